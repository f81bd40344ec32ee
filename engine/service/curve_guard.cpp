#include "curve_guard.h"

#include "wire/curve_keys.h"
#include "wire/text.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <sys/socket.h>

namespace meshbench::service {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";  // RFC 27: where ZeroMQ asks
constexpr const char* kStopEndpoint = "inproc://meshbench-curve-guard-stop";
constexpr std::size_t kMaxRememberedRefusals = 10000;

// A guarded socket's handshake events, as its monitor reports them, and its open connections: each
// accepted file descriptor with the addresses it had then, so that a descriptor ZeroMQ has closed
// and the system has given to another socket is never taken for one of them.
struct Watched {
    zmq::socket_t& socket;
    zmq::socket_t monitor;
    std::string name;
    std::map<int, std::string> connections;
};

// A connected socket's own and its peer's address, as bytes; empty when it is not a socket.
std::string addressesOf(int fd)
{
    sockaddr_storage own{}, peer{};
    socklen_t ownSize = sizeof own, peerSize = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&own), &ownSize) != 0 ||
        ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peerSize) != 0)
        return {};
    return std::string(reinterpret_cast<const char*>(&own), ownSize) + "|" +
           std::string(reinterpret_cast<const char*>(&peer), peerSize);
}

std::string peerText(const std::string& address)
{
    return address.empty() ? std::string("a client") : "a client at " + wire::printableText(address);
}

}  // namespace

std::string clientKeys(std::size_t count)
{
    return std::to_string(count) + (count == 1 ? " client key" : " client keys");
}

struct CurveGuard::Impl {
    explicit Impl(zmq::context_t& c) : context(c) {}

    zmq::context_t& context;
    std::filesystem::path allowListFile;  // empty for a fixed list
    std::string fixedListName;
    // The guard thread (ZAP) and the server's thread (each request) both read the list.
    mutable std::mutex allowedMutex;
    std::set<std::string> allowed;
    std::atomic<std::size_t> allowedCount{0};  // its size, for any thread
    bool revoked = false;                      // a reload took a key away: close every connection
    // The allow-list as last read, to notice a change.
    std::optional<std::filesystem::file_time_type> allowListTime;
    std::uintmax_t allowListSize = 0;
    zmq::socket_t zap{context, zmq::socket_type::rep};
    zmq::socket_t stopSender{context, zmq::socket_type::pair};
    zmq::socket_t stopReceiver{context, zmq::socket_type::pair};
    std::vector<Watched> watched;
    std::thread thread;
    struct Repeats {
        Clock::time_point reported;
        std::uint64_t quiet = 0;
    };
    std::map<std::string, Repeats> refusals;

    void serve();
    void answerZap();
    void readMonitor(Watched& w);
    void closeConnectionsIfRevoked();
    void refuse(const std::string& signature, const std::string& message);
    bool admits(const std::string& key);
    void rereadAllowListIfChanged();  // with allowedMutex held
    void bindHandler();
};

void CurveGuard::Impl::bindHandler()
{
    zap.set(zmq::sockopt::linger, 0);
    zap.bind(kZapEndpoint);
    stopReceiver.bind(kStopEndpoint);
    stopSender.connect(kStopEndpoint);
}

CurveGuard::CurveGuard(zmq::context_t& context, std::filesystem::path allowList)
    : m_impl(std::make_unique<Impl>(context))
{
    Impl& d = *m_impl;
    d.allowListFile = std::move(allowList);
    for (const std::string& key : wire::readAllowList(d.allowListFile))
        d.allowed.insert(key);
    d.allowedCount = d.allowed.size();
    std::error_code error;
    d.allowListTime = std::filesystem::last_write_time(d.allowListFile, error);
    d.allowListSize = std::filesystem::file_size(d.allowListFile, error);
    d.bindHandler();
}

CurveGuard::CurveGuard(zmq::context_t& context, const std::vector<std::string>& allowedKeys, std::string whose)
    : m_impl(std::make_unique<Impl>(context))
{
    Impl& d = *m_impl;
    d.fixedListName = std::move(whose);
    d.allowed.insert(allowedKeys.begin(), allowedKeys.end());
    d.allowedCount = d.allowed.size();
    d.bindHandler();
}

CurveGuard::~CurveGuard()
{
    Impl& d = *m_impl;
    // Monitoring ends first, so that no event waits for a reader that has gone.
    for (Watched& w : d.watched)
        zmq_socket_monitor(w.socket.handle(), nullptr, 0);
    try {
        if (d.thread.joinable()) {
            d.stopSender.send(zmq::str_buffer("stop"), zmq::send_flags::none);
            d.thread.join();
        }
    } catch (const std::exception& e) {
        // Only while the ZeroMQ context ends, which ends the thread's poll too.
        std::fprintf(stderr, "meshbench-engine: stopping the CURVE guard: %s\n", e.what());
    }
}

