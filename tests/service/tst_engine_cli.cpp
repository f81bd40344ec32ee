// meshbench-engine's command line, run as a user would: good jobs, bad jobs, bad arguments.

#include "common/process_run.h"

#include "plan/capability.h"

#include <algorithm>

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {

using Run = ProcessRun;

Run engine(const QStringList& args) { return runProcess(QStringLiteral(MESHBENCH_ENGINE), args); }

QString job(const char* name) { return QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/") + name; }

}  // namespace

class TestEngineCli : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void planDemoText();
    void planDemoJson();
    void planUnitCosts();
    void searchJson();
    void searchRanksOnlyWhatTheAgentRuns();
    void runRefusesWhatTheAgentRefusesBeforeLaunching();
    void badSpecs_data();
    void badSpecs();
    void badSpecJsonReport();
    void invalidUtf8IsReportedAsJson();
    void aHugeScheduleIsPlannedWithoutItsOpList();
    void badCommandLines_data();
    void badCommandLines();
    void helpListsEveryOption_data();
    void helpListsEveryOption();

private:
    QString write(const QByteArray& content);
    QTemporaryDir m_dir;
    int m_files = 0;
};

void TestEngineCli::initTestCase() { QVERIFY(m_dir.isValid()); }

QString TestEngineCli::write(const QByteArray& content)
{
    QString path = m_dir.filePath(QStringLiteral("job%1.json").arg(m_files++));
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(content) != content.size())
        qFatal("cannot write %s", qPrintable(path));
    return path;
}

void TestEngineCli::planDemoText()
{
    const Run r = engine({"plan", job("demo.json")});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.contains("Memory per GPU"));
    QVERIFY(r.out.contains("dp 2 x pp 2 x tp 2 = 8 ranks, ep 2"));
    QVERIFY(r.out.contains("stage 1  |"));
}

void TestEngineCli::planDemoJson()
{
    const Run r = engine({"plan", job("demo.json"), "--json"});
    QCOMPARE(r.exitCode, 0);
    const json j = json::parse(r.out.toStdString());
    QCOMPARE(j["valid"].get<bool>(), true);
    QCOMPARE(j["world_size"].get<int>(), 8);
    QCOMPARE(int(j["schedule"].size()), 2);
    QVERIFY(j["memory_bytes"]["total"].get<double>() > 0);
}

void TestEngineCli::planUnitCosts()
{
    // The Mixtral job runs zb-h1 with p = 2, m = 16; with F = B = W = 1 the makespan is
    // 3m + p - 1 = 49 (Qi et al. 2024: bubble (p - 1)(F + B - W)).
    const Run r = engine({"plan", job("mixtral-8x7b.json"), "--json", "--unit-costs", "1,1,1"});
    QCOMPARE(r.exitCode, 0);
    const json j = json::parse(r.out.toStdString());
    QCOMPARE(j["makespan"].get<double>(), 49.0);
    QCOMPARE(j["bubble_ratio"].get<double>(), 1.0 / 49);
}

void TestEngineCli::searchJson()
{
    const Run r = engine({"search", job("demo.json"), "--top", "3", "--json"});
    QCOMPARE(r.exitCode, 0);
    const json j = json::parse(r.out.toStdString());
    QCOMPARE(j["valid"].get<bool>(), true);
    QCOMPARE(int(j["best"].size()), 3);
    QVERIFY(j["evaluated"].get<std::uint64_t>() >= 3);
}

namespace {

// A layout as search --json ranks it, on `base`'s model and cluster.
meshbench::plan::JobSpec rankedSpec(const meshbench::plan::JobSpec& base, const json& c)
{
    namespace plan = meshbench::plan;
    plan::JobSpec spec = base;
    plan::ParallelSpec& p = spec.parallel;
    p.dp = c["dp"];
    p.pp = c["pp"];
    p.tp = c["tp"];
    p.ep = c["ep"];
    p.zero = c["zero"];
    p.sequenceParallel = c["sequence_parallel"];
    if (!plan::parseScheduleName(c["schedule"].get<std::string>(), p.schedule))
        qFatal("unknown schedule %s", c.dump().c_str());
    const std::string recompute = c["recompute"];
    p.recompute = recompute == "none"   ? plan::Recompute::None
                  : recompute == "full" ? plan::Recompute::Full
                                        : plan::Recompute::Selective;
    p.virtualStages = c["virtual_stages"];
    p.microbatches = c["microbatches"];
    p.microBatchSize = c["micro_batch_size"];
    return spec;
}

}  // namespace

