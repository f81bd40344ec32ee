// EngineClient against a real `meshbench-engine serve` (started by the test on ipc endpoints of its
// own) and against a fake engine that publishes garbage: requests and replies matched by id, a
// timeout when nobody listens, the demo job watched on the live feed to completion, the local
// engine started (and stopped) when none answers, and bad live payloads counted, never fatal. With
// CURVE: the keys chosen from the options and the key folder, and an engine served with --curve
// reached with them (and a key it does not allow told where to look).

#include "client/client_keys.h"
#include "client/engine_client.h"

#include <QtTest>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <fstream>
#include <map>
#include <set>

using namespace meshbench;
using meshbench::app::ConnectionState;
using meshbench::app::EngineClient;

namespace {

QString engineExecutable() { return QCoreApplication::applicationDirPath() + QStringLiteral("/meshbench-engine"); }

nlohmann::json demoJob()
{
    std::ifstream in(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    return nlohmann::json::parse(in);
}

// A serve process on ipc endpoints inside a folder of its own, stopped at the end.
struct Served {
    QTemporaryDir dir;
    QProcess process;
    QString control = QStringLiteral("ipc://") + dir.filePath(QStringLiteral("control"));
    QString live = QStringLiteral("ipc://") + dir.filePath(QStringLiteral("live"));

    explicit Served(const QStringList& options = {})
    {
        process.start(engineExecutable(),
                      QStringList{QStringLiteral("serve"), QStringLiteral("--bind"), control, QStringLiteral("--live"),
                                  live, QStringLiteral("--sessions"), dir.path()} +
                          options);
        process.waitForReadyRead(10000);  // "serving: ..." once both sockets are bound
    }
    ~Served()
    {
        process.terminate();
        process.waitForFinished(20000);
    }
};

// Sends a request and waits (in the event loop) for its reply.
nlohmann::json ask(EngineClient& client, nlohmann::json body, int timeoutMs = EngineClient::kDefaultTimeoutMs)
{
    std::optional<nlohmann::json> reply;
    client.request(
        std::move(body), [&](const nlohmann::json& r) { reply = r; }, timeoutMs);
    const bool answered = QTest::qWaitFor([&] { return reply.has_value(); }, timeoutMs + 5000);
    return answered ? *reply : nlohmann::json{{"ok", false}, {"error", "no reply at all"}};
}

bool waitConnected(EngineClient& client, int timeoutMs = 15000)
{
    return QTest::qWaitFor([&] { return client.state() == ConnectionState::Connected; }, timeoutMs);
}

// Waits until the engine has confirmed the client's live subscription (its "subscribed" message):
// a PUB drops whatever it sends before a subscription arrives.
bool awaitLiveFeed(EngineClient& client, int timeoutMs = 60000)
{
    return QTest::qWaitFor([&] { return client.liveFeedConfirmed(); }, timeoutMs);
}

// A key folder of the test's own (XDG_CONFIG_HOME, which the engines it starts inherit).
struct KeyFolder {
    QTemporaryDir home;
    QByteArray saved = qgetenv("XDG_CONFIG_HOME");
    KeyFolder() { qputenv("XDG_CONFIG_HOME", home.path().toUtf8()); }
    ~KeyFolder() { qputenv("XDG_CONFIG_HOME", saved); }
    QString file(const std::string& name) const
    {
        return QString::fromStdString((wire::keyDirectory() / name).string());
    }
    bool makeKeys() const
    {
        QProcess keys;
        keys.start(engineExecutable(), {QStringLiteral("keys")});
        return keys.waitForFinished(30000) && keys.exitStatus() == QProcess::NormalExit && keys.exitCode() == 0;
    }
};

}  // namespace

class TestClientEngine : public QObject {
    Q_OBJECT

private slots:
    void helloPlanAndBadRequests()
    {
        Served served;
        QVERIFY2(served.process.state() == QProcess::Running, served.process.readAllStandardError().constData());
        EngineClient client;
        QSignalSpy states(&client, &EngineClient::stateChanged);
        client.connectTo(served.control);
        QVERIFY(waitConnected(client));
        QCOMPARE(states.first().at(0).value<ConnectionState>(), ConnectionState::Connecting);
        QCOMPARE(states.last().at(0).value<ConnectionState>(), ConnectionState::Connected);
        QCOMPARE(states.last().at(1).toString(), served.control);
        QCOMPARE(client.liveEndpoint(), served.live);  // taken from the hello reply

        const nlohmann::json hello = ask(client, {{"op", "hello"}});
        QCOMPARE(hello["ok"], true);
        QCOMPARE(hello["live"].get<std::string>(), served.live.toStdString());

        nlohmann::json reply = ask(client, {{"op", "plan"}, {"job", demoJob()}});
        QVERIFY2(reply["ok"] == true, reply.dump().c_str());
        QVERIFY(reply["plan"].is_object());
        QCOMPARE(reply["plan"]["world_size"], 8);
        QVERIFY(reply["plan"]["bubble_ratio"].get<double>() > 0.1);

        reply = ask(client, {{"op", "launch-missiles"}});
        QCOMPARE(reply["ok"], false);
        QVERIFY(reply["error"].get<std::string>().find("submit") != std::string::npos);
        nlohmann::json bad = demoJob();
        bad["parallel"]["tp"] = 3;
        reply = ask(client, {{"op", "plan"}, {"job", bad}});
        QCOMPARE(reply["ok"], false);
        QVERIFY(reply["errors"].dump().find("parallel.tp") != std::string::npos);

        // Several in flight at once: each handler gets its own reply.
        std::map<int, std::string> answers;
        for (int i = 0; i < 5; ++i)
            client.request({{"op", i % 2 ? "jobs" : "hello"}}, [&answers, i](const nlohmann::json& r) {
                answers[i] = r.contains("jobs") ? "jobs" : "hello";
            });
        QTRY_COMPARE(int(answers.size()), 5);
        for (int i = 0; i < 5; ++i)
            QCOMPARE(answers[i], std::string(i % 2 ? "jobs" : "hello"));
        QCOMPARE(client.pendingRequests(), 0);
    }

