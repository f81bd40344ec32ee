// meshbench-agent's command line as a user runs it: a short training run, save and resume, and
// every kind of bad input refused with a message and a non-zero exit.

#include "common/process_run.h"

#include "kernels/backend_choice.h"
#include <QTemporaryDir>

#include <QtTest>

#include <nlohmann/json.hpp>

using nlohmann::json;

namespace {

using Run = ProcessRun;

Run agent(const QStringList& args) { return runProcess(QStringLiteral(MESHBENCH_AGENT), args); }

json tinyJob()
{
    return {{"model",
             {{"layers", 2},
              {"hidden", 32},
              {"heads", 4},
              {"vocab", 64},
              {"seq_len", 16},
              {"moe", {{"experts", 4}, {"top_k", 2}}}}},
            {"parallel", {{"microbatches", 2}, {"micro_batch_size", 2}}},
            {"cluster", {{"nodes", 1}, {"devices_per_node", 1}, {"device", "cpu"}}},
            {"train", {{"steps", 4}, {"lr", 0.003}}}};
}

// The step lines of the agent's output, "step N  loss ...".
QStringList stepLines(const QString& out)
{
    QStringList lines;
    for (const QString& line : out.split('\n'))
        if (line.startsWith(QStringLiteral("step ")))
            lines << line.section(QStringLiteral("tokens/s"), 0, 0);  // drop the timing
    return lines;
}

}  // namespace

class TestAgentCli : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void trainsAndReportsEveryStep();
    void saveAndResumeGiveTheSameSteps();
    void autoSaysWhichBackendAndWhy();
    void badInput_data();
    void badInput();
    void helpListsEveryOption();

private:
    QString write(const QString& name, const QByteArray& content);
    QTemporaryDir m_dir;
};

void TestAgentCli::initTestCase() { QVERIFY(m_dir.isValid()); }

QString TestAgentCli::write(const QString& name, const QByteArray& content)
{
    QString path = m_dir.filePath(name);
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly) || f.write(content) != content.size())
        qFatal("cannot write %s", qPrintable(path));
    return path;
}

void TestAgentCli::trainsAndReportsEveryStep()
{
    const QString job = write("job.json", QByteArray::fromStdString(tinyJob().dump()));
    const QString metrics = m_dir.filePath("metrics.jsonl");
    const Run r = agent({"--job", job, "--steps", "3", "--metrics", metrics});
    QCOMPARE(r.exitCode, 0);
    QCOMPARE(stepLines(r.out).size(), 3);
    QVERIFY(r.out.contains("entropy floor"));
    QFile f(metrics);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QList<QByteArray> lines = f.readAll().trimmed().split('\n');
    QCOMPARE(lines.size(), 3);
    const json last = json::parse(lines.back().toStdString());
    QCOMPARE(last["step"].get<int>(), 3);
    QVERIFY(last["loss"].get<double>() > 0);
}

void TestAgentCli::autoSaysWhichBackendAndWhy()
{
    // auto takes the CUDA backend where it can run, and the CPU otherwise with the reason the
    // kernels library gives (no device, no driver, or no CUDA in this build).
    json doc = tinyJob();
    doc["backend"] = "auto";
    const Run r = agent({"--job", write("auto.json", QByteArray::fromStdString(doc.dump())), "--steps", "1"});
    QCOMPARE(r.exitCode, 0);
    const meshbench::kernels::DeviceStatus device = meshbench::kernels::cudaDeviceStatus();
    const std::string expected = device.usable ? "backend cuda (auto: device 0 of " + std::to_string(device.count) +
                                                     ": " + device.description + ")"
                                               : "backend cpu (auto: " + device.description + ")";
    QVERIFY2(r.out.contains(QByteArray::fromStdString(expected)), qPrintable(r.out));
}

void TestAgentCli::saveAndResumeGiveTheSameSteps()
{
    const QString job = write("resume.json", QByteArray::fromStdString(tinyJob().dump()));
    const QString dir = m_dir.filePath("checkpoints");
    const Run straight = agent({"--job", job, "--steps", "4", "--save", dir, "--save-every", "2"});
    QCOMPARE(straight.exitCode, 0);
    for (const char* name : {"step-000000.safetensors", "step-000002.safetensors", "step-000004.safetensors"})
        QVERIFY2(QFile::exists(dir + "/" + name), name);
    const Run resumed = agent({"--job", job, "--steps", "2", "--load", dir + "/step-000002.safetensors"});
    QCOMPARE(resumed.exitCode, 0);
    QCOMPARE(stepLines(resumed.out), stepLines(straight.out).mid(2));
}