void TestEngineCli::searchRanksOnlyWhatTheAgentRuns()
{
    // Issue 12: search never ranks a layout that meshbench-agent refuses. Each ranked layout is
    // asked of the agent's own rule, plan::agentRefusals (agent/main.cpp calls it).
    namespace plan = meshbench::plan;
    QFile demoFile(job("demo.json"));
    QVERIFY(demoFile.open(QIODevice::ReadOnly));
    const QByteArray demoText = demoFile.readAll();
    const plan::LoadResult loaded = plan::parseJobSpec(demoText.toStdString());
    QVERIFY(loaded.runnable());
    const plan::JobSpec demo = *loaded.spec;

    // The demo: the agent runs every valid layout of it now, ZeRO 1-3 with ep > 1 included, so
    // nothing is refused and such layouts are ranked.
    Run r = engine({"search", job("demo.json"), "--top", "1000", "--json"});
    QCOMPARE(r.exitCode, 0);
    json j = json::parse(r.out.toStdString());
    QCOMPARE(j["refused"].get<std::uint64_t>(), std::uint64_t(0));
    QCOMPARE(j["best"].size(), std::size_t(1000));  // of more evaluated
    QVERIFY(j["evaluated"].get<std::uint64_t>() > 1000);
    bool zeroWithExperts = false, demoLayout = false;
    for (const json& c : j["best"]) {
        const plan::JobSpec spec = rankedSpec(demo, c);
        const plan::ParallelSpec& p = spec.parallel;
        QVERIFY2(plan::validateLayout(spec).empty(), c.dump().c_str());
        const std::vector<plan::SpecError> refusals = plan::agentRefusals(spec);
        QVERIFY2(refusals.empty(), (c.dump() + ": " + (refusals.empty() ? "" : refusals.front().message)).c_str());
        zeroWithExperts = zeroWithExperts || (p.ep > 1 && p.zero > 0);
        const plan::ParallelSpec& d = demo.parallel;
        demoLayout = demoLayout || (p.dp == d.dp && p.pp == d.pp && p.tp == d.tp && p.ep == d.ep && p.zero == 0 &&
                                    p.microBatchSize == d.microBatchSize && p.recompute == d.recompute &&
                                    p.schedule == d.schedule && !p.sequenceParallel && p.virtualStages == 1);
    }
    QVERIFY(zeroWithExperts);
    QVERIFY(demoLayout);

    // Where the rule does refuse layouts: the demo's model on 2 devices with a global batch of
    // 8,192 sequences. A pp 2 pipeline of micro-batch 1 (8,192 micro-batches) names 32,768 messages,
    // more than MPI's tags, while larger micro-batches and pp 1 stay under the limit. Every layout
    // priced that fits is ranked (fewer than --top), so a refused one would show among them; and
    // the search must count some as refused, or it did not ask the rule. (On the cpu device the
    // plan counts the agent's fp32 activations, so the largest micro-batches do not fit.)
    json two = json::parse(demoText.toStdString());
    two["cluster"]["devices_per_node"] = 2;
    two["parallel"]["dp"] = 2;
    two["parallel"]["pp"] = 1;
    two["parallel"]["tp"] = 1;
    two["parallel"]["ep"] = 1;
    const plan::LoadResult twoLoaded = plan::loadJobSpec(two);
    QVERIFY(twoLoaded.runnable());
    r = engine(
        {"search", write(QByteArray::fromStdString(two.dump())), "--top", "1000", "--global-batch", "8192", "--json"});
    QCOMPARE(r.exitCode, 0);
    j = json::parse(r.out.toStdString());
    QVERIFY(j["refused"].get<std::uint64_t>() > 0);
    QCOMPARE(j["best"].size(), j["fitting"].get<std::size_t>());
    QVERIFY(j["best"].size() < 1000);
    long long mostTags = 0;
    for (const json& c : j["best"]) {
        const plan::JobSpec spec = rankedSpec(*twoLoaded.spec, c);
        const plan::ParallelSpec& p = spec.parallel;
        QCOMPARE(p.globalBatch(), std::int64_t(8192));
        QVERIFY2(plan::validateLayout(spec).empty(), c.dump().c_str());
        const std::vector<plan::SpecError> refusals = plan::agentRefusals(spec);
        QVERIFY2(refusals.empty(), (c.dump() + ": " + (refusals.empty() ? "" : refusals.front().message)).c_str());
        if (p.pp > 1)
            mostTags = std::max(mostTags, 2LL * p.microbatches * p.pp * p.virtualStages);
    }
    // The ranked pipelines come up to the limit (micro-batch 2: 4,096 micro-batches, 16,384 tags) ...
    QCOMPARE(mostTags, 16384LL);
    // ... and the next one down, valid and refused, is not among them.
    plan::JobSpec tooMany = *twoLoaded.spec;
    tooMany.parallel.dp = 1;
    tooMany.parallel.pp = 2;
    tooMany.parallel.microBatchSize = 1;
    tooMany.parallel.microbatches = 8192;
    QVERIFY(plan::validateLayout(tooMany).empty());
    QVERIFY(!plan::agentCanRun(tooMany));
}

