// meshbench-engine serve and replay through their sockets, as the GUI uses them: the control
// protocol (good and bad requests), a job submitted, watched on the live feed and stopped, and a
// stored session replayed (and sought) to the same aggregates the live run published.

#include "plan/job_spec.h"
#include "wire/control.h"
#include "wire/telemetry.h"

#include "common/process_run.h"

#include <QtTest>

#include <sqlite3.h>
#include <zmq.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace meshbench;

namespace {

const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
const QString kDemo = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");

nlohmann::json demoJob()
{
    std::ifstream in(kDemo.toStdString());
    return nlohmann::json::parse(in);
}

class Client {
public:
    Client(const std::string& control, const std::string& live)
        : m_dealer(m_context, zmq::socket_type::dealer), m_sub(m_context, zmq::socket_type::sub)
    {
        m_dealer.set(zmq::sockopt::rcvtimeo, 20000);
        m_dealer.connect(control);
        m_sub.set(zmq::sockopt::subscribe, "");
        m_sub.connect(live);
    }

    nlohmann::json requestRaw(const std::string& frame)
    {
        m_dealer.send(zmq::buffer(frame));
        zmq::message_t reply;
        if (!m_dealer.recv(reply))
            qFatal("no reply to %s", frame.c_str());
        return nlohmann::json::parse(reply.to_string_view());
    }
    nlohmann::json request(nlohmann::json body)
    {
        body["v"] = 1;
        body["id"] = ++m_id;
        nlohmann::json reply = requestRaw(body.dump());
        if (reply["id"] != m_id)
            qFatal("reply for another request: %s", reply.dump().c_str());
        return reply;
    }

    // Live messages until `done` says so or the time runs out; returns false on timeout.
    bool watch(const std::function<bool(const std::string& topic, const zmq::message_t& payload)>& done,
               int timeoutMs = 120000)
    {
        QElapsedTimer timer;
        timer.start();
        m_sub.set(zmq::sockopt::rcvtimeo, 200);
        while (timer.elapsed() < timeoutMs) {
            zmq::message_t topic, payload;
            if (!m_sub.recv(topic))
                continue;
            if (!m_sub.recv(payload))
                continue;
            if (done(topic.to_string(), payload))
                return true;
        }
        return false;
    }

private:
    zmq::context_t m_context;
    zmq::socket_t m_dealer;
    zmq::socket_t m_sub;
    int m_id = 0;
};

// A short real session, made once per test that needs one.
QString shortSession(const QString& dir, const QString& name, int steps = 3)
{
    const QString session = dir + "/" + name;
    const ProcessRun run = runProcess(kEngine, {"run", kDemo, "--one-device", "--steps", QString::number(steps),
                                                "--session", session});
    if (run.exitCode != 0)
        qFatal("cannot make a session: %s", qPrintable(run.err));
    return session;
}

// A copy of a session, damaged by SQL as a damaging tool would; its path.
QString damagedCopy(const QString& session, const QString& copy, const char* sql)
{
    if (!QFile::copy(session, copy))
        qFatal("cannot copy %s to %s", qPrintable(session), qPrintable(copy));
    sqlite3* db = nullptr;
    if (sqlite3_open(copy.toUtf8().constData(), &db) != SQLITE_OK ||
        sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK)
        qFatal("cannot damage %s: %s", qPrintable(copy), sqlite3_errmsg(db));
    sqlite3_close(db);
    return copy;
}

// A DEALER that has sent `count` hello requests (ids 0, 1, ...) without reading a reply yet.
zmq::socket_t sendHellos(zmq::context_t& context, const std::string& endpoint, int count, int receiveHighWater = 1000)
{
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::sndhwm, 0);
    dealer.set(zmq::sockopt::rcvhwm, receiveHighWater);
    dealer.set(zmq::sockopt::rcvtimeo, 30000);
    dealer.connect(endpoint);
    for (int i = 0; i < count; ++i)
        dealer.send(zmq::buffer(nlohmann::json{{"v", 1}, {"id", i}, {"op", "hello"}}.dump()));
    return dealer;
}

