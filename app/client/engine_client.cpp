#include "engine_client.h"

#include "wire/control.h"
#include "wire/endpoints.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QSocketNotifier>
#include <QStandardPaths>
#include <QTimer>

#include <zmq.hpp>

namespace meshbench::app {

namespace {

constexpr int kPollMs = 50;  // safety net; the notifier does the real work
constexpr int kKeepAliveMs = 3000;
constexpr int kProbeMs = 1000;      // how long a local engine may take to answer before we start one
constexpr int kMaxPerDrain = 5000;  // messages per event-loop turn, so the GUI stays responsive
constexpr qsizetype kStderrKeep = 4096;

nlohmann::json errorReply(int id, const QString& error)
{
    return {{"v", wire::kControlVersion}, {"id", id}, {"ok", false}, {"error", error.toStdString()}};
}

bool readable(zmq::socket_t* socket) { return socket && (socket->get(zmq::sockopt::events) & ZMQ_POLLIN) != 0; }

}  // namespace

QString reachableLiveEndpoint(const QString& control, const QString& advertised)
{
    const std::string live = advertised.toStdString();
    const std::string host = wire::tcpHost(live);
    const std::string controlHost = wire::tcpHost(control.toStdString());
    if ((host != "0.0.0.0" && host != "*" && host != "[::]") || controlHost.empty())
        return advertised;
    return QString::fromStdString("tcp://" + controlHost + live.substr(6 + host.size()));
}

QString connectionStateName(ConnectionState state)
{
    switch (state) {
    case ConnectionState::Disconnected:
        return QStringLiteral("disconnected");
    case ConnectionState::Connecting:
        return QStringLiteral("connecting");
    case ConnectionState::Connected:
        return QStringLiteral("connected");
    }
    return {};
}

EngineClient::EngineClient(QObject* parent)
    : QObject(parent), m_context(std::make_unique<zmq::context_t>(1)), m_poll(new QTimer(this)),
      m_keepAlive(new QTimer(this))
{
    m_poll->setInterval(kPollMs);
    connect(m_poll, &QTimer::timeout, this, &EngineClient::drain);
    m_keepAlive->setInterval(kKeepAliveMs);
    connect(m_keepAlive, &QTimer::timeout, this, [this] { sayHello(kKeepAliveMs); });
}

EngineClient::~EngineClient()
{
    // Handlers are not called from here: their owners may be half torn down already.
    for (auto& [id, p] : m_pending)
        p.handler = nullptr;
    closeSockets();
    if (m_engine && m_engine->state() != QProcess::NotRunning) {
        m_engine->disconnect(this);
        m_engine->terminate();
        if (!m_engine->waitForFinished(10000))
            m_engine->kill();
        m_engine->waitForFinished(1000);
    }
}

bool EngineClient::ownsEngine() const { return m_engine && m_engine->state() != QProcess::NotRunning; }

qint64 EngineClient::engineProcessId() const { return ownsEngine() ? m_engine->processId() : 0; }

void EngineClient::releaseEngine()
{
    if (!m_engine)
        return;
    // A QProcess kills its process when deleted: this one is never deleted, so the engine outlives
    // the workbench (as a `meshbench-engine serve` started by hand would).
    m_engine->disconnect(this);
    m_engine->setParent(nullptr);
    m_engine = nullptr;
}

void EngineClient::setState(ConnectionState state)
{
    if (state == m_state)
        return;
    m_state = state;
    emit stateChanged(state, m_control);
}

void EngineClient::closeSockets()
{
    m_poll->stop();
    m_keepAlive->stop();
    delete m_dealerNotifier;
    m_dealerNotifier = nullptr;
    delete m_subNotifier;
    m_subNotifier = nullptr;
    m_dealer.reset();
    m_sub.reset();
    m_liveConfirmed = false;
    ++m_connection;
    // Every pending handler hears about it, now rather than at its timeout.
    std::map<int, Pending> pending;
    pending.swap(m_pending);
    for (auto& [id, p] : pending) {
        delete p.timer;
        if (p.handler)
            p.handler(errorReply(id, QStringLiteral("the connection to the engine was closed before it answered")));
    }
}

void EngineClient::disconnectFromEngine()
{
    closeSockets();
    setState(ConnectionState::Disconnected);
}

std::unique_ptr<zmq::socket_t> EngineClient::makeSocket(int type) const
{
    auto socket = std::make_unique<zmq::socket_t>(*m_context, type);
    socket->set(zmq::sockopt::linger, 0);
    if (m_keys) {
        socket->set(zmq::sockopt::curve_serverkey, m_keys->serverKey);
        socket->set(zmq::sockopt::curve_publickey, m_keys->client.publicKey);
        socket->set(zmq::sockopt::curve_secretkey, m_keys->client.secretKey);
    }
    return socket;
}

void EngineClient::connectTo(const QString& control, const QString& live, std::optional<wire::ClientKeys> keys)
{
    closeSockets();
    m_control = control;
    m_liveOverride = live;
    m_live.clear();
    m_keys = std::move(keys);
    try {
        m_dealer = makeSocket(ZMQ_DEALER);
        m_dealer->connect(control.toStdString());
    } catch (const zmq::error_t& e) {
        m_dealer.reset();
        setState(ConnectionState::Disconnected);
        emit engineError(QStringLiteral("cannot connect to '%1': %2").arg(control, QString::fromUtf8(e.what())));
        return;
    }
    m_dealerNotifier = new QSocketNotifier(qintptr(m_dealer->get(zmq::sockopt::fd)), QSocketNotifier::Read, this);
    connect(m_dealerNotifier, &QSocketNotifier::activated, this, &EngineClient::drain);
    m_poll->start();
    m_keepAlive->start();
    // Announce the new endpoint even when the state name stays "connecting".
    m_state = ConnectionState::Connecting;
    emit stateChanged(m_state, m_control);
    sayHello(kDefaultTimeoutMs);
}

void EngineClient::sayHello(int timeoutMs)
{
    const int connection = m_connection;
    request(
        {{"op", "hello"}},
        [this, connection](const nlohmann::json& reply) {
            if (connection != m_connection)
                return;
            if (reply.value("ok", false)) {
                if (!m_sub)
                    subscribe(m_liveOverride.isEmpty()
                                  ? reachableLiveEndpoint(m_control, QString::fromStdString(reply.value("live", "")))
                                  : m_liveOverride);
                setState(ConnectionState::Connected);
                return;
            }
            if (!reply.value("timed_out", false))  // it answered, but refused: an engine we cannot use
                emit engineError(QString::fromStdString(reply.value("error", "")));
            setState(ConnectionState::Connecting);
        },
        timeoutMs);
}

void EngineClient::subscribe(const QString& live)
{
    if (live.isEmpty())
        return;
    try {
        std::unique_ptr<zmq::socket_t> sub = makeSocket(ZMQ_SUB);
        sub->set(zmq::sockopt::subscribe, "");
        sub->connect(live.toStdString());
        m_sub = std::move(sub);
    } catch (const zmq::error_t& e) {
        emit engineError(
            QStringLiteral("cannot subscribe to the live feed '%1': %2").arg(live, QString::fromUtf8(e.what())));
        return;
    }
    m_live = live;
    m_subNotifier = new QSocketNotifier(qintptr(m_sub->get(zmq::sockopt::fd)), QSocketNotifier::Read, this);
    connect(m_subNotifier, &QSocketNotifier::activated, this, &EngineClient::drain);
}

void EngineClient::request(nlohmann::json body, ReplyHandler onReply, int timeoutMs)
{
    const int id = ++m_nextId;
    if (!m_dealer) {
        QTimer::singleShot(0, this, [onReply = std::move(onReply), id] {
            onReply(errorReply(id, QStringLiteral("not connected to an engine; connect first (Run > Engine)")));
        });
        return;
    }
    body["v"] = wire::kControlVersion;
    body["id"] = id;
    auto* timer = new QTimer(this);
    timer->setSingleShot(true);
    timer->setTimerType(Qt::PreciseTimer);  // a coarse timer may fire 5% early
    connect(timer, &QTimer::timeout, this, [this, id, timeoutMs] {
        fail(id, QStringLiteral("the engine did not answer within %1 s (is it running at %2?%3)")
                     .arg(timeoutMs / 1000.0, 0, 'g', 3)
                     .arg(m_control,
                          m_keys ? QStringLiteral(" Or it refused this workbench's CURVE key %1: its log says why; "
                                                  "`meshbench-engine keys --allow` on its host lets the key in")
                                       .arg(QString::fromStdString(m_keys->client.publicKey))
                                 : QString()));
    });
    m_pending[id] = Pending{std::move(onReply), timer};
    timer->start(timeoutMs);
    const std::string frame = body.dump();
    try {
        // DEALER queues while the engine is away (up to its high-water mark); a full queue is a
        // failure now rather than a silent wait.
        if (!m_dealer->send(zmq::buffer(frame), zmq::send_flags::dontwait))
            fail(id, QStringLiteral("the request queue to %1 is full; the engine is not reading").arg(m_control));
    } catch (const zmq::error_t& e) {
        fail(id, QStringLiteral("cannot send to the engine: %1").arg(QString::fromUtf8(e.what())));
    }
    // A send can consume the FD's edge: look for what is already waiting.
    drain();
}

void EngineClient::fail(int id, const QString& error)
{
    const auto it = m_pending.find(id);
    if (it == m_pending.end())
        return;
    Pending p = std::move(it->second);
    m_pending.erase(it);
    p.timer->deleteLater();
    nlohmann::json reply = errorReply(id, error);
    reply["timed_out"] = error.startsWith(QStringLiteral("the engine did not answer"));
    p.handler(reply);
}

void EngineClient::drain()
{
    if (m_draining)  // a handler sent a request from inside the loop: the outer loop goes on
        return;
    m_draining = true;
    drainControl();
    drainLive();
    m_draining = false;
    // Something left after a full turn: come back on the next one rather than wait for an edge.
    if (readable(m_dealer.get()) || readable(m_sub.get()))
        QTimer::singleShot(0, this, &EngineClient::drain);
}

void EngineClient::drainControl()
{
    for (int n = 0; n < kMaxPerDrain && readable(m_dealer.get()); ++n) {
        zmq::message_t message;
        if (!m_dealer->recv(message, zmq::recv_flags::dontwait))
            break;
        const nlohmann::json reply = nlohmann::json::parse(message.to_string_view(), nullptr, false);
        if (!reply.is_object() || !reply.contains("id") || !reply["id"].is_number_integer())
            continue;  // not ours, or a late answer to a request that already timed out
        const auto it = m_pending.find(reply["id"].get<int>());
        if (it == m_pending.end())
            continue;
        Pending p = std::move(it->second);
        m_pending.erase(it);
        delete p.timer;
        p.handler(reply);
    }
}

void EngineClient::drainLive()
{
    for (int n = 0; n < kMaxPerDrain && readable(m_sub.get()); ++n) {
        zmq::message_t topic;
        if (!m_sub->recv(topic, zmq::recv_flags::dontwait))
            break;
        if (!topic.more()) {
            reportBadLive(QString::fromUtf8(topic.to_string_view()), QStringLiteral("a topic without payload"));
            continue;
        }
        zmq::message_t payload;
        // The frames of one message arrive together: the payload is already here.
        if (!m_sub->recv(payload, zmq::recv_flags::dontwait))
            break;
        for (bool more = payload.more(); more;) {  // extra frames from a newer engine: skip them
            zmq::message_t extra;
            if (!m_sub->recv(extra, zmq::recv_flags::dontwait))
                break;
            more = extra.more();
        }
        dispatchLive(topic.to_string(), payload.data(), payload.size());
    }
}

void EngineClient::dispatchLive(const std::string& topic, const void* data, std::size_t size)
{
    const std::size_t slash = topic.find('/');
    const QString qtopic = QString::fromStdString(topic);
    if (slash == std::string::npos) {
        reportBadLive(qtopic, QStringLiteral("the topic is not kind/source"));
        return;
    }
    const std::string kind = topic.substr(0, slash);
    const QString source = QString::fromStdString(topic.substr(slash + 1));
    if (kind == wire::liveKindName(wire::LiveKind::Spans)) {
        wire::DecodeResult decoded = wire::decodeBatch({static_cast<const std::uint8_t*>(data), size});
        if (!decoded.batch) {
            reportBadLive(qtopic, QString::fromStdString(decoded.error));
            return;
        }
        emit spansArrived(source, *decoded.batch);
        return;
    }
    if (kind == wire::liveKindName(wire::LiveKind::Subscribed)) {
        // This client subscribes to everything, so the first confirmation to reach it is its own.
        if (!m_liveConfirmed) {
            m_liveConfirmed = true;
            emit liveFeedReady();
        }
        return;
    }
    using Signal = void (EngineClient::*)(const QString&, const nlohmann::json&);
    Signal signal = nullptr;
    if (kind == wire::liveKindName(wire::LiveKind::Step))
        signal = &EngineClient::stepArrived;
    else if (kind == wire::liveKindName(wire::LiveKind::Memory))
        signal = &EngineClient::memoryArrived;
    else if (kind == wire::liveKindName(wire::LiveKind::Job))
        signal = &EngineClient::jobChanged;
    else if (kind == wire::liveKindName(wire::LiveKind::Log))
        signal = &EngineClient::logArrived;
    else
        return;  // a kind a newer engine publishes: not for us
    const nlohmann::json payload =
        nlohmann::json::parse(static_cast<const char*>(data), static_cast<const char*>(data) + size, nullptr, false);
    if (!payload.is_object()) {
        reportBadLive(qtopic, QStringLiteral("the payload is not a JSON object"));
        return;
    }
    emit(this->*signal)(source, payload);
}

void EngineClient::reportBadLive(const QString& topic, const QString& error)
{
    ++m_badLive;
    emit badLiveMessage(topic, error, m_badLive);
}

QString EngineClient::engineExecutable()
{
    QString fromEnv = qEnvironmentVariable("MESHBENCH_ENGINE");
    if (!fromEnv.isEmpty())
        return fromEnv;
    QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("meshbench-engine"));
    if (QFileInfo(beside).isExecutable())
        return beside;
    return QStandardPaths::findExecutable(QStringLiteral("meshbench-engine"));
}

