#include "clock_sync.h"

#include "telemetry_sender.h"
#include "wire/clock.h"
#include "wire/wall_clock.h"

#include <stdexcept>

namespace meshbench::agent {

ClockSync::ClockSync(zmq::context_t& context, const std::string& endpoint, std::uint32_t rank,
                     const wire::ClientKeys* keys)
    : m_socket(context, zmq::socket_type::dealer), m_rank(rank)
{
    try {
        m_socket.set(zmq::sockopt::linger, 0);
        if (keys)
            useCurve(m_socket, *keys);
        // Requests go to a completed connection only, so one sent before the engine answers is
        // not delivered late with a stale stamp.
        m_socket.set(zmq::sockopt::immediate, true);
        m_socket.connect(endpoint);
    } catch (const zmq::error_t& e) {
        throw std::runtime_error("cannot connect to the engine's clock at '" + endpoint + "': " + e.what() +
                                 " (expected an endpoint such as tcp://host:port)");
    }
}

std::optional<wire::ClockOffsetRecord> ClockSync::measure(std::chrono::milliseconds patience)
{
    std::optional<wire::ClockMeasurement> best;
    for (int i = 0; i < kExchangesPerBurst; ++i) {
        const wire::ClockRequest request{m_rank, wire::wallAlignedNowNs()};
        const std::vector<std::uint8_t> frame = wire::encodeClockRequest(request);
        if (!m_socket.send(zmq::const_buffer(frame.data(), frame.size()), zmq::send_flags::dontwait)) {
            // Not connected yet: wait for the connection as long as for a reply, once.
            zmq::pollitem_t writable{m_socket.handle(), 0, ZMQ_POLLOUT, 0};
            if (zmq::poll(&writable, 1, patience) <= 0)
                break;
            continue;
        }
        // Replies to earlier requests that came late are read and put aside.
        std::optional<wire::ClockMeasurement> answer;
        const auto giveUp = std::chrono::steady_clock::now() + patience;
        while (!answer) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(giveUp - std::chrono::steady_clock::now());
            zmq::pollitem_t readable{m_socket.handle(), 0, ZMQ_POLLIN, 0};
            if (left.count() <= 0 || zmq::poll(&readable, 1, left) <= 0)
                break;
            zmq::message_t message;
            if (!m_socket.recv(message, zmq::recv_flags::dontwait))
                continue;
            const std::int64_t received = wire::wallAlignedNowNs();
            const std::optional<wire::ClockReply> reply =
                wire::decodeClockReply({static_cast<const std::uint8_t*>(message.data()), message.size()});
            if (reply && reply->requestSentNs == request.sentNs)
                answer = wire::measureClock(*reply, received);
        }
        if (!answer)
            break;
        if (!best || answer->roundTripNs < best->roundTripNs)
            best = answer;
    }
    if (!best)
        return std::nullopt;
    return wire::ClockOffsetRecord{best->midpointNs, best->offsetNs, best->roundTripNs};
}

}  // namespace meshbench::agent
