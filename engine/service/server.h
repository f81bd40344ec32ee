#pragma once
// meshbench-engine serve: the daemon the GUI talks to. One thread serves the control socket
// (ZeroMQ ROUTER) and the live feed (PUB); each submitted job and each opened replay runs on a
// worker thread of its own and reaches the feed through an in-process socket (see
// live_publisher.h). Protocol: wire/control.h.
//
// Security: the engine acts for its own user only. Without keys it serves only where no other user
// can connect: an ipc socket in a folder private to this user (wire::isPrivateEndpoint), by
// default wire::defaultControlEndpoint(). Anywhere else, a TCP port on loopback included, it
// serves with CURVE (ZeroMQ RFC 26) on both sockets: the engine's key pair and the allow-list of
// client keys come from wire::keyDirectory(), and a CurveGuard lets in only the clients the list
// names (a key taken off it loses its open connections too). `curve` turns the same on for ipc.
// Every connection is held to wire::kMaxRequestBytes a frame, before authentication and after.

#include <atomic>
#include <memory>
#include <string>

namespace meshbench::service {

struct ServeOptions {
    std::string control;          // empty: wire::defaultControlEndpoint()
    std::string live;             // empty: the control port + 1, or the ipc path + ".live"
    std::string sessionsDir;      // where submitted jobs store their sessions
    bool exitWhenIdle = false;    // end once every job and replay has ended (replay command)
    bool curve = false;           // CURVE even when both endpoints are on loopback
    bool allowRunAsRoot = false;  // every job as with run --allow-run-as-root
};

class Server {
public:
    // Binds both sockets; throws std::runtime_error naming the endpoint, or the key file, and the
    // fix when it cannot.
    explicit Server(ServeOptions options);
    ~Server();  // stops the jobs and replays still running, and waits for them
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    const std::string& controlEndpoint() const;
    const std::string& liveEndpoint() const;
    // With CURVE: the allow-list and how many client keys it holds. Empty without.
    std::string curveSummary() const;
    // Starts replaying a session (as the "open" request does); returns its source name. Throws
    // store::StoreError when the session cannot be read.
    std::string openReplay(const std::string& session, double speed);
    // Why a replay that has ended stopped before its end (a damaged session); empty when it played
    // through, or is still playing.
    std::string replayFailure(const std::string& source) const;
    // Serves until `stop` is set (or, with exitWhenIdle, until nothing runs any more).
    void run(const std::atomic<bool>& stop);

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace meshbench::service