void TestAgentCli::badInput_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("exitCode");
    QTest::addColumn<QString>("expected");
    QTest::newRow("no job") << "no job" << 2 << "--job is required";
    QTest::newRow("unknown option") << "unknown option" << 2 << "unknown option '--fast'";
    QTest::newRow("bad steps") << "bad steps" << 2 << "--steps: Value many not in range 0 to 1000000000";
    QTest::newRow("value missing") << "value missing" << 2 << "--job: 1 required JOB.json missing";
    QTest::newRow("missing job file") << "missing job file" << 1 << "cannot open job spec";
    QTest::newRow("invalid spec") << "invalid spec" << 1 << "model.layers";
    QTest::newRow("cuda backend, no device") << "cuda backend" << 1 << "backend \"cuda\": no CUDA device: ";
    QTest::newRow("truncated checkpoint") << "truncated checkpoint" << 1 << "checkpoint";
    QTest::newRow("checkpoint of another model") << "other model" << 1 << "model.hidden = 32 (the job has 64)";
    QTest::newRow("token id >= vocab") << "token id" << 1 << "vocab";
    QTest::newRow("token file of odd size") << "odd token file" << 1 << "not a multiple of 2";
}

void TestAgentCli::badInput()
{
    QFETCH(QString, kind);
    QFETCH(int, exitCode);
    QFETCH(QString, expected);
    const QString job = write("good.json", QByteArray::fromStdString(tinyJob().dump()));
    QStringList args;
    if (kind == "no job") {
        args = {"--steps", "1"};
    } else if (kind == "unknown option") {
        args = {"--job", job, "--fast"};
    } else if (kind == "bad steps") {
        args = {"--job", job, "--steps", "many"};
    } else if (kind == "value missing") {
        args = {"--job"};
    } else if (kind == "missing job file") {
        args = {"--job", m_dir.filePath("absent.json")};
    } else if (kind == "invalid spec") {
        json doc = tinyJob();
        doc["model"]["layers"] = "two";
        args = {"--job", write("invalid.json", QByteArray::fromStdString(doc.dump()))};
    } else if (kind == "cuda backend") {
        json doc = tinyJob();
        doc["backend"] = "cuda";
        args = {"--job", write("cuda.json", QByteArray::fromStdString(doc.dump()))};
    } else if (kind == "truncated checkpoint" || kind == "other model") {
        const QString dir = m_dir.filePath("ckpt-" + kind);
        QCOMPARE(agent({"--job", job, "--steps", "0", "--save", dir}).exitCode, 0);
        const QString path = dir + "/step-000000.safetensors";
        json doc = tinyJob();
        if (kind == "truncated checkpoint") {
            QFile f(path);
            QVERIFY(f.resize(f.size() / 2));
        } else {
            doc["model"]["hidden"] = 64;
        }
        args = {"--job", write("resume-" + kind + ".json", QByteArray::fromStdString(doc.dump())), "--load", path};
    } else {
        // A uint16 token file: ids 0..69 against a vocabulary of 64, or one byte short of whole tokens.
        QByteArray tokens;
        for (int i = 0; i < 70; ++i)
            tokens.append(char(i)).append(char(0));
        if (kind == "odd token file")
            tokens.chop(1);
        const QString file = write(kind + ".bin", tokens);
        json doc = tinyJob();
        doc["train"]["data"] = {{"source", "file"}, {"path", file.toStdString()}, {"dtype", "uint16"}};
        args = {"--job", write(kind + ".json", QByteArray::fromStdString(doc.dump()))};
    }
    const Run r = agent(args);
    QCOMPARE(r.exitCode, exitCode);
    QVERIFY2(r.err.contains(expected), qPrintable(r.err));
}

void TestAgentCli::helpListsEveryOption()
{
    // --help names every option on a line of its own (the man page is made from this output).
    const Run r = agent({"--help"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains("Usage: meshbench-agent [OPTIONS]\n"), qPrintable(r.out));
    for (const char* option :
         {"--job JOB.json", "--steps N", "--save DIR", "--save-every N", "--load CHECKPOINT", "--metrics FILE",
          "--spans FILE", "--threads N", "--telemetry ENDPOINT", "--clock ENDPOINT"}) {
        const QRegularExpression line("^  " + QRegularExpression::escape(option) + R"(( REQUIRED)? {2,}\S)",
                                      QRegularExpression::MultilineOption);
        QVERIFY2(line.match(r.out).hasMatch(), qPrintable(QString(option) + " is not described in:\n" + r.out));
    }
}

QTEST_APPLESS_MAIN(TestAgentCli)
#include "tst_agent_cli.moc"
