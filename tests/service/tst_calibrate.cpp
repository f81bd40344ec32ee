// `meshbench-engine calibrate` and `--profile` on this machine. The sessions are real runs of the
// demo model (two of them on one device); the damaged and nonsensical ones are copies of a real one
// changed with SQLite, so every expectation comes from what was changed, never from a fitted figure:
// - a one-device session calibrates (issue 27, finding 9);
// - a device that takes twice as long for everything is fitted at half the rates (finding 26);
// - calibrated plans of other layouts meet their measured steps better than the table's plans,
//   both judged against the same measurement (finding 29);
// - nonsense is refused, naming what is wrong, with nothing written (finding 5);
// - plan --json prints one document on every failure (finding 6).

#include "common/process_run.h"

#include "plan/calibration.h"
#include "store/session_store.h"

#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>
#include <sched.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <fstream>

using nlohmann::json;

namespace {

ProcessRun engine(const QStringList& args) { return runProcess(QStringLiteral(MESHBENCH_ENGINE), args); }

// The engine with every process it starts (mpirun and the ranks inherit it) on one CPU of this
// machine, however many it has.
ProcessRun engineOnOneCpu(const QStringList& args)
{
    QProcess process;
    process.setChildProcessModifier([] {
        cpu_set_t mask;
        if (sched_getaffinity(0, sizeof mask, &mask) != 0)
            return;
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
            if (CPU_ISSET(cpu, &mask)) {
                CPU_ZERO(&mask);
                CPU_SET(cpu, &mask);
                sched_setaffinity(0, sizeof mask, &mask);
                return;
            }
    });
    process.start(QStringLiteral(MESHBENCH_ENGINE), args);
    ProcessRun run;
    if (!process.waitForStarted(-1) || !process.waitForFinished(300000)) {
        process.kill();
        process.waitForFinished(-1);
        run.err = process.errorString();
        return run;
    }
    run.exitCode = process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -100;
    run.out = QString::fromUtf8(process.readAllStandardOutput());
    run.err = QString::fromUtf8(process.readAllStandardError());
    return run;
}

json demo()
{
    std::ifstream file(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    return json::parse(file);
}

// The median of a session's steps after the first, read from the file.
double measuredStep(const QString& session)
{
    const meshbench::store::SessionReader reader(session.toStdString());
    std::vector<double> steps;
    for (const auto& m : reader.stepMetrics())
        if (m.record.step > 1)
            steps.push_back(double(m.record.endNs - m.record.beginNs) * 1e-9);
    std::sort(steps.begin(), steps.end());
    return steps.empty() ? 0.0 : steps[steps.size() / 2];
}

// Runs `statements` on a session file; the error, or empty.
QString execute(const QString& session, const std::string& statements)
{
    sqlite3* db = nullptr;
    QString error;
    if (sqlite3_open_v2(session.toUtf8().constData(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
        error = QString::fromUtf8(sqlite3_errmsg(db));
    } else {
        char* message = nullptr;
        if (sqlite3_exec(db, statements.c_str(), nullptr, nullptr, &message) != SQLITE_OK)
            error = QString::fromUtf8(message ? message : "failed");
        sqlite3_free(message);
    }
    sqlite3_close(db);
    return error;
}

// The first column of the first row `query` returns.
std::int64_t queryInteger(const QString& session, const std::string& query)
{
    sqlite3* db = nullptr;
    sqlite3_stmt* statement = nullptr;
    std::int64_t value = -1;
    if (sqlite3_open_v2(session.toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK &&
        sqlite3_prepare_v2(db, query.c_str(), -1, &statement, nullptr) == SQLITE_OK &&
        sqlite3_step(statement) == SQLITE_ROW)
        value = sqlite3_column_int64(statement, 0);
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return value;
}

// Statements that stretch a session's time by `factor` (an SQL multiplier such as "* 2" or
// "/ 1000") about its first step's begin: every span and step takes that many times as long, as on
// a device that much slower or faster.
std::string dilation(const QString& session, const std::string& factor)
{
    const std::string t0 = std::to_string(queryInteger(session, "SELECT MIN(begin_ns) FROM step_metrics"));
    const auto stretch = [&](const char* column) {
        return std::string(column) + " = " + t0 + " + (" + column + " - " + t0 + ") " + factor;
    };
    return "UPDATE spans SET " + stretch("begin_ns") + ", " + stretch("end_ns") + "; UPDATE step_metrics SET " +
           stretch("begin_ns") + ", " + stretch("end_ns") + "; UPDATE meta SET max_span_ns = max_span_ns " + factor +
           ";";
}

json readJson(const QString& path)
{
    std::ifstream file(path.toStdString());
    return json::parse(file, nullptr, false);
}

}  // namespace

class TestCalibrate : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void calibratesAOneDeviceSession();
    void aSlowerDeviceIsFittedAtLowerRates();
    void calibratedPlansMeetOtherLayoutsBetterThanTheTable();
    void refusesNonsense_data();
    void refusesNonsense();
    void badInput();

private:
    QString writeJob(const QString& name, const json& job);
    QString run(const QString& name, const json& job, const QStringList& extra = {});
    QString copyOfOneRankSession(const QString& name);
    double plannedStep(const QString& job, const QString& profile = {});
    QTemporaryDir m_dir;
    QString m_oneDevice;  // a --one-device run of the demo (a layout of 8 ranks)
    QString m_oneRank;    // a run of the demo laid out for one rank
};

void TestCalibrate::initTestCase()
{
    QVERIFY(m_dir.isValid());
    m_oneDevice = run("one-device", demo(), {"--one-device"});
    QVERIFY(!m_oneDevice.isEmpty());
    json oneRank = demo();
    oneRank["parallel"].update({{"dp", 1}, {"pp", 1}, {"tp", 1}, {"ep", 1}});
    oneRank["cluster"]["devices_per_node"] = 1;
    m_oneRank = run("one-rank", oneRank, {"--one-device"});
    QVERIFY(!m_oneRank.isEmpty());
}

QString TestCalibrate::writeJob(const QString& name, const json& job)
{
    QString path = m_dir.filePath(name + ".json");
    std::ofstream(path.toStdString()) << job.dump();
    return path;
}

QString TestCalibrate::run(const QString& name, const json& job, const QStringList& extra)
{
    const QString session = m_dir.filePath(name + ".meshbench");
    const QStringList args = QStringList{"run", writeJob(name, job), "--steps", "8", "--session", session} + extra;
    // Issue 27's runs: the ranks all on one CPU (see calibratedPlansMeetOtherLayoutsBetterThanTheTable).
    const ProcessRun r = extra.contains("--one-device") ? engine(args) : engineOnOneCpu(args);
    if (r.exitCode != 0)
        qWarning("%s", qPrintable(r.err + r.out));
    return r.exitCode == 0 ? session : QString();
}

QString TestCalibrate::copyOfOneRankSession(const QString& name)
{
    QString copy = m_dir.filePath(name + ".meshbench");
    QFile::remove(copy);
    QFile::remove(copy + "-wal");
    if (!QFile::copy(m_oneRank, copy))
        return {};
    if (QFile::exists(m_oneRank + "-wal") && !QFile::copy(m_oneRank + "-wal", copy + "-wal"))
        return {};
    return copy;
}

double TestCalibrate::plannedStep(const QString& job, const QString& profile)
{
    QStringList args = {"plan", job, "--json"};
    if (!profile.isEmpty())
        args << "--profile" << profile;
    const ProcessRun r = engine(args);
    return r.exitCode == 0 ? json::parse(r.out.toStdString()).at("step_time_s").get<double>() : -1.0;
}

// Finding 9: the session's one rank tells that the run was the one-device layout of its spec.
void TestCalibrate::calibratesAOneDeviceSession()
{
    const QString profile = m_dir.filePath("one-device-profile.json");
    const ProcessRun r = engine({"calibrate", m_oneDevice, "--out", profile});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    const json written = readJson(profile);
    QVERIFY2(written.is_object(), qPrintable(profile));
    QCOMPARE(written.at("source").get<std::string>(), std::string("one-device.meshbench"));
    QVERIFY(written.at("matmul_efficiency").get<double>() > 0);
    // The profile is one that plan takes.
    QVERIFY(plannedStep(m_dir.filePath("one-device.json"), profile) > 0);
}

// Finding 26, an expectation that does not come from the fit: a session with every span and
// step twice as long is a device at half the speed, so every fitted rate halves and the overhead
// per op doubles. The one-device plan has no links, so nothing in it is left unscaled; the two
// fits each stop within kFitPrecision of their exact speed.
void TestCalibrate::aSlowerDeviceIsFittedAtLowerRates()
{
    const QString slower = copyOfOneRankSession("twice-as-long");
    QVERIFY(!slower.isEmpty());
    const QString error = execute(slower, dilation(slower, "* 2"));
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QCOMPARE(measuredStep(slower), 2 * measuredStep(m_oneRank));

    const QString profile = m_dir.filePath("profile-1x.json"), profileSlower = m_dir.filePath("profile-2x.json");
    ProcessRun r = engine({"calibrate", m_oneRank, "--out", profile});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    r = engine({"calibrate", slower, "--out", profileSlower});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    const json fast = readJson(profile), slow = readJson(profileSlower);
    for (const auto& [key, ratio] : {std::pair{"matmul_efficiency", 0.5}, std::pair{"attention_efficiency", 0.5},
                                     std::pair{"memory_bandwidth_GBps", 0.5}, std::pair{"kernel_overhead_us", 2.0}}) {
        const double found = slow.at(key).get<double>() / fast.at(key).get<double>();
        QVERIFY2(std::abs(std::log(found / ratio)) <= meshbench::plan::kFitPrecision,
                 qPrintable(QString("%1: %2x, not %3x").arg(key).arg(found, 0, 'g', 8).arg(ratio)));
    }
}

// Finding 29. The cpu device's table was measured on this machine, so on an idle one calibration
// has little to correct, and which of two close predictions lands nearer is noise. Here the runs
// are slower than the table by a factor it cannot know: the job is described as eight one-device
// nodes (a core for each rank, to the table), and all eight ranks share one CPU of this machine,
// however many it has. A profile fitted to one layout's run must carry that factor to the others:
// each calibrated plan is nearer its run's measured step than the table's plan of the same layout
// is to the same measurement. The layouts keep tp and ep at 1: their per-layer collectives between
// ranks that share one CPU wait for the scheduler, a cost a device's speed cannot carry (here a
// tp2 ep2 layout fitted from a tp1 run lands 1.5x off, where dp and pp layouts land within 1.5x
// and the table 4-10x).
void TestCalibrate::calibratedPlansMeetOtherLayoutsBetterThanTheTable()
{
    struct Layout {
        const char* name;
        int dp, pp;
    };
    const auto described = [](const Layout& l) {
        json job = demo();
        job["parallel"].update({{"dp", l.dp}, {"pp", l.pp}, {"tp", 1}, {"ep", 1}});
        job["cluster"].update({{"nodes", l.dp * l.pp}, {"devices_per_node", 1}, {"nvlink_domain", 1}});
        return job;
    };
    const QString source = run("dp4-pp2", described({"dp4-pp2", 4, 2}));
    QVERIFY(!source.isEmpty());
    const QString profile = m_dir.filePath("dp4-pp2-profile.json");
    const ProcessRun calibrated = engine({"calibrate", source, "--out", profile});
    QVERIFY2(calibrated.exitCode == 0, qPrintable(calibrated.err + calibrated.out));
    qInfo("%s", qPrintable(calibrated.out));

    for (const Layout& l : {Layout{"dp8", 8, 1}, Layout{"dp2-pp4", 2, 4}}) {
        const QString session = run(l.name, described(l));
        QVERIFY2(!session.isEmpty(), l.name);
        const QString job = m_dir.filePath(QString(l.name) + ".json");
        const double measured = measuredStep(session), table = plannedStep(job), fitted = plannedStep(job, profile);
        qInfo("%s: measured %.1f ms, planned %.1f ms from the table (%+.0f%%), %.1f ms calibrated (%+.0f%%)", l.name,
              measured * 1e3, table * 1e3, 100 * (table / measured - 1), fitted * 1e3, 100 * (fitted / measured - 1));
        QVERIFY2(measured > 0 && table > 0 && fitted > 0, l.name);
        QVERIFY2(std::abs(std::log(fitted / measured)) < std::abs(std::log(table / measured)), l.name);
    }
}

// Finding 5: each a copy of the one-rank session (which the old code calibrated), changed as the
// outside tester changed theirs.
void TestCalibrate::refusesNonsense_data()
{
    QTest::addColumn<QString>("change");  // SQL, with {dilate x} for dilation(x)
    QTest::addColumn<QString>("expected");
    QTest::newRow("spans a million times too long")
        << "UPDATE spans SET end_ns = begin_ns + (end_ns - begin_ns) * 1000000; "
           "UPDATE meta SET max_span_ns = max_span_ns * 1000000;"
        << "longer than the step";
    QTest::newRow("steps that end as they begin") << "UPDATE step_metrics SET end_ns = begin_ns;"
                                                  << "end at or before they begin";
    QTest::newRow("every span stored twice")
        << "INSERT INTO spans SELECT rank, begin_ns, seq + {max seq}, end_ns, step, stage, chunk, microbatch, kind, "
           "peer, bytes FROM spans; UPDATE meta SET span_count = span_count * 2;"
        << "stored more than once";
    QTest::newRow("one-nanosecond spans") << "UPDATE spans SET end_ns = begin_ns + 1;"
                                          << "the steps and the spans disagree";
    QTest::newRow("a device a thousand times faster") << "{dilate / 1000}"
                                                      << "is above";
    QTest::newRow("times in microseconds read as nanoseconds") << "{dilate * 1000}"
                                                               << "is below";
    QTest::newRow("a damaged page calibration does not read") << "{damage heartbeats_by_time}"
                                                              << "quick_check";
}

void TestCalibrate::refusesNonsense()
{
    QFETCH(QString, change);
    QFETCH(QString, expected);
    const QString name = QString(QTest::currentDataTag()).replace(' ', '-');
    const QString session = copyOfOneRankSession(name);
    QVERIFY(!session.isEmpty());
    if (change.startsWith("{dilate ")) {
        const std::string factor = change.mid(8, change.size() - 9).toStdString();
        const QString error = execute(session, dilation(session, factor));
        QVERIFY2(error.isEmpty(), qPrintable(error));
    } else if (change.startsWith("{damage ")) {
        // The b-tree page of an index no reader of calibration's visits, its type byte made invalid.
        const QString index = change.mid(8, change.size() - 9);
        QVERIFY(execute(session, "PRAGMA wal_checkpoint(TRUNCATE);").isEmpty());
        const std::int64_t page =
            queryInteger(session, "SELECT rootpage FROM sqlite_schema WHERE name = '" + index.toStdString() + "'");
        const std::int64_t pageSize = queryInteger(session, "PRAGMA page_size");
        QVERIFY(page > 1 && pageSize > 0);
        QFile file(session);
        QVERIFY(file.open(QIODevice::ReadWrite));
        QVERIFY(file.seek((page - 1) * pageSize));
        QCOMPARE(file.write("\x07", 1), qint64(1));
    } else {
        const std::string maxSeq = std::to_string(queryInteger(session, "SELECT MAX(seq) FROM spans") + 1);
        const QString error =
            execute(session, change.replace("{max seq}", QString::fromStdString(maxSeq)).toStdString());
        QVERIFY2(error.isEmpty(), qPrintable(error));
    }
    const QString profile = m_dir.filePath(name + ".json");
    const ProcessRun r = engine({"calibrate", session, "--out", profile});
    QVERIFY2(r.exitCode == 1, qPrintable(QString::number(r.exitCode) + ": " + r.err + r.out));
    QVERIFY2(r.err.contains(expected), qPrintable(r.err));
    QVERIFY2(r.err.contains(name + ".meshbench"), qPrintable(r.err));
    QVERIFY(!QFile::exists(profile));
}

void TestCalibrate::badInput()
{
    ProcessRun r = engine({"calibrate"});
    QCOMPARE(r.exitCode, 2);
    r = engine({"calibrate", m_dir.filePath("missing.db")});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("missing.db"), qPrintable(r.err));

    const QString demoJob = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    const QString broken = m_dir.filePath("broken.json");
    std::ofstream(broken.toStdString()) << R"({"source": "x", "matmul_efficiency": 3})";
    r = engine({"plan", demoJob, "--profile", broken});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("matmul_efficiency"), qPrintable(r.err));
    r = engine({"plan", demoJob, "--profile", m_dir.filePath("absent.json")});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("absent.json"), qPrintable(r.err));

