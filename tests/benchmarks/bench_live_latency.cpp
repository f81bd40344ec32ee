// Live latency: from the moment the record that completes a step is handed to an agent's telemetry
// sender, to the moment that step's aggregate arrives at a live-feed subscriber; measured at a
// steady total load (default 100,000 records/s) from the demo job's 8 ranks, through the real path:
// TelemetrySender (ZeroMQ PUSH) -> Collector (decode, checks, LiveAggregator, SessionWriter) ->
// PUB -> SUB. The reference, measured in the same run: one bare message per step through the same
// sockets (PUSH -> PULL -> PUB -> SUB) with no decoding, storing or aggregating.
//
// A record lost on the way, a step whose aggregate never arrives, or a lost reference message fails
// the run: the reason on stderr, no figures, exit status 1. Both subscribers wait for a first message
// (a probe the publisher repeats) before anything is measured, so no step is lost to ZeroMQ's
// subscription handshake.
//
// usage: bench_live_latency [RECORDS_PER_SECOND] [SECONDS]   (default 100000 3)

#include "common/guarded_main.h"

#include "agent/telemetry/telemetry_sender.h"
#include "service/collector.h"

#include "live/feed_json.h"

#include "plan/mesh.h"
#include "plan/planner.h"
#include "store/session_store.h"
#include "wire/wall_clock.h"

#include <zmq.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

using namespace meshbench;

