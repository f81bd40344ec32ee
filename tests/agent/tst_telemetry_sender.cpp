// The agent's telemetry sender against a real ZeroMQ PULL socket: every posted record arrives in
// order with contiguous sequence numbers, heartbeats and node samples come on their own, the last
// heartbeat says how the rank ended, and what the bounded queue had to drop is counted exactly.

#include "agent/telemetry/telemetry_sender.h"

#include <QtTest>

#include <zmq.hpp>

#include <variant>

using namespace meshbench;

namespace {

// Receives frames until the final heartbeat arrives (or the time runs out).
std::vector<wire::Batch> receiveUntilFinal(zmq::socket_t& pull, int timeoutMs = 10000)
{
    std::vector<wire::Batch> batches;
    QElapsedTimer timer;
    timer.start();
    pull.set(zmq::sockopt::rcvtimeo, 100);
    while (timer.elapsed() < timeoutMs) {
        zmq::message_t frame;
        if (!pull.recv(frame))
            continue;
        wire::DecodeResult decoded = wire::decodeBatch({static_cast<const std::uint8_t*>(frame.data()), frame.size()});
        if (!decoded.batch)
            qFatal("undecodable frame: %s", decoded.error.c_str());
        batches.push_back(std::move(*decoded.batch));
        for (const wire::Record& r : batches.back().records)
            if (const auto* h = std::get_if<wire::HeartbeatRecord>(&r);
                h && h->state != wire::RankState::Running && h->state != wire::RankState::Starting)
                return batches;
    }
    return batches;
}

wire::SpanRecord span(int i)
{
    return {i, 1, 0, i % 7, wire::SpanKind::Forward, -1, 1000 + i, 2000 + i, std::uint64_t(i)};
}

}  // namespace

class TestTelemetrySender : public QObject {
    Q_OBJECT

private slots:
    void recordsArriveInOrderWithHeartbeats()
    {
        zmq::context_t context;
        zmq::socket_t pull(context, zmq::socket_type::pull);
        pull.bind("tcp://127.0.0.1:*");
        const std::string endpoint = pull.get(zmq::sockopt::last_endpoint);

        agent::TelemetryOptions options{endpoint, 5, true};
        options.heartbeatInterval = std::chrono::milliseconds(50);
        agent::TelemetrySender sender(options);
        // More than one batch's worth, posted in pieces, with a pause for heartbeats in between.
        std::vector<wire::SpanRecord> posted;
        for (int piece = 0; piece < 4; ++piece) {
            std::vector<wire::Record> records;
            for (int i = 0; i < 3000; ++i) {
                posted.push_back(span(piece * 3000 + i));
                records.emplace_back(posted.back());
            }
            sender.post(std::move(records));
            sender.setCompletedSteps(piece + 1);
            QThread::msleep(120);
        }
        sender.log(wire::LogLevel::Error, "the last words");
        sender.finish(wire::RankState::Failed, 7);

        const std::vector<wire::Batch> batches = receiveUntilFinal(pull);
        QVERIFY(!batches.empty());
        std::uint64_t expected = 0;
        std::vector<wire::SpanRecord> spans;
        int running = 0, nodeSamples = 0;
        std::optional<wire::HeartbeatRecord> last;
        std::optional<wire::LogRecord> log;
        for (const wire::Batch& b : batches) {
            QCOMPARE(b.rank, 5u);
            QCOMPARE(b.sequence, expected);  // no gap, no repeat
            expected += b.records.size();
            for (const wire::Record& r : b.records) {
                if (const auto* s = std::get_if<wire::SpanRecord>(&r))
                    spans.push_back(*s);
                else if (const auto* h = std::get_if<wire::HeartbeatRecord>(&r)) {
                    running += h->state == wire::RankState::Running;
                    last = *h;
                } else if (const auto* n = std::get_if<wire::NodeSampleRecord>(&r)) {
                    // The host's record; a GPU's (device >= 0, from NVML) leaves the host fields at -1.
                    if (n->device >= 0)
                        continue;
                    ++nodeSamples;
                    QVERIFY(n->hostMemoryTotalBytes > 0);
                    QVERIFY(n->hostMemoryUsedBytes > 0 && n->hostMemoryUsedBytes <= n->hostMemoryTotalBytes);
                } else if (const auto* l = std::get_if<wire::LogRecord>(&r))
                    log = *l;
            }
        }
        QCOMPARE(spans, posted);
        QVERIFY2(running >= 3, qPrintable(QString::number(running)));  // ~480 ms at 50 ms intervals
        QVERIFY(nodeSamples >= 3);
        QVERIFY(last.has_value());
        QCOMPARE(last->state, wire::RankState::Failed);
        QCOMPARE(last->detail, 7);
        QCOMPARE(last->step, 4);
        QCOMPARE(last->pid, std::int32_t(QCoreApplication::applicationPid()));
        QCOMPARE(last->droppedRecords, 0u);
        QVERIFY(log.has_value());
        QCOMPARE(log->text, std::string("the last words"));
        QCOMPARE(log->level, wire::LogLevel::Error);
    }

