// `meshbench-engine calibrate` and `--profile` on this machine: calibrate on one demo run; its
// profile reproduces that run's step exactly (the fit's definition), and the plans of other layouts
// of the same model land within a factor of 2.5 of what they measure, with and without it. The
// factor is loose on purpose: the same binary has measured the 8-rank demo at 114 and 160 ms a
// step on this shared 2-core machine; bench_calibration holds the plans to issue 14's 15% and 30%.

#include "common/process_run.h"

#include "store/session_store.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

using nlohmann::json;

namespace {

ProcessRun engine(const QStringList& args) { return runProcess(QStringLiteral(MESHBENCH_ENGINE), args); }

json demo()
{
    std::ifstream file(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    return json::parse(file);
}

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

}  // namespace

class TestCalibrate : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }
    void calibratedPlansPredictOtherLayouts();
    void badInput();

private:
    QString writeJob(const QString& name, const json& job);
    QString run(const QString& name, const json& job);
    double plannedStep(const QString& job, const QString& profile = {});
    QTemporaryDir m_dir;
};

QString TestCalibrate::writeJob(const QString& name, const json& job)
{
    const QString path = m_dir.filePath(name + ".json");
    std::ofstream(path.toStdString()) << job.dump();
    return path;
}

QString TestCalibrate::run(const QString& name, const json& job)
{
    const QString session = m_dir.filePath(name + ".db");
    const ProcessRun r = engine({"run", writeJob(name, job), "--steps", "8", "--session", session});
    if (r.exitCode != 0)
        qWarning("%s", qPrintable(r.err + r.out));
    return r.exitCode == 0 ? session : QString();
}

double TestCalibrate::plannedStep(const QString& job, const QString& profile)
{
    QStringList args = {"plan", job, "--json"};
    if (!profile.isEmpty())
        args << "--profile" << profile;
    const ProcessRun r = engine(args);
    return r.exitCode == 0 ? json::parse(r.out.toStdString()).at("step_time_s").get<double>() : -1.0;
}

void TestCalibrate::calibratedPlansPredictOtherLayouts()
{
    const QString demoSession = run("demo", demo());
    QVERIFY(!demoSession.isEmpty());
    const QString profile = m_dir.filePath("profile.json");
    const ProcessRun calibrated = engine({"calibrate", demoSession, "--out", profile});
    QCOMPARE(calibrated.exitCode, 0);
    qInfo("%s", qPrintable(calibrated.out));
    // The fit reproduces the session it came from.
    QVERIFY(std::abs(plannedStep(m_dir.filePath("demo.json"), profile) / measuredStep(demoSession) - 1) < 0.02);

    struct Layout {
        const char* name;
        int dp, pp, tp, ep;
    };
    for (const Layout& l : {Layout{"dp2-ep2", 2, 1, 1, 2}, Layout{"pp2-tp2", 1, 2, 2, 1}, Layout{"dp2-pp2-ep2", 2, 2, 1, 2}}) {
        json job = demo();
        job["parallel"].update({{"dp", l.dp}, {"pp", l.pp}, {"tp", l.tp}, {"ep", l.ep}});
        job["cluster"]["devices_per_node"] = l.dp * l.pp * l.tp;
        const QString session = run(l.name, job);
        QVERIFY2(!session.isEmpty(), l.name);
        const double measured = measuredStep(session);
        const double table = plannedStep(m_dir.filePath(QString(l.name) + ".json"));
        const double fitted = plannedStep(m_dir.filePath(QString(l.name) + ".json"), profile);
        qInfo("%s: measured %.1f ms, planned %.1f ms from the table (%+.0f%%), %.1f ms calibrated (%+.0f%%)", l.name,
              measured * 1e3, table * 1e3, 100 * (table / measured - 1), fitted * 1e3, 100 * (fitted / measured - 1));
        QVERIFY2(measured > 0 && table > 0 && fitted > 0, l.name);
        QVERIFY2(fitted / measured > 0.4 && fitted / measured < 2.5, l.name);
        QVERIFY2(table / measured > 0.4 && table / measured < 2.5, l.name);
    }
}

void TestCalibrate::badInput()
{
    ProcessRun r = engine({"calibrate"});
    QCOMPARE(r.exitCode, 2);
    r = engine({"calibrate", m_dir.filePath("missing.db")});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("missing.db"), qPrintable(r.err));

    const QString broken = m_dir.filePath("broken.json");
    std::ofstream(broken.toStdString()) << R"({"source": "x", "matmul_efficiency": 3})";
    r = engine({"plan", QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"), "--profile", broken});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("matmul_efficiency"), qPrintable(r.err));
    r = engine({"plan", QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"), "--profile",
                m_dir.filePath("absent.json")});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("absent.json"), qPrintable(r.err));
}

QTEST_GUILESS_MAIN(TestCalibrate)
#include "tst_calibrate.moc"
