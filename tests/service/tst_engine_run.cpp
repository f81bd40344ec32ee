// meshbench-engine run, end to end on this machine's CPU: the demo job under mpirun streams into
// a session that holds every rank's spans, every MoE layer's expert loads, every rank's memory and
// every step's metrics with no record lost, and whose CSV losses are the ones the agent printed.
// Then the faults. The kill matrix: a rank ended by SIGKILL, SIGTERM, SIGSEGV or SIGSTOP or by an
// early exit 0, and mpirun killed, each with the culprit and cause the engine must find from what it
// could know (the ranks' last heartbeats, mpirun's report, how mpirun itself ended), every agent
// gone after it and the session sound. And the engine's own: killed with SIGKILL, Ctrl-C, a rank
// that fails with its own error, bad input on the collector socket and on the command line.

#include "plan/job_spec.h"
#include "store/session_store.h"

#include "common/process_run.h"
#include "common/session_checks.h"

#include <QtTest>

#include <sys/stat.h>

#include <sqlite3.h>
#include <zmq.hpp>

#include <csignal>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <sys/resource.h>
#include <unistd.h>

using namespace meshbench;
using meshbench::testing::storedSteps;
using meshbench::testing::waitForSteps;

namespace {

const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
const QString kDemo = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");

std::string readFile(const QString& path)
{
    std::ifstream in(path.toStdString(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// Every agent process the session heard of: rank -> pid, from the heartbeats.
std::map<std::uint32_t, int> agentPids(const QString& session)
{
    std::map<std::uint32_t, int> pids;
    for (const auto& h : store::SessionReader(session.toStdString()).heartbeats())
        pids[h.rank] = h.record.pid;
    return pids;
}

bool alive(int pid)
{
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!std::getline(stat, text))
        return false;
    const std::size_t close = text.rfind(')');
    return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

// Waits up to `timeoutMs` for every pid to be gone; returns the survivors.
std::vector<int> survivors(const std::map<std::uint32_t, int>& pids, int timeoutMs)
{
    QElapsedTimer timer;
    timer.start();
    std::vector<int> left;
    do {
        left.clear();
        for (const auto& [rank, pid] : pids)
            if (alive(pid))
                left.push_back(pid);
        if (left.empty())
            break;
        QThread::msleep(100);
    } while (timer.elapsed() < timeoutMs);
    return left;
}

std::string integrityCheck(const QString& path) { return testing::integrityCheck(path.toStdString()); }

// The demo job, made long enough to be interrupted.
QString longDemo(const QString& dir, int steps)
{
    nlohmann::json doc = nlohmann::json::parse(readFile(kDemo));
    doc["train"]["steps"] = steps;
    doc["train"]["decay_steps"] = steps;
    QString path = dir + "/long-demo.json";
    std::ofstream(path.toStdString()) << doc.dump();
    return path;
}

// The engine running the long demo into `session`, once `steps` steps are stored; with the pids
// of its agents.
struct RunningDemo {
    QProcess engine;
    std::map<std::uint32_t, int> pids;

    bool start(const QTemporaryDir& dir, const QString& session, int steps, const QStringList& options = {})
    {
        engine.start(kEngine, QStringList{"run", longDemo(dir.path(), 2000), "--session", session} + options);
        if (!waitForSteps(session, steps))
            return false;
        pids = agentPids(session);
        return true;
    }
};

// Rows of a CSV file written by export (RFC 4180: quoted fields may hold commas, quotes, newlines).
std::vector<std::vector<std::string>> readCsv(const QString& path)
{
    const std::string text = readFile(path);
    std::vector<std::vector<std::string>> rows(1);
    std::string field;
    bool quoted = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quoted) {
            if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
                field += text[++i];
            else if (c == '"')
                quoted = false;
            else
                field += c;
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            rows.back().push_back(std::move(field));
            field.clear();
        } else if (c == '\n' || c == '\r') {
            if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')
                ++i;
            rows.back().push_back(std::move(field));
            field.clear();
            rows.emplace_back();
        } else {
            field += c;
        }
    }
    if (rows.back().empty())
        rows.pop_back();
    return rows;
}

std::size_t column(const std::vector<std::string>& header, const std::string& name)
{
    for (std::size_t i = 0; i < header.size(); ++i)
        if (header[i] == name)
            return i;
    qFatal("no column %s", name.c_str());
}

// The parent of a process, from /proc/PID/stat (the name in parentheses may hold spaces).
int parentOf(int pid)
{
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    std::getline(stat, text);
    const std::size_t close = text.rfind(')');
    if (close == std::string::npos)
        return -1;
    std::istringstream fields(text.substr(close + 1));
    char state = 0;
    int parent = -1;
    fields >> state >> parent;
    return parent;
}

struct Ended {
    int exitCode = -1;
    store::SessionOutcome outcome;
    QString said;  // the engine's output
};

// Waits for the engine to end on its own; what it said and stored.
Ended waitForTheEnd(RunningDemo& demo, const QString& session)
{
    Ended ended;
    if (!demo.engine.waitForFinished(120000))
        qFatal("the engine did not end");
    ended.exitCode = demo.engine.exitCode();
    ended.said = QString::fromUtf8(demo.engine.readAll());
    ended.outcome = store::SessionReader(session.toStdString()).outcome();
    return ended;
}

// A job spec beside `dir`'s executable script bin/rank.sh (`script` its body): the demo's model and
// layout (8 ranks), `patch` merged into it, run by the script in meshbench-agent's place; returns the
// spec's path.
QString launchJob(const QString& dir, const std::string& script, const nlohmann::json& launch,
                  const nlohmann::json& patch = nlohmann::json::object())
{
    QDir(dir).mkpath("bin");
    const QString program = dir + "/bin/rank.sh";
    std::ofstream(program.toStdString()) << "#!/bin/sh\n" << script;
    QFile::setPermissions(program, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    nlohmann::json doc = nlohmann::json::parse(readFile(kDemo));
    doc.merge_patch(patch);
    doc["launch"] = launch;
    const QString job = dir + "/launch.json";
    std::ofstream(job.toStdString()) << doc.dump();
    return job;
}

}  // namespace

class TestEngineRun : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        // A rank ended by SIGSEGV would leave a core file behind.
        const rlimit noCores{0, 0};
        setrlimit(RLIMIT_CORE, &noCores);
    }