    void aFullQueueDropsAndCountsExactly()
    {
        // Nobody listens yet, and the sender hands ZeroMQ nothing before a collector is connected:
        // every record waits in the queue, whichever way the threads run. (An ipc endpoint in a
        // folder of our own, so that no other process can take it before we listen.)
        QTemporaryDir dir;
        const std::string endpoint = "ipc://" + dir.filePath("telemetry").toStdString();
        zmq::context_t context;
        zmq::socket_t pull(context, zmq::socket_type::pull);

        constexpr std::size_t capacity = 100, posts = 30, recordsPerPost = 10;
        agent::TelemetryOptions options{endpoint, 0, false, capacity};
        options.heartbeatInterval = std::chrono::hours(1);
        agent::TelemetrySender sender(options);
        std::vector<wire::SpanRecord> posted;
        for (std::size_t piece = 0; piece < posts; ++piece) {
            std::vector<wire::Record> records;
            for (std::size_t i = 0; i < recordsPerPost; ++i) {
                posted.push_back(span(int(piece * recordsPerPost + i)));
                records.emplace_back(posted.back());
            }
            sender.post(std::move(records));
        }
        // The Starting heartbeat holds one of the 100 places; of the 99 left, 9 whole posts fit (a
        // post is taken or dropped whole): the first 90 records are kept and 300 - 90 = 210 dropped.
        const std::vector<wire::SpanRecord> kept(posted.begin(), posted.begin() + 90);
        QCOMPARE(sender.dropped(), 210u);

        pull.bind(endpoint);
        sender.finish(wire::RankState::Finished, 0);
        const std::vector<wire::Batch> batches = receiveUntilFinal(pull);
        QVERIFY(!batches.empty() && !batches.front().records.empty());
        const auto* first = std::get_if<wire::HeartbeatRecord>(&batches.front().records.front());
        QVERIFY(first && first->state == wire::RankState::Starting);  // the stream opens with it
        std::vector<wire::SpanRecord> spans;
        std::optional<wire::HeartbeatRecord> last;
        for (const wire::Batch& b : batches)
            for (const wire::Record& r : b.records) {
                if (const auto* s = std::get_if<wire::SpanRecord>(&r))
                    spans.push_back(*s);
                else if (const auto* h = std::get_if<wire::HeartbeatRecord>(&r))
                    last = *h;
            }
        QCOMPARE(spans, kept);  // the first posts, whole and in order
        QVERIFY(last.has_value());
        QCOMPARE(last->state, wire::RankState::Finished);
        QCOMPARE(last->droppedRecords, sender.dropped());
    }

    void aBadEndpointIsRefusedWithItsName()
    {
        try {
            agent::TelemetrySender sender({"nonsense://x", 0, false});
            QFAIL("a bad endpoint was accepted");
        } catch (const std::runtime_error& e) {
            QVERIFY2(QString(e.what()).contains("nonsense://x"), e.what());
            QVERIFY2(QString(e.what()).contains("tcp://host:port"), e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestTelemetrySender)
#include "tst_telemetry_sender.moc"