    // Finding 6: with --json, each failure is one JSON document on stdout.
    for (const char* command : {"plan", "search"}) {
        r = engine({command, demoJob, "--json", "--profile", broken});
        QCOMPARE(r.exitCode, 1);
        json document = json::parse(r.out.toStdString(), nullptr, false);
        QVERIFY2(document.is_object() && document.value("valid", true) == false, qPrintable(r.out));
        QCOMPARE(document.at("errors").at(0).at("path").get<std::string>(), std::string("matmul_efficiency"));
        r = engine({command, demoJob, "--json", "--profile", m_dir.filePath("absent.json")});
        QCOMPARE(r.exitCode, 1);
        document = json::parse(r.out.toStdString(), nullptr, false);
        QVERIFY2(document.is_object() && document.value("valid", true) == false, qPrintable(r.out));
        QVERIFY2(QString::fromStdString(document.at("errors").at(0).at("message").get<std::string>())
                     .contains("absent.json"),
                 qPrintable(r.out));
    }
    r = engine({"plan", demoJob, "--json", "--unit-costs", "x"});
    QCOMPARE(r.exitCode, 2);
    const json document = json::parse(r.out.toStdString(), nullptr, false);
    QVERIFY2(document.is_object() && document.value("valid", true) == false, qPrintable(r.out));
    QVERIFY2(
        QString::fromStdString(document.at("errors").at(0).at("message").get<std::string>()).contains("unit-costs"),
        qPrintable(r.out));
}

QTEST_GUILESS_MAIN(TestCalibrate)
#include "tst_calibrate.moc"