void CurveGuard::guard(zmq::socket_t& socket, const std::string& secretKey, const std::string& name)
{
    Impl& d = *m_impl;
    socket.set(zmq::sockopt::curve_server, true);
    socket.set(zmq::sockopt::curve_secretkey, secretKey);
    // The domain comes back in each ZAP request: it says which socket the client knocked on.
    socket.set(zmq::sockopt::zap_domain, name);
    const std::string endpoint = "inproc://meshbench-curve-monitor-" + std::to_string(d.watched.size());
    if (zmq_socket_monitor(socket.handle(), endpoint.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED) != 0)
        throw zmq::error_t();
    zmq::socket_t monitor(d.context, zmq::socket_type::pair);
    monitor.connect(endpoint);
    d.watched.push_back({socket, std::move(monitor), name, {}});
}

void CurveGuard::start()
{
    m_impl->thread = std::thread([this] { m_impl->serve(); });
}

bool CurveGuard::Impl::admits(const std::string& key)
{
    const std::lock_guard lock(allowedMutex);
    rereadAllowListIfChanged();
    return allowed.count(key) > 0;
}

bool CurveGuard::allows(const std::string& key) { return m_impl->admits(key); }

void CurveGuard::Impl::closeConnectionsIfRevoked()
{
    {
        const std::lock_guard lock(allowedMutex);
        rereadAllowListIfChanged();
        if (!revoked)
            return;
        revoked = false;
    }
    // What the monitors hold first, so that no connection ZeroMQ has closed is still listed.
    for (Watched& w : watched)
        while (w.monitor.get(zmq::sockopt::events) & ZMQ_POLLIN)
            readMonitor(w);
    // ZeroMQ gives no way to drop one peer of a ROUTER or XPUB; shutting its descriptor down makes
    // ZeroMQ end the connection as if the peer had. Every client goes through ZAP again as it
    // reconnects, and those no longer allowed are turned away there.
    std::size_t closed = 0;
    for (Watched& w : watched)
        for (const auto& [fd, addresses] : w.connections)
            if (addressesOf(fd) == addresses && ::shutdown(fd, SHUT_RDWR) == 0)
                ++closed;
    std::fprintf(stderr,
                 "meshbench-engine: a key left the allow-list: %zu client connections were closed, and only allowed "
                 "clients reconnect\n",
                 closed);
}

std::size_t CurveGuard::allowedKeys() const { return m_impl->allowedCount.load(); }

const std::filesystem::path& CurveGuard::allowList() const { return m_impl->allowListFile; }

void CurveGuard::Impl::serve()
{
    std::vector<zmq::pollitem_t> items{{stopReceiver.handle(), 0, ZMQ_POLLIN, 0}, {zap.handle(), 0, ZMQ_POLLIN, 0}};
    for (Watched& w : watched)
        items.push_back({w.monitor.handle(), 0, ZMQ_POLLIN, 0});
    for (;;) {
        // Whatever a client sends, the guard answers on; only the stop message ends it.
        try {
            // Woken at least this often to read the allow-list again, for revocations nobody asks about.
            zmq::poll(items, std::chrono::milliseconds(allowListFile.empty() ? -1 : 100));
            if (items[0].revents & ZMQ_POLLIN)
                return;
            if (items[1].revents & ZMQ_POLLIN)
                answerZap();
            for (std::size_t i = 0; i < watched.size(); ++i)
                if (items[2 + i].revents & ZMQ_POLLIN)
                    readMonitor(watched[i]);
            closeConnectionsIfRevoked();
        } catch (const zmq::error_t& e) {
            if (e.num() == ETERM)
                return;
            std::fprintf(stderr, "meshbench-engine: the CURVE guard: %s\n", e.what());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "meshbench-engine: the CURVE guard: %s\n", e.what());
        }
    }
}

void CurveGuard::Impl::answerZap()
{
    // Request (RFC 27): version, request id, domain, address, routing id, mechanism, credentials...
    std::vector<zmq::message_t> frames;
    do {
        zmq::message_t frame;
        if (!zap.recv(frame, zmq::recv_flags::dontwait))
            break;
        frames.push_back(std::move(frame));
    } while (zap.get(zmq::sockopt::rcvmore));
    if (frames.empty())
        return;
    auto frameText = [&](std::size_t i) { return i < frames.size() ? frames[i].to_string() : std::string(); };
    std::string status = "400", statusText, userId;
    const std::string domain = frameText(2), address = frameText(3), mechanism = frameText(5);
    if (frames.size() < 6 || frameText(0) != "1.0") {
        status = "500";
        statusText = "not a ZAP 1.0 request";
    } else if (mechanism == "CURVE" && frames.size() == 7 && frames[6].size() == 32) {
        char key[wire::kZ85KeyLength + 1];
        zmq_z85_encode(key, static_cast<const std::uint8_t*>(frames[6].data()), 32);
        if (admits(key)) {
            status = "200";
            statusText = "allowed";
            userId = key;
        } else {
            statusText = "this client's key is not allowed";
            refuse(domain + "\n" + address + "\n" + key,
                   "refused " + peerText(address) + " on the " + wire::printableText(domain) + ": its key " + key +
                       (allowListFile.empty() ? " is not " + fixedListName
                                              : " is not in " + allowListFile.string() +
                                                    "; to let it in: meshbench-engine keys --allow '" + key + "'"));
        }
    } else {
        statusText = "CURVE clients only";
        refuse(domain + "\n" + address + "\n" + mechanism,
               "refused " + peerText(address) + " on the " + wire::printableText(domain) + ": it uses ZeroMQ's " +
                   wire::printableText(mechanism) + " mechanism, and this engine lets in CURVE clients only");
    }
    // Reply: version, request id, status code, status text, user id, metadata.
    const std::string requestId = frameText(1);
    zap.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(requestId), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(status), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(statusText), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(userId), zmq::send_flags::sndmore);
    zap.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::none);
}