// Every reply to sendHellos' requests, in order.
void expectHelloReplies(zmq::socket_t& dealer, int count)
{
    for (int i = 0; i < count; ++i) {
        zmq::message_t reply;
        QVERIFY2(dealer.recv(reply), qPrintable(QStringLiteral("reply %1 of %2 never came").arg(i).arg(count)));
        const nlohmann::json body = nlohmann::json::parse(reply.to_string_view());
        QCOMPARE(body["ok"], true);
        QCOMPARE(body["id"].get<int>(), i);
    }
}

struct Served {
    QTemporaryDir sessions;
    QProcess process;
    std::string control, live;

    // ipc endpoints in a folder of our own: no other process can take them first.
    Served() : control("ipc://" + sessions.filePath("control").toStdString()),
               live("ipc://" + sessions.filePath("live").toStdString())
    {
        process.start(kEngine, {"serve", "--bind", QString::fromStdString(control), "--live", QString::fromStdString(live),
                                "--sessions", sessions.path()});
        process.waitForReadyRead(10000);
    }
    // Serves on a given control endpoint (the live feed on the next port).
    explicit Served(const std::string& bind) : control(bind)
    {
        process.start(kEngine, {"serve", "--bind", QString::fromStdString(bind), "--sessions", sessions.path()});
        process.waitForReadyRead(10000);
    }
    ~Served()
    {
        process.terminate();
        process.waitForFinished(20000);
    }
};

}  // namespace

class TestEngineServe : public QObject {
    Q_OBJECT

private slots:
    void controlRequestsAndBadInput()
    {
        Served served;
        QVERIFY2(served.process.state() == QProcess::Running, served.process.readAllStandardError().constData());
        Client client(served.control, served.live);
        const nlohmann::json hello = client.request({{"op", "hello"}});
        QCOMPARE(hello["ok"], true);
        QCOMPARE(hello["live"].get<std::string>(), served.live);

        // Garbage, the wrong version, an unknown op: an error reply each, and the server lives on.
        nlohmann::json reply = client.requestRaw("not json at all");
        QCOMPARE(reply["ok"], false);
        QVERIFY2(reply["error"].get<std::string>().find("line 1, column 2: not valid JSON") != std::string::npos,
                 reply.dump().c_str());
        reply = client.requestRaw(R"({"v": 7, "id": 3, "op": "hello"})");
        QCOMPARE(reply["ok"], false);
        QCOMPARE(reply["id"], 3);
        QVERIFY(reply["error"].get<std::string>().find("\"v\": 1") != std::string::npos);
        reply = client.request({{"op", "launch-missiles"}});
        QCOMPARE(reply["ok"], false);
        QVERIFY(reply["error"].get<std::string>().find("submit") != std::string::npos);
        reply = client.request({{"op", "seek"}, {"source", "replay-9"}, {"step", 1}});
        QCOMPARE(reply["ok"], false);
        QVERIFY(reply["error"].get<std::string>().find("no replay named") != std::string::npos);
        reply = client.request({{"op", "open"}, {"session", "/nonexistent.meshbench"}});
        QCOMPARE(reply["ok"], false);
        QVERIFY(reply["error"].get<std::string>().find("/nonexistent.meshbench") != std::string::npos);

        // Plan: the demo's plan, and a layout that does not divide refused with the field named.
        reply = client.request({{"op", "plan"}, {"job", demoJob()}});
        QCOMPARE(reply["ok"], true);
        QVERIFY(reply["plan"].is_object());
        nlohmann::json bad = demoJob();
        bad["parallel"]["tp"] = 3;
        reply = client.request({{"op", "plan"}, {"job", bad}});
        QCOMPARE(reply["ok"], false);
        QVERIFY(reply["errors"].dump().find("parallel.tp") != std::string::npos);
        reply = client.request({{"op", "submit"}, {"job", bad}});
        QCOMPARE(reply["ok"], false);
        // A job the planner prices but the agent refuses (an odd head dimension, which its rotary
        // embeddings cannot pair) is planned, and refused at submit with the key named, before
        // anything launches.
        nlohmann::json refused = demoJob();
        refused["model"]["hidden"] = 3 * refused["model"]["heads"].get<int>();
        QCOMPARE(client.request({{"op", "plan"}, {"job", refused}})["ok"], true);
        reply = client.request({{"op", "submit"}, {"job", refused}});
        QCOMPARE(reply["ok"], false);
        QVERIFY2(reply["error"].get<std::string>().find("meshbench-agent of this build does not run this job") !=
                     std::string::npos,
                 reply.dump().c_str());
        QCOMPARE(reply["errors"].size(), 1u);
        QCOMPARE(reply["errors"][0]["path"].get<std::string>(), std::string("model.hidden"));
        QCOMPARE(client.request({{"op", "jobs"}})["jobs"].size(), 0u);
        QCOMPARE(served.process.state(), QProcess::Running);
    }

