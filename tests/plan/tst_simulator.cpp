#include "plan/simulator.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <tuple>

using namespace meshbench::plan;

namespace {

using PairList = std::initializer_list<std::pair<int, int>>;
using TripleList = std::initializer_list<std::tuple<int, int, int>>;

ScheduleShape shapeOf(ScheduleKind kind, int p, int m, int v = 1, int group = 0)
{
    ScheduleShape shape;
    shape.kind = kind;
    shape.stages = p;
    shape.microbatches = m;
    shape.virtualStages = v;
    shape.groupSize = group;
    return shape;
}

ScheduleKind kindFromName(const QString& name)
{
    ScheduleKind kind = ScheduleKind::GPipe;
    if (!parseScheduleName(name.toStdString(), kind))
        qFatal("unknown schedule name in test data: %s", qPrintable(name));
    return kind;
}

bool near(double actual, double expected)
{
    return std::abs(actual - expected) <= 1e-12 * std::max(1.0, std::abs(expected));
}

QByteArray describe(double actual, double expected)
{
    return QByteArray::number(actual, 'g', 17) + " != " + QByteArray::number(expected, 'g', 17);
}

// Index of the first op of the given kind, micro-batch and chunk on a stage's list.
std::size_t indexOf(const std::vector<Op>& ops, OpKind kind, int mb, int chunk = 0)
{
    const auto it = std::find_if(ops.begin(), ops.end(), [&](const Op& op) {
        return op.kind == kind && op.microbatch == mb && op.chunk == chunk;
    });
    if (it == ops.end())
        qFatal("op not found in test schedule");
    return static_cast<std::size_t>(it - ops.begin());
}

}  // namespace

class TestSimulator : public QObject {
    Q_OBJECT

private slots:
    void uniformCosts();
    void timeline();
    void transferTime();
    void bubbleEqualCosts_data();
    void bubbleEqualCosts();
    void bubbleInterleaved_data();
    void bubbleInterleaved();
    void zeroBubble_data();
    void zeroBubble();
    void zeroBubbleFewMicrobatches_data();
    void zeroBubbleFewMicrobatches();
    void dualPipeTable_data();
    void dualPipeTable();
    void zeroBubbleV_data();
    void zeroBubbleV();
    void vPeakInFlight_data();
    void vPeakInFlight();
    void completesOnGrid_data();
    void completesOnGrid();
    void peakInFlight_data();
    void peakInFlight();
    void zeroCosts();
    void deadlockReported();
    void recvWithoutSend();
    void duplicateRecvRejected();
    void costsTooShort();
    void missingBackwardCaught();
    void missingWeightGradCaught();
    void unmatchedSendCaught();
    void earlyForwardCaught();
    void incompleteResultRejected();
    void largeZeroBubble();
};

void TestSimulator::uniformCosts()
{
    const OpCosts costs = OpCosts::uniform(shapeOf(ScheduleKind::Interleaved, 4, 8, 3), 1.5, 2.5, 0.5, 0.25);
    QCOMPARE(costs.forward, std::vector<double>(12, 1.5));
    QCOMPARE(costs.backward, std::vector<double>(12, 2.5));
    QCOMPARE(costs.weightGrad, std::vector<double>(12, 0.5));
    QCOMPARE(costs.activationTransfer, 0.25);
    QCOMPARE(costs.gradientTransfer, 0.25);
    QCOMPARE(OpCosts::uniform(shapeOf(ScheduleKind::OneFOneB, 2, 2), 1, 2, 0).activationTransfer, 0.0);
}

