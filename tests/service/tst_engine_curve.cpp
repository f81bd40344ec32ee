// meshbench-engine keys, and serve with CURVE: the keys made once, secrets readable by their owner
// alone, malformed keys refused with the fix; a TCP bind without keys refused; a plaintext client,
// one without the engine's key and one whose key is not allowed each refused on both sockets and
// logged with what is known of it, while an allowed client (and one allowed while the engine runs;
// nobody while the allow-list does not read) plans, submits and watches the demo. Loopback TCP is
// served with CURVE as any other port is, so another local user gets no answer; a key taken off
// the list loses its open connections; a frame larger than any request ends its connection before
// the handshake. On the test hosts' bridge (10.250.77.1) as tst_engine_curve_hosts, beside the
// test_hosts fixture. And a job named with shell syntax is run and stored as named, with no shell
// ever reading the name.

#include "wire/curve_keys.h"

#include "common/other_user.h"
#include "common/process_run.h"
#include "common/zmtp_probe.h"

#include <QtTest>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

using namespace meshbench;

namespace {

const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
const QString kDemo = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
constexpr const char* kBridgeAddress = "10.250.77.1";  // tests/hosts/test_hosts.sh: the engine's side

nlohmann::json demoJob()
{
    std::ifstream in(kDemo.toStdString());
    return nlohmann::json::parse(in);
}

wire::KeyPair freshPair()
{
    char publicKey[41], secretKey[41];
    if (zmq_curve_keypair(publicKey, secretKey) != 0)
        qFatal("this libzmq makes no CURVE keys");
    return {publicKey, secretKey};
}

// The keys `meshbench-engine keys` made: the engine's public key and the client pair it allowed.
wire::ClientKeys allowedKeys()
{
    const std::filesystem::path dir = wire::keyDirectory();
    return {wire::readPublicKey(wire::publicKeyPath(dir, wire::kServerKeyName)),
            wire::readKeyPair(wire::secretKeyPath(dir, wire::kClientKeyName))};
}

unsigned modeOf(const std::filesystem::path& path)
{
    struct stat s {};
    if (stat(path.c_str(), &s) != 0)
        qFatal("cannot stat %s", path.c_str());
    return s.st_mode & 0777;
}

bool hasAddress(const char* address)
{
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0)
        return false;
    bool found = false;
    for (ifaddrs* a = list; a && !found; a = a->ifa_next)
        if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET) {
            char text[INET_ADDRSTRLEN];
            const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
            found = inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) && std::strcmp(text, address) == 0;
        }
    freeifaddrs(list);
    return found;
}

// meshbench-engine serve, its endpoints read from what it printed, its log (stderr) kept.
struct Served {
    QTemporaryDir sessions;
    QProcess process;
    std::string control, live;
    QByteArray said, log;

    Served(const QString& bind, const QStringList& options)
    {
        process.start(kEngine, QStringList{"serve", "--bind", bind, "--sessions", sessions.path()} + options);
        while (!said.contains("(Ctrl-C to stop)") && process.waitForReadyRead(60000))
            said += process.readAllStandardOutput();
        const QRegularExpressionMatch m =
            QRegularExpression("control (\\S+), live feed (\\S+)").match(QString::fromUtf8(said));
        if (m.hasMatch()) {
            control = m.captured(1).toStdString();
            live = m.captured(2).toStdString();
        }
    }
    ~Served()
    {
        process.terminate();
        process.waitForFinished(30000);
    }
    bool running() const { return process.state() == QProcess::Running && !control.empty(); }
    QByteArray why() { return said + process.readAllStandardError(); }
    // Whether the log comes to hold a line with every one of `parts` (it is read as the event loop runs).
    bool logs(const std::vector<std::string>& parts)
    {
        auto hasLine = [&] {
            for (const QByteArray& line : log.split('\n')) {
                bool all = true;
                for (const std::string& part : parts)
                    all = all && line.contains(QByteArray::fromStdString(part));
                if (all)
                    return true;
            }
            return false;
        };
        const bool found = QTest::qWaitFor(
            [&] {
                log += process.readAllStandardError();
                return hasLine();
            },
            120000);
        if (!found)
            qWarning("the log never said \"%s\"; it holds:\n%s", parts.front().c_str(), log.constData());
        return found;
    }
};