    void aCorruptSessionIsAnsweredAndServingGoesOn()
    {
        // Issue 11: one corrupt session in the folder made `sessions` and `open` take serve down
        // (invalid UTF-8 in the error text, which nlohmann-json refused to serialise).
        Served served;
        const QString healthy = shortSession(served.sessions.path(), "healthy.meshbench");
        // A file that is not a session, whose name is not UTF-8 either: the reply must still be JSON.
        const QByteArray corruptName = served.sessions.path().toUtf8() + "/bad\xff.meshbench";
        std::ofstream(corruptName.toStdString(), std::ios::binary) << std::string(8192, '\xff');
        // And one a client can name (a JSON request cannot carry the stray byte).
        const std::string damaged = served.sessions.filePath("damaged.meshbench").toStdString();
        std::ofstream(damaged, std::ios::binary) << std::string(8192, '\xff');
        Client client(served.control, served.live);
        for (int round = 0; round < 2; ++round) {
            const nlohmann::json listing = client.request({{"op", "sessions"}});
            QVERIFY2(listing["ok"] == true, listing.dump().c_str());
            QCOMPARE(listing["sessions"].size(), 1u);
            QCOMPARE(listing["sessions"][0]["path"].get<std::string>(), healthy.toStdString());
            QCOMPARE(listing["unreadable"].size(), 2u);
            std::set<std::string> unreadable;
            for (const nlohmann::json& entry : listing["unreadable"]) {
                const std::string why = entry["error"];
                QVERIFY2(why.find("not an SQLite database") != std::string::npos, why.c_str());
                unreadable.insert(entry["path"]);
            }
            // The path's stray byte comes back as U+FFFD.
            QCOMPARE(unreadable, (std::set<std::string>{served.sessions.path().toStdString() + "/bad\xef\xbf\xbd.meshbench",
                                                        damaged}));

            const nlohmann::json opened = client.request({{"op", "open"}, {"session", damaged}});
            QCOMPARE(opened["ok"], false);
            QVERIFY2(opened["error"].get<std::string>().find("not an SQLite database") != std::string::npos,
                     opened.dump().c_str());
            QCOMPARE(client.request({{"op", "hello"}})["ok"], true);
        }
        QCOMPARE(served.process.state(), QProcess::Running);

        // The CLI lists the healthy one beside it, and prints JSON all the same (exit 1: one unreadable).
        const ProcessRun listed = runProcess(kEngine, {"sessions", served.sessions.path(), "--json"});
        QCOMPARE(listed.exitCode, 1);
        const nlohmann::json cli = nlohmann::json::parse(listed.out.toStdString());
        QCOMPARE(cli["sessions"].size(), 1u);
        QCOMPARE(cli["unreadable"].size(), 2u);
    }

    void pipelinedRequestsAreAllAnswered()
    {
        // Issue 11: 10,000 requests sent before reading any reply lost 199 at the ROUTER's
        // high-water mark (1,000 by default), silently.
        Served served;
        zmq::context_t context;
        zmq::socket_t client = sendHellos(context, served.control, 10000);
        expectHelloReplies(client, 10000);
    }