    void demoJobOnTheLiveFeed()
    {
        Served served;
        EngineClient client;
        client.connectTo(served.control);
        QVERIFY(waitConnected(client));
        QVERIFY(awaitLiveFeed(client));
        QSignalSpy stepSpy(&client, &EngineClient::stepArrived);
        QSignalSpy jobSpy(&client, &EngineClient::jobChanged);
        QSignalSpy spanSpy(&client, &EngineClient::spansArrived);

        const nlohmann::json reply =
            ask(client, {{"op", "submit"}, {"job", demoJob()}, {"steps", 3}, {"one_device", true}});
        QVERIFY2(reply["ok"] == true, reply.dump().c_str());
        const QString source = QString::fromStdString(reply["job"]);

        auto finalState = [&]() -> std::string {
            for (const QList<QVariant>& args : jobSpy)
                if (args.at(0).toString() == source) {
                    std::string state = args.at(1).value<nlohmann::json>().value("state", "");
                    if (state == "completed" || state == "failed" || state == "stopped")
                        return state;
                }
            return {};
        };
        QVERIFY(QTest::qWaitFor([&] { return !finalState().empty(); }, 180000));
        QCOMPARE(finalState(), std::string("completed"));

        std::set<int> steps;
        for (const QList<QVariant>& args : stepSpy) {
            QCOMPARE(args.at(0).toString(), source);
            const nlohmann::json step = args.at(1).value<nlohmann::json>();
            QCOMPARE(step["source"].get<std::string>(), source.toStdString());
            steps.insert(step["step"].get<int>());
        }
        QCOMPARE(steps, (std::set<int>{1, 2, 3}));
        QVERIFY(spanSpy.count() > 0);
        const wire::Batch batch = spanSpy.first().at(1).value<wire::Batch>();
        QVERIFY(!batch.records.empty());
        QVERIFY(std::holds_alternative<wire::SpanRecord>(batch.records.front()));
        QCOMPARE(client.badLiveMessages(), quint64(0));
    }

