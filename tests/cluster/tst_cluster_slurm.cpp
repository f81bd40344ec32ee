// meshbench-engine under Slurm: the test Slurm (tests/slurm/slurm_cluster.sh: munged, slurmctld and
// slurmd of Debian's packages, configured under the build folder) runs the demo as one job step
// through srun and PMIx, and a job cancelled with scancel is stopped, not failed.

#include "store/session_store.h"

#include "common/process_run.h"
#include "common/session_checks.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <fstream>

using namespace meshbench;

namespace {

const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
const QString kDemo = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
const QString kSlurmScript = QStringLiteral(MESHBENCH_SOURCE_DIR "/tests/slurm/slurm_cluster.sh");
const QString kSlurmDir = QStringLiteral(MESHBENCH_TEST_SLURM_DIR);

}  // namespace

class ClusterSlurm : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        if (runProcess(kSlurmScript, {"check", kSlurmDir}).exitCode != 0)
            QSKIP("no test Slurm (tests/slurm/slurm_cluster.sh up needs root and Debian's slurmctld, slurmd, munge)");
        qputenv("SLURM_CONF", (kSlurmDir + "/slurm.conf").toUtf8());
    }

    // The demo's 8 ranks as one Slurm job step: the same losses as under mpirun on this machine,
    // every rank's records stored, none lost.
    void demoRunsThroughSrun()
    {
        QTemporaryDir dir;
        const QString slurm = dir.filePath("slurm.meshbench"), mpirun = dir.filePath("mpirun.meshbench");
        const ProcessRun viaSrun = runProcess(kEngine, {"run", kDemo, "--slurm", "--steps", "4", "--session", slurm});
        QVERIFY2(viaSrun.exitCode == 0, qPrintable(viaSrun.out + viaSrun.err));
        const ProcessRun viaMpirun = runProcess(kEngine, {"run", kDemo, "--steps", "4", "--session", mpirun});
        QVERIFY2(viaMpirun.exitCode == 0, qPrintable(viaMpirun.err));

        const store::SessionReader session(slurm.toStdString()), reference(mpirun.toStdString());
        QCOMPARE(session.outcome().outcome, store::Outcome::Completed);
        std::map<int, double> losses, expected;
        for (const auto& m : session.stepMetrics())
            losses[m.record.step] = m.record.loss;
        for (const auto& m : reference.stepMetrics())
            expected[m.record.step] = m.record.loss;
        QCOMPARE(losses.size(), std::size_t(4));
        QVERIFY(losses == expected);
        const std::vector<store::RankTraffic> traffic = session.traffic();
        QCOMPARE(traffic.size(), std::size_t(8));
        for (const store::RankTraffic& t : traffic) {
            QVERIFY2(t.received > 0, qPrintable(QString("rank %1 sent nothing").arg(t.rank)));
            QCOMPARE(t.lost + t.dropped, std::uint64_t(0));
        }
        bool launchedWithSrun = false;
        for (const auto& log : session.logs())
            launchedWithSrun = launchedWithSrun || log.record.text.rfind("launching: srun --mpi=pmix", 0) == 0;
        QVERIFY(launchedWithSrun);
    }

    // A launch command that fails on one task before it reports anything, the others waiting for an
    // hour: the run fails naming that task's rank, its status and its last stderr line (the wrapper's
    // line and srun's --label, launcher_report.h), and the other tasks are taken down with the step.
    void aLaunchCommandFailingOnOneTaskIsNamed()
    {
        QTemporaryDir dir;
        std::ifstream in(kDemo.toStdString());
        nlohmann::json doc = nlohmann::json::parse(in);
        doc["launch"] = {{"command",
                          {"/bin/sh", "-c",
                           "if [ \"$SLURM_PROCID\" = 3 ]; then echo 'reading shard 3: no such file' >&2; exit 4; fi; "
                           "exec sleep 3600"}}};
        const QString job = dir.filePath("failing-launch.json"), session = dir.filePath("failing.meshbench");
        std::ofstream(job.toStdString()) << doc.dump();
        const ProcessRun run = runProcess(kEngine, {"run", job, "--slurm", "--session", session});
        QCOMPARE(run.exitCode, 3);
        const store::SessionOutcome outcome = store::SessionReader(session.toStdString()).outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Failed);
        QCOMPARE(outcome.failedRank, 3);
        const QString cause = QString::fromStdString(outcome.cause);
        QVERIFY2(cause.startsWith("rank 3 "), qPrintable(cause));
        QVERIFY2(cause.contains("exited with status 4 before reporting anything (its last stderr line: reading shard "
                                "3: no such file)"),
                 qPrintable(cause));
        QCOMPARE(testing::integrityCheck(session.toStdString()), std::string("ok"));
        QTRY_VERIFY_WITH_TIMEOUT(runProcess("squeue", {"-h"}).out.trimmed().isEmpty(), 60000);
    }

    // scancel of the running job: the session is stopped, with Slurm's word for it, and sound.
    void scancelStopsTheRun()
    {
        QTemporaryDir dir;
        std::ifstream in(kDemo.toStdString());
        nlohmann::json doc = nlohmann::json::parse(in);
        doc["train"]["steps"] = 2000;
        doc["train"]["decay_steps"] = 2000;
        const QString job = dir.filePath("long-demo.json"), session = dir.filePath("cancelled.meshbench");
        std::ofstream(job.toStdString()) << doc.dump();
        QProcess engine;
        engine.start(kEngine, {"run", job, "--slurm", "--session", session});
        QVERIFY2(testing::waitForSteps(session, 2), "the job did not get going under Slurm");
        const QStringList jobs = runProcess("squeue", {"-h", "-o", "%A"}).out.split('\n', Qt::SkipEmptyParts);
        QCOMPARE(jobs.size(), 1);
        QCOMPARE(runProcess("scancel", {jobs.front().trimmed()}).exitCode, 0);
        QVERIFY(engine.waitForFinished(120000));
        QCOMPARE(engine.exitCode(), 4);
        const store::SessionReader reader(session.toStdString());
        const store::SessionOutcome outcome = reader.outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Stopped);
        QVERIFY2(outcome.cause.rfind("cancelled in Slurm (scancel) at ", 0) == 0, outcome.cause.c_str());
        QCOMPARE(testing::integrityCheck(session.toStdString()), std::string("ok"));
        QVERIFY(reader.stepMetrics().size() >= 2);
        // Slurm finishes the job's cleanup (state CG) on its own time.
        QTRY_VERIFY_WITH_TIMEOUT(runProcess("squeue", {"-h"}).out.trimmed().isEmpty(), 60000);
    }
};

QTEST_GUILESS_MAIN(ClusterSlurm)
#include "tst_cluster_slurm.moc"