    void aClientThatDoesNotReadHoldsUpNobodyElse()
    {
        // Replies wait per client: one whose queue is full does not stall another's answers.
        Served served;
        zmq::context_t context;
        zmq::socket_t silent = sendHellos(context, served.control, 5000, 1);
        Client client(served.control, served.live);
        for (int i = 0; i < 20; ++i)
            QCOMPARE(client.request({{"op", "hello"}})["ok"], true);
        // And the silent one still gets every reply, in order, once it reads.
        expectHelloReplies(silent, 5000);
    }

    void aHugePlanIsAnsweredWithoutItsOpList()
    {
        // Issue 11: 65,537 micro-batches built a 121 MB reply and held the control loop for seconds.
        Served served;
        Client client(served.control, served.live);
        nlohmann::json job = demoJob();
        job["parallel"]["microbatches"] = 65537;
        const nlohmann::json reply = client.request({{"op", "plan"}, {"job", job}});
        QVERIFY2(reply["ok"] == true, reply.dump().substr(0, 2000).c_str());
        for (const nlohmann::json& stage : reply["plan"]["schedule"])
            QVERIFY(stage["ops"].empty());
        QVERIFY(reply["plan"]["warnings"].back().get<std::string>().find("parallel.microbatches") != std::string::npos);
        QVERIFY(reply.dump().size() < wire::kMaxControlBytes / 16);
        QCOMPARE(client.request({{"op", "hello"}})["ok"], true);
    }

    void localhostIsServedOnLoopback()
    {
        // Issue 11: localhost passed the loopback check and then failed with "No such device":
        // ZeroMQ binds addresses, not host names. Port * is any free port.
        const ProcessRun refused = runProcess(kEngine, {"serve", "--bind", "tcp://localhost:notaport"});
        QCOMPARE(refused.exitCode, 5);
        Served served("tcp://localhost:*");
        QByteArray said = served.process.readAllStandardOutput();
        const QRegularExpressionMatch endpoint =
            QRegularExpression("control (tcp://127\\.0\\.0\\.1:\\d+)").match(QString::fromUtf8(said));
        QVERIFY2(endpoint.hasMatch(), said.constData() + served.process.readAllStandardError());
        Client client(endpoint.captured(1).toStdString(), "inproc://unused");
        QCOMPARE(client.request({{"op", "hello"}})["ok"], true);
    }