    void aRequestNobodyAnswersTimesOut()
    {
        QTemporaryDir dir;
        EngineClient client;
        client.connectTo(QStringLiteral("ipc://") + dir.filePath(QStringLiteral("nobody")));
        QElapsedTimer timer;
        timer.start();
        const nlohmann::json reply = ask(client, {{"op", "hello"}}, 400);
        const qint64 elapsed = timer.elapsed();
        QCOMPARE(reply["ok"], false);
        QCOMPARE(reply["timed_out"], true);
        QVERIFY2(reply["error"].get<std::string>().find("the engine did not answer") == 0, reply.dump().c_str());
        QVERIFY2(elapsed >= 400, qPrintable(QString::number(elapsed)));  // it waited the whole timeout
        QCOMPARE(client.state(), ConnectionState::Connecting);

        // Without any connection the handler still runs once, from the event loop.
        EngineClient idle;
        int calls = 0;
        idle.request({{"op", "hello"}}, [&](const nlohmann::json& r) { calls += r["ok"] == false ? 1 : 100; });
        QCOMPARE(calls, 0);
        QTRY_COMPARE(calls, 1);
    }

    void theLocalEngineIsStartedWhenNoneAnswers()
    {
        QTemporaryDir dir;
        const QString control = QStringLiteral("ipc://") + dir.filePath(QStringLiteral("control"));
        const QString live = QStringLiteral("ipc://") + dir.filePath(QStringLiteral("live"));
        auto owner = std::make_unique<EngineClient>();
        QElapsedTimer timer;
        timer.start();
        owner->startLocalEngine(control, live, dir.path());
        QVERIFY(waitConnected(*owner));
        QVERIFY(timer.elapsed() >= 900);  // it waited for the probe first
        QVERIFY(owner->ownsEngine());
        QCOMPARE(owner->liveEndpoint(), live);

        // A second workbench finds it and starts nothing.
        EngineClient second;
        second.startLocalEngine(control, live, dir.path());
        QVERIFY(waitConnected(second, 3000));
        QVERIFY(!second.ownsEngine());

        // The owner takes its engine down with it.
        owner.reset();
        const nlohmann::json reply = ask(second, {{"op", "hello"}}, 500);
        QCOMPARE(reply["ok"], false);
        QCOMPARE(reply["timed_out"], true);
    }

