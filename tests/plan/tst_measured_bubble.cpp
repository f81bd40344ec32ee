// plan::measuredBubble and rankPipelinePhase on timelines small enough to work by hand.
#include "plan/measured_bubble.h"

#include <QtTest>

using namespace meshbench;
using namespace meshbench::plan;
using wire::SpanKind;

namespace {

wire::SpanRecord span(SpanKind kind, std::int64_t begin, std::int64_t end)
{
    wire::SpanRecord s;
    s.kind = kind;
    s.beginNs = begin;
    s.endNs = end;
    return s;
}

}  // namespace

class TestMeasuredBubble : public QObject {
    Q_OBJECT

private slots:
    void unionCountsOverlapsOnce()
    {
        std::vector<TimeInterval> intervals{{10, 20}, {0, 5}, {15, 30}, {40, 40}, {3, 4}};
        QCOMPARE(unionLength(intervals, false), std::int64_t(5 + 20));  // [0, 5] and [10, 30]
        std::vector<TimeInterval> none;
        QCOMPARE(unionLength(none, true), std::int64_t(0));
    }

    void phaseTakesPipelineSpansOnly()
    {
        // Window from the first pipeline span (a receive at 5) to the last (a send ending at 95);
        // busy: F [10, 30] and B [40, 70] overlapping W [60, 80] = 20 + 40. The optimizer, the
        // data-parallel reduction and idle spans fall outside the phase.
        const std::vector<wire::SpanRecord> spans{span(SpanKind::Optimizer, 0, 200),
                                                  span(SpanKind::RecvActivation, 5, 10),
                                                  span(SpanKind::Forward, 10, 30),
                                                  span(SpanKind::Idle, 30, 40),
                                                  span(SpanKind::Backward, 40, 70),
                                                  span(SpanKind::WeightGrad, 60, 80),
                                                  span(SpanKind::DataParallelReduce, 70, 150),
                                                  span(SpanKind::SendGradient, 80, 95)};
        const RankPipelinePhase phase = rankPipelinePhase(3, spans);
        QVERIFY(phase.reported());
        QCOMPARE(phase.stage, 3);
        QCOMPARE(phase.beginNs, std::int64_t(5));
        QCOMPARE(phase.endNs, std::int64_t(95));
        QCOMPARE(phase.busyNs, std::int64_t(60));

        const std::vector<wire::SpanRecord> outside{span(SpanKind::Optimizer, 0, 10)};
        QVERIFY(!rankPipelinePhase(0, outside).reported());
    }

    void oneWindowForEveryRank()
    {
        // Two stages of two ranks. The common window is [0, 100] (stage 0 starts, stage 1 ends).
        // Stage 0 idles 100 - 60 and 100 - 50, stage 1 100 - 80 and 100 - 70: stage bubbles
        // (40 + 50) / 200 and (20 + 30) / 200, overall 140 / 400.
        const std::vector<RankPipelinePhase> ranks{{0, 0, 70, 60}, {0, 0, 65, 50}, {1, 20, 100, 80}, {1, 25, 100, 70}};
        const MeasuredBubble bubble = measuredBubble(ranks, 2);
        QCOMPARE(bubble.beginNs, std::int64_t(0));
        QCOMPARE(bubble.endNs, std::int64_t(100));
        QCOMPARE(bubble.ranksReporting, 4);
        QCOMPARE(bubble.stageRanks, (std::vector<int>{2, 2}));
        QCOMPARE(*bubble.stages[0], 90.0 / 200.0);
        QCOMPARE(*bubble.stages[1], 50.0 / 200.0);
        QCOMPARE(*bubble.overall, 140.0 / 400.0);
    }

    void ranksWithoutSpansAreLeftOut()
    {
        // Rank 1 sent nothing for the step (a partial step) and stage 2 is outside the two stages:
        // neither widens the window or counts as idle.
        RankPipelinePhase silent;
        silent.stage = 1;
        const std::vector<RankPipelinePhase> ranks{{0, 10, 50, 30}, silent, {2, 0, 1000, 0}};
        const MeasuredBubble bubble = measuredBubble(ranks, 2);
        QCOMPARE(bubble.ranksReporting, 1);
        QCOMPARE(bubble.beginNs, std::int64_t(10));
        QCOMPARE(bubble.endNs, std::int64_t(50));
        QCOMPARE(*bubble.stages[0], 10.0 / 40.0);
        QVERIFY(!bubble.stages[1]);
        QCOMPARE(*bubble.overall, 10.0 / 40.0);
    }

    void emptyWindowHasNoRatio()
    {
        const std::vector<RankPipelinePhase> instant{{0, 7, 7, 0}};
        const MeasuredBubble bubble = measuredBubble(instant, 1);
        QCOMPARE(bubble.ranksReporting, 1);
        QVERIFY(!bubble.overall);
        QVERIFY(!bubble.stages[0]);
        QVERIFY(!measuredBubble({}, 1).overall);
    }
};

QTEST_GUILESS_MAIN(TestMeasuredBubble)
#include "tst_measured_bubble.moc"