    void submitWatchAndReplayToTheSameAggregates()
    {
        Served served;
        Client client(served.control, served.live);
        QTest::qWait(300);   // let the subscription reach the publisher
        const int steps = 4;
        nlohmann::json reply = client.request({{"op", "submit"}, {"job", demoJob()}, {"steps", steps}});
        QVERIFY2(reply["ok"] == true, reply.dump().c_str());
        const std::string job = reply["job"];
        const std::string session = reply["session"];

        std::map<int, nlohmann::json> liveSteps;
        int spanMessages = 0, memoryMessages = 0;
        std::string finalState;
        nlohmann::json lastStatus;
        QVERIFY(client.watch([&](const std::string& topic, const zmq::message_t& payload) -> bool {
            if (topic == "step/" + job) {
                const nlohmann::json s = nlohmann::json::parse(payload.to_string_view());
                liveSteps[s["step"].get<int>()] = s;
            } else if (topic == "spans/" + job) {
                const wire::DecodeResult decoded = wire::decodeBatch(
                    {static_cast<const std::uint8_t*>(payload.data()), payload.size()});
                spanMessages += decoded.batch ? 1 : -1000000;
            } else if (topic == "memory/" + job) {
                ++memoryMessages;
            } else if (topic == "job/" + job) {
                lastStatus = nlohmann::json::parse(payload.to_string_view());
                finalState = lastStatus["state"];
            }
            return finalState == "completed" || finalState == "failed";
        }));
        QVERIFY2(finalState == "completed", lastStatus.dump().c_str());
        QCOMPARE(int(liveSteps.size()), steps);
        QVERIFY(spanMessages > 0);
        QVERIFY(memoryMessages >= 8);
        const nlohmann::json jobs = client.request({{"op", "jobs"}})["jobs"];
        QCOMPARE(jobs.size(), 1u);
        QCOMPARE(jobs[0]["state"], "completed");
        QCOMPARE(jobs[0]["session"], session);
        const nlohmann::json sessions = client.request({{"op", "sessions"}})["sessions"];
        QCOMPARE(sessions.size(), 1u);
        QCOMPARE(sessions[0]["steps"], steps);

        // The replay goes through the same aggregates: the same figures, step by step.
        reply = client.request({{"op", "open"}, {"session", session}, {"speed", 1000}});
        QVERIFY2(reply["ok"] == true, reply.dump().c_str());
        const std::string replay = reply["replay"];
        std::map<int, nlohmann::json> replayed;
        std::string replayState;
        QVERIFY(client.watch([&](const std::string& topic, const zmq::message_t& payload) -> bool {
            if (topic == "step/" + replay) {
                const nlohmann::json s = nlohmann::json::parse(payload.to_string_view());
                replayed[s["step"].get<int>()] = s;
            } else if (topic == "job/" + replay) {
                replayState = nlohmann::json::parse(payload.to_string_view())["state"];
            }
            return replayState == "ended";
        }));
        QCOMPARE(int(replayed.size()), steps);
        auto sameStep = [](const nlohmann::json& a, const nlohmann::json& b) {
            QCOMPARE(a["partial"], b["partial"]);
            QCOMPARE(a["loss"], b["loss"]);
            QCOMPARE(a["aux_loss"], b["aux_loss"]);
            QCOMPARE(a["imbalance_p95"], b["imbalance_p95"]);
            QCOMPARE(a["dropped_fraction"], b["dropped_fraction"]);
            QVERIFY(std::abs(a["bubble"].get<double>() - b["bubble"].get<double>()) < 1e-12);
            QCOMPARE(a["expert_layers"], b["expert_layers"]);
        };
        for (int step = 1; step <= steps; ++step)
            sameStep(replayed[step], liveSteps[step]);

        // Seek back to step 3: the replay resumes there, with that step's figures.
        QCOMPARE(client.request({{"op", "seek"}, {"source", replay}, {"step", 3}})["ok"], true);
        std::optional<nlohmann::json> afterSeek;
        QVERIFY(client.watch([&](const std::string& topic, const zmq::message_t& payload) -> bool {
            if (topic == "step/" + replay)
                afterSeek = nlohmann::json::parse(payload.to_string_view());
            return afterSeek.has_value();
        }));
        QCOMPARE((*afterSeek)["step"], 3);
        sameStep(*afterSeek, liveSteps[3]);
        QCOMPARE(client.request({{"op", "close"}, {"source", replay}})["ok"], true);
    }

    void aSubmittedJobCanBeStopped()
    {
        Served served;
        Client client(served.control, served.live);
        nlohmann::json job = demoJob();
        job["train"]["steps"] = 5000;
        const nlohmann::json reply = client.request({{"op", "submit"}, {"job", job}, {"one_device", true}});
        QVERIFY2(reply["ok"] == true, reply.dump().c_str());
        const std::string source = reply["job"];
        QVERIFY(client.watch([&](const std::string& topic, const zmq::message_t& payload) -> bool {
            return topic == "step/" + source && nlohmann::json::parse(payload.to_string_view())["step"] == 2;
        }));
        QCOMPARE(client.request({{"op", "stop"}, {"source", source}})["ok"], true);
        std::string state;
        QVERIFY(client.watch([&](const std::string& topic, const zmq::message_t& payload) -> bool {
            if (topic == "job/" + source)
                state = nlohmann::json::parse(payload.to_string_view())["state"];
            return state == "stopped" || state == "failed" || state == "completed";
        }));
        QCOMPARE(state, std::string("stopped"));
    }