void TestSimulator::timeline()
{
    // 1F1B, p = 2, m = 2, F = 1, B = 2, worked by hand:
    // stage 1: recv 0-1, F0 1-2, B0 2-4, send 4, recv 4-4 (F1 arrived at 2), F1 4-5, B1 5-7, send 7.
    // stage 0: F0 0-1, send 1, F1 1-2, send 2, recv-grad 2-4, B0 4-6, recv-grad 6-7, B1 7-9.
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 2, 2));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY2(result.completed, result.error.c_str());
    QVERIFY(result.error.empty());
    QCOMPARE(result.makespan, 9.0);
    const std::vector<std::pair<double, double>> stage0{{0, 1}, {1, 1}, {1, 2}, {2, 2}, {2, 4}, {4, 6}, {6, 7}, {7, 9}};
    const std::vector<std::pair<double, double>> stage1{{0, 1}, {1, 2}, {2, 4}, {4, 4}, {4, 4}, {4, 5}, {5, 7}, {7, 7}};
    for (const auto& [stage, expected] : {std::pair{0, stage0}, std::pair{1, stage1}}) {
        const auto& timed = result.timeline[stage];
        QCOMPARE(timed.size(), expected.size());
        for (std::size_t i = 0; i < timed.size(); ++i) {
            QCOMPARE(timed[i].op.kind, schedule.stages[stage][i].kind);
            QCOMPARE(timed[i].begin, expected[i].first);
            QCOMPARE(timed[i].end, expected[i].second);
        }
    }
    QCOMPARE(result.busy, (std::vector<double>{6, 6}));
    QCOMPARE(result.bubbleRatio, (std::vector<double>{1.0 / 3.0, 1.0 / 3.0}));
    QCOMPARE(result.overallBubbleRatio, 1.0 / 3.0);
    QCOMPARE(checkDependencies(schedule, result), std::string());
}

void TestSimulator::transferTime()
{
    // GPipe, F = 1, B = 2, every hop costs T. The last forward leaves the last stage at
    // m + (p - 1)(1 + T); its m backwards run back to back; the last one climbs p - 1 hops of
    // 2 + T. Makespan 3m + 3(p - 1) + 2(p - 1)T = 24 + 9 + 3 = 36 for p = 4, m = 8, T = 0.5.
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::GPipe, 4, 8));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0, 0.5));
    QVERIFY2(result.completed, result.error.c_str());
    QCOMPARE(result.makespan, 36.0);
    // Stage 1's first recv waits from 0 until F0 of stage 0 ends (1) plus the hop.
    const TimedOp& recv = result.timeline[1].front();
    QCOMPARE(recv.op.kind, OpKind::RecvActivation);
    QCOMPARE(recv.begin, 0.0);
    QCOMPARE(recv.end, 1.5);
    // Sends take no time on the sender.
    const TimedOp& send = result.timeline[0][1];
    QCOMPARE(send.op.kind, OpKind::SendActivation);
    QCOMPARE(send.begin, 1.0);
    QCOMPARE(send.end, 1.0);
    QCOMPARE(checkDependencies(schedule, result), std::string());
}

void TestSimulator::bubbleEqualCosts_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    for (const char* kind : {"gpipe", "1f1b"})
        for (const auto& [p, m] :
             PairList{{1, 1}, {1, 6}, {2, 1}, {2, 2}, {3, 7}, {4, 2}, {4, 4}, {4, 8}, {8, 3}, {8, 32}, {16, 64}})
            QTest::addRow("%s p%d m%d", kind, p, m) << kind << p << m;
}

void TestSimulator::bubbleEqualCosts()
{
    QFETCH(QString, kind);
    QFETCH(int, p);
    QFETCH(int, m);
    const Schedule schedule = buildSchedule(shapeOf(kindFromName(kind), p, m));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY2(result.completed, result.error.c_str());
    // Every stage does 3m of work; the fill and drain add (p - 1)(F + B) = 3(p - 1).
    QCOMPARE(result.makespan, 3.0 * (m + p - 1));
    const double expected = double(p - 1) / double(m + p - 1);
    QVERIFY2(near(result.overallBubbleRatio, expected), describe(result.overallBubbleRatio, expected));
    for (int r = 0; r < p; ++r) {
        QCOMPARE(result.busy[r], 3.0 * m);
        QVERIFY2(near(result.bubbleRatio[r], expected), describe(result.bubbleRatio[r], expected));
    }
}

void TestSimulator::bubbleInterleaved_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("group");
    for (const auto& [p, m, v] : TripleList{{2, 2, 2},
                                            {2, 4, 2},
                                            {2, 6, 3},
                                            {4, 4, 2},
                                            {4, 8, 2},
                                            {4, 8, 4},
                                            {4, 16, 3},
                                            {8, 8, 2},
                                            {8, 16, 2},
                                            {8, 32, 4}})
        QTest::addRow("p%d m%d v%d", p, m, v) << p << m << v << 0;
    // Megatron's non-default group sizes, the REFERENCES example among them, reach the same share.
    for (const auto& [p, m, group] : TripleList{{2, 5, 3}, {3, 7, 4}, {4, 10, 6}, {4, 9, 9}})
        QTest::addRow("p%d m%d v2 G%d", p, m, group) << p << m << 2 << group;
}

