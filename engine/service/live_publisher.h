#pragma once
// What a worker of meshbench-engine serve (a running job, a replay) says on the live feed. Each
// worker owns a ZeroMQ PUSH socket on its own thread, connected to the server's in-process
// endpoint; the server forwards every message to its PUB socket (ZeroMQ sockets are not shared
// between threads). Spans are decimated for the timeline: per rank at most kSpansPerRankPerSecond
// reach the feed (the session keeps them all).

#include "live/aggregator.h"
#include "wire/control.h"
#include "wire/telemetry.h"

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace meshbench::service {

constexpr const char* kLiveInproc = "inproc://meshbench-live";
constexpr double kSpansPerRankPerSecond = 5000;

class LivePublisher {
public:
    LivePublisher(zmq::context_t& context, std::string source);

    const std::string& source() const { return m_source; }
    void step(const live::StepAggregate& step);
    void memory(const live::RankMemory& memory);
    void job(nlohmann::json status);
    void log(std::uint32_t rank, wire::LogLevel level, const std::string& text);
    // The batch's spans that fit this second's budget of their rank.
    void spans(const wire::Batch& batch);
    std::uint64_t decimatedSpans() const { return m_decimated; }

private:
    void send(wire::LiveKind kind, const void* data, std::size_t size);
    void send(wire::LiveKind kind, const nlohmann::json& payload);

    std::string m_source;
    zmq::socket_t m_push;
    struct Budget {
        double tokens = kSpansPerRankPerSecond;
        std::chrono::steady_clock::time_point refilled = std::chrono::steady_clock::now();
    };
    std::unordered_map<std::uint32_t, Budget> m_budgets;
    std::uint64_t m_decimated = 0;
    std::vector<std::uint8_t> m_frame;
};

}  // namespace meshbench::service
