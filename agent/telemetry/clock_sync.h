#pragma once
// Measures this rank's clock against the engine's (the exchange of wire/clock.h) from the
// telemetry thread: a burst of exchanges, of which the one with the shortest round trip gives the
// offset (its error is at most half that round trip; a request that queued somewhere only has a
// longer one). The engine moves the rank's records onto its own clock with the result, so spans of
// hosts whose clocks disagree by seconds still line up.

#include "wire/curve_keys.h"
#include "wire/telemetry.h"

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace meshbench::agent {

class ClockSync {
public:
    // Throws std::runtime_error naming the endpoint if it is not a valid ZeroMQ endpoint. With
    // `keys`, the exchange goes over CURVE (as the engine serves it off loopback).
    ClockSync(zmq::context_t& context, const std::string& endpoint, std::uint32_t rank,
              const wire::ClientKeys* keys = nullptr);

    // The burst's best exchange, or nothing when the engine did not answer within `patience`
    // (which then ends the burst: an engine that does not answer one request will not answer
    // the next either).
    std::optional<wire::ClockOffsetRecord> measure(std::chrono::milliseconds patience = std::chrono::milliseconds(250));

    static constexpr int kExchangesPerBurst = 8;

private:
    zmq::socket_t m_socket;
    std::uint32_t m_rank;
};

}  // namespace meshbench::agent
