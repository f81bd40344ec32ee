// meshbench-engine serve and replay through their sockets, as the GUI uses them: the control
// protocol (good and bad requests), a job submitted, watched on the live feed and stopped, and a
// stored session replayed (and sought) to the same aggregates the live run published.

#include "plan/job_spec.h"
#include "wire/control.h"
#include "wire/telemetry.h"

#include "common/process_run.h"

#include <QtTest>

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
        QVERIFY(reply["error"].get<std::string>().find("not JSON") != std::string::npos);
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
        QCOMPARE(client.request({{"op", "jobs"}})["jobs"].size(), 0u);
        QCOMPARE(served.process.state(), QProcess::Running);
    }

    void aNonLoopbackBindIsRefused()
    {
        const ProcessRun run = runProcess(kEngine, {"serve", "--bind", "tcp://0.0.0.0:5599"});
        QCOMPARE(run.exitCode, 5);
        QVERIFY2(run.err.contains("no authentication") && run.err.contains("127.0.0.1"), qPrintable(run.err));
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
                finalState = nlohmann::json::parse(payload.to_string_view())["state"];
            }
            return finalState == "completed" || finalState == "failed";
        }));
        QCOMPARE(finalState, std::string("completed"));
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
};

QTEST_GUILESS_MAIN(TestEngineServe)
#include "tst_engine_serve.moc"
