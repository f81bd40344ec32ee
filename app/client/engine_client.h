#pragma once
// The GUI's connection to `meshbench-engine serve` (protocol: wire/control.h).
//
// Control: a ZeroMQ DEALER to the engine's ROUTER. request() stamps "v" and an "id", and calls the
// handler with the reply whose id matches, or with {"ok": false, "error": "the engine did not
// answer ..."} when none came within the timeout. Live feed: a SUB subscribed to everything,
// re-emitted as Qt signals by topic kind. Both sockets are driven from the Qt event loop: a
// QSocketNotifier on ZMQ_FD plus a short safety-net timer (ZMQ_FD is edge-triggered, so every
// notification and every send drains the sockets until ZMQ_EVENTS says nothing is left).
//
// Payload types: the JSON kinds (step, memory, job, log) arrive as nlohmann::json, exactly the
// engine's objects (keys in live/aggregator.h and engine/service); spans arrive decoded as a
// wire::Batch. Signals are emitted on the GUI thread; connect them directly.
//
// The connection state follows `hello`: Connecting until the engine answers it, Connected after,
// and back to Connecting when a periodic hello goes unanswered (the DEALER keeps reconnecting).
//
// Keys: an engine served on tcp:// (or with --curve) speaks CURVE and lets in only the client
// keys its allow-list names; connectTo's `keys` put the engine's public key and this workbench's
// pair on both sockets (client_keys.h chooses them). A refused client hears nothing back: its
// requests time out, and the engine's log names the refused key.

#include "wire/curve_keys.h"
#include "wire/telemetry.h"

#include <nlohmann/json.hpp>

#include <QObject>
#include <QPointer>
#include <QString>

#include <functional>
#include <map>
#include <memory>
#include <optional>

class QProcess;
class QSocketNotifier;
class QTimer;

Q_DECLARE_METATYPE(nlohmann::json)
Q_DECLARE_METATYPE(meshbench::wire::Batch)

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace meshbench::app {

enum class ConnectionState { Disconnected, Connecting, Connected };
QString connectionStateName(ConnectionState state);

// The live feed's endpoint as a client of `control` reaches it: an engine bound to every interface
// (tcp://0.0.0.0, tcp://*, tcp://[::]) advertises that wildcard, which here means the control
// endpoint's host.
QString reachableLiveEndpoint(const QString& control, const QString& advertised);

class EngineClient : public QObject {
    Q_OBJECT

public:
    using ReplyHandler = std::function<void(const nlohmann::json& reply)>;

    static constexpr int kDefaultTimeoutMs = 10000;

    explicit EngineClient(QObject* parent = nullptr);
    // Stops the engine if this client started it (SIGTERM, then waits up to 10 s: the engine ends
    // its jobs cleanly and keeps their sessions).
    ~EngineClient() override;

    // Connects to an engine's control endpoint; the live feed's endpoint is taken from the hello
    // reply unless `live` is given (a tunnel may map it elsewhere). With `keys`, over CURVE.
    // Replaces any current connection; requests still pending on it get the error reply.
    void connectTo(const QString& control, const QString& live = {}, std::optional<wire::ClientKeys> keys = {});
    void disconnectFromEngine();

    // The local engine: asks `control` (by default wire::defaultControlEndpoint(), this user's own
    // ipc socket) for hello (1 s); when nothing answers, starts
    // `meshbench-engine serve --bind control [--live live] [--sessions dir]` and connects to it.
    // The executable is $MESHBENCH_ENGINE, else meshbench-engine beside this executable, else the
    // one on PATH. Failures (not found, exited) come as engineError and state Disconnected.
    void startLocalEngine(const QString& endpoint = {}, const QString& live = {}, const QString& sessionsDir = {});
    static QString engineExecutable();

    // Sends `body` (an object with "op" and its arguments). `onReply` runs on the GUI thread exactly
    // once, with the reply or the timeout error (or, on connectTo/disconnectFromEngine, a "closed"
    // error); never inside this call, and not at all once the client is destroyed. Without a
    // connection it gets the error from the event loop. A handler that captures an object that may
    // die first should guard it (QPointer).
    void request(nlohmann::json body, ReplyHandler onReply, int timeoutMs = kDefaultTimeoutMs);

    ConnectionState state() const { return m_state; }
    QString controlEndpoint() const { return m_control; }
    QString liveEndpoint() const { return m_live; }
    // Whether the engine has said it took in this connection's live subscription (its
    // "subscribed" message): from then on nothing it publishes is lost to this client.
    bool liveFeedConfirmed() const { return m_liveConfirmed; }
    bool usesCurve() const { return m_keys.has_value(); }
    // Whether this client started the engine it talks to (and will stop it).
    bool ownsEngine() const;
    // The engine this client started, or 0.
    qint64 engineProcessId() const;
    // Leaves the engine this client started running when the client goes (a job still runs in it).
    void releaseEngine();
    // Live messages that could not be read (a topic without payload, bad JSON, a bad span batch).
    quint64 badLiveMessages() const { return m_badLive; }
    int pendingRequests() const { return int(m_pending.size()); }

signals:
    void stateChanged(meshbench::app::ConnectionState state, const QString& endpoint);
    void stepArrived(const QString& source, const nlohmann::json& step);
    void memoryArrived(const QString& source, const nlohmann::json& memory);
    void jobChanged(const QString& source, const nlohmann::json& status);
    void logArrived(const QString& source, const nlohmann::json& line);
    void spansArrived(const QString& source, const meshbench::wire::Batch& batch);
    // The engine took in the live subscription (liveFeedConfirmed turns true).
    void liveFeedReady();
    // A live message dropped unread; `count` is the total so far.
    void badLiveMessage(const QString& topic, const QString& error, quint64 count);
    // The local engine could not be started or stopped unexpectedly.
    void engineError(const QString& message);

private:
    struct Pending {
        ReplyHandler handler;
        QTimer* timer = nullptr;
    };

    void closeSockets();
    // A socket of the connection: CURVE when the connection has keys, and linger 0.
    std::unique_ptr<zmq::socket_t> makeSocket(int type) const;
    void setState(ConnectionState state);
    void sayHello(int timeoutMs);
    void subscribe(const QString& live);
    void drain();
    void drainControl();
    void drainLive();
    void dispatchLive(const std::string& topic, const void* data, std::size_t size);
    void reportBadLive(const QString& topic, const QString& error);
    void fail(int id, const QString& error);
    void launchEngine(const QString& control, const QString& live, const QString& sessionsDir);

    std::unique_ptr<zmq::context_t> m_context;
    std::unique_ptr<zmq::socket_t> m_dealer;
    std::unique_ptr<zmq::socket_t> m_sub;
    QSocketNotifier* m_dealerNotifier = nullptr;
    QSocketNotifier* m_subNotifier = nullptr;
    QTimer* m_poll = nullptr;       // safety net for a missed edge
    QTimer* m_keepAlive = nullptr;  // periodic hello while connected
    QString m_control, m_live, m_liveOverride;
    std::optional<wire::ClientKeys> m_keys;
    ConnectionState m_state = ConnectionState::Disconnected;
    std::map<int, Pending> m_pending;
    int m_nextId = 0;
    int m_connection = 0;  // bumped per connectTo, so an old hello reply is ignored
    bool m_draining = false;
    quint64 m_badLive = 0;
    bool m_liveConfirmed = false;
    QPointer<QProcess> m_engine;  // the engine we started, if any
};

}  // namespace meshbench::app

Q_DECLARE_METATYPE(meshbench::app::ConnectionState)