void CurveGuard::Impl::readMonitor(Watched& w)
{
    // Event (version 1): [16-bit event, 32-bit value], then the socket's endpoint.
    zmq::message_t event, endpoint;
    if (!w.monitor.recv(event, zmq::recv_flags::dontwait))
        return;
    if (event.more())
        (void)w.monitor.recv(endpoint, zmq::recv_flags::none);
    if (event.size() < 6)
        return;
    std::uint16_t id = 0;
    std::uint32_t value = 0;
    std::memcpy(&id, event.data(), sizeof id);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    const int fd = int(value);
    if (id == ZMQ_EVENT_ACCEPTED) {
        w.connections[fd] = addressesOf(fd);
        return;
    }
    if (id == ZMQ_EVENT_DISCONNECTED || id == ZMQ_EVENT_CLOSED) {
        w.connections.erase(fd);
        return;
    }
    const std::string client = "a client on the " + w.name + " (" + wire::printableText(endpoint.to_string_view()) +
                               "; ZeroMQ names no peer address before CURVE starts)";
    const std::string keysHint = " (a workbench needs --server-key and --client-key)";
    std::string why;
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        // A plaintext client that reads the engine's greeting first hangs up before finishing its own.
        why = client + ": it hung up during the handshake, as a plaintext client does on meeting CURVE" + keysHint;
    } else if (id != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        return;
    } else if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
        why = client + ": a plaintext client, it connects without CURVE keys" + keysHint;
    } else if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
        why = client +
              ": its CURVE handshake does not decrypt with this engine's key, so it holds another server's "
              "public key (give it this engine's " +
              std::string(wire::kServerKeyName) + ".key) or a damaged key pair";
    } else {
        char code[16];
        std::snprintf(code, sizeof code, "0x%08x", value);
        why = client + ": its handshake broke ZeroMQ's protocol (error " + code + ")";
    }
    refuse(w.name + "\n" + std::to_string(id) + "\n" + std::to_string(value), "refused " + why);
}

void CurveGuard::Impl::refuse(const std::string& signature, const std::string& message)
{
    const Clock::time_point now = Clock::now();
    const auto known = refusals.find(signature);
    if (known != refusals.end() && now - known->second.reported < std::chrono::seconds(kRepeatQuietSeconds)) {
        ++known->second.quiet;
        return;
    }
    const std::uint64_t quiet = known != refusals.end() ? known->second.quiet : 0;
    // A flood of fresh keys cannot grow the record without bound; forgetting costs a repeated line.
    if (refusals.size() >= kMaxRememberedRefusals)
        refusals.clear();
    refusals[signature] = {now, 0};
    std::string line = "meshbench-engine: " + message;
    if (quiet > 0)
        line += " (refused the same way " + std::to_string(quiet) + " more times since it was last said)";
    std::fprintf(stderr, "%s\n", line.c_str());
}

void CurveGuard::Impl::rereadAllowListIfChanged()
{
    if (allowListFile.empty())
        return;
    std::error_code timeError, sizeError;
    const std::filesystem::file_time_type time = std::filesystem::last_write_time(allowListFile, timeError);
    const std::uintmax_t size = std::filesystem::file_size(allowListFile, sizeError);
    const std::optional<std::filesystem::file_time_type> seen =
        timeError ? std::nullopt : std::optional<std::filesystem::file_time_type>(time);
    if (seen == allowListTime && size == allowListSize)
        return;
    allowListTime = seen;
    allowListSize = size;
    try {
        std::set<std::string> keys;
        for (const std::string& key : wire::readAllowList(allowListFile))
            keys.insert(key);
        if (!std::includes(keys.begin(), keys.end(), allowed.begin(), allowed.end()))
            revoked = true;
        allowed = std::move(keys);
        allowedCount = allowed.size();
        std::fprintf(stderr, "meshbench-engine: %s changed: %s allowed\n", allowListFile.string().c_str(),
                     clientKeys(allowed.size()).c_str());
    } catch (const wire::KeyError& e) {
        // Fail closed: a list that cannot be read is no reason to trust the one it replaced.
        if (!allowed.empty())
            revoked = true;
        allowed.clear();
        allowedCount = 0;
        std::fprintf(stderr, "meshbench-engine: %s; no client is let in until the allow-list reads again\n", e.what());
    }
}

}  // namespace meshbench::service