    void theReplayCommandRepublishesASession()
    {
        // A short session, then `meshbench-engine replay` on it, watched from outside.
        QTemporaryDir dir;
        const QString session = dir.filePath("short.meshbench");
        const ProcessRun run = runProcess(kEngine, {"run", kDemo, "--one-device", "--steps", "3", "--session", session});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        const std::string control = "ipc://" + dir.filePath("control").toStdString();
        const std::string live = "ipc://" + dir.filePath("live").toStdString();
        Client client(control, live);
        QProcess replay;
        replay.start(kEngine, {"replay", session, "--speed", "0.5", "--bind", QString::fromStdString(control), "--live",
                               QString::fromStdString(live)});
        std::set<int> steps;
        QVERIFY(client.watch([&](const std::string& topic, const zmq::message_t& payload) -> bool {
            if (topic.rfind("step/", 0) == 0)
                steps.insert(nlohmann::json::parse(payload.to_string_view())["step"].get<int>());
            return steps.size() == 3;
        }));
        QVERIFY(replay.waitForFinished(60000));
        QCOMPARE(replay.exitCode(), 0);
        QVERIFY(replay.readAllStandardOutput().contains("replay ended"));
        const ProcessRun broken = runProcess(kEngine, {"replay", dir.filePath("missing.meshbench")});
        QCOMPARE(broken.exitCode, 1);
        QVERIFY2(broken.err.contains("missing.meshbench"), qPrintable(broken.err));
    }

    void aDamagedSessionFailsItsReplayAsExportDoes()
    {
        // Issue 11: replay said "replay ended" and exited 0 on sessions export rejects, and a span
        // moved 58 h ahead made it sleep for minutes at --speed 1000.
        QTemporaryDir dir;
        const QString session = shortSession(dir.path(), "good.meshbench");
        const auto replay = [&](const QString& file) {
            return runProcess(kEngine, {"replay", file, "--speed", "1000", "--bind", "ipc://" + dir.filePath("c"),
                                        "--live", "ipc://" + dir.filePath("l")});
        };
        const ProcessRun good = replay(session);
        QCOMPARE(good.exitCode, 0);

        const QString ahead = damagedCopy(session, dir.filePath("ahead.meshbench"),
                                          "UPDATE spans SET begin_ns = begin_ns + 58 * 3600000000000, "
                                          "end_ns = end_ns + 58 * 3600000000000 WHERE seq = (SELECT MIN(seq) FROM spans)");
        const ProcessRun late = replay(ahead);
        QCOMPARE(late.exitCode, 1);
        QVERIFY2(late.err.contains(ahead + " is damaged") && late.err.contains("58.0 h after the session ended"),
                 qPrintable(late.err));
        const QString before = damagedCopy(session, dir.filePath("before.meshbench"),
                                           "UPDATE logs SET time_ns = -1 WHERE rowid = (SELECT MIN(rowid) FROM logs)");
        const ProcessRun early = replay(before);
        QCOMPARE(early.exitCode, 1);
        QVERIFY2(early.err.contains(before + " is damaged") && early.err.contains("before the session began"),
                 qPrintable(early.err));

        const QString badKind = damagedCopy(session, dir.filePath("bad-kind.meshbench"),
                                            "UPDATE spans SET kind = 77 WHERE seq = (SELECT MIN(seq) FROM spans)");
        const ProcessRun exported = runProcess(kEngine, {"export", badKind, "--csv", dir.filePath("csv")});
        QCOMPARE(exported.exitCode, 1);   // it was 5, where the README promises 1
        QVERIFY2(exported.err.contains(badKind), qPrintable(exported.err));
        const ProcessRun replayed = replay(badKind);
        QCOMPARE(replayed.exitCode, 1);
        QVERIFY2(replayed.err.contains(badKind) && !replayed.out.contains("replay ended"),
                 qPrintable(replayed.out + replayed.err));
    }
};

QTEST_GUILESS_MAIN(TestEngineServe)
#include "tst_engine_serve.moc"
