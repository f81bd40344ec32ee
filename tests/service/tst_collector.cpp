// Every record type, sent over a real ZeroMQ socket to the engine's collector, stored, read back
// and exported: what comes out equals what went in, field for field.

#include "service/collector.h"

#include "store/session_export.h"

#include <QtTest>

#include <fstream>
#include <limits>
#include <sstream>

using namespace meshbench;

namespace {

plan::JobSpec demoSpec()
{
    std::ifstream in(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    std::ostringstream text;
    text << in.rdbuf();
    return *plan::parseJobSpec(text.str()).spec;
}

class CountingObserver : public service::RunObserver {
public:
    void started(const std::string&, const std::string&, int) override {}
    void stepCompleted(const live::StepAggregate&) override {}
    void memoryChanged(const live::RankMemory&) override {}
    void batchArrived(const wire::Batch&) override { ++batches; }
    void message(wire::LogLevel, const std::string& text) override { messages.push_back(text); }
    int batches = 0;
    std::vector<std::string> messages;
};

template <typename T>
std::vector<T> records(const std::vector<store::FromRank<T>>& stored, std::uint32_t rank)
{
    std::vector<T> out;
    for (const auto& s : stored) {
        if (s.rank != rank)
            qFatal("a record arrived under rank %u", s.rank);
        out.push_back(s.record);
    }
    return out;
}

}  // namespace

class TestCollector : public QObject {
    Q_OBJECT

private slots:
    void everyRecordTypeRoundTrips()
    {
        const plan::JobSpec spec = demoSpec();
        const plan::Plan plan = plan::makePlan(spec);
        live::LiveAggregator aggregator(spec, &plan);
        CountingObserver observer;
        zmq::context_t context;
        service::Collector collector(context, "tcp://127.0.0.1:*", 8, aggregator, observer);
        QTemporaryDir dir;
        const std::string session = dir.filePath("round-trip.meshbench").toStdString();
        auto writer = std::make_unique<store::SessionWriter>(
            session, store::SessionHeader{"round trip", "{}", "{}", "dp8", {}, 1, "test"});
        collector.attach(*writer);

        const std::int64_t big = std::numeric_limits<std::int64_t>::max() / 4;
        const wire::SpanRecord span{7, 1, 0, 3, wire::SpanKind::SendActivation, 5, big, big + 12345, 1ull << 40};
        const wire::ExpertLoadRecord load{7, 2, {10, 0, 4000000000u, 7}, {0, 0, 12, 7}};
        const wire::MemorySampleRecord memory{7, big, wire::MemoryCategory::Activations, 1ll << 35, 1ll << 36};
        const wire::StepMetricsRecord metrics{7,         big - 10, big, 2.718281828459045, 0.0123, 0.5, 3e-4,
                                              12345.678, 0.2272,   1024};
        const wire::NodeSampleRecord node{big, "node-0.cluster", 1ll << 40, 1ll << 39, -1, -1, -1, -1.0f};
        const wire::LogRecord log{big, wire::LogLevel::Error, "rank 3: a line, with \"quotes\",\nand a newline"};
        const wire::HeartbeatRecord heartbeat{big, wire::RankState::Terminated, 7, 4242, 15, 3, "node-0.cluster"};
        wire::Batch batch{3, 0, {span, load, memory, metrics, node, log, heartbeat}};

        zmq::socket_t push(context, zmq::socket_type::push);
        push.connect(collector.endpoint());
        push.send(zmq::buffer(wire::encodeBatch(batch)));
        QElapsedTimer timer;
        timer.start();
        while (collector.records() < batch.records.size() && timer.elapsed() < 10000) {
            std::vector<zmq::pollitem_t> items{{collector.socket().handle(), 0, ZMQ_POLLIN, 0}};
            zmq::poll(items, std::chrono::milliseconds(50));
            collector.receive();
        }
        QCOMPARE(collector.records(), std::uint64_t(batch.records.size()));
        QCOMPARE(observer.batches, 1);
        QVERIFY(observer.messages.empty());
        QCOMPARE(collector.ingest().traffic()[3].received, 7u);
        QCOMPARE(collector.ingest().liveness(3).pid, 4242);
        writer->flush();

        store::SessionReader reader(session);
        std::vector<wire::SpanRecord> spans;
        reader.spans(0, std::numeric_limits<std::int64_t>::max(), {}, [&](const store::StoredSpan& s) {
            QCOMPARE(s.rank, 3u);
            spans.push_back(s.span);
        });
        QCOMPARE(spans, std::vector<wire::SpanRecord>{span});
        QCOMPARE(records(reader.expertLoads(), 3), std::vector<wire::ExpertLoadRecord>{load});
        QCOMPARE(records(reader.memorySamples(), 3), std::vector<wire::MemorySampleRecord>{memory});
        QCOMPARE(records(reader.stepMetrics(), 3), std::vector<wire::StepMetricsRecord>{metrics});
        QCOMPARE(records(reader.nodeSamples(), 3), std::vector<wire::NodeSampleRecord>{node});
        QCOMPARE(records(reader.logs(), 3), std::vector<wire::LogRecord>{log});
        QCOMPARE(records(reader.heartbeats(), 3), std::vector<wire::HeartbeatRecord>{heartbeat});

        // Exported: the steps table carries the metrics exactly, the log its text exactly.
        store::exportCsv(reader, dir.filePath("csv").toStdString());
        std::ifstream steps(dir.filePath("csv/steps.csv").toStdString());
        std::string header, row;
        std::getline(steps, header);
        std::getline(steps, row);
        QVERIFY2(header.rfind("step,loss,aux_loss,tokens_per_s,bubble_ratio", 0) == 0, header.c_str());
        std::istringstream fields(row);
        std::string step, loss, aux, tokens, bubble;
        std::getline(fields, step, ',');
        std::getline(fields, loss, ',');
        std::getline(fields, aux, ',');
        std::getline(fields, tokens, ',');
        std::getline(fields, bubble, ',');
        QCOMPARE(std::stoi(step), metrics.step);
        QCOMPARE(std::stod(loss), metrics.loss);
        QCOMPARE(std::stod(aux), metrics.auxLoss);
        QCOMPARE(std::stod(tokens), metrics.tokensPerSecond);
        QCOMPARE(std::stod(bubble), metrics.bubbleRatio);
        std::ifstream logs(dir.filePath("csv/logs.csv").toStdString());
        std::ostringstream logText;
        logText << logs.rdbuf();
        QVERIFY2(logText.str().find("\"rank 3: a line, with \"\"quotes\"\",\nand a newline\"") != std::string::npos,
                 logText.str().c_str());
    }
};

QTEST_GUILESS_MAIN(TestCollector)
#include "tst_collector.moc"
