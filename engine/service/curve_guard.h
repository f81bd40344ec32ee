#pragma once
// Who may talk to meshbench-engine serve when it serves with CURVE keys: the ZAP handler
// (ZeroMQ RFC 27) of the server's context, on a thread of its own, lets in a CURVE client whose
// public key the allow-list holds, and refuses every other. The same thread watches the guarded
// sockets' handshakes, for the clients ZeroMQ turns away before ZAP is asked: a plaintext client
// (the NULL mechanism meets CURVE; depending on which side reads the other's greeting first, the
// engine sees the mismatch or the client hanging up mid-handshake) and one that holds another
// server's public key (its HELLO does not decrypt). Each refusal goes to stderr with what is known
// of the client: its key and address from ZAP, the socket's endpoint otherwise (ZeroMQ names no
// peer before CURVE starts). The same refusal again within kRepeatQuietSeconds is counted, and
// said with the next one reported.
//
// The allow-list file is read again when it changes, so `meshbench-engine keys --allow` takes
// effect for the next connection; a change that does not read (malformed, removed) is reported,
// and lets nobody in until the file reads again. A key taken off the list is refused at once: the
// server asks allows() for every request's key, and the guard, which reads the list again every
// 100 ms, closes every open connection when a key has left it, so that a revoked client cannot go
// on with a connection it opened before (the others reconnect, through ZAP again).

#include <zmq.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace meshbench::service {

constexpr int kRepeatQuietSeconds = 10;

// "1 client key", "2 client keys".
std::string clientKeys(std::size_t count);

class CurveGuard {
public:
    // Reads the allow-list (throws wire::KeyError naming the file and the fix) and binds the ZAP
    // endpoint in `context`. Construct it before any CURVE socket of the context binds.
    CurveGuard(zmq::context_t& context, std::filesystem::path allowList);
    // A fixed allow-list, e.g. a run's own agents' key; `whose` names it in refusals.
    CurveGuard(zmq::context_t& context, const std::vector<std::string>& allowedKeys, std::string whose);
    ~CurveGuard();  // stops the thread
    CurveGuard(const CurveGuard&) = delete;
    CurveGuard& operator=(const CurveGuard&) = delete;

    // Makes `socket` a CURVE server with the engine's secret key, its refusals reported as those of
    // `name` ("control socket"); call before it binds, and before start().
    void guard(zmq::socket_t& socket, const std::string& secretKey, const std::string& name);
    // Starts answering: the thread takes over the handler's sockets.
    void start();
    // Whether the allow-list, read again if it changed, holds a client's Z85 key (the User-Id
    // ZeroMQ gives each message of a client that ZAP let in). Any thread.
    bool allows(const std::string& key);
    std::size_t allowedKeys() const;
    const std::filesystem::path& allowList() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

}  // namespace meshbench::service
