// The collector's bookkeeping on hand-made frames: sequence gaps counted as lost records, repeats
// and strangers refused, agents' own drops taken from their heartbeats, and liveness kept.

#include "service/ingest.h"

#include <QtTest>

using namespace meshbench;

namespace {

std::vector<std::uint8_t> frame(std::uint32_t rank, std::uint64_t sequence, int spans,
                                std::optional<wire::HeartbeatRecord> heartbeat = {})
{
    wire::Batch batch{rank, sequence, {}};
    for (int i = 0; i < spans; ++i)
        batch.records.emplace_back(wire::SpanRecord{1, 0, 0, i, wire::SpanKind::Forward, -1, i, i + 1, 0});
    if (heartbeat)
        batch.records.emplace_back(*heartbeat);
    return wire::encodeBatch(batch);
}

}  // namespace

class TestIngest : public QObject {
    Q_OBJECT

private slots:
    void sequencesCountWhatWasLost()
    {
        service::Ingest ingest(2);
        QVERIFY(ingest.accept(frame(0, 0, 10), 100).problems.empty());
        QVERIFY(ingest.accept(frame(0, 10, 5), 101).problems.empty());  // 0..9, then 10..14: contiguous
        // Records 15..21 never arrived.
        const service::Ingest::Accepted gap = ingest.accept(frame(0, 22, 3), 102);
        QVERIFY(gap.batch.has_value());
        QCOMPARE(gap.problems.size(), 1u);
        QVERIFY2(gap.problems[0].find("lost 7 records of rank 0") != std::string::npos, gap.problems[0].c_str());
        // A repeat of an old batch is refused and not counted twice.
        const service::Ingest::Accepted repeat = ingest.accept(frame(0, 10, 5), 103);
        QVERIFY(!repeat.batch.has_value());
        QVERIFY(repeat.problems[0].find("repeated batch") != std::string::npos);

        const std::vector<store::RankTraffic> traffic = ingest.traffic();
        QCOMPARE(traffic[0].received, 18u);
        QCOMPARE(traffic[0].lost, 7u);
        QCOMPARE(traffic[1].received, 0u);
        QCOMPARE(ingest.lostRecords(), 7u);
        QCOMPARE(ingest.rejectedFrames(), 1u);
    }

    void strangersAndGarbageAreRefused()
    {
        service::Ingest ingest(2);
        const service::Ingest::Accepted stranger = ingest.accept(frame(2, 0, 4), 1);
        QVERIFY(!stranger.batch);
        QVERIFY(stranger.problems[0].find("rank 2, which is not in this job (ranks 0..1)") != std::string::npos);
        const std::uint8_t garbage[] = {1, 2, 3};
        const service::Ingest::Accepted bad = ingest.accept(garbage, 2);
        QVERIFY(!bad.batch);
        QVERIFY(bad.problems[0].find("malformed telemetry frame of 3 bytes") != std::string::npos);
        QCOMPARE(ingest.rejectedFrames(), 2u);
        QCOMPARE(ingest.traffic()[0].received + ingest.traffic()[1].received, 0u);
        QVERIFY(!ingest.liveness(0).everHeard);
    }

    void heartbeatsKeepLivenessAndAgentDrops()
    {
        service::Ingest ingest(1);
        wire::HeartbeatRecord h{5000, wire::RankState::Running, 12, 4242, 0, 30, "node7"};
        QVERIFY(ingest.accept(frame(0, 0, 2, h), 777).batch);
        const service::RankLiveness& live = ingest.liveness(0);
        QVERIFY(live.everHeard);
        QCOMPARE(live.lastHeardNs, std::int64_t(777));  // the engine's clock, not the agent's
        QCOMPARE(live.state, wire::RankState::Running);
        QCOMPARE(live.pid, 4242);
        QCOMPARE(live.host, std::string("node7"));
        QCOMPARE(live.completedSteps, 12);
        QCOMPARE(ingest.traffic()[0].dropped, 30u);
        QCOMPARE(ingest.lostRecords(), 30u);
        // A batch without a heartbeat still shows the rank alive; the last heartbeat's state stays.
        h.state = wire::RankState::Failed;
        h.detail = 3;
        QVERIFY(ingest.accept(frame(0, 3, 1), 900).batch);
        QCOMPARE(ingest.liveness(0).lastHeardNs, std::int64_t(900));
        QVERIFY(ingest.accept(frame(0, 4, 0, h), 950).batch);
        QCOMPARE(ingest.liveness(0).state, wire::RankState::Failed);
        QCOMPARE(ingest.liveness(0).detail, 3);
    }

    // A rank's clock offsets move its later records onto the engine's clock, offsets included,
    // and a clock a second or more off is noted; a rank that sent none keeps its own times.
    void clockOffsetsMoveARanksRecords()
    {
        constexpr std::int64_t kAhead = 3'000'000'000;
        service::Ingest ingest(2);
        wire::Batch first{0, 0, {}};
        first.records.emplace_back(wire::ClockOffsetRecord{kAhead + 1000, kAhead, 80'000});
        first.records.emplace_back(
            wire::SpanRecord{1, 0, 0, 0, wire::SpanKind::Forward, -1, kAhead + 5000, kAhead + 6000, 0});
        first.records.emplace_back(wire::StepMetricsRecord{1, kAhead + 4000, kAhead + 7000, 1, 0, 0, 0, 0, 0, 1});
        first.records.emplace_back(wire::LogRecord{kAhead + 8000, wire::LogLevel::Info, "x"});
        const service::Ingest::Accepted accepted = ingest.accept(wire::encodeBatch(first), 1);
        QVERIFY(accepted.batch);
        QCOMPARE(accepted.notes.size(), 1u);
        QVERIFY2(accepted.notes[0].find("rank 0's clock is +3000.0 ms from the engine's (measured to 0.0 ms)") !=
                     std::string::npos,
                 accepted.notes[0].c_str());
        const std::vector<wire::Record>& records = accepted.batch->records;
        QCOMPARE(std::get<wire::ClockOffsetRecord>(records[0]), (wire::ClockOffsetRecord{1000, kAhead, 80'000}));
        const auto& span = std::get<wire::SpanRecord>(records[1]);
        QCOMPARE(span.beginNs, std::int64_t(5000));
        QCOMPARE(span.endNs, std::int64_t(6000));
        const auto& step = std::get<wire::StepMetricsRecord>(records[2]);
        QCOMPARE(step.beginNs, std::int64_t(4000));
        QCOMPARE(step.endNs, std::int64_t(7000));
        QCOMPARE(std::get<wire::LogRecord>(records[3]).timeNs, std::int64_t(8000));
        QCOMPARE(ingest.clock(0).offsetAt(0), kAhead);

        const service::Ingest::Accepted other = ingest.accept(frame(1, 0, 1), 2);
        QCOMPARE(std::get<wire::SpanRecord>(other.batch->records[0]).beginNs, std::int64_t(0));
        QVERIFY(other.notes.empty());
    }
};

QTEST_APPLESS_MAIN(TestIngest)
#include "tst_ingest.moc"
