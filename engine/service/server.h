#pragma once
// meshbench-engine serve: the daemon the GUI talks to. One thread serves the control socket
// (ZeroMQ ROUTER) and the live feed (PUB); each submitted job and each opened replay runs on a
// worker thread of its own and reaches the feed through an in-process socket (see
// live_publisher.h). Protocol: wire/control.h.
//
// Security: there is no authentication yet, so the server binds to loopback only (127.0.0.1,
// ::1, localhost, or ipc://) and refuses any other address; reach a remote engine through an SSH
// tunnel until CURVE keys are supported.

#include <atomic>
#include <memory>
#include <string>

namespace meshbench::service {

struct ServeOptions {
    std::string control = "tcp://127.0.0.1:5570";
    std::string live;                     // empty: the control endpoint's port + 1
    std::string sessionsDir;              // where submitted jobs store their sessions
    bool exitWhenIdle = false;            // end once every job and replay has ended (replay command)
};

// Whether an endpoint only listens on this machine; `why` says what is wrong otherwise.
bool isLoopbackEndpoint(const std::string& endpoint, std::string& why);

class Server {
public:
    // Binds both sockets; throws std::runtime_error naming the endpoint when it cannot.
    explicit Server(ServeOptions options);
    ~Server();   // stops the jobs and replays still running, and waits for them
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    const std::string& controlEndpoint() const;
    const std::string& liveEndpoint() const;
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