void TestEngineCli::runRefusesWhatTheAgentRefusesBeforeLaunching()
{
    // The demo with 8,192 micro-batches plans (the planner prices it), but its pp 2 names
    // 2 x 8,192 x 2 = 32,768 pipeline messages, more than MPI's tags: run refuses it on
    // parallel.microbatches before anything launches, and no session file is written.
    QFile demoFile(job("demo.json"));
    QVERIFY(demoFile.open(QIODevice::ReadOnly));
    json doc = json::parse(demoFile.readAll().toStdString());
    doc["parallel"]["microbatches"] = 8192;
    const QString path = write(QByteArray::fromStdString(doc.dump()));
    QCOMPARE(engine({"plan", path}).exitCode, 0);
    const QString session = m_dir.filePath("refused.meshbench");
    const Run r = engine({"run", path, "--session", session});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("meshbench-agent of this build does not run this job") &&
                 r.err.contains("parallel.microbatches") && r.err.contains("needs 32768 pipeline message tags"),
             qPrintable(r.err));
    QVERIFY(!QFileInfo::exists(session));
}

void TestEngineCli::badSpecs_data()
{
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QString>("expected");  // must appear in stderr
    const QByteArray valid = R"({"model": {"layers": 4, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 16},
                                 "cluster": {"nodes": 1, "devices_per_node": 1, "device": "cpu"}})";
    QTest::newRow("not json") << QByteArray("{\"model\": ") << "line 1, column";
    QTest::newRow("empty") << QByteArray() << "not valid JSON";
    QTest::newRow("array") << QByteArray("[1, 2]") << "a job spec is a JSON object";
    QTest::newRow("wrong type") << QByteArray(valid).replace("\"layers\": 4", "\"layers\": \"four\"")
                                << "model.layers: expected an integer";
    QTest::newRow("zero size") << QByteArray(valid).replace("\"hidden\": 64", "\"hidden\": 0") << "model.hidden";
    QTest::newRow("negative") << QByteArray(valid).replace("\"layers\": 4", "\"layers\": -3") << "model.layers";
    QTest::newRow("10^12 layers") << QByteArray(valid).replace("\"layers\": 4", "\"layers\": 1000000000000")
                                  << "model.layers: 1000000000000 is out of range";
    QTest::newRow("unknown preset") << QByteArray(valid).replace(
                                           R"("nodes": 1, "devices_per_node": 1, "device": "cpu")",
                                           R"("preset": "dgx-h10")")
                                    << "did you mean 'dgx-h100'";
    QTest::newRow("unknown key") << QByteArray(valid).replace("\"seq_len\"", "\"seqlen\"") << "did you mean 'seq_len'";
    QTest::newRow("indivisible pp") << QByteArray(valid).replace("\"seq_len\": 16}",
                                                                 R"("seq_len": 16}, "parallel": {"pp": 3})")
                                    << "parallel.pp: 4 layers do not divide into pp=3";
}

void TestEngineCli::badSpecs()
{
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    const QString path = write(content);
    for (const char* command : {"plan", "search"}) {
        const Run r = engine({command, path});
        QCOMPARE(r.exitCode, 1);
        // search tolerates layout errors only; the indivisible pp row is a layout error.
        QVERIFY2(r.err.contains(expected), qPrintable(r.err));
        if (QTest::currentDataTag() == QLatin1String("indivisible pp"))
            break;
    }
}