    void aRankEndsEarly_data()
    {
        QTest::addColumn<int>("signal");    // sent to rank 3; 0: the agent's test hook ends it
        QTest::addColumn<QString>("hook");  // MESHBENCH_TEST_END_AFTER_STEP's value
        QTest::addColumn<QStringList>("cause");
        QTest::newRow("SIGKILL") << int(SIGKILL) << QString() << QStringList{"rank 3 (", "killed by signal 9 (Killed)"};
        // It says so itself, and mpirun names it as the first to exit (status 143 = 128 + 15).
        QTest::newRow("SIGTERM") << int(SIGTERM) << QString()
                                 << QStringList{"rank 3 (",
                                                "was terminated by signal 15 (Terminated), which the engine "
                                                "did not send"};
        QTest::newRow("SIGSEGV") << int(SIGSEGV) << QString()
                                 << QStringList{"rank 3 (", "killed by signal 11 (Segmentation fault)"};
        // Issue 11: this was described as a kill. mpirun reports an exit without MPI_Finalize.
        QTest::newRow("exit 0") << 0 << "3:2:exit0"
                                << QStringList{"rank 3 (", "exited with status 0 before the job ended",
                                               "its last heartbeat said step"};
        // A rank that is done early says so; its peers would otherwise wait for it for ever.
        QTest::newRow("finished early") << 0 << "3:2:finish"
                                        << QStringList{"rank 3 (",
                                                       "finished after step 2 of 2000 while the others went on"};
    }

    void aRankEndsEarly()
    {
        QFETCH(int, signal);
        QFETCH(QString, hook);
        QFETCH(QStringList, cause);
        QTemporaryDir dir;
        const QString session = dir.filePath("rank-ends.meshbench");
        RunningDemo demo;
        demo.engine.setProcessChannelMode(QProcess::MergedChannels);
        if (!hook.isEmpty()) {
            QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
            env.insert("MESHBENCH_TEST_END_AFTER_STEP", hook);
            demo.engine.setProcessEnvironment(env);
        }
        QVERIFY(demo.start(dir, session, 1));
        QCOMPARE(int(demo.pids.size()), 8);
        const int stepsBefore = storedSteps(session);
        if (signal != 0)
            ::kill(demo.pids.at(3), signal);
        const Ended ended = waitForTheEnd(demo, session);
        QCOMPARE(ended.exitCode, 3);
        QCOMPARE(ended.outcome.outcome, store::Outcome::Failed);
        QVERIFY2(ended.outcome.failedRank == 3, ended.outcome.cause.c_str());
        for (const QString& words : cause)
            QVERIFY2(QString::fromStdString(ended.outcome.cause).contains(words), ended.outcome.cause.c_str());
        // The engine said it too, naming the rank as it stored it.
        QVERIFY2(ended.said.contains(QString::fromStdString(ended.outcome.cause)), qPrintable(ended.said));
        QCOMPARE(survivors(demo.pids, 10000), std::vector<int>{});
        QCOMPARE(integrityCheck(session), std::string("ok"));
        // Nothing stored before is lost.
        QVERIFY(storedSteps(session) >= stepsBefore);
    }

