#include "clock_server.h"

#include "wire/clock.h"
#include "wire/endpoints.h"
#include "wire/telemetry.h"
#include "wire/wall_clock.h"

#include <stdexcept>

namespace meshbench::service {

ClockServer::ClockServer(zmq::context_t& context, const std::string& bind, const SocketSetup& setup)
    : m_socket(context, zmq::socket_type::router)
{
    try {
        m_socket.set(zmq::sockopt::linger, 0);
        if (setup)
            setup(m_socket, "clock server");
        m_socket.bind(bind);
    } catch (const zmq::error_t& e) {
        throw std::runtime_error("cannot bind the clock server to '" + bind + "': " + wire::bindFailure(e.num(), bind) +
                                 " (it binds beside the collector, which --collector sets)");
    }
    m_endpoint = reachableEndpoint(m_socket);
    m_thread = std::thread([this] { serve(); });
}

ClockServer::~ClockServer()
{
    m_stop = true;
    m_thread.join();
}

void ClockServer::serve()
{
    zmq::pollitem_t item{m_socket.handle(), 0, ZMQ_POLLIN, 0};
    while (!m_stop) {
        // Woken every 50 ms to notice the stop flag; requests are answered as they come.
        if (zmq::poll(&item, 1, std::chrono::milliseconds(50)) <= 0)
            continue;
        zmq::message_t identity, payload;
        if (!m_socket.recv(identity, zmq::recv_flags::dontwait))
            continue;
        const std::int64_t received = wire::wallAlignedNowNs();
        // A peer's message is its identity and one frame; any other shape is not a request.
        if (!identity.more() || !m_socket.recv(payload, zmq::recv_flags::dontwait)) {
            ++m_refused;
            continue;
        }
        const bool wellFormed = !payload.more();
        // A longer message's other frames are read and dropped; it is refused below.
        for (bool more = payload.more(); more;) {
            zmq::message_t rest;
            more = m_socket.recv(rest, zmq::recv_flags::dontwait) && rest.more();
        }
        const std::optional<wire::ClockRequest> request =
            wellFormed ? wire::decodeClockRequest({static_cast<const std::uint8_t*>(payload.data()), payload.size()})
                       : std::nullopt;
        if (!request) {
            ++m_refused;
            continue;
        }
        wire::ClockReply reply{request->rank, request->sentNs, received, 0};
        reply.repliedNs = wire::wallAlignedNowNs();
        const std::vector<std::uint8_t> frame = wire::encodeClockReply(reply);
        // A peer that went away, or one whose queue is full, simply gets no reply.
        if (m_socket.send(identity, zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
            m_socket.send(zmq::const_buffer(frame.data(), frame.size()), zmq::send_flags::dontwait))
            ++m_answered;
    }
}

std::string clockBindBeside(const std::string& collectorBind)
{
    if (collectorBind.rfind("tcp://", 0) == 0) {
        const std::size_t colon = collectorBind.rfind(':');
        if (colon != std::string::npos && colon > 5)
            return collectorBind.substr(0, colon) + ":*";
    }
    if (collectorBind.rfind("ipc://", 0) == 0)
        return collectorBind + ".clock";
    throw std::runtime_error("the collector's endpoint '" + collectorBind +
                             "' leaves no place for the clock server beside it: use tcp://HOST:PORT or ipc://PATH");
}

}  // namespace meshbench::service
