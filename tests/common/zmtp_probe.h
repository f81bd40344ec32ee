#pragma once
// A raw ZMTP 3.0 peer (RFC 23), for tests of what an engine's socket does with a client that ZeroMQ
// itself would never be: one whose frame header claims far more than it sends. It connects a plain
// stream socket to a tcp:// or ipc:// endpoint, speaks the greeting (and the NULL handshake), and
// then streams a frame's bytes until the far side stops taking them.

#include "wire/error_text.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

class ZmtpProbe {
public:
    // Connects to tcp://IPV4:PORT or ipc://PATH; connected() says whether it could, error() why not.
    explicit ZmtpProbe(const std::string& endpoint)
    {
        if (endpoint.rfind("ipc://", 0) == 0) {
            sockaddr_un address{};
            address.sun_family = AF_UNIX;
            const std::string path = endpoint.substr(6);
            std::memcpy(address.sun_path, path.data(), std::min(path.size(), sizeof address.sun_path - 1));
            m_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            connectTo(reinterpret_cast<const sockaddr*>(&address), sizeof address);
        } else if (endpoint.rfind("tcp://", 0) == 0) {
            const std::size_t colon = endpoint.rfind(':');
            sockaddr_in address{};
            address.sin_family = AF_INET;
            address.sin_port = htons(std::uint16_t(std::stoi(endpoint.substr(colon + 1))));
            ::inet_pton(AF_INET, endpoint.substr(6, colon - 6).c_str(), &address.sin_addr);
            m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            connectTo(reinterpret_cast<const sockaddr*>(&address), sizeof address);
        } else {
            m_error = "not a tcp:// or ipc:// endpoint: " + endpoint;
        }
    }
    ~ZmtpProbe()
    {
        if (m_fd >= 0)
            ::close(m_fd);
    }
    ZmtpProbe(const ZmtpProbe&) = delete;
    ZmtpProbe& operator=(const ZmtpProbe&) = delete;

    bool connected() const { return m_connected; }
    int connectError() const { return m_connectErrno; }
    const std::string& error() const { return m_error; }

    // The 64-byte greeting for `mechanism` ("NULL", "CURVE"), as a client; reads the server's.
    bool greet(const std::string& mechanism)
    {
        std::vector<std::uint8_t> greeting(64, 0);
        greeting[0] = 0xFF;
        greeting[9] = 0x7F;
        greeting[10] = 3;  // ZMTP 3.0
        std::memcpy(&greeting[12], mechanism.data(), std::min<std::size_t>(mechanism.size(), 20));
        return sendAll(greeting.data(), greeting.size()) && receive(64);
    }

    // The NULL mechanism's READY (Socket-Type DEALER); reads the server's READY.
    bool nullHandshake()
    {
        const std::string name = "Socket-Type", value = "DEALER";
        std::vector<std::uint8_t> body{5, 'R', 'E', 'A', 'D', 'Y', std::uint8_t(name.size())};
        body.insert(body.end(), name.begin(), name.end());
        for (int shift = 24; shift >= 0; shift -= 8)
            body.push_back(std::uint8_t(value.size() >> shift));
        body.insert(body.end(), value.begin(), value.end());
        std::vector<std::uint8_t> frame{0x04, std::uint8_t(body.size())};  // a short command
        frame.insert(frame.end(), body.begin(), body.end());
        if (!sendAll(frame.data(), frame.size()))
            return false;
        std::uint8_t header[2];
        if (!receiveInto(header, 2) || (header[0] & 0x04) == 0)
            return false;
        return receive(header[1]);
    }

    // A long frame header claiming `claimed` bytes (a command, or a final message frame), then zeros
    // until the peer stops taking them or `limit` bytes are sent; returns how many were sent.
    std::uint64_t streamClaimedFrame(std::uint64_t claimed, std::uint64_t limit, bool command)
    {
        std::vector<std::uint8_t> header{std::uint8_t(command ? 0x06 : 0x02)};
        for (int shift = 56; shift >= 0; shift -= 8)
            header.push_back(std::uint8_t(claimed >> shift));
        if (!sendAll(header.data(), header.size()))
            return 0;
        const std::vector<std::uint8_t> chunk(1 << 16, 0);
        std::uint64_t sent = 0;
        while (sent < limit) {
            const ssize_t wrote = ::send(m_fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
            if (wrote < 0 && errno == EINTR)
                continue;
            if (wrote <= 0)
                break;
            sent += std::uint64_t(wrote);
        }
        return sent;
    }

private:
    void connectTo(const sockaddr* address, socklen_t size)
    {
        if (m_fd < 0) {
            m_error = std::string("socket: ") + meshbench::wire::errorText(errno);
            return;
        }
        m_connected = ::connect(m_fd, address, size) == 0;
        if (!m_connected) {
            m_connectErrno = errno;
            m_error = std::string("connect: ") + meshbench::wire::errorText(errno);
        }
    }
    bool sendAll(const std::uint8_t* data, std::size_t size)
    {
        for (std::size_t at = 0; at < size;) {
            const ssize_t wrote = ::send(m_fd, data + at, size - at, MSG_NOSIGNAL);
            if (wrote < 0 && errno == EINTR)
                continue;
            if (wrote <= 0)
                return false;
            at += std::size_t(wrote);
        }
        return true;
    }
    bool receiveInto(std::uint8_t* data, std::size_t size)
    {
        for (std::size_t at = 0; at < size;) {
            const ssize_t got = ::recv(m_fd, data + at, size - at, 0);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0)
                return false;
            at += std::size_t(got);
        }
        return true;
    }
    bool receive(std::size_t size)
    {
        std::vector<std::uint8_t> ignored(size);
        return receiveInto(ignored.data(), size);
    }

    int m_fd = -1;
    bool m_connected = false;
    int m_connectErrno = 0;
    std::string m_error;
};