namespace {

using Clock = std::chrono::steady_clock;

plan::JobSpec demoSpec()
{
    std::ifstream in(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    std::ostringstream text;
    text << in.rdbuf();
    return *plan::parseJobSpec(text.str()).spec;
}

// One step of one rank: its micro-batches' F and B (with the pipeline transfers of its stage), the
// optimizer, and its memory by category. Times are synthetic but ordered as a real step.
std::vector<wire::Record> rankStep(const plan::Mesh& mesh, int rank, int step, int microbatches)
{
    const plan::MeshCoord c = mesh.coordOf(rank);
    std::vector<wire::Record> records;
    std::int64_t t = wire::wallAlignedNowNs();
    auto span = [&](wire::SpanKind kind, int mb, std::int64_t length) {
        records.emplace_back(wire::SpanRecord{step, std::int16_t(c.pp), 0, mb, kind, -1, t, t + length, 0});
        t += length;
    };
    for (int mb = 0; mb < microbatches; ++mb) {
        if (c.pp > 0)
            span(wire::SpanKind::RecvActivation, mb, 1000);
        span(wire::SpanKind::Forward, mb, 50'000);
        if (c.pp + 1 < mesh.pp())
            span(wire::SpanKind::SendActivation, mb, 1000);
    }
    for (int mb = 0; mb < microbatches; ++mb)
        span(wire::SpanKind::Backward, mb, 100'000);
    span(wire::SpanKind::Optimizer, -1, 20'000);
    for (int category = 0; category < wire::kMemoryCategories; ++category)
        records.emplace_back(wire::MemorySampleRecord{step, t, wire::MemoryCategory(category), 1 << 20, 2 << 20});
    return records;
}

// Publishes each completed step's number on a PUB socket, as the engine's live feed does.
class StepPublisher : public service::RunObserver {
public:
    explicit StepPublisher(zmq::socket_t& pub) : m_pub(pub) {}
    void started(const std::string&, const std::string&, int) override {}
    void stepCompleted(const live::StepAggregate& step) override
    {
        const std::string payload = live::toJson(step).dump();
        m_pub.send(zmq::buffer(std::string("step")), zmq::send_flags::sndmore);
        m_pub.send(zmq::buffer(payload), zmq::send_flags::none);
    }
    void memoryChanged(const live::RankMemory&) override {}
    void batchArrived(const wire::Batch&) override {}
    void message(wire::LogLevel, const std::string&) override {}

private:
    zmq::socket_t& m_pub;
};

struct Percentiles {
    double p50 = 0, p99 = 0;
    std::size_t count = 0;
    std::string failure;  // why the figures are not to be trusted, or empty
};

// Publishes `probe` on `pub` until `sub` (subscribed to it) receives one: the subscription has then
// reached the publisher, and everything published after it is delivered. Whatever probes were still
// on their way are read off here too, so the first message after is not a probe. False after 10 s.
bool awaitSubscription(zmq::socket_t& pub, zmq::socket_t& sub, const std::string& probe)
{
    const int timeout = sub.get(zmq::sockopt::rcvtimeo);
    sub.set(zmq::sockopt::rcvtimeo, 20);
    bool subscribed = false;
    for (int attempt = 0; attempt < 500 && !subscribed; ++attempt) {
        pub.send(zmq::buffer(probe), zmq::send_flags::none);
        zmq::message_t message;
        subscribed = bool(sub.recv(message));
    }
    zmq::message_t late;
    while (subscribed && sub.recv(late))
        ;
    sub.set(zmq::sockopt::rcvtimeo, timeout);
    return subscribed;
}

Percentiles percentiles(std::vector<double> values)
{
    Percentiles p;
    p.count = values.size();
    if (values.empty())
        return p;
    std::sort(values.begin(), values.end());
    // Nearest rank.
    auto at = [&](double q) {
        return values[std::min(values.size() - 1, std::size_t(std::ceil(q * double(values.size()))) - 1)];
    };
    p.p50 = at(0.50);
    p.p99 = at(0.99);
    return p;
}

// Latency of our path at `rate` records/s for `seconds`.
Percentiles measureEngine(const plan::JobSpec& spec, double rate, double seconds, double& achievedRate)
{
    const plan::Plan plan = plan::makePlan(spec);
    const plan::Mesh mesh(spec.parallel);
    const int world = mesh.worldSize();
    zmq::context_t context;
    zmq::socket_t pub(context, zmq::socket_type::pub);
    pub.bind("tcp://127.0.0.1:*");
    zmq::socket_t sub(context, zmq::socket_type::sub);
    sub.set(zmq::sockopt::subscribe, "step");
    sub.set(zmq::sockopt::rcvtimeo, 200);
    sub.connect(pub.get(zmq::sockopt::last_endpoint));

    live::LiveAggregator aggregator(spec, &plan);
    StepPublisher observer(pub);
    service::Collector collector(context, "tcp://127.0.0.1:*", std::uint32_t(world), aggregator, observer);
    const std::string session =
        (std::filesystem::temp_directory_path() / ("bench-live-" + std::to_string(getpid()) + ".meshbench")).string();
    store::SessionHeader header;
    header.name = "bench";
    store::SessionWriter writer(session, header);
    collector.attach(writer);
    // A topic the "step" subscription takes, alone in its message: the subscriber below skips any
    // late one (a step is a topic and a payload).
    if (!awaitSubscription(pub, sub, "step-probe")) {
        Percentiles none;
        none.failure = "the live subscriber never received a probe from the publisher";
        return none;
    }

    std::mutex mutex;
    std::map<int, Clock::time_point> completedAt;  // step -> when its last record was handed over
    std::vector<double> latencies;
    std::atomic<bool> producing{true};
    std::atomic<bool> draining{false};  // the producers are done and the engine has caught up
    std::atomic<std::uint64_t> posted{0};

    std::thread agents([&] {
        std::vector<std::unique_ptr<agent::TelemetrySender>> senders;
        senders.reserve(std::size_t(world));
        for (int r = 0; r < world; ++r)
            senders.push_back(std::make_unique<agent::TelemetrySender>(
                agent::TelemetryOptions{collector.endpoint(), std::uint32_t(r), r == 0}));
        const Clock::time_point start = Clock::now();
        for (int step = 1; Clock::now() - start < std::chrono::duration<double>(seconds); ++step) {
            std::uint64_t records = 0;
            for (int r = 0; r < world; ++r) {
                std::vector<wire::Record> batch = rankStep(mesh, r, step, spec.parallel.microbatches);
                const plan::MeshCoord c = mesh.coordOf(r);
                if (c.dp == 0 && c.tp == 0)
                    for (int layer = 0; layer < spec.model.layers; ++layer)
                        // Each stage's reporter sends its own layers (the demo splits them evenly).
                        if (spec.model.isMoeLayer(layer) && layer / (spec.model.layers / mesh.pp()) == c.pp)
                            batch.emplace_back(wire::ExpertLoadRecord{
                                step, layer, std::vector<std::uint32_t>(std::size_t(spec.model.moe.experts), 100),
                                std::vector<std::uint32_t>(std::size_t(spec.model.moe.experts), 0)});
                if (r == 0)
                    batch.emplace_back(
                        wire::StepMetricsRecord{step, 0, 1'000'000, 5.0, 0.01, 1.0, 1e-3, 1e4, 0.2, 1024});
                records += batch.size();
                if (r + 1 == world) {
                    std::lock_guard lock(mutex);
                    completedAt[step] = Clock::now();
                }
                senders[std::size_t(r)]->post(std::move(batch));
            }
            posted += records;
            // Pace to the target rate.
            const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(double(posted.load()) / rate));
            std::this_thread::sleep_until(due);
        }
        achievedRate = double(posted.load()) / std::chrono::duration<double>(Clock::now() - start).count();
        senders.clear();
        producing = false;
    });
    std::thread subscriber([&] {
        for (;;) {
            zmq::message_t topic, payload;
            if (!sub.recv(topic)) {
                if (!draining.load())
                    continue;
                break;
            }
            if (!topic.more())
                continue;  // a probe
            if (!sub.recv(payload))
                continue;
            const Clock::time_point now = Clock::now();
            const int step = nlohmann::json::parse(payload.to_string_view())["step"].get<int>();
            std::lock_guard lock(mutex);
            if (const auto it = completedAt.find(step); it != completedAt.end())
                latencies.push_back(std::chrono::duration<double, std::micro>(now - it->second).count());
        }
    });
    // The engine's loop, as the job runner polls it, until the producers are done and a second more.
    std::optional<Clock::time_point> stopAt;
    while (!stopAt || Clock::now() < *stopAt) {
        std::vector<zmq::pollitem_t> items{{collector.socket().handle(), 0, ZMQ_POLLIN, 0}};
        zmq::poll(items, std::chrono::milliseconds(10));
        collector.receive();
        if (!stopAt && !producing.load())
            stopAt = Clock::now() + std::chrono::seconds(1);
    }
    draining = true;
    agents.join();
    subscriber.join();
    writer.flush();
    std::filesystem::remove(session);
    std::filesystem::remove(session + "-wal");
    std::filesystem::remove(session + "-shm");
    Percentiles p = percentiles(latencies);
    if (const std::uint64_t lost = collector.ingest().lostRecords(); lost > 0)
        p.failure = std::to_string(lost) + " records lost between the senders and the collector";
    else if (latencies.size() != completedAt.size())
        p.failure = "the aggregates of " +
                    std::to_string(completedAt.size() - std::min(completedAt.size(), latencies.size())) + " of " +
                    std::to_string(completedAt.size()) + " steps never reached the subscriber";
    else if (latencies.empty())
        p.failure = "no step was completed";
    return p;
}

// The same hops with nothing done at the engine: PUSH -> PULL -> PUB -> SUB, one message per step.
Percentiles measureBareSockets(int messages)
{
    zmq::context_t context;
    zmq::socket_t pull(context, zmq::socket_type::pull);
    pull.set(zmq::sockopt::rcvtimeo, 2000);
    pull.bind("tcp://127.0.0.1:*");
    zmq::socket_t push(context, zmq::socket_type::push);
    push.connect(pull.get(zmq::sockopt::last_endpoint));
    zmq::socket_t pub(context, zmq::socket_type::pub);
    pub.bind("tcp://127.0.0.1:*");
    zmq::socket_t sub(context, zmq::socket_type::sub);
    sub.set(zmq::sockopt::subscribe, "");
    sub.set(zmq::sockopt::rcvtimeo, 2000);
    sub.connect(pub.get(zmq::sockopt::last_endpoint));
    if (!awaitSubscription(pub, sub, "probe")) {
        Percentiles none;
        none.failure = "the reference's subscriber never received a probe from its publisher";
        return none;
    }
    std::thread relay([&] {
        for (int i = 0; i < messages; ++i) {
            zmq::message_t m;
            if (!pull.recv(m))
                return;
            pub.send(m, zmq::send_flags::none);
        }
    });
    std::vector<double> latencies;
    for (int i = 0; i < messages; ++i) {
        const Clock::time_point sent = Clock::now();
        push.send(zmq::buffer(&i, sizeof i), zmq::send_flags::none);
        zmq::message_t m;
        if (!sub.recv(m))
            break;
        latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - sent).count());
        std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    relay.join();  // it gives up 2 s after the last message, when one was lost
    Percentiles p = percentiles(latencies);
    if (latencies.size() != std::size_t(messages))
        p.failure = "the reference lost message " + std::to_string(latencies.size()) + " of " +
                    std::to_string(messages) + " (none arrived within 2 s)";
    return p;
}

int runBenchmark(int argc, char** argv)
{
    const double rate = argc > 1 ? std::atof(argv[1]) : 100'000;
    const double seconds = argc > 2 ? std::atof(argv[2]) : 3;
    if (!(rate > 0) || !(seconds > 0) || seconds > 600) {
        std::fprintf(stderr, "usage: bench_live_latency [RECORDS_PER_SECOND] [SECONDS (up to 600)]\n");
        return 2;
    }
    const plan::JobSpec spec = demoSpec();
    double achieved = 0;
    const Percentiles engine = measureEngine(spec, rate, seconds, achieved);
    if (!engine.failure.empty()) {
        std::fprintf(stderr, "bench_live_latency: %s; no figures\n", engine.failure.c_str());
        return 1;
    }
    const Percentiles bare = measureBareSockets(int(std::min<std::size_t>(engine.count, 2000)) + 100);
    if (!bare.failure.empty()) {
        std::fprintf(stderr, "bench_live_latency: %s; no figures\n", bare.failure.c_str());
        return 1;
    }
    std::printf("live latency, record handed to the agent's sender -> step aggregate at a subscriber\n");
    std::printf("  load %.0f records/s (asked %.0f) from %d ranks, %zu steps\n", achieved, rate,
                int(spec.parallel.worldSize()), engine.count);
    std::printf("  meshbench path:      p50 %8.0f us   p99 %8.0f us\n", engine.p50, engine.p99);
    std::printf("  bare ZeroMQ hops:    p50 %8.0f us   p99 %8.0f us   (reference, same run)\n", bare.p50, bare.p99);
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    return meshbench::testing::guardedMain("bench_live_latency", 1, [&] { return runBenchmark(argc, argv); });
}
