#include "telemetry_sender.h"

#include "clock_sync.h"
#include "nvml.h"

#include "wire/host_name.h"
#include "wire/wall_clock.h"

#include <zmq.hpp>

#include <cstdlib>
#include <deque>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

namespace meshbench::agent {

namespace {

// Records per ZeroMQ message: large enough to amortise the per-message cost, small enough that
// one message stays well under the engine's frame limit.
constexpr std::size_t kRecordsPerBatch = 4096;

wire::NodeSampleRecord sampleHost()
{
    wire::NodeSampleRecord sample;
    sample.timeNs = wire::wallAlignedNowNs();
    sample.host = wire::localHostName();
    // /proc/meminfo reports kB; "used" is what the kernel cannot hand out: total - available.
    std::ifstream meminfo("/proc/meminfo");
    std::string line;
    std::int64_t totalKb = -1, availableKb = -1;
    while (std::getline(meminfo, line)) {
        std::istringstream fields(line);
        std::string key;
        std::int64_t value = 0;
        fields >> key >> value;
        if (key == "MemTotal:")
            totalKb = value;
        else if (key == "MemAvailable:")
            availableKb = value;
    }
    if (totalKb > 0) {
        sample.hostMemoryTotalBytes = totalKb * 1024;
        if (availableKb >= 0)
            sample.hostMemoryUsedBytes = (totalKb - availableKb) * 1024;
    }
    return sample;
}

}  // namespace

std::optional<wire::ClientKeys> telemetryKeysFromEnvironment()
{
    const char* text = std::getenv("MESHBENCH_TELEMETRY_KEYS");
    if (!text)
        return std::nullopt;
    std::istringstream fields(text);
    wire::ClientKeys keys;
    std::string extra;
    fields >> keys.serverKey >> keys.client.publicKey >> keys.client.secretKey;
    for (const std::string* key : {&keys.serverKey, &keys.client.publicKey, &keys.client.secretKey})
        if (const std::string problem = wire::z85KeyProblem(*key); !problem.empty())
            throw std::runtime_error("MESHBENCH_TELEMETRY_KEYS holds a bad key (" + problem +
                                     "); it is the engine's to set, for the agents it launches");
    if (fields >> extra)
        throw std::runtime_error("MESHBENCH_TELEMETRY_KEYS holds more than three keys");
    return keys;
}

void useCurve(zmq::socket_t& socket, const wire::ClientKeys& keys)
{
    socket.set(zmq::sockopt::curve_serverkey, keys.serverKey);
    socket.set(zmq::sockopt::curve_publickey, keys.client.publicKey);
    socket.set(zmq::sockopt::curve_secretkey, keys.client.secretKey);
}

std::vector<wire::NodeSampleRecord> sampleNode()
{
    std::vector<wire::NodeSampleRecord> samples{sampleHost()};
    for (const GpuSample& gpu : Nvml::process().sample()) {
        wire::NodeSampleRecord& sample = samples.emplace_back();
        sample.timeNs = samples.front().timeNs;
        sample.host = samples.front().host;
        sample.device = gpu.index;
        sample.deviceMemoryTotalBytes = gpu.memoryTotalBytes;
        sample.deviceMemoryUsedBytes = gpu.memoryUsedBytes;
        sample.deviceUtilization = gpu.utilization;
    }
    return samples;
}

struct TelemetrySender::Socket {
    zmq::context_t context{1};
    zmq::socket_t push{context, zmq::socket_type::push};
    std::optional<ClockSync> clock;
};

TelemetrySender::TelemetrySender(TelemetryOptions options)
    : m_options(std::move(options)), m_host(wire::localHostName()), m_socket(std::make_unique<Socket>())
{
    try {
        // A bounded send buffer: beyond it the records wait in our queue, where they are counted.
        m_socket->push.set(zmq::sockopt::sndhwm, 64);
        // Frames go to completed connections only: until the collector answers, records wait in our
        // queue, whose bound and drop count are exact, not in ZeroMQ's (up to 64 full batches,
        // uncounted) for a collector that may never come.
        m_socket->push.set(zmq::sockopt::immediate, true);
        m_socket->push.set(zmq::sockopt::linger, int(m_options.finishTimeout.count()));
        if (m_options.curve)
            useCurve(m_socket->push, *m_options.curve);
        m_socket->push.connect(m_options.endpoint);
    } catch (const zmq::error_t& e) {
        throw std::runtime_error("cannot connect telemetry to '" + m_options.endpoint + "': " + e.what() +
                                 " (expected an endpoint such as tcp://host:port or ipc:///path)");
    }
    if (!m_options.clockEndpoint.empty())
        m_socket->clock.emplace(m_socket->context, m_options.clockEndpoint, m_options.rank,
                                m_options.curve ? &*m_options.curve : nullptr);
    // Queued before anything can be posted, so the stream always opens with them and they take a
    // known place in the bounded queue.
    if (m_options.sampleNode)
        for (wire::NodeSampleRecord& sample : sampleNode())
            m_queue.push_back(std::move(sample));
    m_queue.push_back(heartbeat(wire::RankState::Starting, 0));
    m_queued = m_queue.size();
    // The socket now belongs to the sender thread (thread start orders the accesses, the queue's too).
    m_thread = std::thread([this] { run(); });
}

TelemetrySender::~TelemetrySender() { finish(wire::RankState::Finished, 0); }

void TelemetrySender::post(std::vector<wire::Record> records)
{
    if (records.empty())
        return;
    std::lock_guard lock(m_mutex);
    if (m_finishing)
        return;
    if (m_queued + records.size() > m_options.queueCapacity) {
        m_dropped.fetch_add(records.size(), std::memory_order_relaxed);
        return;
    }
    m_queued += records.size();
    for (wire::Record& r : records)
        m_queue.push_back(std::move(r));
    m_wake.notify_one();
}

void TelemetrySender::log(wire::LogLevel level, std::string text)
{
    std::vector<wire::Record> records;
    records.emplace_back(wire::LogRecord{wire::wallAlignedNowNs(), level, std::move(text)});
    post(std::move(records));
}

void TelemetrySender::finish(wire::RankState state, std::int32_t detail)
{
    std::call_once(m_finishOnce, [&] {
        {
            std::lock_guard lock(m_mutex);
            m_finishing = true;
            m_finalState = state;
            m_finalDetail = detail;
        }
        m_wake.notify_one();
        m_thread.join();
        m_socket.reset();  // closes with the linger set above, so the last frames get out
    });
}

wire::HeartbeatRecord TelemetrySender::heartbeat(wire::RankState state, std::int32_t detail) const
{
    wire::HeartbeatRecord h;
    h.timeNs = wire::wallAlignedNowNs();
    h.state = state;
    h.step = m_steps.load(std::memory_order_relaxed);
    h.pid = std::int32_t(getpid());
    h.detail = detail;
    h.droppedRecords = m_dropped.load(std::memory_order_relaxed);
    h.host = m_host;
    return h;
}

void TelemetrySender::run()
{
    using Clock = std::chrono::steady_clock;
    std::uint64_t sequence = 0;
    std::deque<wire::Record> backlog;  // taken from the queue, not yet sent
    std::vector<std::uint8_t> frame;   // encoded but refused by a full socket: resent as is
    std::size_t frameRecords = 0;
    auto nextHeartbeat = Clock::now() + m_options.heartbeatInterval;
    auto nextClock = Clock::now() + kClockInterval;
    std::optional<Clock::time_point> deadline;
    // Before anything else leaves, so that the engine has the rank's clock for every record after.
    if (m_socket->clock) {
        std::optional<wire::ClockOffsetRecord> offset = m_socket->clock->measure();
        if (offset)
            backlog.push_back(*offset);
        else
            backlog.push_back(wire::LogRecord{wire::wallAlignedNowNs(), wire::LogLevel::Warning,
                                              "telemetry: the engine's clock at " + m_options.clockEndpoint +
                                                  " did not answer; this rank's times stay on its own clock until "
                                                  "it does"});
        std::lock_guard lock(m_mutex);
        ++m_queued;
    }

    auto sendFrame = [&]() -> bool {
        if (frame.empty())
            return true;
        const auto sent = m_socket->push.send(zmq::const_buffer(frame.data(), frame.size()), zmq::send_flags::dontwait);
        if (!sent)
            return false;
        sequence += frameRecords;
        frame.clear();
        std::lock_guard lock(m_mutex);
        m_queued -= frameRecords;
        return true;
    };
    auto encodeNext = [&] {
        wire::Batch batch;
        batch.rank = m_options.rank;
        batch.sequence = sequence;
        const std::size_t n = std::min(backlog.size(), kRecordsPerBatch);
        batch.records.reserve(n);
        for (std::size_t i = 0; i < n; ++i) {
            batch.records.push_back(std::move(backlog.front()));
            backlog.pop_front();
        }
        frameRecords = n;
        try {
            wire::encodeBatch(batch, frame);
        } catch (const std::invalid_argument& e) {
            // Records the format cannot carry (e.g. a batch over the frame limit): dropped, counted
            // and said, never the end of the rank.
            m_dropped.fetch_add(n, std::memory_order_relaxed);
            {
                std::lock_guard lock(m_mutex);
                m_queued -= n;
            }
            frameRecords = 0;
            backlog.emplace_front(wire::LogRecord{wire::wallAlignedNowNs(), wire::LogLevel::Error,
                                                  "telemetry: dropped " + std::to_string(n) + " records: " + e.what()});
            std::lock_guard lock(m_mutex);
            ++m_queued;
        }
    };

    bool finishing = false;
    wire::RankState finalState = wire::RankState::Finished;
    std::int32_t finalDetail = 0;
    for (;;) {
        {
            std::unique_lock lock(m_mutex);
            // A frame the socket refused is retried every few milliseconds.
            const auto wakeAt = frame.empty() ? nextHeartbeat : Clock::now() + std::chrono::milliseconds(5);
            m_wake.wait_until(lock, wakeAt, [&] { return !m_queue.empty() || (m_finishing && !deadline); });
            for (wire::Record& r : m_queue)
                backlog.push_back(std::move(r));
            m_queue.clear();
            finishing = m_finishing;
            finalState = m_finalState;
            finalDetail = m_finalDetail;
        }
        // Heartbeats queue behind the posted records; they count against the queue too, but the
        // capacity check in post() is the only place that drops.
        auto addOwn = [&](wire::Record record) {
            backlog.push_back(std::move(record));
            std::lock_guard lock(m_mutex);
            ++m_queued;
        };
        if (finishing && !deadline) {
            deadline = Clock::now() + m_options.finishTimeout;
            addOwn(heartbeat(finalState, finalDetail));
        } else if (!finishing && Clock::now() >= nextHeartbeat) {
            if (m_options.sampleNode)
                for (wire::NodeSampleRecord& sample : sampleNode())
                    addOwn(std::move(sample));
            addOwn(heartbeat(wire::RankState::Running, 0));
            nextHeartbeat = Clock::now() + m_options.heartbeatInterval;
        }
        if (!finishing && m_socket->clock && Clock::now() >= nextClock) {
            if (std::optional<wire::ClockOffsetRecord> offset = m_socket->clock->measure())
                addOwn(*offset);
            nextClock = Clock::now() + kClockInterval;
        }
        while (sendFrame() && !backlog.empty())
            encodeNext();
        if (finishing && ((frame.empty() && backlog.empty()) || Clock::now() >= *deadline))
            return;
    }
}

}  // namespace meshbench::agent
