#pragma once
// Ships a rank's telemetry to the engine's collector: records are queued by the training thread
// and sent from a background thread over a ZeroMQ PUSH socket, so training never waits on the
// network. Until the collector is connected, records wait in that queue rather than ZeroMQ's. The
// queue is bounded; a record that does not fit is dropped and counted, and the count travels in
// every heartbeat, so the engine knows the loss exactly.
// The stream opens with a Starting heartbeat; heartbeats then go out every second (with a node
// sample when this rank samples its node). The last heartbeat says how the rank ended: finished,
// failed (exit status) or terminated (signal). With the engine's clock endpoint, the stream opens
// with this rank's clock offset (ClockSync) and carries a new one every kClockInterval.

#include "wire/curve_keys.h"
#include "wire/telemetry.h"

#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace meshbench::agent {

struct TelemetryOptions {
    std::string endpoint;  // e.g. tcp://127.0.0.1:5555
    std::uint32_t rank = 0;
    bool sampleNode = false;               // local rank 0 of a node
    std::size_t queueCapacity = 1u << 20;  // records
    std::chrono::milliseconds heartbeatInterval{1000};
    std::chrono::milliseconds finishTimeout{5000};  // how long finish() waits for the collector
    std::string clockEndpoint{};                    // the engine's clock server; empty: no offsets
    // The run's CURVE keys, when the engine serves its collector with them (off loopback).
    std::optional<wire::ClientKeys> curve{};
};

// The keys the engine hands its agents in MESHBENCH_TELEMETRY_KEYS ("SERVER AGENT-PUBLIC
// AGENT-SECRET", Z85): nothing when it is not set; throws std::runtime_error when it is malformed.
std::optional<wire::ClientKeys> telemetryKeysFromEnvironment();
// Makes `socket` a CURVE client with `keys`, before it connects.
void useCurve(zmq::socket_t& socket, const wire::ClientKeys& keys);

// A node's samples, all at one time: first the host's memory from /proc/meminfo (device -1), then
// one record per GPU that NVML reports (none without the driver), whose host memory fields stay
// -1 so that the host's figures are counted once.
std::vector<wire::NodeSampleRecord> sampleNode();

class TelemetrySender {
public:
    // Often enough to follow a drifting clock (NTP keeps drift to tens of ppm: under a
    // microsecond per interval), seldom enough to cost nothing.
    static constexpr std::chrono::seconds kClockInterval{5};

    // Connects (ZeroMQ connects lazily: an absent collector only delays delivery). Throws
    // std::runtime_error naming the endpoint if it is not a valid ZeroMQ endpoint.
    explicit TelemetrySender(TelemetryOptions options);
    ~TelemetrySender();  // finish(Finished, 0) unless finished already
    TelemetrySender(const TelemetrySender&) = delete;
    TelemetrySender& operator=(const TelemetrySender&) = delete;

    // Never blocks on the network: takes the records, or drops (and counts) what does not fit.
    void post(std::vector<wire::Record> records);
    void log(wire::LogLevel level, std::string text);
    void setCompletedSteps(int steps) { m_steps.store(steps, std::memory_order_relaxed); }
    std::uint64_t dropped() const { return m_dropped.load(std::memory_order_relaxed); }

    // Sends the final heartbeat after everything queued, and waits (bounded) until it left.
    // Safe to call from a signal-handling thread; later calls do nothing.
    void finish(wire::RankState state, std::int32_t detail);

private:
    void run();
    wire::HeartbeatRecord heartbeat(wire::RankState state, std::int32_t detail) const;

    struct Socket;

    TelemetryOptions m_options;
    std::string m_host;
    std::unique_ptr<Socket> m_socket;  // used by the sender thread only
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::vector<wire::Record> m_queue;                         // guarded by m_mutex
    std::size_t m_queued = 0;                                  // records queued or in the backlog; guarded by m_mutex
    bool m_finishing = false;                                  // guarded by m_mutex
    wire::RankState m_finalState = wire::RankState::Finished;  // guarded by m_mutex
    std::int32_t m_finalDetail = 0;                            // guarded by m_mutex
    std::atomic<int> m_steps{0};
    std::atomic<std::uint64_t> m_dropped{0};
    std::once_flag m_finishOnce;
    std::thread m_thread;
};

}  // namespace meshbench::agent