void TestSimulator::bubbleInterleaved()
{
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, v);
    QFETCH(int, group);
    const ScheduleShape shape = shapeOf(ScheduleKind::Interleaved, p, m, v, group);
    QVERIFY(validateScheduleShape(shape).empty());
    const Schedule schedule = buildSchedule(shape);
    // Per chunk F/v and B/v with F = v, B = 2v: 1 and 2, exact in binary. The ratio does not
    // depend on the time unit.
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY2(result.completed, result.error.c_str());
    // Fill and drain shrink to (p - 1)(F + B)/v: 3(p - 1) chunk units against 3vm of work.
    QCOMPARE(result.makespan, 3.0 * (v * m + p - 1));
    const double expected = double(p - 1) / double(v * m + p - 1);
    QVERIFY2(near(result.overallBubbleRatio, expected), describe(result.overallBubbleRatio, expected));
    QCOMPARE(checkDependencies(schedule, result), std::string());
}

void TestSimulator::zeroBubble_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    for (const auto& [p, m] :
         PairList{{1, 4}, {2, 2}, {2, 5}, {3, 3}, {4, 4}, {4, 8}, {4, 13}, {6, 9}, {8, 8}, {8, 20}, {8, 64}})
        QTest::addRow("p%d m%d", p, m) << p << m;
}

void TestSimulator::zeroBubble()
{
    QFETCH(int, p);
    QFETCH(int, m);
    const Schedule zb = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleH1, p, m));
    const SimulationResult zbResult = simulate(zb, OpCosts::uniform(zb.shape, 1, 1, 1));
    QVERIFY2(zbResult.completed, zbResult.error.c_str());
    QCOMPARE(checkDependencies(zb, zbResult), std::string());
    // DualPipe README: ZB-H1 bubble (p - 1)(F + B - 2W) with B the full backward (here 2).
    QCOMPARE(zbResult.makespan, 3.0 * m + p - 1);

    const Schedule oneF = buildSchedule(shapeOf(ScheduleKind::OneFOneB, p, m));
    const SimulationResult oneFResult = simulate(oneF, OpCosts::uniform(oneF.shape, 1, 2, 0));
    QVERIFY2(oneFResult.completed, oneFResult.error.c_str());
    for (int r = 0; r < p; ++r) {
        // Idle per stage: p - 1 against 1F1B's 3(p - 1), one third.
        QCOMPARE(zbResult.makespan - zbResult.busy[r], double(p - 1));
        QCOMPARE(oneFResult.makespan - oneFResult.busy[r], 3.0 * (p - 1));
    }
    const double zbExpected = double(p - 1) / (3.0 * m + p - 1);
    QVERIFY2(near(zbResult.overallBubbleRatio, zbExpected), describe(zbResult.overallBubbleRatio, zbExpected));
    if (p > 1) {
        QVERIFY(zbResult.overallBubbleRatio < oneFResult.overallBubbleRatio);
        // (m + p - 1)/(3m + p - 1) < 1/2 for m >= 1: at most half of 1F1B's share.
        QVERIFY(zbResult.overallBubbleRatio < 0.5 * oneFResult.overallBubbleRatio);
    } else {
        QCOMPARE(zbResult.overallBubbleRatio, 0.0);
    }
}

void TestSimulator::zeroBubbleFewMicrobatches_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    for (const auto& [p, m] : PairList{{2, 1}, {4, 1}, {4, 2}, {4, 3}, {8, 5}})
        QTest::addRow("p%d m%d", p, m) << p << m;
}

void TestSimulator::zeroBubbleFewMicrobatches()
{
    // With m < p the pipeline never fills: stage 0's first B cannot start before 2p - 1
    // (micro-batch 0 goes down p stages and its B comes back up p), after which it still has m B's
    // and m W's to run. The schedule reaches that bound, 2(m + p) - 1, not 3m + p - 1.
    QFETCH(int, p);
    QFETCH(int, m);
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleH1, p, m));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 1, 1));
    QVERIFY2(result.completed, result.error.c_str());
    QCOMPARE(result.makespan, 2.0 * (m + p) - 1);
    QCOMPARE(checkDependencies(schedule, result), std::string());
}

void TestSimulator::dualPipeTable_data()
{
    QTest::addColumn<int>("devices");
    QTest::addColumn<int>("m");
    for (const auto& [devices, m] : PairList{{2, 4}, {2, 9}, {3, 6}, {4, 8}, {4, 13}, {6, 12}, {8, 16}, {8, 40}})
        QTest::addRow("%d devices m%d", devices, m) << devices << m;
}