// A client as a script would write one: a DEALER for control and a SUB for the feed, each with a
// monitor that tells how its handshakes end.
class Client {
public:
    // With `disconnects`, the monitors tell each connection's end too (ZMQ_EVENT_DISCONNECTED).
    Client(const std::string& control, const std::string& live, const std::optional<wire::ClientKeys>& keys,
           bool disconnects = false)
        : m_dealer(m_context, zmq::socket_type::dealer), m_sub(m_context, zmq::socket_type::sub),
          m_dealerEvents(m_context, zmq::socket_type::pair), m_subEvents(m_context, zmq::socket_type::pair)
    {
        static int monitors = 0;
        for (auto [socket, events] : {std::pair{&m_dealer, &m_dealerEvents}, std::pair{&m_sub, &m_subEvents}}) {
            socket->set(zmq::sockopt::linger, 0);
            if (keys) {
                socket->set(zmq::sockopt::curve_serverkey, keys->serverKey);
                socket->set(zmq::sockopt::curve_publickey, keys->client.publicKey);
                socket->set(zmq::sockopt::curve_secretkey, keys->client.secretKey);
            }
            const std::string endpoint = "inproc://client-monitor-" + std::to_string(++monitors);
            zmq_socket_monitor(socket->handle(), endpoint.c_str(),
                               ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                   (disconnects ? ZMQ_EVENT_DISCONNECTED : 0));
            events->set(zmq::sockopt::rcvtimeo, 120000);
            events->connect(endpoint);
        }
        m_dealer.set(zmq::sockopt::rcvtimeo, 60000);
        m_dealer.connect(control);
        m_sub.set(zmq::sockopt::subscribe, "");
        m_sub.connect(live);
    }

    // How the next handshake of each socket ended: ZMQ_EVENT_HANDSHAKE_SUCCEEDED or a failure (or,
    // with `disconnects`, ZMQ_EVENT_DISCONNECTED when the connection ends first); 0 after two
    // minutes without one.
    int controlHandshake() { return nextEvent(m_dealerEvents); }
    int liveHandshake() { return nextEvent(m_subEvents); }

    // Queues a request without waiting; a refused client's never reaches the engine.
    void send(nlohmann::json body)
    {
        body["v"] = 1;
        body["id"] = ++m_id;
        m_dealer.send(zmq::buffer(body.dump()));
    }
    nlohmann::json request(nlohmann::json body)
    {
        send(std::move(body));
        zmq::message_t reply;
        if (!m_dealer.recv(reply))
            return {{"ok", false}, {"error", "no reply"}};
        return nlohmann::json::parse(reply.to_string_view());
    }
    // Live messages until `done` says so; false if the feed falls silent for two minutes.
    bool watch(const std::function<bool(const std::string& topic, const zmq::message_t& payload)>& done)
    {
        m_sub.set(zmq::sockopt::rcvtimeo, 120000);
        for (;;) {
            zmq::message_t topic, payload;
            if (!m_sub.recv(topic) || !m_sub.recv(payload))
                return false;
            if (done(topic.to_string(), payload))
                return true;
        }
    }

private:
    static int nextEvent(zmq::socket_t& events)
    {
        zmq::message_t event, endpoint;
        if (!events.recv(event) || event.size() < 6)
            return 0;
        (void)events.recv(endpoint);
        std::uint16_t id = 0;
        std::memcpy(&id, event.data(), sizeof id);
        return id;
    }

    zmq::context_t m_context;
    zmq::socket_t m_dealer, m_sub, m_dealerEvents, m_subEvents;
    int m_id = 0;
};