void TestEngineCli::badSpecJsonReport()
{
    const QString path = write(R"({"model": {"layers": 30, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 16},
                                   "parallel": {"pp": 4},
                                   "cluster": {"nodes": 1, "devices_per_node": 4, "device": "cpu"}})");
    const Run r = engine({"plan", path, "--json"});
    QCOMPARE(r.exitCode, 1);
    const json j = json::parse(r.out.toStdString());
    QCOMPARE(j["valid"].get<bool>(), false);
    QCOMPARE(j["errors"][0]["path"].get<std::string>(), std::string("parallel.pp"));
    QVERIFY(j["errors"][0]["message"].get<std::string>().find("use pp 2, 3, 5, 6, 10 or 15") != std::string::npos);
}

void TestEngineCli::invalidUtf8IsReportedAsJson()
{
    // Issue 11: a stray byte made plan --json exit 3 with nothing on stdout (nlohmann-json refused to
    // serialise the parser's message, which quoted the byte).
    const QString path = write("{\"name\": \"\xff\"}");
    for (const char* command : {"plan", "search"}) {
        const Run r = engine({command, path, "--json"});
        QCOMPARE(r.exitCode, 1);
        const json j = json::parse(r.out.toStdString());
        QCOMPARE(j["errors"][0]["path"].get<std::string>(), std::string("name"));
        const std::string message = j["errors"][0]["message"];
        QVERIFY2(message.find("line 1, column 11") != std::string::npos && message.find("\\xFF") != std::string::npos,
                 message.c_str());
    }
    const Run text = engine({"plan", path});
    QCOMPARE(text.exitCode, 1);
    QVERIFY2(text.err.contains("name: line 1, column 11") && text.err.contains("\\xFF"), qPrintable(text.err));
}

void TestEngineCli::aHugeScheduleIsPlannedWithoutItsOpList()
{
    // Issue 11: 249,999 micro-batches on Llama-3-70B (pp 4: about a million pipeline slots) made plan
    // --json take 7.5 GB and print 892 MB. The plan still comes, its op list left out.
    QFile file(job("llama3-70b.json"));
    QVERIFY(file.open(QIODevice::ReadOnly));
    json spec = json::parse(file.readAll().toStdString());
    spec["parallel"]["microbatches"] = 249999;
    const Run r = engine({"plan", write(QByteArray::fromStdString(spec.dump())), "--json"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.size() < 100000, qPrintable(QString::number(r.out.size())));
    const json plan = json::parse(r.out.toStdString());
    QCOMPARE(plan["schedule"].size(), 4u);
    for (const json& stage : plan["schedule"]) {
        QVERIFY(stage["ops"].empty());
        QVERIFY(stage["bubble_ratio"].get<double>() >= 0);
    }
    QVERIFY(plan["warnings"].back().get<std::string>().find("lower parallel.microbatches") != std::string::npos);
}

void TestEngineCli::badCommandLines_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("exitCode");
    QTest::addColumn<QString>("expected");
    const QString demo = job("demo.json");
    QTest::newRow("no command") << QStringList{} << 2 << "Usage: meshbench-engine [OPTIONS] SUBCOMMAND";
    QTest::newRow("unknown command") << QStringList{"frobnicate"} << 2 << "unknown command 'frobnicate'";
    QTest::newRow("plan without job") << QStringList{"plan"} << 2 << "JOB.json is required";
    QTest::newRow("two jobs") << QStringList{"plan", demo, "other.json"} << 2 << "unexpected argument 'other.json'";
    QTest::newRow("unknown option") << QStringList{"plan", demo, "--fast"} << 2 << "unknown option '--fast'";
    QTest::newRow("bad unit costs") << QStringList{"plan", demo, "--unit-costs", "1,x,1"} << 2
                                    << "--unit-costs: 'x' is not a non-negative number";
    QTest::newRow("two unit costs") << QStringList{"plan", demo, "--unit-costs", "1,1"} << 2 << "three";
    QTest::newRow("zero unit costs") << QStringList{"plan", demo, "--unit-costs", "0,0,0"} << 2 << "not all zero";
    QTest::newRow("bad top") << QStringList{"search", demo, "--top", "0"} << 2
                             << "--top: Value 0 not in range 1 to 1000";
    QTest::newRow("value missing") << QStringList{"run", demo, "--session"} << 2
                                   << "--session: 1 required FILE missing";
    QTest::newRow("slurm and mpirun") << QStringList{"run", demo, "--slurm", "--mpirun", "mpirun"} << 2
                                      << "--mpirun excludes --slurm";
    QTest::newRow("missing hostfile") << QStringList{"run", demo, "--hostfile", "/nonexistent/hosts"} << 2
                                      << "--hostfile: File does not exist: /nonexistent/hosts";
    QTest::newRow("NaN heartbeat") << QStringList{"run", demo, "--heartbeat-timeout", "nan"} << 2
                                   << "--heartbeat-timeout: needs seconds from 0.5 to 3600, not 'nan'";
    QTest::newRow("zero speed") << QStringList{"replay", "x.meshbench", "--speed", "0"} << 2
                                << "--speed: needs a number above 0";
    QTest::newRow("nothing to export") << QStringList{"export", "x.meshbench"} << 2
                                       << "At least 1 option from [--chrome-trace,--csv]";
    QTest::newRow("missing file") << QStringList{"plan", "/nonexistent/job.json"} << 1 << "cannot open job spec";
    QTest::newRow("directory") << QStringList{"plan", "/"} << 1 << "/";
}

