// meshbench-engine across hosts: the test hosts (tests/hosts/test_hosts.sh: network namespaces on
// a private bridge, each with its own address and host name, entered by mpirun through netns_rsh
// where it would use ssh). The engine and its collector stay on this machine's side of the bridge;
// the ranks run on the hosts, four to a host, as a hostfile places them.

#include "store/session_store.h"

#include "common/process_run.h"

#include <QtTest>

#include <cmath>
#include <map>

using namespace meshbench;

namespace {

const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
const QString kDemo = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
const QString kHostsScript = QStringLiteral(MESHBENCH_SOURCE_DIR "/tests/hosts/test_hosts.sh");
const QString kHostfile = QStringLiteral(MESHBENCH_TEST_HOSTS_DIR "/hostfile");
// The bridge's address on this machine, where the hosts reach the collector.
const QString kCollector = QStringLiteral("tcp://10.250.77.1:*");

std::map<int, double> lossByStep(const store::SessionReader& session)
{
    std::map<int, double> losses;
    for (const auto& m : session.stepMetrics())
        if (m.rank == 0)
            losses[m.record.step] = m.record.loss;
    return losses;
}

}  // namespace

class ClusterHosts : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        if (runProcess(kHostsScript, {"check"}).exitCode != 0)
            QSKIP("no test hosts (tests/hosts/test_hosts.sh up needs root)");
    }

    // The demo's 8 ranks, 4 on each of two hosts, train exactly as 8 ranks on one host: the same
    // loss every step, every record of every rank stored, and each rank's host as it ran.
    void demoAcrossTwoHostsEqualsOneHost()
    {
        QTemporaryDir dir;
        const QString local = dir.filePath("one-host.meshbench"), hosts = dir.filePath("two-hosts.meshbench");
        const ProcessRun oneHost = runProcess(kEngine, {"run", kDemo, "--steps", "5", "--session", local});
        QVERIFY2(oneHost.exitCode == 0, qPrintable(oneHost.err));
        const ProcessRun twoHosts = runProcess(
            kEngine, {"run", kDemo, "--steps", "5", "--session", hosts, "--hostfile", kHostfile, "--collector", kCollector});
        QVERIFY2(twoHosts.exitCode == 0, qPrintable(twoHosts.out + twoHosts.err));

        const store::SessionReader reference(local.toStdString()), across(hosts.toStdString());
        QCOMPARE(across.outcome().outcome, store::Outcome::Completed);
        const std::map<int, double> expected = lossByStep(reference), measured = lossByStep(across);
        QCOMPARE(measured.size(), std::size_t(5));
        QCOMPARE(expected.size(), measured.size());
        for (const auto& [step, loss] : expected)
            QVERIFY2(std::abs(measured.at(step) - loss) <= 1e-5 * std::abs(loss),
                     qPrintable(QString("step %1: %2 across hosts, %3 on one").arg(step).arg(measured.at(step)).arg(loss)));

        const std::vector<store::RankTraffic> traffic = across.traffic();
        QCOMPARE(traffic.size(), std::size_t(8));
        for (const store::RankTraffic& t : traffic) {
            QVERIFY2(t.received > 0, qPrintable(QString("rank %1 sent nothing").arg(t.rank)));
            QCOMPARE(t.lost, std::uint64_t(0));
            QCOMPARE(t.dropped, std::uint64_t(0));
        }
        // The hostfile fills mbt-h1's four slots first.
        for (const store::RankInfo& r : across.header().ranks)
            QCOMPARE(QString::fromStdString(r.host), QString(r.rank < 4 ? "mbt-h1" : "mbt-h2"));
    }
};

QTEST_GUILESS_MAIN(ClusterHosts)
#include "tst_cluster_hosts.moc"