// Every kind of refusal on both sockets, each logged; the refused clients' requests never ran, and a
// key allowed while the engine runs is let in. `address` is where the clients connect from.
void refusalsAreLogged(Served& served, const std::string& address)
{
    const wire::ClientKeys allowed = allowedKeys();

    Client plaintext(served.control, served.live, std::nullopt);
    plaintext.send({{"op", "submit"}, {"job", demoJob()}});
    QVERIFY(plaintext.controlHandshake() != ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    QVERIFY(plaintext.liveHandshake() != ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    // ZeroMQ sees the mismatch, or the client hanging up mid-handshake: whichever read the other's greeting first.
    QVERIFY(served.logs({"refused a client on the control socket (" + served.control + ";", "plaintext client"}));
    QVERIFY(served.logs({"refused a client on the live feed (" + served.live + ";", "plaintext client"}));

    // A client given another engine's public key: its HELLO does not decrypt here.
    wire::ClientKeys otherServer = allowed;
    otherServer.serverKey = freshPair().publicKey;
    Client misled(served.control, served.live, otherServer);
    misled.send({{"op", "submit"}, {"job", demoJob()}});
    QVERIFY(misled.controlHandshake() != ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    QVERIFY(misled.liveHandshake() != ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    for (const std::string& socket : {"control socket (" + served.control, "live feed (" + served.live})
        QVERIFY(served.logs({"refused a client on the " + socket + ";", "does not decrypt with this engine's key"}));

    // A client whose key the allow-list does not hold: ZAP refuses it, naming its key and address.
    const wire::ClientKeys stranger{allowed.serverKey, freshPair()};
    Client refused(served.control, served.live, stranger);
    refused.send({{"op", "submit"}, {"job", demoJob()}});
    QCOMPARE(refused.controlHandshake(), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    QCOMPARE(refused.liveHandshake(), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    for (const char* socket : {"control socket", "live feed"})
        QVERIFY(served.logs({"refused a client at " + address + " on the " + socket + ": its key " +
                             stranger.client.publicKey + " is not in " +
                             wire::allowListPath(wire::keyDirectory()).string()}));

    // The engine served on, and none of the refused clients' submissions ran.
    QVERIFY(served.running());
    Client client(served.control, served.live, allowed);
    QCOMPARE(client.controlHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    const nlohmann::json jobs = client.request({{"op", "jobs"}});
    QVERIFY2(jobs["ok"] == true, jobs.dump().c_str());
    QCOMPARE(jobs["jobs"].size(), 0u);

    // Allowed while the engine runs: the next connection is let in.
    const ProcessRun allow =
        runProcess(kEngine, {"keys", "--allow", QString::fromStdString(stranger.client.publicKey)});
    QVERIFY2(allow.exitCode == 0, qPrintable(allow.err));
    Client admitted(served.control, served.live, stranger);
    QCOMPARE(admitted.controlHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    QCOMPARE(admitted.request({{"op", "hello"}})["ok"], true);
    QVERIFY(served.logs({"changed: 2 client keys allowed"}));

    // A change that does not read lets nobody in until the list reads again.
    const std::filesystem::path allowList = wire::allowListPath(wire::keyDirectory());
    std::ifstream in(allowList);
    const std::string good{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::ofstream(allowList, std::ios::app) << "garbled\n";
    QVERIFY(served.logs({"'garbled' is neither a key", "no client is let in until the allow-list reads again"}));
    // The keys it held are taken away with it: the open connections end, as for a revoked key.
    QVERIFY(served.logs({"a key left the allow-list: ", " client connections were closed"}));
    Client locked(served.control, served.live, allowed);
    QCOMPARE(locked.controlHandshake(), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
    std::ofstream(allowList, std::ios::trunc) << good;
    Client restored(served.control, served.live, allowed);
    QCOMPARE(restored.controlHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
}

// An allowed client plans the demo, submits it for a few steps and watches it to the end.
void allowedClientRunsTheDemo(Served& served)
{
    Client client(served.control, served.live, allowedKeys());
    QCOMPARE(client.controlHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    QCOMPARE(client.liveHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    const nlohmann::json hello = client.request({{"op", "hello"}});
    QVERIFY2(hello["ok"] == true, hello.dump().c_str());
    QCOMPARE(hello["live"].get<std::string>(), served.live);

    const nlohmann::json plan = client.request({{"op", "plan"}, {"job", demoJob()}});
    QVERIFY2(plan["ok"] == true, plan.dump().substr(0, 2000).c_str());
    QCOMPARE(plan["plan"]["world_size"], 8);

    const int steps = 2;
    const nlohmann::json submitted = client.request({{"op", "submit"}, {"job", demoJob()}, {"steps", steps}});
    QVERIFY2(submitted["ok"] == true, submitted.dump().c_str());
    const std::string job = submitted["job"];
    std::map<int, nlohmann::json> liveSteps;
    nlohmann::json status = nlohmann::json::object();
    QVERIFY(client.watch([&](const std::string& topic, const zmq::message_t& payload) {
        if (topic == "step/" + job) {
            const nlohmann::json s = nlohmann::json::parse(payload.to_string_view());
            liveSteps[s["step"].get<int>()] = s;
        } else if (topic == "job/" + job) {
            status = nlohmann::json::parse(payload.to_string_view());
        }
        return status.value("state", "") == "completed" || status.value("state", "") == "failed";
    }));
    QVERIFY2(status["state"] == "completed", status.dump().c_str());
    QCOMPARE(int(liveSteps.size()), steps);
    const nlohmann::json jobs = client.request({{"op", "jobs"}})["jobs"];
    QCOMPARE(jobs.size(), 1u);
    QCOMPARE(jobs[0]["state"], "completed");
    QCOMPARE(jobs[0]["session"], submitted["session"]);
}

}  // namespace

class TestEngineCurve : public QObject {
    Q_OBJECT

private slots:
    void init()
    {
        // Each test's engines keep their keys in a folder of its own.
        m_home = std::make_unique<QTemporaryDir>();
        qputenv("XDG_CONFIG_HOME", m_home->path().toUtf8());
    }

    void keysAreMadeOnceAndSecretsStayPrivate()
    {
        const std::filesystem::path dir = wire::keyDirectory();
        QCOMPARE(QString::fromStdString(dir.string()), m_home->filePath("meshbench"));
        const ProcessRun made = runProcess(kEngine, {"keys"});
        QVERIFY2(made.exitCode == 0, qPrintable(made.err));
        const wire::KeyPair server = wire::readKeyPair(wire::secretKeyPath(dir, "server"));
        const wire::KeyPair client = wire::readKeyPair(wire::secretKeyPath(dir, "client"));
        QVERIFY(wire::z85KeyProblem(server.secretKey).empty());
        QCOMPARE(wire::readPublicKey(wire::publicKeyPath(dir, "server")), server.publicKey);
        QCOMPARE(wire::readPublicKey(wire::publicKeyPath(dir, "client")), client.publicKey);
        QVERIFY(server.publicKey != client.publicKey);
        // The public keys are printed with their files; the secrets are not printed.
        for (const std::string& shown :
             {server.publicKey, client.publicKey, wire::publicKeyPath(dir, "server").string(),
              wire::secretKeyPath(dir, "client").string()})
            QVERIFY2(made.out.contains(QString::fromStdString(shown)), qPrintable(made.out));
        QVERIFY(!made.out.contains(QString::fromStdString(server.secretKey)));
        QCOMPARE(modeOf(dir), 0700u);
        QCOMPARE(modeOf(wire::secretKeyPath(dir, "server")), 0600u);
        QCOMPARE(modeOf(wire::secretKeyPath(dir, "client")), 0600u);
        // The client pair made here is allowed here.
        QCOMPARE(wire::readAllowList(wire::allowListPath(dir)), std::vector<std::string>{client.publicKey});

        // Again: the keys are kept, nothing is allowed twice.
        const ProcessRun again = runProcess(kEngine, {"keys"});
        QCOMPARE(again.exitCode, 0);
        QVERIFY(again.out.contains("(kept)"));
        QCOMPARE(wire::readKeyPair(wire::secretKeyPath(dir, "server")).secretKey, server.secretKey);
        QCOMPARE(wire::readAllowList(wire::allowListPath(dir)).size(), 1u);

        // --allow takes a key or a public key file, once each.
        const wire::KeyPair laptop = freshPair();
        QCOMPARE(runProcess(kEngine, {"keys", "--allow", QString::fromStdString(laptop.publicKey)}).exitCode, 0);
        const ProcessRun twice = runProcess(kEngine, {"keys", "--allow", QString::fromStdString(laptop.publicKey)});
        QCOMPARE(twice.exitCode, 0);
        QVERIFY(twice.out.contains("already allowed"));
        const QString laptopFile = m_home->filePath("laptop.key");
        std::ofstream(laptopFile.toStdString()) << wire::publicKeyText("laptop", freshPair().publicKey);
        QCOMPARE(runProcess(kEngine, {"keys", "--allow", laptopFile}).exitCode, 0);
        QCOMPARE(wire::readAllowList(wire::allowListPath(dir)).size(), 3u);

        // Malformed keys and secret files are refused, saying why, and nothing is added.
        struct Refusal {
            QString argument;
            QString says;
        };
        const QString badLine = m_home->filePath("bad.key");
        std::ofstream(badLine.toStdString()) << "# a key file\npublic-key = \"tooshort\"\n";
        for (const Refusal& r : {Refusal{"abc", "has 3 characters; a key has 40"},
                                 Refusal{QString(40, QChar('~')), "character 1 ('~') is not one of Z85's"},
                                 Refusal{QString(40, QChar('#')), "encode more than 32 bits"},
                                 Refusal{badLine, "bad.key, line 2: public-key 'tooshort' is not a key"},
                                 Refusal{QString::fromStdString(wire::secretKeyPath(dir, "client").string()),
                                         "holds a secret key (line 3): give " +
                                             QString::fromStdString(wire::publicKeyPath(dir, "client").string())}}) {
            const ProcessRun run = runProcess(kEngine, {"keys", "--allow", r.argument});
            QCOMPARE(run.exitCode, 1);
            QVERIFY2(run.err.contains(r.says), qPrintable(run.err));
        }
        QCOMPARE(wire::readAllowList(wire::allowListPath(dir)).size(), 3u);
        QCOMPARE(runProcess(kEngine, {"keys", "--client", "../elsewhere"}).exitCode, 2);
        QCOMPARE(runProcess(kEngine, {"keys", "--client", "laptop", "--allow", laptopFile}).exitCode, 2);

        // A secret file others may read is refused where it is used.
        std::filesystem::permissions(wire::secretKeyPath(dir, "server"), std::filesystem::perms::group_read,
                                     std::filesystem::perm_options::add);
        const ProcessRun exposed = runProcess(kEngine, {"serve", "--curve", "--bind", "tcp://127.0.0.1:*"});
        QCOMPARE(exposed.exitCode, 5);
        QVERIFY2(exposed.err.contains("other users may read it (mode 0640)") && exposed.err.contains("chmod 600"),
                 qPrintable(exposed.err));
    }

    void servingWithoutKeysIsRefused()
    {
        // Off loopback, CURVE is not optional: the missing file is named, with the command that makes it.
        // (192.0.2.1 is a documentation address: the keys are looked for before anything binds.)
        const ProcessRun bare = runProcess(kEngine, {"serve", "--bind", "tcp://192.0.2.1:5599"});
        QCOMPARE(bare.exitCode, 5);
        QVERIFY2(bare.err.contains("which other machines reach") &&
                     bare.err.contains(QString::fromStdString(
                         wire::secretKeyPath(wire::keyDirectory(), "server").string() + " does not exist")) &&
                     bare.err.contains("run `meshbench-engine keys`"),
                 qPrintable(bare.err));

        QCOMPARE(runProcess(kEngine, {"keys"}).exitCode, 0);
        const std::filesystem::path allowList = wire::allowListPath(wire::keyDirectory());
        const QString loopback = "tcp://127.0.0.1:*";
        std::ofstream(allowList, std::ios::app) << "not-a-key\n";
        const ProcessRun malformed = runProcess(kEngine, {"serve", "--curve", "--bind", loopback});
        QCOMPARE(malformed.exitCode, 5);
        QVERIFY2(
            malformed.err.contains(QString::fromStdString(allowList.string()) + ", line 4: 'not-a-key' is neither"),
            qPrintable(malformed.err));

        std::filesystem::remove(allowList);
        const ProcessRun missing = runProcess(kEngine, {"serve", "--curve", "--bind", loopback});
        QCOMPARE(missing.exitCode, 5);
        QVERIFY2(missing.err.contains(QString::fromStdString(allowList.string()) + " does not exist") &&
                     missing.err.contains("meshbench-engine keys --allow"),
                 qPrintable(missing.err));

        std::ofstream(allowList) << wire::allowListHeader();
        const ProcessRun nobody = runProcess(kEngine, {"serve", "--curve", "--bind", loopback});
        QCOMPARE(nobody.exitCode, 5);
        QVERIFY2(nobody.err.contains("allows no client yet"), qPrintable(nobody.err));
    }

    void curveOnLoopbackRefusesAndLogsAndServesTheAllowed()
    {
        QCOMPARE(runProcess(kEngine, {"keys"}).exitCode, 0);
        // No --curve: every local user reaches a loopback port, so CURVE is on by itself. localhost
        // is bound as 127.0.0.1 (ZeroMQ binds addresses, not host names).
        Served served("tcp://localhost:*", {});
        QVERIFY2(served.running(), served.why().constData());
        QVERIFY2(served.said.contains("CURVE, 1 client key allowed"), served.said.constData());
        refusalsAreLogged(served, "127.0.0.1");
        if (QTest::currentTestFailed())
            return;
        allowedClientRunsTheDemo(served);
    }

    // Issue 27, finding 2: another user of this machine, who cannot read the engine's keys, gets
    // no answer on loopback: a plain client and one with a key of its own are both turned away.
    void anotherUserGetsNoAnswerOnLoopback()
    {
        MESHBENCH_OTHER_TEST_USER(user);
        QCOMPARE(runProcess(kEngine, {"keys"}).exitCode, 0);
        Served served("tcp://127.0.0.1:*", {});
        QVERIFY2(served.running(), served.why().constData());
        const std::string serverKey = allowedKeys().serverKey;  // public: suppose the other user has it
        const nlohmann::json job = demoJob();
        std::string message;
        const int status = runAsOtherUser(
            *user,
            [&](std::string& out) {
                Client plain(served.control, served.live, std::nullopt);
                plain.send({{"op", "submit"}, {"job", job}});
                if (const int event = plain.controlHandshake(); event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED || event == 0) {
                    out = "a plain client's handshake did not fail (event " + std::to_string(event) + ")";
                    return 1;
                }
                Client own(served.control, served.live, wire::ClientKeys{serverKey, freshPair()});
                own.send({{"op", "submit"}, {"job", job}});
                if (const int event = own.controlHandshake(); event != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
                    out = "a client with a key of its own was not refused (event " + std::to_string(event) + ")";
                    return 2;
                }
                return 0;
            },
            message);
        QVERIFY2(status == 0, message.c_str());
        Client client(served.control, served.live, allowedKeys());
        const nlohmann::json jobs = client.request({{"op", "jobs"}});
        QVERIFY2(jobs["ok"] == true, jobs.dump().c_str());
        QCOMPARE(jobs["jobs"].size(), 0u);
    }

    // Issue 27, finding 12: a key taken off the allow-list loses the connection it already has;
    // every other client reconnects and is served on.
    void aRevokedKeyLosesItsOpenConnection()
    {
        QCOMPARE(runProcess(kEngine, {"keys"}).exitCode, 0);
        const wire::ClientKeys kept = allowedKeys();
        const wire::ClientKeys revoked{kept.serverKey, freshPair()};
        QCOMPARE(runProcess(kEngine, {"keys", "--allow", QString::fromStdString(revoked.client.publicKey)}).exitCode,
                 0);
        Served served("tcp://127.0.0.1:*", {});
        QVERIFY2(served.running(), served.why().constData());
        Client keeper(served.control, served.live, kept, true);
        Client leaver(served.control, served.live, revoked, true);
        QCOMPARE(keeper.controlHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        QCOMPARE(leaver.controlHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        QCOMPARE(leaver.request({{"op", "hello"}})["ok"], true);

        const std::filesystem::path allowList = wire::allowListPath(wire::keyDirectory());
        std::ofstream(allowList, std::ios::trunc) << wire::allowListHeader() << kept.client.publicKey << "\n";
        QCOMPARE(leaver.controlHandshake(), ZMQ_EVENT_DISCONNECTED);
        QCOMPARE(leaver.controlHandshake(), ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
        QCOMPARE(leaver.liveHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        QCOMPARE(leaver.liveHandshake(), ZMQ_EVENT_DISCONNECTED);
        QVERIFY(served.logs({"a key left the allow-list: ", " client connections were closed"}));
        QCOMPARE(keeper.controlHandshake(), ZMQ_EVENT_DISCONNECTED);
        QCOMPARE(keeper.controlHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        QCOMPARE(keeper.request({{"op", "hello"}})["ok"], true);
    }

    // Issue 27, finding 3: before its CURVE handshake a client may not make the engine hold a
    // frame larger than any request: the connection ends at the frame's header.
    void anOversizedFrameBeforeTheHandshakeEndsItsConnection()
    {
        QCOMPARE(runProcess(kEngine, {"keys"}).exitCode, 0);
        Served served("tcp://127.0.0.1:*", {});
        QVERIFY2(served.running(), served.why().constData());
        ZmtpProbe probe(served.control);
        QVERIFY2(probe.connected(), probe.error().c_str());
        QVERIFY(probe.greet("CURVE"));
        const std::uint64_t limit = std::uint64_t(64) << 20;
        const std::uint64_t taken = probe.streamClaimedFrame(std::uint64_t(1) << 30, limit, true);
        QVERIFY2(taken < limit, qPrintable(QStringLiteral("the engine took %1 bytes of a 1 GiB frame").arg(taken)));
        Client client(served.control, served.live, allowedKeys());
        QCOMPARE(client.controlHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        QCOMPARE(client.request({{"op", "hello"}})["ok"], true);
    }

    void curveOverTheTestHostsBridge()
    {
        // Registered a second time as tst_engine_curve_hosts, which holds the test_hosts fixture.
        if (!qEnvironmentVariableIsSet("MESHBENCH_TEST_HOSTS"))
            QSKIP("runs as tst_engine_curve_hosts, beside the test_hosts fixture");
        if (!hasAddress(kBridgeAddress))
            QSKIP("no test-hosts bridge here (10.250.77.1): the test_hosts fixture could not make it");
        QCOMPARE(runProcess(kEngine, {"keys"}).exitCode, 0);
        // No --curve: an address other machines reach turns CURVE on by itself.
        Served served(QStringLiteral("tcp://%1:*").arg(kBridgeAddress), {});
        QVERIFY2(served.running(), served.why().constData());
        QVERIFY2(served.said.contains("CURVE, 1 client key allowed"), served.said.constData());
        QVERIFY(QString::fromStdString(served.control).startsWith(QStringLiteral("tcp://%1:").arg(kBridgeAddress)));
        refusalsAreLogged(served, kBridgeAddress);
        if (QTest::currentTestFailed())
            return;
        allowedClientRunsTheDemo(served);
    }

    void shellSyntaxInAJobNameReachesNoShell()
    {
        // If any shell read the name, one of these would make a file.
        const QString marker = m_home->filePath("pwned");
        const std::string m = marker.toStdString();
        const std::string name = "x; touch " + m + "-1 && $(touch " + m + "-2) `touch " + m + "-3` | tee " + m +
                                 "-4 > " + m + "-5 & touch /tmp/pwned-$$ 'q' \"dq\" \\";
        const QStringList tmpBefore = QDir("/tmp").entryList({"pwned-*"});
        Served served("ipc://" + m_home->filePath("control"), {"--live", "ipc://" + m_home->filePath("live")});
        QVERIFY2(served.running(), served.why().constData());
        Client client(served.control, served.live, std::nullopt);
        QCOMPARE(client.liveHandshake(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        nlohmann::json job = demoJob();
        job["name"] = name;
        const nlohmann::json submitted = client.request({{"op", "submit"}, {"job", job}, {"steps", 1}});
        QVERIFY2(submitted["ok"] == true, submitted.dump().c_str());
        const std::string source = submitted["job"];
        nlohmann::json status = nlohmann::json::object();
        QVERIFY(client.watch([&](const std::string& topic, const zmq::message_t& payload) {
            if (topic == "job/" + source)
                status = nlohmann::json::parse(payload.to_string_view());
            return status.value("state", "") == "completed" || status.value("state", "") == "failed";
        }));
        QVERIFY2(status["state"] == "completed", status.dump().c_str());

        for (int i = 1; i <= 5; ++i)
            QVERIFY2(!QFile::exists(marker + "-" + QString::number(i)), qPrintable(marker));
        QCOMPARE(QDir("/tmp").entryList({"pwned-*"}), tmpBefore);
        // Stored as given; the session's file name keeps only the name's safe characters.
        const nlohmann::json sessions = client.request({{"op", "sessions"}});
        QCOMPARE(sessions["sessions"].size(), 1u);
        QCOMPARE(sessions["sessions"][0]["name"].get<std::string>(), name);
        const QString file = QFileInfo(QString::fromStdString(submitted["session"].get<std::string>())).fileName();
        QVERIFY2(QRegularExpression("^[A-Za-z0-9.-]+$").match(file).hasMatch(), qPrintable(file));
    }

private:
    std::unique_ptr<QTemporaryDir> m_home;
};

QTEST_GUILESS_MAIN(TestEngineCurve)
#include "tst_engine_curve.moc"