void TestSimulator::dualPipeTable()
{
    // DualPipe README, "Pipeline Bubbles and Memory Usage Comparison", with unit costs for one
    // pipeline stage's chunk: F = 1, W = 1, the full backward B = 2 (input gradient 1 + W) and
    // an overlapped F&B = 3 (the simulation runs the pair's ops back to back). PP counts pipeline
    // stages: 1F1B and ZB1P put one on each device, DualPipeV two (PP = 2 x devices).
    QFETCH(int, devices);
    QFETCH(int, m);
    const double F = 1, W = 1, B = 2, FB = 3;
    struct Row {
        ScheduleKind kind;
        int v;
        double pp;
        double bubble;
    };
    const double oneStagePerDevice = devices, twoStagesPerDevice = 2.0 * devices;
    const Row rows[] = {
        {ScheduleKind::OneFOneB, 1, oneStagePerDevice, (oneStagePerDevice - 1) * (F + B)},
        {ScheduleKind::ZeroBubbleH1, 1, oneStagePerDevice, (oneStagePerDevice - 1) * (F + B - 2 * W)},
        {ScheduleKind::DualPipeV, 2, twoStagesPerDevice, (twoStagesPerDevice / 2 - 1) * (FB + B - 3 * W)},
    };
    for (const Row& row : rows) {
        const Schedule schedule = buildSchedule(shapeOf(row.kind, devices, m, row.v));
        const bool split = schedule.splitBackward();
        const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, F, split ? B - W : B, W));
        QVERIFY2(result.completed, result.error.c_str());
        QCOMPARE(checkDependencies(schedule, result), std::string());
        for (int r = 0; r < devices; ++r) {
            const double idle = result.makespan - result.busy[r];
            QVERIFY2(near(idle, row.bubble), scheduleName(row.kind).data() + (": " + describe(idle, row.bubble)));
        }
        // Activation per device, in chunks of activations: PP for 1F1B and ZB1P (one chunk each),
        // PP + 1 for DualPipeV, once m reaches them.
        const int expectedPeak = row.kind == ScheduleKind::DualPipeV ? int(row.pp) + 1 : std::min(int(row.pp), m);
        QCOMPARE(*std::max_element(result.peakInFlight.begin(), result.peakInFlight.end()), expectedPeak);
    }
}

void TestSimulator::zeroBubbleV_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    for (const auto& [p, m] : PairList{{2, 3}, {2, 8}, {3, 5}, {4, 7}, {4, 8}, {4, 13}, {6, 11}, {8, 15}, {8, 32}})
        QTest::addRow("p%d m%d", p, m) << p << m;
}

void TestSimulator::zeroBubbleV()
{
    // zero-bubble README: ZB-V's bubble rate is 0 with T_F = T_B = T_W. Every stage runs without
    // a gap from its first op to its last; all it waits is the forward wave reaching it, r F's at
    // the start, and the p - 1 - r F's by which stage 0 outlasts it at the end: (p - 1) F per
    // stage, against 1F1B's (p - 1)(F + B) with a stage's two chunks (F = 2, B = 4), a sixth.
    QFETCH(int, p);
    QFETCH(int, m);
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleV, p, m, 2));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 1, 1));
    QVERIFY2(result.completed, result.error.c_str());
    QCOMPARE(checkDependencies(schedule, result), std::string());
    QCOMPARE(result.makespan, 6.0 * m + p - 1);
    for (int r = 0; r < p; ++r) {
        const std::vector<TimedOp>& ops = result.timeline[r];
        const auto compute = [](const TimedOp& t) { return isCompute(t.op.kind); };
        const auto first = std::find_if(ops.begin(), ops.end(), compute);
        const auto last = std::find_if(ops.rbegin(), ops.rend(), compute);
        QCOMPARE(last->end - first->begin, result.busy[r]);
        QCOMPARE(first->begin, double(r));
        QCOMPARE(result.makespan - result.busy[r], double(p - 1));
    }
    const Schedule oneF = buildSchedule(shapeOf(ScheduleKind::OneFOneB, p, m));
    const SimulationResult oneFResult = simulate(oneF, OpCosts::uniform(oneF.shape, 2, 4, 0));
    QCOMPARE(oneFResult.makespan - oneFResult.busy[0], 6.0 * (p - 1));
}