void EngineClient::startLocalEngine(const QString& endpoint, const QString& live, const QString& sessionsDir)
{
    QString control = endpoint;
    if (control.isEmpty()) {
        try {
            control = QString::fromStdString(wire::defaultControlEndpoint());
        } catch (const wire::EndpointError& e) {
            disconnectFromEngine();
            emit engineError(QString::fromStdString(e.what()));
            return;
        }
    }
    connectTo(control, live);
    const int connection = m_connection;
    request(
        {{"op", "hello"}},
        [this, connection, control, live, sessionsDir](const nlohmann::json& reply) {
            if (connection == m_connection && !reply.value("ok", false) && reply.value("timed_out", false))
                launchEngine(control, live, sessionsDir);
        },
        kProbeMs);
}

void EngineClient::launchEngine(const QString& control, const QString& live, const QString& sessionsDir)
{
    const QString program = engineExecutable();
    if (program.isEmpty()) {
        disconnectFromEngine();
        emit engineError(QStringLiteral("meshbench-engine was not found beside the workbench or on PATH; "
                                        "set MESHBENCH_ENGINE to its path"));
        return;
    }
    QStringList args{QStringLiteral("serve"), QStringLiteral("--bind"), control};
    if (!live.isEmpty())
        args << QStringLiteral("--live") << live;
    if (!sessionsDir.isEmpty())
        args << QStringLiteral("--sessions") << sessionsDir;
    auto* process = new QProcess(this);
    process->setStandardOutputFile(QProcess::nullDevice());
    auto stderrTail = std::make_shared<QByteArray>();
    connect(process, &QProcess::readyReadStandardError, process, [process, stderrTail] {
        stderrTail->append(process->readAllStandardError());
        if (stderrTail->size() > kStderrKeep)
            stderrTail->remove(0, stderrTail->size() - kStderrKeep);
    });
    connect(process, &QProcess::errorOccurred, this, [this, process, program](QProcess::ProcessError error) {
        if (error == QProcess::FailedToStart) {
            emit engineError(QStringLiteral("cannot start %1: %2").arg(program, process->errorString()));
            disconnectFromEngine();
        }
    });
    connect(process, &QProcess::finished, this, [this, process, stderrTail](int code, QProcess::ExitStatus) {
        const QString why = QString::fromUtf8(*stderrTail).trimmed();
        emit engineError(QStringLiteral("the local engine exited with status %1%2")
                             .arg(code)
                             .arg(why.isEmpty() ? QString() : QStringLiteral(": ") + why));
        process->deleteLater();
        if (m_engine == process)
            disconnectFromEngine();
    });
    m_engine = process;
    process->start(program, args);
    // The DEALER reconnects by itself; ask again with room for the engine to come up.
    sayHello(kDefaultTimeoutMs);
}

}  // namespace meshbench::app
