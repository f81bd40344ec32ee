#include "server.h"

#include "curve_guard.h"
#include "job_runner.h"
#include "live_publisher.h"
#include "replay_player.h"
#include "run_command.h"
#include "session_commands.h"
#include "worker.h"

#include "live/session_spec.h"
#include "plan/planner.h"
#include "plan/report.h"
#include "store/session_store.h"
#include "wire/control.h"
#include "wire/curve_keys.h"
#include "wire/endpoints.h"
#include "wire/text.h"

#include <zmq.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <variant>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace meshbench::service {

namespace {

// Hands a running job's progress to the live feed.
class PublishingObserver : public RunObserver {
public:
    explicit PublishingObserver(LivePublisher& publisher) : m_publisher(publisher) {}

    void started(const std::string& sessionPath, const std::string& collector, int ranks) override
    {
        m_session = sessionPath;
        m_publisher.job(
            {{"state", "running"}, {"session", sessionPath}, {"collector", collector}, {"ranks", ranks}, {"step", 0}});
    }
    void stepCompleted(const live::StepAggregate& step) override
    {
        m_publisher.step(step);
        m_publisher.job({{"state", "running"}, {"session", m_session}, {"step", step.step}});
    }
    void memoryChanged(const live::RankMemory& memory) override { m_publisher.memory(memory); }
    void batchArrived(const wire::Batch& batch) override
    {
        m_publisher.spans(batch);
        for (const wire::Record& record : batch.records)
            if (const auto* log = std::get_if<wire::LogRecord>(&record))
                m_publisher.log(batch.rank, log->level, log->text);
    }
    void message(wire::LogLevel level, const std::string& text) override
    {
        m_publisher.log(store::kEngineRank, level, text);
    }

private:
    LivePublisher& m_publisher;
    std::string m_session;
};

nlohmann::json controlErrorNoId(const std::string& error) { return wire::controlError(nullptr, error); }

// The live feed's default endpoint: the control port + 1 (an ephemeral port stays ephemeral), or
// the control socket's path + ".live".
std::string liveBeside(const std::string& endpoint)
{
    if (endpoint.rfind("ipc://", 0) == 0)
        return endpoint + ".live";
    const std::size_t colon = endpoint.rfind(':');
    const std::string port = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
    if (endpoint.rfind("tcp://", 0) != 0 || port.empty() ||
        (port != "*" && port.find_first_not_of("0123456789") != std::string::npos) || port.size() > 5)
        throw std::runtime_error("give the live feed's endpoint with --live (cannot derive it from '" + endpoint +
                                 "')");
    if (port == "*")
        return endpoint;
    if (std::stoi(port) >= 65535)
        throw std::runtime_error("the live feed goes on the control port + 1, and " + port +
                                 " is the last port; choose a lower control port, or give --live ENDPOINT");
    return endpoint.substr(0, colon + 1) + std::to_string(std::stoi(port) + 1);
}

// The "source" a request names ("job-N", "replay-N"); empty when absent or not a string.
std::string sourceArgument(const nlohmann::json& args)
{
    const auto it = args.find("source");
    return it != args.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Whether an endpoint is one this engine serves on (`why` says what is wrong when it is not), and
// who can reach it: this user alone, every user of this machine, or other machines too.
enum class EndpointReach { Invalid, ThisUser, ThisMachine, Network };

EndpointReach endpointReach(const std::string& endpoint, std::string& why)
{
    if (wire::isPrivateEndpoint(endpoint))
        return EndpointReach::ThisUser;
    if (wire::isLocalEndpoint(endpoint))
        return EndpointReach::ThisMachine;
    if (endpoint.rfind("tcp://", 0) != 0) {
        why = "'" + endpoint + "' is not an endpoint this engine serves on; use tcp://HOST:PORT or ipc:///PATH";
        return EndpointReach::Invalid;
    }
    const std::string host = wire::tcpHost(endpoint);
    if (host.find(':') != std::string::npos && host.front() != '[') {
        why = "'" + endpoint + "': write an IPv6 address in brackets, e.g. tcp://[::1]:5570";
        return EndpointReach::Invalid;
    }
    return EndpointReach::Network;
}

// Why CURVE guards an endpoint others can reach, for the error when its keys are missing.
std::string curveReason(const std::string& what, const std::string& endpoint, EndpointReach reach)
{
    return "serving the " + what + " on '" + endpoint + "', which " +
           (reach == EndpointReach::Network    ? std::string("other machines reach,")
            : endpoint.rfind("tcp://", 0) == 0 ? std::string("every user of this machine can reach,")
                                               : std::string("sits in a folder other users may enter,"));
}

}  // namespace

struct Server::Impl {
    ServeOptions options;
    zmq::context_t context{1};
    zmq::socket_t control{context, zmq::socket_type::router};
    zmq::socket_t live{context, zmq::socket_type::xpub};  // a PUB that hears each subscription
    zmq::socket_t feed{context, zmq::socket_type::pull};
    std::unique_ptr<CurveGuard> guard;  // with CURVE; goes before the sockets it guards
    std::string controlEndpoint, liveEndpoint;
    std::map<std::string, std::unique_ptr<Worker>> workers;
    int nextJob = 1, nextReplay = 1;
    // Replies a client's full queue could not take yet, per client (its identity), oldest first, so
    // that one client that does not read holds up nobody else.
    struct PendingReply {
        std::vector<zmq::message_t> envelope;
        std::string body;
    };
    struct ClientQueue {
        std::deque<PendingReply> replies;
        std::size_t bytes = 0;
    };
    std::map<std::string, ClientQueue> pending;
    std::uint64_t droppedReplies = 0;