void TestSimulator::vPeakInFlight_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    for (const auto& [p, m] : PairList{{2, 1}, {2, 4}, {3, 2}, {4, 4}, {4, 8}, {4, 20}, {6, 9}, {6, 12}, {8, 16}}) {
        QTest::addRow("zb-v p%d m%d", p, m) << "zb-v" << p << m;
        if (m >= 2 * p)
            QTest::addRow("dualpipev p%d m%d", p, m) << "dualpipev" << p << m;
    }
}

void TestSimulator::vPeakInFlight()
{
    // In chunks of activations held (a chunk's forward to its W). ZB-V: the most is held at
    // stage r's first B, after its warm-up's 2p - r - 1 F0's and r + 1 F1's (fewer where m runs
    // out); from there every F is matched by a W. With m >= 2p - 1 that is 2p, 1F1B's p
    // micro-batches (Qi et al. 2024, Sec. 6: the same peak memory as 1F1B). DualPipeV holds
    // 2p + 1 on every stage (DualPipe README: PP + 1, PP = 2p).
    QFETCH(QString, kind);
    QFETCH(int, p);
    QFETCH(int, m);
    const ScheduleKind scheduleKind = kindFromName(kind);
    const Schedule schedule = buildSchedule(shapeOf(scheduleKind, p, m, 2));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 1, 1));
    QVERIFY2(result.completed, result.error.c_str());
    for (int r = 0; r < p; ++r) {
        const int zeroBubbleV = std::min(m, 2 * p - r - 1) + std::min(m, r + 1);
        QCOMPARE(result.peakInFlight[r], scheduleKind == ScheduleKind::DualPipeV ? 2 * p + 1 : zeroBubbleV);
        if (m >= 2 * p - 1)
            QCOMPARE(result.peakInFlight[r], scheduleKind == ScheduleKind::DualPipeV ? 2 * p + 1 : 2 * p);
    }
}

void TestSimulator::completesOnGrid_data()
{
    QTest::addColumn<QString>("kind");
    QTest::newRow("gpipe") << "gpipe";
    QTest::newRow("1f1b") << "1f1b";
    QTest::newRow("interleaved") << "interleaved";
    QTest::newRow("zb-h1") << "zb-h1";
    QTest::newRow("zb-v") << "zb-v";
    QTest::newRow("dualpipev") << "dualpipev";
}

void TestSimulator::completesOnGrid()
{
    QFETCH(QString, kind);
    const ScheduleKind scheduleKind = kindFromName(kind);
    int shapes = 0;
    for (int p = 1; p <= 6; ++p)
        for (int m = 1; m <= 13; ++m)
            for (int v = 1; v <= 4; ++v)
                for (int group = 0; group <= m; ++group) {
                    const ScheduleShape shape = shapeOf(scheduleKind, p, m, v, group);
                    if (!validateScheduleShape(shape).empty())
                        continue;
                    ++shapes;
                    const Schedule schedule = buildSchedule(shape);
                    // Uneven stages and slow links on top of equal costs, so orderings that only
                    // work by coincidence of equal times show up.
                    OpCosts uneven = OpCosts::uniform(shape, 1, 2, 1, 0);
                    for (std::size_t vs = 0; vs < uneven.forward.size(); ++vs) {
                        uneven.forward[vs] = 1.0 + double(vs % 3) * 0.5;
                        uneven.backward[vs] = 2.0 + double(vs % 2);
                        uneven.weightGrad[vs] = 0.25 + double(vs % 4) * 0.25;
                    }
                    uneven.activationTransfer = 0.3;
                    uneven.gradientTransfer = 0.7;
                    for (const OpCosts& costs : {OpCosts::uniform(shape, 1, 2, 1), uneven}) {
                        const SimulationResult result = simulate(schedule, costs);
                        const QByteArray where = QByteArrayLiteral("p=") + QByteArray::number(p) +
                                                 " m=" + QByteArray::number(m) + " v=" + QByteArray::number(v) +
                                                 " G=" + QByteArray::number(group) + ": ";
                        QVERIFY2(result.completed, where + result.error.c_str());
                        QVERIFY2(result.makespan > 0.0, where);
                        const std::string violation = checkDependencies(schedule, result);
                        QVERIFY2(violation.empty(), where + violation.c_str());
                    }
                }
    QVERIFY2(shapes >= 30, QByteArray::number(shapes));
}