    void curveKeysAreChosenFromOptionsAndTheKeyFolder()
    {
        KeyFolder folder;
        // An ipc socket in a folder of this user's alone (the key folder's QTemporaryDir is 0700)
        // goes without keys; any TCP port, loopback too, without any gets the keys to give.
        const QString local = QStringLiteral("ipc://") + folder.home.filePath(QStringLiteral("control")),
                      remote = QStringLiteral("tcp://10.0.0.5:5570");
        app::ClientKeysChoice choice = app::chooseClientKeys(local, {}, {});
        QVERIFY(!choice.keys && choice.error.isEmpty());
        for (const QString& open : {remote, QStringLiteral("tcp://127.0.0.1:5570")}) {
            const QString none = app::chooseClientKeys(open, {}, {}).error;
            QVERIFY2(none.contains(QStringLiteral("is open to other users")) &&
                         none.contains(QStringLiteral("--server-key FILE")),
                     qPrintable(none));
        }
        QVERIFY(app::chooseClientKeys(local, {}, QStringLiteral("x"))
                    .error.startsWith(QStringLiteral("--client-key goes with the engine's key")));

        QVERIFY(folder.makeKeys());
        const wire::KeyPair client = wire::readKeyPair(folder.file("client.key_secret").toStdString());
        const std::string serverKey = wire::readPublicKey(folder.file("server.key").toStdString());
        // The folder's files are the defaults off loopback.
        choice = app::chooseClientKeys(remote, {}, {});
        QVERIFY2(choice.keys, qPrintable(choice.error));
        QCOMPARE(choice.keys->serverKey, serverKey);
        QCOMPARE(choice.keys->client.publicKey, client.publicKey);
        QCOMPARE(choice.keys->client.secretKey, client.secretKey);
        QVERIFY(!app::chooseClientKeys(local, {}, {}).keys);
        // On a private socket, naming the server key asks for CURVE; a key may be given as Z85 text.
        const QString otherKey = QStringLiteral("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
        choice = app::chooseClientKeys(local, otherKey, {});
        QVERIFY2(choice.keys && choice.keys->serverKey == otherKey.toStdString(), qPrintable(choice.error));
        // Malformed or misplaced keys: the reason, and no keys.
        choice = app::chooseClientKeys(remote, QStringLiteral("abc"), {});
        QVERIFY(!choice.keys);
        QVERIFY2(choice.error.contains(QStringLiteral("'abc' is neither a public key nor a key file")),
                 qPrintable(choice.error));
        QVERIFY(app::chooseClientKeys(remote, {}, folder.file("client.key"))
                    .error.contains(QStringLiteral("holds no secret-key line")));
        QVERIFY(app::chooseClientKeys(remote, folder.file("server.key_secret"), {})
                    .error.contains(QStringLiteral("holds a secret key")));
        QFile::remove(folder.file("client.key_secret"));
        QVERIFY(
            app::chooseClientKeys(remote, {}, {}).error.contains(QStringLiteral("run `meshbench-engine keys` here")));

        // An engine bound to every interface advertises its feed's wildcard: the control host replaces it.
        QCOMPARE(app::reachableLiveEndpoint(remote, QStringLiteral("tcp://0.0.0.0:5571")),
                 QStringLiteral("tcp://10.0.0.5:5571"));
        QCOMPARE(app::reachableLiveEndpoint(QStringLiteral("tcp://[fd00::7]:5570"), QStringLiteral("tcp://[::]:5571")),
                 QStringLiteral("tcp://[fd00::7]:5571"));
        QCOMPARE(app::reachableLiveEndpoint(remote, QStringLiteral("tcp://*:5571")),
                 QStringLiteral("tcp://10.0.0.5:5571"));
        QCOMPARE(app::reachableLiveEndpoint(remote, QStringLiteral("tcp://10.0.0.6:5571")),
                 QStringLiteral("tcp://10.0.0.6:5571"));
        QCOMPARE(app::reachableLiveEndpoint(QStringLiteral("ipc:///x"), QStringLiteral("tcp://0.0.0.0:5571")),
                 QStringLiteral("tcp://0.0.0.0:5571"));
    }

    void anEngineServedWithCurveIsReachedWithKeys()
    {
        KeyFolder folder;
        QVERIFY(folder.makeKeys());
        Served served({QStringLiteral("--curve")});
        QVERIFY2(served.process.state() == QProcess::Running, served.process.readAllStandardError().constData());
        const app::ClientKeysChoice choice = app::chooseClientKeys(served.control, folder.file("server.key"), {});
        QVERIFY2(choice.keys, qPrintable(choice.error));

        EngineClient client;
        QSignalSpy jobSpy(&client, &EngineClient::jobChanged);
        client.connectTo(served.control, {}, choice.keys);
        QVERIFY(client.usesCurve());
        QVERIFY(waitConnected(client));
        QCOMPARE(client.liveEndpoint(), served.live);
        const nlohmann::json reply =
            ask(client, {{"op", "submit"}, {"job", demoJob()}, {"steps", 2}, {"one_device", true}});
        QVERIFY2(reply["ok"] == true, reply.dump().c_str());
        const QString source = QString::fromStdString(reply["job"]);
        // The run's end comes over the live feed, which is CURVE too.
        QVERIFY(QTest::qWaitFor(
            [&] {
                for (const QList<QVariant>& args : jobSpy)
                    if (args.at(0).toString() == source &&
                        args.at(1).value<nlohmann::json>().value("state", "") == "completed")
                        return true;
                return false;
            },
            180000));

        // A key the engine does not allow hears nothing, and the timeout says where to look.
        char publicKey[41], secretKey[41];
        QCOMPARE(zmq_curve_keypair(publicKey, secretKey), 0);
        EngineClient stranger;
        stranger.connectTo(served.control, {}, wire::ClientKeys{choice.keys->serverKey, {publicKey, secretKey}});
        const nlohmann::json refused = ask(stranger, {{"op", "hello"}}, 1000);
        QCOMPARE(refused["timed_out"], true);
        QVERIFY2(refused["error"].get<std::string>().find(std::string("refused this workbench's CURVE key ") +
                                                          publicKey) != std::string::npos,
                 refused.dump().c_str());
        QByteArray log;
        QVERIFY(QTest::qWaitFor(
            [&] {
                log += served.process.readAllStandardError();
                return log.contains(QByteArray("its key ") + publicKey);
            },
            30000));
    }

    void badLivePayloadsAreCountedNotFatal()
    {
        // A fake engine: a ROUTER that answers hello with our PUB as the feed, and a PUB that sends garbage.
        QTemporaryDir dir;
        const std::string control = "ipc://" + dir.filePath(QStringLiteral("control")).toStdString();
        const std::string live = "ipc://" + dir.filePath(QStringLiteral("live")).toStdString();
        zmq::context_t context;
        zmq::socket_t router(context, zmq::socket_type::router);
        zmq::socket_t pub(context, zmq::socket_type::pub);
        router.bind(control);
        pub.bind(live);
        QTimer serve;
        connect(&serve, &QTimer::timeout, [&] {
            std::vector<zmq::message_t> frames;
            while (zmq::recv_multipart(router, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
                const nlohmann::json request = nlohmann::json::parse(frames.back().to_string_view());
                const nlohmann::json reply = {{"v", 1}, {"id", request["id"]}, {"ok", true}, {"live", live}};
                router.send(frames.front(), zmq::send_flags::sndmore);
                router.send(zmq::buffer(reply.dump()));
                frames.clear();
            }
        });
        serve.start(10);

        EngineClient client;
        QSignalSpy bad(&client, &EngineClient::badLiveMessage);
        QSignalSpy steps(&client, &EngineClient::stepArrived);
        QSignalSpy spans(&client, &EngineClient::spansArrived);
        client.connectTo(QString::fromStdString(control));
        QVERIFY(waitConnected(client));
        auto publish = [&](const std::string& topic, const std::string& payload) {
            pub.send(zmq::buffer(topic), zmq::send_flags::sndmore);
            pub.send(zmq::buffer(payload));
        };
        // The subscription has reached our PUB once a first message arrives: a log line, a kind
        // counted nowhere below, published until one does (a PUB drops what it sends before).
        QSignalSpy probes(&client, &EngineClient::logArrived);
        QVERIFY(QTest::qWaitFor(
            [&] {
                publish("log/probe", "{}");
                return probes.count() > 0;
            },
            30000));
        publish("spans/job-1", "MBTW but not a batch");
        publish("step/job-1", "{not json");
        publish("nonsense", "{}");
        publish("future-kind/job-1", "{}");                // a kind from a newer engine: ignored, not an error
        pub.send(zmq::buffer(std::string("step/job-1")));  // a topic alone
        publish("step/job-1", R"({"type": "step", "step": 7})");
        wire::Batch batch{3, 0, {wire::SpanRecord{7, 1, 0, 2, wire::SpanKind::Backward, -1, 100, 250, 0}}};
        const std::vector<std::uint8_t> frame = wire::encodeBatch(batch);
        pub.send(zmq::buffer(std::string("spans/job-1")), zmq::send_flags::sndmore);
        pub.send(zmq::buffer(frame));

        QTRY_COMPARE(spans.count(), 1);
        QCOMPARE(steps.count(), 1);
        QCOMPARE(steps.first().at(0).toString(), QStringLiteral("job-1"));
        QCOMPARE(steps.first().at(1).value<nlohmann::json>()["step"], 7);
        QCOMPARE(spans.first().at(0).toString(), QStringLiteral("job-1"));
        QCOMPARE(spans.first().at(1).value<wire::Batch>(), batch);
        // The bad batch, the bad JSON, the topic without a slash and the topic without a payload.
        QCOMPARE(bad.count(), 4);
        QCOMPARE(bad.at(0).at(0).toString(), QStringLiteral("spans/job-1"));
        QCOMPARE(bad.last().at(2).toULongLong(), client.badLiveMessages());
        QCOMPARE(client.state(), ConnectionState::Connected);
    }
};

QTEST_MAIN(TestClientEngine)
#include "tst_client_engine.moc"