    void answer(std::vector<zmq::message_t> envelope, const std::string& body);
    bool trySend(PendingReply& reply);
    void queueReply(PendingReply reply);
    void sendPending();
    std::string replyText(const std::optional<wire::ControlRequest>& request, const wire::ParsedControl& parsed);

    nlohmann::json handle(const wire::ControlRequest& request);
    nlohmann::json submit(const nlohmann::json& args);
    std::string openReplay(const std::string& session, double speed);
    Worker* replay(const nlohmann::json& args, std::string& error);
    void forwardFeed();
    void confirmSubscriptions();
    void reapWorkers();
    bool admitted(const zmq::message_t& request);
    bool idle() const;
};

namespace {

// Whether an engine (or anything) already answers on an ipc socket's path. ZeroMQ removes the file
// before it binds, which would silently take the socket from an engine still serving there.
bool ipcPathAnswers(const std::string& endpoint)
{
    const std::string path = endpoint.substr(6);
    sockaddr_un address{};
    if (endpoint.rfind("ipc://", 0) != 0 || path.empty() || path.front() == '@' ||
        path.size() >= sizeof address.sun_path)
        return false;
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    const bool answers = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return answers;
}

void bindOrThrow(zmq::socket_t& socket, const std::string& endpoint, const char* what)
{
    // ZeroMQ binds to an address or an interface name, not a host name: localhost is 127.0.0.1 here,
    // and an IPv6 address needs the socket's IPv6 option.
    std::string address = endpoint;
    if (endpoint.rfind("tcp://", 0) == 0) {
        const std::string host = wire::tcpHost(endpoint);
        if (host == "localhost")
            address = "tcp://127.0.0.1" + endpoint.substr(6 + host.size());
        else if (!host.empty() && host.front() == '[')
            socket.set(zmq::sockopt::ipv6, true);
    }
    const std::string failure = std::string("cannot bind the ") + what + " to '" + endpoint + "': ";
    if (ipcPathAnswers(endpoint))
        throw std::runtime_error(failure + wire::bindFailure(EADDRINUSE, endpoint));
    try {
        socket.bind(address);
    } catch (const zmq::error_t& e) {
        throw std::runtime_error(failure + wire::bindFailure(e.num(), endpoint));
    }
}

// The engine's secret key on each socket and a guard over them, from the key folder; throws when
// a file is missing or malformed, naming it and the command that makes it right.
std::unique_ptr<CurveGuard> guardWithKeys(zmq::context_t& context, const std::filesystem::path& keyDir,
                                          const std::string& reason,
                                          const std::vector<std::pair<zmq::socket_t*, const char*>>& sockets)
{
    const std::filesystem::path secretFile = wire::secretKeyPath(keyDir, wire::kServerKeyName);
    const std::filesystem::path allowList = wire::allowListPath(keyDir);
    const std::string allowHint = "allow each workbench's public key with `meshbench-engine keys --allow CLIENT.key` "
                                  "(the client.key that `meshbench-engine keys` writes on the workbench's machine)";
    std::error_code error;
    if (!std::filesystem::exists(secretFile, error))
        throw std::runtime_error(reason + " needs the engine's CURVE keys, and " + secretFile.string() +
                                 " does not exist: run `meshbench-engine keys` to create them, then " + allowHint);
    if (!std::filesystem::exists(allowList, error))
        throw std::runtime_error(reason + " needs the list of client keys it lets in, and " + allowList.string() +
                                 " does not exist: " + allowHint);
    const wire::KeyPair server = wire::readKeyPair(secretFile);
    auto guard = std::make_unique<CurveGuard>(context, allowList);
    if (guard->allowedKeys() == 0)
        throw std::runtime_error(allowList.string() + " allows no client yet: " + allowHint);
    for (const auto& [socket, name] : sockets)
        guard->guard(*socket, server.secretKey, name);
    guard->start();
    return guard;
}

// Requests one client may have waiting (each up to kMaxRequestBytes), and the longest subscription
// topic a live feed client may send.
constexpr int kMaxQueuedRequests = 64;
constexpr std::int64_t kMaxSubscriptionBytes = 4096;

// Replies held for one client whose queue is full; beyond either bound it is not reading them.
constexpr std::size_t kMaxPendingReplies = 100'000;
constexpr std::size_t kMaxPendingBytes = std::size_t(256) << 20;

std::optional<double> speedArgument(const nlohmann::json& args, std::string& error)
{
    if (!args.contains("speed"))
        return 1.0;
    const nlohmann::json& s = args["speed"];
    if (!s.is_number() || !(s.get<double>() > 0) || s.get<double>() > 1e6) {
        error = "\"speed\" must be a number above 0 (1 = real time) and at most 1,000,000";
        return std::nullopt;
    }
    return s.get<double>();
}

}  // namespace

Server::Server(ServeOptions options) : m_impl(std::make_unique<Impl>())
{
    Impl& d = *m_impl;
    d.options = std::move(options);
    if (d.options.sessionsDir.empty())
        d.options.sessionsDir = defaultSessionDir();
    if (d.options.control.empty())
        d.options.control = wire::defaultControlEndpoint();
    if (d.options.live.empty())
        d.options.live = liveBeside(d.options.control);
    d.control.set(zmq::sockopt::linger, 0);
    d.control.set(zmq::sockopt::router_mandatory, true);
    // Bounded buffering, before authentication and after: a frame larger than any request ends its
    // connection as its header arrives, and each client may queue only so many requests.
    d.control.set(zmq::sockopt::maxmsgsize, std::int64_t(wire::kMaxRequestBytes));
    d.control.set(zmq::sockopt::rcvhwm, kMaxQueuedRequests);
    d.live.set(zmq::sockopt::linger, 0);
    d.live.set(zmq::sockopt::maxmsgsize, kMaxSubscriptionBytes);
    d.live.set(zmq::sockopt::xpub_verbose, true);  // every client's subscription, not only the first
    d.feed.bind(kLiveInproc);
    std::string why;
    const EndpointReach controlReach = endpointReach(d.options.control, why);
    if (controlReach == EndpointReach::Invalid)
        throw std::runtime_error(why);
    const EndpointReach liveReach = endpointReach(d.options.live, why);
    if (liveReach == EndpointReach::Invalid)
        throw std::runtime_error(why);
    // Keyless only where no other user can connect at all; CURVE everywhere else.
    if (d.options.curve || controlReach != EndpointReach::ThisUser || liveReach != EndpointReach::ThisUser) {
        const std::string reason =
            controlReach != EndpointReach::ThisUser ? curveReason("control socket", d.options.control, controlReach)
            : liveReach != EndpointReach::ThisUser  ? curveReason("live feed", d.options.live, liveReach)
                                                    : std::string("serving with --curve");
        d.guard = guardWithKeys(d.context, wire::keyDirectory(), reason,
                                {{&d.control, "control socket"}, {&d.live, "live feed"}});
    }
    bindOrThrow(d.control, d.options.control, "control socket");
    bindOrThrow(d.live, d.options.live, "live feed");
    d.controlEndpoint = d.control.get(zmq::sockopt::last_endpoint);
    d.liveEndpoint = d.live.get(zmq::sockopt::last_endpoint);
}

Server::~Server()
{
    for (auto& [name, worker] : m_impl->workers) {
        worker->stop = true;
        if (worker->thread.joinable())
            worker->thread.join();
    }
}

const std::string& Server::controlEndpoint() const { return m_impl->controlEndpoint; }

const std::string& Server::liveEndpoint() const { return m_impl->liveEndpoint; }

std::string Server::curveSummary() const
{
    const CurveGuard* guard = m_impl->guard.get();
    return guard ? "CURVE, " + clientKeys(guard->allowedKeys()) + " allowed by " + guard->allowList().string()
                 : std::string();
}

std::string Server::openReplay(const std::string& session, double speed) { return m_impl->openReplay(session, speed); }

std::string Server::Impl::openReplay(const std::string& session, double speed)
{
    // Opened here, so that an unreadable session is an error reply rather than a silent worker.
    auto reader = std::make_shared<store::SessionReader>(session);
    live::sessionSpecAsRun(*reader, session);
    auto worker = std::make_unique<Worker>();
    worker->source = "replay-" + std::to_string(nextReplay++);
    worker->speed = speed;
    worker->status = {{"state", "playing"}, {"session", session}, {"step", 0}};
    Worker& w = *worker;
    const bool endWhenDone = options.exitWhenIdle;
    w.thread = std::thread([this, &w, reader, session, endWhenDone] {
        try {
            playSession(context, w, reader, session, endWhenDone);
        } catch (const std::exception& e) {
            w.failure = e.what();
            LivePublisher(context, w.source).job({{"state", "failed"}, {"session", session}, {"cause", e.what()}});
            w.done = true;
        }
    });
    workers[w.source] = std::move(worker);
    return w.source;
}

nlohmann::json Server::Impl::submit(const nlohmann::json& args)
{
    if (!args.contains("job") || !args["job"].is_object())
        return controlErrorNoId("\"job\" must be the job spec, a JSON object");
    RunRequest request;
    request.specText = wire::jsonText(args["job"], 2);
    plan::LoadResult loaded = plan::loadJobSpec(args["job"]);
    if (!loaded.valid()) {
        nlohmann::json reply = controlErrorNoId("the job spec has problems");
        reply["errors"] = plan::errorsToJson(loaded.errors);
        return reply;
    }
    request.spec = *loaded.spec;
    if (args.contains("one_device") && !args["one_device"].is_boolean())
        return controlErrorNoId("\"one_device\" must be true or false");
    request.oneDevice = args.value("one_device", false);
    if (args.contains("allow_run_as_root") && !args["allow_run_as_root"].is_boolean())
        return controlErrorNoId("\"allow_run_as_root\" must be true or false");
    request.allowRunAsRoot = options.allowRunAsRoot || args.value("allow_run_as_root", false);
    // What the agent of this build would refuse is refused here, before anything launches.
    if (const std::vector<plan::SpecError> refusals = runRefusals(request.spec, request.oneDevice); !refusals.empty()) {
        nlohmann::json reply = controlErrorNoId(std::string("meshbench-agent of this build does not run this job") +
                                                (request.oneDevice ? " on one device" : ""));
        reply["errors"] = plan::errorsToJson(refusals);
        return reply;
    }
    if (args.contains("steps")) {
        if (!args["steps"].is_number_integer() || args["steps"].get<std::int64_t>() < 0 ||
            args["steps"].get<std::int64_t>() > 1'000'000'000)
            return controlErrorNoId("\"steps\" must be a whole number from 0 to 1,000,000,000");
        request.steps = int(args["steps"].get<std::int64_t>());
    }
    request.agent = agentExecutable();
    std::filesystem::create_directories(options.sessionsDir);
    request.sessionPath = newSessionPath(options.sessionsDir, request.spec.name);
    // The agents read the job from a file: it is kept beside the session.
    request.jobPath = request.sessionPath + ".job.json";
    std::ofstream(request.jobPath) << request.specText << "\n";

    auto worker = std::make_unique<Worker>();
    worker->source = "job-" + std::to_string(nextJob++);
    worker->status = {{"state", "starting"}, {"session", request.sessionPath}, {"step", 0}};
    Worker& w = *worker;
    w.thread = std::thread([this, &w, request] {
        LivePublisher publisher(context, w.source);
        PublishingObserver observer(publisher);
        try {
            const RunResult r = runJob(request, observer, w.stop);
            publisher.job({{"state", store::outcomeName(r.outcome.outcome)},
                           {"cause", r.outcome.cause},
                           {"failed_rank", r.outcome.failedRank},
                           {"session", r.sessionPath},
                           {"step", r.steps},
                           {"final_loss", r.finalLoss ? nlohmann::json(*r.finalLoss) : nlohmann::json()},
                           {"lost", r.lostRecords}});
        } catch (const std::exception& e) {
            publisher.job({{"state", "failed"}, {"cause", e.what()}, {"session", request.sessionPath}});
        }
        w.done = true;
    });
    nlohmann::json reply = {{"job", w.source}, {"session", request.sessionPath}};
    workers[w.source] = std::move(worker);
    return reply;
}

Worker* Server::Impl::replay(const nlohmann::json& args, std::string& error)
{
    const std::string source = sourceArgument(args);
    const auto it = workers.find(source);
    if (it == workers.end() || source.rfind("replay-", 0) != 0) {
        error = "no replay named \"" + source + "\"; \"jobs\" lists them";
        return nullptr;
    }
    return it->second.get();
}

nlohmann::json Server::Impl::handle(const wire::ControlRequest& request)
{
    const nlohmann::json& args = request.args;
    std::string error;
    switch (request.op) {
    case wire::ControlOp::Hello:
        return {{"version", MESHBENCH_VERSION}, {"live", liveEndpoint}, {"control_version", wire::kControlVersion}};
    case wire::ControlOp::Plan: {
        if (!args.contains("job") || !args["job"].is_object())
            return controlErrorNoId("\"job\" must be the job spec, a JSON object");
        const plan::LoadResult loaded = plan::loadJobSpec(args["job"]);
        if (!loaded.valid()) {
            nlohmann::json reply = controlErrorNoId("the job spec has problems");
            reply["errors"] = plan::errorsToJson(loaded.errors);
            return reply;
        }
        return {{"plan", plan::planToJson(plan::makePlan(*loaded.spec))}};
    }
    case wire::ControlOp::Submit:
        return submit(args);
    case wire::ControlOp::Stop: {
        const auto it = workers.find(sourceArgument(args));
        if (it == workers.end() || it->first.rfind("job-", 0) != 0)
            return controlErrorNoId("no job named \"" + sourceArgument(args) + "\"; \"jobs\" lists them");
        it->second->stop = true;
        return nlohmann::json::object();
    }
    case wire::ControlOp::Jobs: {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& [name, worker] : workers) {
            nlohmann::json entry = worker->status;
            entry["source"] = name;
            list.push_back(entry);
        }
        return {{"jobs", list}};
    }
    case wire::ControlOp::Sessions: {
        if (args.contains("dir") && !args["dir"].is_string())
            return controlErrorNoId("\"dir\" must be the path of a folder of sessions");
        return sessionListingJson(store::listSessions(args.value("dir", options.sessionsDir)));
    }
    case wire::ControlOp::Open: {
        if (!args.contains("session") || !args["session"].is_string())
            return controlErrorNoId("\"session\" must be the path of a session file");
        const std::optional<double> speed = speedArgument(args, error);
        if (!speed)
            return controlErrorNoId(error);
        return {{"replay", openReplay(args["session"].get<std::string>(), *speed)}};
    }
    case wire::ControlOp::Seek:
    case wire::ControlOp::Pause:
    case wire::ControlOp::Resume:
    case wire::ControlOp::Speed:
    case wire::ControlOp::Close: {
        Worker* worker = replay(args, error);
        if (!worker)
            return controlErrorNoId(error);
        if (request.op == wire::ControlOp::Seek) {
            if (!args.contains("step") || !args["step"].is_number_integer() || args["step"].get<std::int64_t>() < 0 ||
                args["step"].get<std::int64_t>() > INT32_MAX)
                return controlErrorNoId("\"step\" must be a step number (0 = the start)");
            worker->seekStep = int(args["step"].get<std::int64_t>());
        } else if (request.op == wire::ControlOp::Speed) {
            const std::optional<double> speed = args.contains("speed") ? speedArgument(args, error) : std::nullopt;
            if (!speed)
                return controlErrorNoId(error.empty() ? "\"speed\" is required" : error);
            worker->speed = *speed;
        } else if (request.op == wire::ControlOp::Close) {
            worker->stop = true;
        } else {
            worker->paused = request.op == wire::ControlOp::Pause;
        }
        return nlohmann::json::object();
    }
    }
    return controlErrorNoId("unhandled op");
}

void Server::Impl::forwardFeed()
{
    for (int n = 0; n < 10000; ++n) {
        zmq::message_t topic, payload;
        if (!feed.recv(topic, zmq::recv_flags::dontwait))
            return;
        if (!feed.recv(payload, zmq::recv_flags::none))
            return;
        // The control thread keeps each worker's last status for "jobs".
        const std::string name = topic.to_string();
        if (name.rfind("job/", 0) == 0) {
            const auto it = workers.find(name.substr(4));
            nlohmann::json status = nlohmann::json::parse(payload.to_string_view(), nullptr, false);
            if (it != workers.end() && status.is_object())
                for (auto& [key, value] : status.items())
                    it->second->status[key] = value;
        }
        live.send(topic, zmq::send_flags::sndmore);
        live.send(payload, zmq::send_flags::none);
    }
}

void Server::Impl::confirmSubscriptions()
{
    // XPUB hands up each subscription as one frame: 1 (or 0 to unsubscribe), then the topic prefix.
    const std::string topic = wire::liveTopic(wire::LiveKind::Subscribed, wire::kEngineSource);
    for (int n = 0; n < 1000; ++n) {
        zmq::message_t subscription;
        if (!live.recv(subscription, zmq::recv_flags::dontwait))
            return;
        const std::string_view frame = subscription.to_string_view();
        if (frame.empty() || frame.front() != 1)
            continue;
        const std::string payload = wire::jsonText({{"topic", wire::validUtf8(frame.substr(1))}});
        live.send(zmq::buffer(topic), zmq::send_flags::sndmore);
        live.send(zmq::buffer(payload), zmq::send_flags::none);
    }
}

void Server::Impl::reapWorkers()
{
    for (auto& [name, worker] : workers)
        if (worker->done.load() && worker->thread.joinable())
            worker->thread.join();
}

bool Server::Impl::admitted(const zmq::message_t& request)
{
    if (!guard)
        return true;
    // ZAP's user id, which the guard sets to the client's key.
    const char* key = zmq_msg_gets(request.handle(), "User-Id");
    return key && guard->allows(key);
}

bool Server::Impl::idle() const
{
    for (const auto& [name, worker] : workers)
        if (!worker->done.load())
            return false;
    return true;
}

void Server::Impl::answer(std::vector<zmq::message_t> envelope, const std::string& body)
{
    PendingReply reply{std::move(envelope), body};
    const auto waiting = pending.find(reply.envelope.front().to_string());
    if (waiting != pending.end() || !trySend(reply))
        queueReply(std::move(reply));
}

bool Server::Impl::trySend(PendingReply& reply)
{
    // ROUTER_MANDATORY: a client whose queue is full makes the send fail with EAGAIN instead of
    // ZeroMQ dropping the reply; one that has gone away fails with EHOSTUNREACH.
    try {
        const auto sent = control.send(zmq::buffer(reply.envelope.front().data(), reply.envelope.front().size()),
                                       zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        if (!sent)
            return false;
        // The first frame (the identity) decided the route; the rest goes out whole.
        for (std::size_t i = 1; i < reply.envelope.size(); ++i)
            control.send(reply.envelope[i], zmq::send_flags::sndmore);
        control.send(zmq::buffer(reply.body), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
        // EHOSTUNREACH: nobody left to answer. Anything else costs this reply; the daemon serves on.
        if (e.num() != EHOSTUNREACH)
            std::fprintf(stderr, "meshbench-engine: cannot send a control reply: %s\n", e.what());
    }
    return true;
}

void Server::Impl::queueReply(PendingReply reply)
{
    ClientQueue& queue = pending[reply.envelope.front().to_string()];
    if (queue.replies.size() >= kMaxPendingReplies || queue.bytes + reply.body.size() > kMaxPendingBytes) {
        // A client that sends without reading its replies cannot hold the engine's memory.
        ++droppedReplies;
        if (droppedReplies == 1 || droppedReplies % 1000 == 0)
            std::fprintf(stderr,
                         "meshbench-engine: %llu control replies dropped: a client sends requests without "
                         "reading the replies (%zu, %zu bytes, are waiting for it)\n",
                         static_cast<unsigned long long>(droppedReplies), queue.replies.size(), queue.bytes);
        return;
    }
    queue.bytes += reply.body.size();
    queue.replies.push_back(std::move(reply));
}

void Server::Impl::sendPending()
{
    for (auto it = pending.begin(); it != pending.end();) {
        ClientQueue& queue = it->second;
        while (!queue.replies.empty() && trySend(queue.replies.front())) {
            queue.bytes -= queue.replies.front().body.size();
            queue.replies.pop_front();
        }
        it = queue.replies.empty() ? pending.erase(it) : std::next(it);
    }
}

std::string Server::Impl::replyText(const std::optional<wire::ControlRequest>& request,
                                    const wire::ParsedControl& parsed)
{
    nlohmann::json reply;
    if (!request) {
        reply = wire::controlError(parsed.id, parsed.error);
    } else {
        try {
            reply = handle(*request);
        } catch (const std::exception& e) {
            reply = controlErrorNoId(e.what());
        }
        if (reply.value("ok", true))
            reply = wire::controlReply(request->id, std::move(reply));
        else
            reply["id"] = request->id;
    }
    std::string text = wire::jsonText(reply);
    if (text.size() > wire::kMaxReplyBytes) {
        const std::string op = request ? std::string(wire::controlOpName(request->op)) : "request";
        text = wire::jsonText(wire::controlError(
            request ? request->id : parsed.id,
            "the " + op + " reply would be " + std::to_string(text.size()) + " bytes, over the " +
                std::to_string(wire::kMaxReplyBytes >> 20) + " MiB a reply may hold" +
                (request && request->op == wire::ControlOp::Plan
                     ? "; the schedule's op list is what grows: lower parallel.microbatches (with a larger "
                       "micro_batch_size) or parallel.pp"
                 : request && request->op == wire::ControlOp::Sessions ? "; list a folder with fewer sessions (\"dir\")"
                                                                       : "")));
    }
    return text;
}

void Server::run(const std::atomic<bool>& stop)
{
    Impl& d = *m_impl;
    while (!stop.load()) {
        std::vector<zmq::pollitem_t> items{{d.control.handle(), 0, ZMQ_POLLIN, 0},
                                           {d.feed.handle(), 0, ZMQ_POLLIN, 0},
                                           {d.live.handle(), 0, ZMQ_POLLIN, 0}};
        // Replies waiting for a client to read are retried soon.
        zmq::poll(items, std::chrono::milliseconds(d.pending.empty() ? 100 : 5));
        d.confirmSubscriptions();
        d.forwardFeed();
        d.reapWorkers();
        d.sendPending();
        // A request: [identity, (empty delimiter from REQ clients), body]; the reply keeps the envelope.
        for (int n = 0; n < 1000; ++n) {
            std::vector<zmq::message_t> parts;
            zmq::message_t part;
            if (!d.control.recv(part, zmq::recv_flags::dontwait))
                break;
            parts.push_back(std::move(part));
            while (d.control.get(zmq::sockopt::rcvmore)) {
                zmq::message_t more;
                if (!d.control.recv(more, zmq::recv_flags::none))
                    break;
                parts.push_back(std::move(more));
            }
            if (parts.size() < 2 || !d.admitted(parts.back()))
                continue;  // no body, or a client whose key was taken off the allow-list: no answer
            const wire::ParsedControl parsed = wire::parseControlRequest(parts.back().to_string_view());
            const std::string body = d.replyText(parsed.request, parsed);
            parts.pop_back();
            d.answer(std::move(parts), body);
        }
        if (d.options.exitWhenIdle && d.idle()) {
            d.forwardFeed();
            d.sendPending();
            break;
        }
    }
}

std::string Server::replayFailure(const std::string& source) const
{
    const auto it = m_impl->workers.find(source);
    return it != m_impl->workers.end() && it->second->done.load() ? it->second->failure : std::string();
}

}  // namespace meshbench::service
