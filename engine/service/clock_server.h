#pragma once
// The engine's side of the clock exchange (wire/clock.h): a ZeroMQ ROUTER socket beside the
// collector, answered by a thread of its own so that a request is stamped the moment it arrives
// and answered at once, whatever the job runner's loop is doing (a busy loop would lengthen the
// round trip, and the offset's error with it). Frames that are not clock requests get no answer
// and are counted.

#include "collector.h"

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace meshbench::service {

class ClockServer {
public:
    // Binds `bind`; throws std::runtime_error naming it when it cannot.
    ClockServer(zmq::context_t& context, const std::string& bind, const SocketSetup& setup = {});
    ~ClockServer();
    ClockServer(const ClockServer&) = delete;
    ClockServer& operator=(const ClockServer&) = delete;

    // The bound endpoint, as agents reach it (see reachableEndpoint).
    const std::string& endpoint() const { return m_endpoint; }
    std::uint64_t answered() const { return m_answered.load(std::memory_order_relaxed); }
    std::uint64_t refused() const { return m_refused.load(std::memory_order_relaxed); }

private:
    void serve();

    zmq::socket_t m_socket;  // used by the serving thread only, once it runs
    std::string m_endpoint;
    std::atomic<bool> m_stop{false};
    std::atomic<std::uint64_t> m_answered{0};
    std::atomic<std::uint64_t> m_refused{0};
    std::thread m_thread;
};

// Where the clock server binds beside a collector bound at `collectorBind`: the same host on a
// port of its own (tcp://HOST:*), or the collector's ipc path with ".clock" appended.
std::string clockBindBeside(const std::string& collectorBind);

}  // namespace meshbench::service