void TestSimulator::peakInFlight_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    for (const auto& [p, m] : PairList{{1, 3}, {2, 1}, {4, 2}, {4, 4}, {4, 9}, {8, 3}, {8, 16}})
        QTest::addRow("p%d m%d", p, m) << p << m;
}

void TestSimulator::peakInFlight()
{
    QFETCH(int, p);
    QFETCH(int, m);
    const auto peaks = [&](ScheduleKind kind) {
        const Schedule schedule = buildSchedule(shapeOf(kind, p, m));
        const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 1));
        return result.completed ? result.peakInFlight : std::vector<int>();
    };
    const std::vector<int> gpipe = peaks(ScheduleKind::GPipe);
    const std::vector<int> oneF = peaks(ScheduleKind::OneFOneB);
    const std::vector<int> zb = peaks(ScheduleKind::ZeroBubbleH1);
    QCOMPARE(int(gpipe.size()), p);
    QCOMPARE(int(oneF.size()), p);
    QCOMPARE(int(zb.size()), p);
    for (int r = 0; r < p; ++r) {
        QCOMPARE(gpipe[r], m);
        QCOMPARE(oneF[r], std::min(p - r, m));
        // ZB-H1 keeps 1F1B's peak, p: stage r holds p - r forwards before its first B and
        // defers r W's. With m < p there are only m micro-batches to hold.
        QVERIFY(zb[r] <= p);
        QCOMPARE(zb[r], std::min(p, m));
    }
}

void TestSimulator::zeroCosts()
{
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::Interleaved, 2, 4, 2));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 0, 0, 0));
    QVERIFY2(result.completed, result.error.c_str());
    QCOMPARE(result.makespan, 0.0);
    QCOMPARE(result.overallBubbleRatio, 0.0);
    QCOMPARE(result.bubbleRatio, (std::vector<double>{0.0, 0.0}));
    QCOMPARE(result.busy, (std::vector<double>{0.0, 0.0}));
    QCOMPARE(checkDependencies(schedule, result), std::string());
}

void TestSimulator::deadlockReported()
{
    // 1F1B, p = 2, m = 2. Stage 0 asks for the gradient of micro-batch 0 before it has run
    // that micro-batch's forward: stage 1 needs the activation first, so both wait forever.
    Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 2, 2));
    auto& ops = schedule.stages[0];
    const std::size_t forward = indexOf(ops, OpKind::Forward, 0);
    const std::size_t recv = indexOf(ops, OpKind::RecvGradient, 0);
    QVERIFY(forward < recv);
    std::swap(ops[forward], ops[recv]);
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY(!result.completed);
    const QString error = QString::fromStdString(result.error);
    QVERIFY2(error.startsWith(QStringLiteral("deadlock: ")), qPrintable(error));
    for (const char* fragment : {"stage 0 waits for recv-grad mb 0 chunk 0 from stage 1 (op 0 of 8)",
                                 "stage 1 waits for recv-act mb 0 chunk 0 from stage 0 (op 0 of 8)"})
        QVERIFY2(error.contains(QLatin1String(fragment)), qPrintable(error));
    QVERIFY(checkDependencies(schedule, result).starts_with("simulation did not complete: deadlock"));
    // Both stages got stuck on their first op, so nothing ran.
    QVERIFY(result.timeline[0].empty());
    QVERIFY(result.timeline[1].empty());

    // Ten stages stuck the same way: the message lists eight and counts the rest.
    Schedule deep = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 10, 12));
    auto& first = deep.stages[0];
    std::swap(first[indexOf(first, OpKind::Forward, 0)], first[indexOf(first, OpKind::RecvGradient, 0)]);
    const SimulationResult deepResult = simulate(deep, OpCosts::uniform(deep.shape, 1, 2, 0));
    QVERIFY(!deepResult.completed);
    const QString deepError = QString::fromStdString(deepResult.error);
    QVERIFY2(deepError.contains(QStringLiteral("stage 7 waits for recv-act mb 0 chunk 0 from stage 6")),
             qPrintable(deepError));
    QVERIFY2(!deepError.contains(QStringLiteral("stage 8 waits")), qPrintable(deepError));
    QVERIFY2(deepError.endsWith(QStringLiteral("; 2 more stages stuck")), qPrintable(deepError));
}

