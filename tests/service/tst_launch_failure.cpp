// A launch command that fails on one rank before it reports anything (an import error, a missing file,
// a crash, a program that does not report at all): `meshbench-engine run` fails (exit 3) naming that
// rank, how it ended and its last stderr line, under mpirun, which names no rank of such a program
// reliably (Open MPI 4.1.4 names none of these). The other ranks would wait for ever; they are taken
// down with the job.

#include "store/session_store.h"

#include "common/process_run.h"
#include "common/session_checks.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include <sys/resource.h>

using namespace meshbench;

namespace {

const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
const QString kDemo = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");

// The demo's job (8 ranks) with `script` as every rank's launch command, run by /bin/sh -c.
QString launchJob(const QString& dir, const std::string& script)
{
    std::ifstream in(kDemo.toStdString());
    std::ostringstream text;
    text << in.rdbuf();
    nlohmann::json doc = nlohmann::json::parse(text.str());
    doc["launch"] = {{"command", {"/bin/sh", "-c", script}}};
    QString job = dir + "/launch.json";
    std::ofstream(job.toStdString()) << doc.dump();
    return job;
}

}  // namespace

class TestLaunchFailure : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        // A rank ended by SIGSEGV would leave a core file behind.
        const rlimit noCores{0, 0};
        setrlimit(RLIMIT_CORE, &noCores);
    }

    void aRankThatFailsBeforeReportingIsNamed_data()
    {
        QTest::addColumn<QString>("script");  // every rank's; the others wait to be taken down
        QTest::addColumn<int>("rank");
        QTest::addColumn<QString>("how");  // the cause after the rank's words, up to the launcher's end
        QTest::newRow("a status, with a line on stderr")
            << "if [ \"$OMPI_COMM_WORLD_RANK\" = 5 ]; then echo 'reading data.bin: No such file or directory' >&2; "
               "echo 'giving up' >&2; exit 7; fi; exec sleep 60"
            << 5 << "exited with status 7 before reporting anything (its last stderr line: giving up)";
        // Rank 0; nothing on stderr.
        QTest::newRow("rank 0, silently") << "[ \"$OMPI_COMM_WORLD_RANK\" = 0 ] && exit 3; exec sleep 60" << 0
                                          << "exited with status 3 before reporting anything";
        QTest::newRow("a Python import error")
            << "[ \"$OMPI_COMM_WORLD_RANK\" = 2 ] && exec python3 -c 'import meshbench_no_such_module'; exec sleep 60"
            << 2
            << "exited with status 1 before reporting anything (its last stderr line: ModuleNotFoundError: No module "
               "named 'meshbench_no_such_module')";
        // The shell it runs under says how it was killed (dash: "Segmentation fault"): the rank's own
        // last line is the one named.
        QTest::newRow("a crash") << "[ \"$OMPI_COMM_WORLD_RANK\" = 4 ] && { echo 'about to crash' >&2; kill -SEGV $$; "
                                    "}; exec sleep 60"
                                 << 4
                                 << "was killed by signal 11 (Segmentation fault) before reporting anything (its last "
                                    "stderr line: about to crash)";
    }

    void aRankThatFailsBeforeReportingIsNamed()
    {
        QFETCH(QString, script);
        QFETCH(int, rank);
        QFETCH(QString, how);
        QTemporaryDir dir;
        const QString job = launchJob(dir.path(), script.toStdString());
        const QString session = dir.filePath("failing.meshbench");
        const ProcessRun run = runProcess(kEngine, {"run", job, "--session", session});
        QVERIFY2(run.exitCode == 3, qPrintable(QString::number(run.exitCode) + "\n" + run.out + run.err));
        const store::SessionOutcome outcome = store::SessionReader(session.toStdString()).outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Failed);
        QCOMPARE(outcome.failedRank, rank);
        // "rank 5 (dp1 pp0 tp1 ep1) exited with status 7 ...; mpirun exited with status 7": mpirun's own
        // status is its to choose.
        const QRegularExpression cause("^rank " + QString::number(rank) + " \\(dp\\d pp\\d tp\\d ep\\d\\) " +
                                       QRegularExpression::escape(how) + "; mpirun exited with status \\d+$");
        QVERIFY2(cause.match(QString::fromStdString(outcome.cause)).hasMatch(), outcome.cause.c_str());
        QVERIFY2(run.err.contains(QString::fromStdString(outcome.cause)), qPrintable(run.err));
        QCOMPARE(testing::integrityCheck(session.toStdString()), std::string("ok"));
    }
};

QTEST_GUILESS_MAIN(TestLaunchFailure)
#include "tst_launch_failure.moc"