    void aKilledOneDeviceAgentIsRankZero()
    {
        // Without mpirun the agent is both the launcher and rank 0: a kill is rank 0's.
        QTemporaryDir dir;
        const QString session = dir.filePath("one-device-killed.meshbench");
        RunningDemo demo;
        QVERIFY(demo.start(dir, session, 1, {"--one-device"}));
        QCOMPARE(int(demo.pids.size()), 1);
        ::kill(demo.pids.at(0), SIGKILL);
        const Ended ended = waitForTheEnd(demo, session);
        QCOMPARE(ended.exitCode, 3);
        QCOMPARE(ended.outcome.outcome, store::Outcome::Failed);
        QVERIFY2(ended.outcome.failedRank == 0, ended.outcome.cause.c_str());
        QVERIFY2(QString::fromStdString(ended.outcome.cause).contains("rank 0 (") &&
                     QString::fromStdString(ended.outcome.cause).contains("killed by signal 9 (Killed)"),
                 ended.outcome.cause.c_str());
        QCOMPARE(integrityCheck(session), std::string("ok"));
    }

    void aStoppedRankIsFoundByItsSilence()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("stopped-rank.meshbench");
        RunningDemo demo;
        QVERIFY(demo.start(dir, session, 2));
        ::kill(demo.pids.at(5), SIGSTOP);  // alive but silent: no exit for mpirun to notice
        const Ended ended = waitForTheEnd(demo, session);
        QCOMPARE(ended.exitCode, 3);
        QCOMPARE(survivors(demo.pids, 10000), std::vector<int>{});
        QCOMPARE(ended.outcome.outcome, store::Outcome::Failed);
        QCOMPARE(ended.outcome.failedRank, 5);
        const QString cause = QString::fromStdString(ended.outcome.cause);
        // Noticed once the rank had been silent for the 5 s heartbeat timeout, by the engine's clock;
        // and this host could see why.
        const QRegularExpressionMatch silence = QRegularExpression("sent no heartbeat for ([0-9.]+) s").match(cause);
        QVERIFY2(silence.hasMatch(), qPrintable(cause));
        QVERIFY2(silence.captured(1).toDouble() >= 5.0, qPrintable(cause));
        QVERIFY2(cause.contains("its process is stopped (SIGSTOP"), qPrintable(cause));
    }

    void aKilledMpirunIsTheCulprit()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("killed-mpirun.meshbench");
        RunningDemo demo;
        QVERIFY(demo.start(dir, session, 2));
        const int mpirun = parentOf(demo.pids.at(0));
        QVERIFY(mpirun > 0 && mpirun != int(demo.engine.processId()));
        ::kill(mpirun, SIGKILL);
        const Ended ended = waitForTheEnd(demo, session);
        QCOMPARE(ended.exitCode, 3);
        QCOMPARE(ended.outcome.outcome, store::Outcome::Failed);
        // Issue 11: this was blamed on rank 0 ("killed, e.g. SIGKILL or out of memory").
        QVERIFY2(ended.outcome.failedRank == -1, ended.outcome.cause.c_str());
        QVERIFY2(QString::fromStdString(ended.outcome.cause)
                     .contains("mpirun was killed by signal 9 (Killed), which the engine did not send"),
                 ended.outcome.cause.c_str());
        // The ranks it left behind were found and stopped.
        QCOMPARE(survivors(demo.pids, 10000), std::vector<int>{});
        QCOMPARE(integrityCheck(session), std::string("ok"));
    }

    void demoRunsIntoACompleteSession()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("demo.meshbench");
        const int steps = 6;
        const ProcessRun run =
            runProcess(kEngine, {"run", kDemo, "--steps", QString::number(steps), "--session", session});
        QVERIFY2(run.exitCode == 0, qPrintable(run.out + run.err));
        QVERIFY2(run.out.contains("completed"), qPrintable(run.out));
        QVERIFY2(run.out.contains("session " + session), qPrintable(run.out));
        QVERIFY2(run.out.contains(", 0 lost"), qPrintable(run.out));

        const plan::JobSpec spec = *plan::parseJobSpec(readFile(kDemo)).spec;
        const int world = int(spec.parallel.worldSize());
        const int microbatches = spec.parallel.microbatches;  // per data-parallel replica
        store::SessionReader reader(session.toStdString());
        QCOMPARE(reader.outcome().outcome, store::Outcome::Completed);
        QCOMPARE(int(reader.header().ranks.size()), world);
        QCOMPARE(reader.header().jobSpec, readFile(kDemo));  // verbatim

        // Spans: every rank runs every micro-batch's F and B, and the optimizer, every step.
        std::map<std::pair<std::uint32_t, int>, std::map<wire::SpanKind, int>> kinds;
        reader.spans(reader.timeRange().first, reader.timeRange().second, {}, [&](const store::StoredSpan& s) {
            ++kinds[{s.rank, s.span.step}][s.span.kind];
        });
        for (int r = 0; r < world; ++r)
            for (int step = 1; step <= steps; ++step) {
                auto& k = kinds[{std::uint32_t(r), step}];
                QCOMPARE(k[wire::SpanKind::Forward], microbatches);
                QCOMPARE(k[wire::SpanKind::Backward], microbatches);
                QCOMPARE(k[wire::SpanKind::Optimizer], 1);
            }
        // Expert loads: every MoE layer, every step, each expert's routed tokens adding up to
        // top_k x the step's tokens.
        std::set<std::pair<int, int>> loads;
        for (const auto& l : reader.expertLoads()) {
            QVERIFY(spec.model.isMoeLayer(l.record.layer));
            QCOMPARE(int(l.record.routed.size()), spec.model.moe.experts);
            std::uint64_t routed = 0;
            for (std::uint32_t n : l.record.routed)
                routed += n;
            QCOMPARE(std::int64_t(routed), spec.model.moe.topK * spec.parallel.globalBatch() * spec.model.seqLen);
            loads.insert({l.record.step, l.record.layer});
        }
        for (int step = 1; step <= steps; ++step)
            for (int layer = 0; layer < spec.model.layers; ++layer)
                QCOMPARE(loads.count({step, layer}), std::size_t(spec.model.isMoeLayer(layer)));
        // Memory: every rank, every category, every step.
        std::set<std::tuple<std::uint32_t, int, int>> memory;
        for (const auto& m : reader.memorySamples())
            memory.insert({m.rank, m.record.step, int(m.record.category)});
        QCOMPARE(int(memory.size()), world * steps * wire::kMemoryCategories);
        // Step metrics: every step once; sequence numbers: nothing lost, nothing dropped.
        const auto metrics = reader.stepMetrics();
        QCOMPARE(int(metrics.size()), steps);
        for (int i = 0; i < steps; ++i)
            QCOMPARE(metrics[std::size_t(i)].record.step, i + 1);
        const auto traffic = reader.traffic();
        QCOMPARE(int(traffic.size()), world);
        for (const store::RankTraffic& t : traffic) {
            QVERIFY(t.received > 0);
            QCOMPARE(t.lost, 0u);
            QCOMPARE(t.dropped, 0u);
        }

        // Listed among the folder's sessions, with its outcome, steps and final loss.
        const ProcessRun listed = runProcess(kEngine, {"sessions", dir.path(), "--json"});
        QVERIFY2(listed.exitCode == 0, qPrintable(listed.err));
        const nlohmann::json sessions = nlohmann::json::parse(listed.out.toStdString())["sessions"];
        QCOMPARE(sessions.size(), 1u);
        QCOMPARE(sessions[0]["path"].get<std::string>(), session.toStdString());
        QCOMPARE(sessions[0]["outcome"], "completed");
        QCOMPARE(sessions[0]["steps"], steps);
        QCOMPARE(sessions[0]["final_loss"].get<double>(), metrics.back().record.loss);

        // CSV losses are the losses the agent printed (its output is in the session's log).
        const ProcessRun exported = runProcess(kEngine, {"export", session, "--csv", dir.filePath("csv")});
        QVERIFY2(exported.exitCode == 0, qPrintable(exported.err));
        const auto stepsCsv = readCsv(dir.filePath("csv/steps.csv"));
        QCOMPARE(std::vector<std::string>(stepsCsv[0].begin(), stepsCsv[0].begin() + 5),
                 (std::vector<std::string>{"step", "loss", "aux_loss", "tokens_per_s", "bubble_ratio"}));
        std::map<int, std::string> printed;
        const std::regex stepLine(R"(^step\s+(\d+)\s+loss (\S+))");
        const auto logs = readCsv(dir.filePath("csv/logs.csv"));
        const std::size_t text = column(logs[0], "text");
        for (std::size_t i = 1; i < logs.size(); ++i) {
            std::smatch m;
            if (std::regex_search(logs[i][text], m, stepLine))
                printed[std::stoi(m[1])] = m[2];
        }
        QCOMPARE(int(printed.size()), steps);
        QCOMPARE(int(stepsCsv.size()) - 1, steps);
        for (std::size_t i = 1; i < stepsCsv.size(); ++i) {
            char loss[32];
            std::snprintf(loss, sizeof loss, "%.6f", std::stod(stepsCsv[i][1]));
            QCOMPARE(std::string(loss), printed[std::stoi(stepsCsv[i][0])]);
        }
    }

    void anInvalidLayoutIsRefusedBeforeLaunch()
    {
        QTemporaryDir dir;
        nlohmann::json doc = nlohmann::json::parse(readFile(kDemo));
        doc["parallel"]["dp"] = 3;
        const QString job = dir.filePath("bad.json");
        std::ofstream(job.toStdString()) << doc.dump();
        const QString session = dir.filePath("bad.meshbench");
        const ProcessRun run = runProcess(kEngine, {"run", job, "--session", session});
        QCOMPARE(run.exitCode, 1);
        QVERIFY2(run.err.contains("parallel"), qPrintable(run.err));
        QVERIFY(!QFile::exists(session));
    }

    void mpirunAsRootGetsAHintToFixIt()
    {
        if (geteuid() != 0)
            QSKIP("only root meets Open MPI's refusal");
        QTemporaryDir dir;
        const QString session = dir.filePath("root.meshbench");
        QProcess process;
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.remove("OMPI_ALLOW_RUN_AS_ROOT");
        env.remove("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
        process.setProcessEnvironment(env);
        process.start(kEngine, {"run", kDemo, "--steps", "1", "--session", session});
        QVERIFY(process.waitForFinished(120000));
        const QString out = QString::fromUtf8(process.readAllStandardOutput());
        QCOMPARE(process.exitCode(), 3);
        QVERIFY2(out.contains("Open MPI refuses to run as root") && out.contains("--one-device"), qPrintable(out));
        store::SessionReader reader(session.toStdString());
        const QString cause = QString::fromStdString(reader.outcome().cause);
        QVERIFY2(cause.contains("--allow-run-as-root") && cause.contains("Run > Allow Open MPI as Root"),
                 qPrintable(cause));

        // The fix it names: the same run with --allow-run-as-root, still without the variables.
        const QString allowed = dir.filePath("root-allowed.meshbench");
        process.start(kEngine, {"run", kDemo, "--steps", "1", "--session", allowed, "--allow-run-as-root"});
        QVERIFY(process.waitForFinished(120000));
        const QString again = QString::fromUtf8(process.readAllStandardOutput());
        QVERIFY2(process.exitCode() == 0, qPrintable(again + process.readAllStandardError()));
        QCOMPARE(store::SessionReader(allowed.toStdString()).outcome().outcome, store::Outcome::Completed);
    }

    void aFailingRankIsNamedWithItsError()
    {
        QTemporaryDir dir;
        nlohmann::json doc = nlohmann::json::parse(readFile(kDemo));
        // A valid spec whose token file is not there: only the ranks can see that, and each refuses it.
        doc["train"]["data"] = {{"source", "file"}, {"path", "missing-tokens.bin"}, {"dtype", "uint16"}};
        const QString job = dir.filePath("missing-tokens.json");
        std::ofstream(job.toStdString()) << doc.dump();
        const QString session = dir.filePath("missing-tokens.meshbench");
        const ProcessRun run = runProcess(kEngine, {"run", job, "--session", session});
        QCOMPARE(run.exitCode, 3);
        QVERIFY2(run.out.contains("failed: rank "), qPrintable(run.out));
        QVERIFY2(run.out.contains("missing-tokens.bin"), qPrintable(run.out));
        store::SessionReader reader(session.toStdString());
        const store::SessionOutcome outcome = reader.outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Failed);
        QVERIFY(outcome.failedRank >= 0 && outcome.failedRank < 8);
        QVERIFY2(QString::fromStdString(outcome.cause).contains("failed (exit status 1): data: cannot open token file"),
                 outcome.cause.c_str());
    }

    void aBadDataSettingIsRefusedBeforeLaunch()
    {
        // Issue 11: each of these planned as valid, and run launched agents that then failed.
        QTemporaryDir dir;
        const std::vector<std::pair<nlohmann::json, QString>> cases = {
            {{{"source", "zb-h2"}}, "train.data.source"},
            {{{"branching", nlohmann::json::parse("-9223372036854775809")}}, "train.data.branching"},
            {{{"order", 0}}, "train.data.order"},
        };
        for (const auto& [data, path] : cases) {
            nlohmann::json doc = nlohmann::json::parse(readFile(kDemo));
            doc["train"]["data"] = data;
            const QString job = dir.filePath("bad-data.json");
            std::ofstream(job.toStdString()) << doc.dump();
            const QString session = dir.filePath("bad-data.meshbench");
            const ProcessRun run = runProcess(kEngine, {"run", job, "--session", session});
            QCOMPARE(run.exitCode, 1);
            QVERIFY2(run.err.contains(path + ": "), qPrintable(run.err));
            QVERIFY(!QFile::exists(session));
            const ProcessRun plan = runProcess(kEngine, {"plan", job, "--json"});
            QCOMPARE(plan.exitCode, 1);
            const nlohmann::json reply = nlohmann::json::parse(plan.out.toStdString());
            QCOMPARE(reply["errors"][0]["path"].get<std::string>(), path.toStdString());
        }
    }

    // Issue 27, finding 10: a token file that is a FIFO fails the run with the reason; opening it
    // waited for a writer for ever, the heartbeat saying "running" at step 0.
    void aTokenFifoFailsTheRun()
    {
        QTemporaryDir dir;
        const QString fifo = dir.filePath("tokens.fifo");
        QCOMPARE(::mkfifo(fifo.toUtf8().constData(), 0600), 0);
        nlohmann::json doc = nlohmann::json::parse(readFile(kDemo));
        doc["train"]["data"] = {{"source", "file"}, {"path", fifo.toStdString()}, {"dtype", "uint16"}};
        const QString job = dir.filePath("fifo.json");
        std::ofstream(job.toStdString()) << doc.dump();
        const ProcessRun run =
            runProcess(kEngine, {"run", job, "--one-device", "--steps", "1", "--session", dir.filePath("f.meshbench")});
        QVERIFY2(run.exitCode != 0 && run.err.contains("tokens.fifo") && run.err.contains("it is not a regular file"),
                 qPrintable(run.err));
    }

    // Issue 27: the readers of a finished session (sessions, export, replay) leave nothing beside it;
    // each left an empty -wal and a 32 KiB -shm, as a WAL reader does.
    void readersLeaveNoFilesBesideAFinishedSession()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("done.meshbench");
        const ProcessRun run =
            runProcess(kEngine, {"run", kDemo, "--one-device", "--steps", "2", "--session", session});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        const QStringList beside = {session + "-wal", session + "-shm"};
        for (const QString& file : beside)
            QVERIFY2(!QFileInfo::exists(file), qPrintable(file));
        const std::vector<QStringList> readers = {
            {"sessions", dir.path()},
            {"export", session, "--csv", dir.filePath("csv"), "--chrome-trace", dir.filePath("trace.json")},
            {"replay", session, "--speed", "1000000", "--bind", "ipc://" + dir.filePath("c"), "--live",
             "ipc://" + dir.filePath("l")}};
        for (const QStringList& reader : readers) {
            const ProcessRun read = runProcess(kEngine, reader);
            QVERIFY2(read.exitCode == 0, qPrintable(reader.join(' ') + ": " + read.err));
            for (const QString& file : beside)
                QVERIFY2(!QFileInfo::exists(file), qPrintable(reader.front() + " left " + file));
        }
    }

    void aKilledEngineLeavesASoundSession()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("kill-engine.meshbench");
        RunningDemo demo;
        QVERIFY(demo.start(dir, session, 3));
        ::kill(pid_t(demo.engine.processId()), SIGKILL);
        QVERIFY(demo.engine.waitForFinished(10000));
        // The job goes with its engine.
        QCOMPARE(survivors(demo.pids, 10000), std::vector<int>{});

        QCOMPARE(integrityCheck(session), std::string("ok"));
        store::SessionReader reader(session.toStdString());
        QCOMPARE(reader.outcome().outcome, store::Outcome::Running);  // nobody lived to say otherwise
        QVERIFY(reader.stepMetrics().size() >= 3);
        QVERIFY(reader.spanCount() > 0);
    }

    void ctrlCStopsTheJobAndMarksTheSessionStopped()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("stopped.meshbench");
        RunningDemo demo;
        QVERIFY(demo.start(dir, session, 2));
        ::kill(pid_t(demo.engine.processId()), SIGINT);
        QVERIFY(demo.engine.waitForFinished(30000));
        QCOMPARE(demo.engine.exitCode(), 4);
        QCOMPARE(survivors(demo.pids, 10000), std::vector<int>{});
        store::SessionReader reader(session.toStdString());
        QCOMPARE(reader.outcome().outcome, store::Outcome::Stopped);
        // Every rank said it was terminated, and nothing it sent was lost.
        std::map<std::uint32_t, wire::RankState> last;
        for (const auto& h : reader.heartbeats())
            last[h.rank] = h.record.state;
        QCOMPARE(int(last.size()), 8);
        for (const auto& [rank, state] : last)
            QCOMPARE(state, wire::RankState::Terminated);
        QCOMPARE(reader.traffic().size(), std::size_t(8));
        for (const store::RankTraffic& t : reader.traffic())
            QCOMPARE(t.lost, 0u);
    }

    void badFramesAndStrangersAreLoggedAndNothingIsLost()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("bad-frames.meshbench");
        QProcess engine;
        engine.start(kEngine, {"run", longDemo(dir.path(), 40), "--one-device", "--session", session});
        QVERIFY(engine.waitForReadyRead(30000));
        QString said = QString::fromUtf8(engine.readAllStandardOutput());
        const QRegularExpressionMatch collector = QRegularExpression("collector (tcp://\\S+),").match(said);
        QVERIFY2(collector.hasMatch(), qPrintable(said));

        // A second engine may not write the same session.
        const ProcessRun second = runProcess(kEngine, {"run", kDemo, "--one-device", "--session", session});
        QCOMPARE(second.exitCode, 5);
        QVERIFY2(second.err.contains(session) && second.err.contains("another engine is writing it"),
                 qPrintable(second.err));

        zmq::context_t context;
        zmq::socket_t push(context, zmq::socket_type::push);
        push.connect(collector.captured(1).toStdString());
        const std::string garbage = "this is not a telemetry frame";
        push.send(zmq::buffer(garbage));
        wire::Batch stranger{99, 0, {wire::LogRecord{1, wire::LogLevel::Info, "hello"}}};
        const std::vector<std::uint8_t> strangerFrame = wire::encodeBatch(stranger);
        push.send(zmq::buffer(strangerFrame));
        std::vector<std::uint8_t> truncated = strangerFrame;
        truncated.resize(truncated.size() - 3);
        push.send(zmq::buffer(truncated));
        std::vector<std::uint8_t> oversized(wire::kMaxBatchBytes + 1, 0);
        std::copy(strangerFrame.begin(), strangerFrame.begin() + wire::kBatchHeaderBytes, oversized.begin());
        push.send(zmq::buffer(oversized));

        QVERIFY(engine.waitForFinished(120000));
        said += QString::fromUtf8(engine.readAllStandardOutput());
        const QString err = QString::fromUtf8(engine.readAllStandardError());
        QVERIFY2(engine.exitCode() == 0, qPrintable(said + err));
        QVERIFY2(err.contains("malformed telemetry frame of " + QString::number(garbage.size()) + " bytes"),
                 qPrintable(err));
        QVERIFY2(err.contains("rank 99, which is not in this job"), qPrintable(err));
        QVERIFY2(err.contains("malformed telemetry frame of " + QString::number(truncated.size()) + " bytes"),
                 qPrintable(err));
        QVERIFY2(err.contains("malformed telemetry frame of " + QString::number(oversized.size()) + " bytes"),
                 qPrintable(err));
        QVERIFY2(said.contains("4 frames rejected"), qPrintable(said));

        store::SessionReader reader(session.toStdString());
        QCOMPARE(reader.outcome().outcome, store::Outcome::Completed);
        QCOMPARE(int(reader.stepMetrics().size()), 40);
        QCOMPARE(reader.traffic().front().lost, 0u);
        int problems = 0;
        for (const auto& log : reader.logs())
            problems += log.rank == store::kEngineRank && log.record.level == wire::LogLevel::Warning &&
                        QString::fromStdString(log.record.text).startsWith("collector: ");
        QCOMPARE(problems, 4);
    }

    // Issue 27, findings 1 and 8: the schedules that need two stages run on one device as the
    // one-stage schedule (they crashed in makePlan, or were refused for pp 1).
    void everyScheduleRunsOnOneDevice_data()
    {
        QTest::addColumn<QString>("schedule");
        QTest::addColumn<int>("virtualStages");
        QTest::newRow("interleaved") << "interleaved" << 2;
        QTest::newRow("zb-v") << "zb-v" << 2;
        QTest::newRow("dualpipev") << "dualpipev" << 2;
    }

    void everyScheduleRunsOnOneDevice()
    {
        QFETCH(QString, schedule);
        QFETCH(int, virtualStages);
        QTemporaryDir dir;
        nlohmann::json doc = nlohmann::json::parse(readFile(kDemo));
        doc["parallel"]["schedule"] = schedule.toStdString();
        doc["parallel"]["virtual_stages"] = virtualStages;
        const QString spec = dir.filePath("schedule.json");
        std::ofstream(spec.toStdString()) << doc.dump();
        const QString session = dir.filePath("one.meshbench");
        const ProcessRun run = runProcess(kEngine, {"run", spec, "--one-device", "--steps", "2", "--session", session});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        QCOMPARE(integrityCheck(session), std::string("ok"));
    }

    // Issue 29, item 4: a launch command runs under mpirun in the agent's place, and every rank finds
    // in its environment where to report, the run's keys, the job, the world size and the command's
    // own variables, starting in its cwd (relative to the spec's folder, as a relative program is).
    // What only meshbench-agent cannot run (tp_comm_overlap) does not hold the job back.
    void aLaunchCommandRunsInEveryRankWithWhereToReport()
    {
        QTemporaryDir dir;
        QDir(dir.path()).mkpath("work");
        const std::string script = R"sh(rank=${OMPI_COMM_WORLD_RANK:-$SLURM_PROCID}
{
  echo "collector=$MESHBENCH_COLLECTOR"
  echo "clock=$MESHBENCH_CLOCK"
  echo "keys=$MESHBENCH_TELEMETRY_KEYS"
  echo "job=$MESHBENCH_JOB"
  echo "world=$MESHBENCH_WORLD_SIZE"
  echo "greeting=$GREETING"
  echo "cwd=$(pwd -P)"
  printf 'args=%s|%s\n' "$1" "$2"
} > "$OUT_DIR/rank-$rank.txt"
)sh";
        const QString out = dir.filePath("out");
        QDir().mkpath(out);
        const QString job = launchJob(dir.path(), script,
                                      {{"command", {"./bin/rank.sh", "a b", "c"}},
                                       {"cwd", "work"},
                                       {"env", {{"GREETING", "hello world"}, {"OUT_DIR", out.toStdString()}}}},
                                      {{"parallel", {{"tp_comm_overlap", true}}}});
        const QString session = dir.filePath("launch.meshbench");
        // A collector off loopback: the run's CURVE keys go to the ranks too.
        const ProcessRun run =
            runProcess(kEngine, {"run", job, "--session", session, "--collector", "tcp://0.0.0.0:*"});
        QVERIFY2(run.exitCode == 0, qPrintable(run.out + run.err));
        const QRegularExpressionMatch collector = QRegularExpression("collector (\\S+),").match(run.out);
        QVERIFY2(collector.hasMatch(), qPrintable(run.out));

        const QString folder = QFileInfo(dir.path()).canonicalFilePath();
        for (int rank = 0; rank < 8; ++rank) {
            QFile file(out + QString("/rank-%1.txt").arg(rank));
            QVERIFY2(file.open(QIODevice::ReadOnly), qPrintable(file.fileName() + " was not written"));
            std::map<QString, QString> seen;
            for (const QString& line : QString::fromUtf8(file.readAll()).split('\n', Qt::SkipEmptyParts))
                seen[line.section('=', 0, 0)] = line.section('=', 1);
            QCOMPARE(seen["collector"], collector.captured(1));
            QVERIFY2(seen["clock"].startsWith("tcp://") && seen["clock"] != seen["collector"],
                     qPrintable(seen["clock"]));
            QCOMPARE(seen["keys"].split(' ').size(), 3);
            QCOMPARE(seen["job"], QFileInfo(job).absoluteFilePath());
            QCOMPARE(seen["world"], QString("8"));
            QCOMPARE(seen["greeting"], QString("hello world"));
            QCOMPARE(seen["cwd"], folder + "/work");
            QCOMPARE(seen["args"], QString("a b|c"));
        }
        store::SessionReader reader(session.toStdString());
        QCOMPARE(reader.outcome().outcome, store::Outcome::Completed);
        QVERIFY(integrityCheck(session) == "ok");
    }

    // One rank of a launch command exits with status 7 before reporting anything: the run fails naming
    // that rank (the launch wrapper's line says it, as Open MPI 4 names no rank of a program that never
    // called MPI_Init) and the others, which would sleep for an hour, are taken down at once (a run
    // that waited for them would outlast the test's time limit).
    void aFailingLaunchCommandFailsTheRun()
    {
        QTemporaryDir dir;
        const QString job = launchJob(dir.path(), "[ \"$OMPI_COMM_WORLD_RANK\" = 5 ] && exit 7\nexec sleep 3600\n",
                                      {{"command", nlohmann::json::array({"bin/rank.sh"})}});
        const QString session = dir.filePath("failing.meshbench");
        const ProcessRun run = runProcess(kEngine, {"run", job, "--session", session});
        QCOMPARE(run.exitCode, 3);
        const store::SessionOutcome outcome = store::SessionReader(session.toStdString()).outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Failed);
        QCOMPARE(outcome.failedRank, 5);
        QVERIFY2(QString::fromStdString(outcome.cause).contains("exited with status 7 before reporting anything"),
                 outcome.cause.c_str());
        QVERIFY2(QString::fromStdString(outcome.cause).contains("mpirun exited with status 7"), outcome.cause.c_str());
        QVERIFY(integrityCheck(session) == "ok");

        // One device is the agent's alone: a launch command is refused there before anything starts.
        const QString oneDevice = dir.filePath("one-device.meshbench");
        const ProcessRun refused = runProcess(kEngine, {"run", job, "--one-device", "--session", oneDevice});
        QCOMPARE(refused.exitCode, 1);
        QVERIFY2(refused.err.contains("launch.command: runs in meshbench-agent's place"), qPrintable(refused.err));
        QVERIFY(!QFile::exists(oneDevice));
    }

    void aSessionFromTheFutureIsRefused()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("future.meshbench");
        const ProcessRun run =
            runProcess(kEngine, {"run", kDemo, "--one-device", "--steps", "1", "--session", session});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(session.toUtf8().constData(), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
        const ProcessRun exported = runProcess(kEngine, {"export", session, "--csv", dir.filePath("csv")});
        QCOMPARE(exported.exitCode, 1);
        QVERIFY2(exported.err.contains("newer"), qPrintable(exported.err));
    }
};

QTEST_GUILESS_MAIN(TestEngineRun)
#include "tst_engine_run.moc"