void TestSimulator::duplicateRecvRejected()
{
    Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 2, 3));
    auto& ops = schedule.stages[1];
    ops.insert(ops.begin() + 1, ops.front());
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY(!result.completed);
    QCOMPARE(result.error, std::string("stage 1 op 0 (recv-act mb 0 chunk 0): the same message is received 2 times"));
}

void TestSimulator::recvWithoutSend()
{
    Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 2, 3));
    auto& ops = schedule.stages[0];
    ops.erase(ops.begin() + std::ptrdiff_t(indexOf(ops, OpKind::SendActivation, 1)));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY(!result.completed);
    QCOMPARE(result.error, std::string("stage 1 op 4 (recv-act mb 1 chunk 0): no matching send on stage 0"));
}

void TestSimulator::costsTooShort()
{
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::Interleaved, 2, 4, 2));
    const OpCosts costs = OpCosts::uniform(shapeOf(ScheduleKind::OneFOneB, 2, 4), 1, 2, 0);
    const SimulationResult result = simulate(schedule, costs);
    QVERIFY(!result.completed);
    QCOMPARE(result.error, std::string("costs cover 2 virtual stages, the schedule has 4"));
}

void TestSimulator::missingBackwardCaught()
{
    // The last stage receives no gradient, so dropping its B leaves a list that still runs.
    Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 2, 3));
    auto& ops = schedule.stages[1];
    ops.erase(ops.begin() + std::ptrdiff_t(indexOf(ops, OpKind::Backward, 1)));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY2(result.completed, result.error.c_str());
    QCOMPARE(checkDependencies(schedule, result), std::string("stage 1 has no B for mb 1 chunk 0"));
}

void TestSimulator::missingWeightGradCaught()
{
    Schedule schedule = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleH1, 3, 4));
    auto& ops = schedule.stages[2];
    ops.erase(ops.begin() + std::ptrdiff_t(indexOf(ops, OpKind::WeightGrad, 3)));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 1, 1));
    QVERIFY2(result.completed, result.error.c_str());
    QCOMPARE(checkDependencies(schedule, result), std::string("stage 2 has no W for mb 3 chunk 0"));
}

void TestSimulator::unmatchedSendCaught()
{
    // Without its recv, stage 1's F of micro-batch 0 no longer waits; the send on stage 0 is orphaned.
    Schedule schedule = buildSchedule(shapeOf(ScheduleKind::GPipe, 2, 2));
    auto& ops = schedule.stages[1];
    ops.erase(ops.begin() + std::ptrdiff_t(indexOf(ops, OpKind::RecvActivation, 0)));
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY2(result.completed, result.error.c_str());
    QCOMPARE(checkDependencies(schedule, result),
             std::string("stage 0 op 1 (send-act mb 0 chunk 0): 0 matching recvs on stage 1, expected exactly one"));
}

void TestSimulator::earlyForwardCaught()
{
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 2, 2));
    SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 2, 0));
    QVERIFY2(result.completed, result.error.c_str());
    // Pretend stage 1 started F of micro-batch 0 at 0.5, before stage 0's F ended at 1.
    const std::size_t forward = indexOf(schedule.stages[1], OpKind::Forward, 0);
    result.timeline[1][forward].begin = 0.5;
    QCOMPARE(checkDependencies(schedule, result),
             std::string("stage 1 op 1 (F mb 0 chunk 0) begins at 0.5 before F of the previous virtual stage "
                         "ends at 1"));
}

void TestSimulator::incompleteResultRejected()
{
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 2, 2));
    SimulationResult result;
    result.error = "deadlock: stage 0 waits";
    QCOMPARE(checkDependencies(schedule, result), std::string("simulation did not complete: deadlock: stage 0 waits"));
}

void TestSimulator::largeZeroBubble()
{
    // Speed sanity: 64 stages, 1024 micro-batches, ~330 k ops. Not a timed assertion.
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleH1, 64, 1024));
    QElapsedTimer timer;
    timer.start();
    const SimulationResult result = simulate(schedule, OpCosts::uniform(schedule.shape, 1, 1, 1));
    qInfo("simulated p=64 m=1024 zb-h1 in %lld ms", static_cast<long long>(timer.elapsed()));
    QVERIFY2(result.completed, result.error.c_str());
    QCOMPARE(result.makespan, 3.0 * 1024 + 64 - 1);
    QCOMPARE(checkDependencies(schedule, result), std::string());
}

QTEST_APPLESS_MAIN(TestSimulator)
#include "tst_simulator.moc"