void TestEngineCli::badCommandLines()
{
    QFETCH(QStringList, args);
    QFETCH(int, exitCode);
    QFETCH(QString, expected);
    const Run r = engine(args);
    QCOMPARE(r.exitCode, exitCode);
    QVERIFY2(r.err.contains(expected), qPrintable(r.err));
}

void TestEngineCli::helpListsEveryOption_data()
{
    // Each command's --help names every option it takes (the man pages are made from this output).
    QTest::addColumn<QString>("command");
    QTest::addColumn<QStringList>("options");
    QTest::newRow("engine") << QString() << QStringList{"--version", "plan",   "search", "run",    "calibrate",
                                                        "sessions",  "export", "serve",  "replay", "keys"};
    QTest::newRow("plan") << "plan"
                          << QStringList{"JOB.json", "--json", "--unit-costs F,B,W", "--profile PROFILE.json"};
    QTest::newRow("search") << "search"
                            << QStringList{"JOB.json", "--json", "--top N", "--global-batch SEQUENCES",
                                           "--profile PROFILE.json"};
    QTest::newRow("run") << "run"
                         << QStringList{"JOB.json",
                                        "--session FILE",
                                        "--steps N",
                                        "--one-device",
                                        "--collector ENDPOINT",
                                        "--hostfile FILE",
                                        "--mpirun PATH",
                                        "--slurm",
                                        "--mpi-arg ARG",
                                        "--heartbeat-timeout S",
                                        "--profile PROFILE.json",
                                        "--allow-run-as-root",
                                        "--verbose"};
    QTest::newRow("calibrate") << "calibrate" << QStringList{"SESSION", "--out PROFILE.json"};
    QTest::newRow("sessions") << "sessions" << QStringList{"DIR", "--json"};
    QTest::newRow("export") << "export" << QStringList{"SESSION", "--chrome-trace OUT.json", "--csv DIR"};
    QTest::newRow("serve") << "serve"
                           << QStringList{"--bind ENDPOINT", "--live ENDPOINT", "--sessions DIR", "--curve",
                                          "--allow-run-as-root"};
    QTest::newRow("replay") << "replay"
                            << QStringList{"SESSION", "--speed X", "--bind ENDPOINT", "--live ENDPOINT", "--curve"};
    QTest::newRow("keys") << "keys" << QStringList{"--client NAME", "--allow PUBLIC_KEY_OR_FILE"};
}

void TestEngineCli::helpListsEveryOption()
{
    QFETCH(QString, command);
    QFETCH(QStringList, options);
    const Run r = engine(command.isEmpty() ? QStringList{"--help"} : QStringList{command, "--help"});
    QCOMPARE(r.exitCode, 0);
    const QString usage = command.isEmpty() ? "Usage: meshbench-engine [OPTIONS] SUBCOMMAND\n"
                                            : "Usage: meshbench-engine " + command + " [OPTIONS]";
    QVERIFY2(r.out.contains(usage), qPrintable(r.out));
    // One line per option: its name (and value), then its description.
    for (const QString& option : options) {
        const QRegularExpression line("^ +" + QRegularExpression::escape(option) + R"(( \.\.\.)?( REQUIRED)? {2,}\S)",
                                      QRegularExpression::MultilineOption);
        QVERIFY2(line.match(r.out).hasMatch(), qPrintable(option + " is not described in:\n" + r.out));
    }
    if (command.isEmpty()) {
        const Run version = engine({"--version"});
        QCOMPARE(version.exitCode, 0);
        QVERIFY2(version.out.startsWith("meshbench-engine "), qPrintable(version.out));
    }
}

QTEST_APPLESS_MAIN(TestEngineCli)
#include "tst_engine_cli.moc"
