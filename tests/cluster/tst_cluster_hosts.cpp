// meshbench-engine across hosts: the test hosts (tests/hosts/test_hosts.sh: network namespaces on
// a private bridge, each with its own address and host name, entered by mpirun through netns_rsh
// where it would use ssh). The engine and its collector stay on this machine's side of the bridge;
// the ranks run on the hosts, four to a host, as a hostfile places them.

#include "store/session_store.h"
#include "wire/telemetry.h"

#include "common/process_run.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <map>

using namespace meshbench;

namespace {

const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
const QString kDemo = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
const QString kHostsScript = QStringLiteral(MESHBENCH_SOURCE_DIR "/tests/hosts/test_hosts.sh");
const QString kHostfile = QStringLiteral(MESHBENCH_TEST_HOSTS_DIR "/hostfile");
// The bridge's address on this machine, where the hosts reach the collector.
const QString kCollector = QStringLiteral("tcp://10.250.77.1:*");

// One side of a pipeline transfer, keyed so that a send and its receive meet.
struct TransferKey {
    bool activation;
    std::int32_t step, microbatch, chunk;
    std::uint32_t from, to;
    auto operator<=>(const TransferKey&) const = default;
};

// The session's transfers between ranks, send and receive side by side.
std::map<TransferKey, std::pair<wire::SpanRecord, wire::SpanRecord>> transfers(const store::SessionReader& session)
{
    std::map<TransferKey, std::pair<wire::SpanRecord, wire::SpanRecord>> pairs;
    session.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                  [&](const store::StoredSpan& stored) {
                      const wire::SpanRecord& s = stored.span;
                      const auto peer = std::uint32_t(s.peerRank);
                      switch (s.kind) {
                      case wire::SpanKind::SendActivation:
                      case wire::SpanKind::SendGradient:
                          pairs[{s.kind == wire::SpanKind::SendActivation, s.step, s.microbatch, s.chunk, stored.rank, peer}]
                              .first = s;
                          break;
                      case wire::SpanKind::RecvActivation:
                      case wire::SpanKind::RecvGradient:
                          pairs[{s.kind == wire::SpanKind::RecvActivation, s.step, s.microbatch, s.chunk, peer, stored.rank}]
                              .second = s;
                          break;
                      default:
                          break;
                      }
                  });
    return pairs;
}

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

    // mbt-h2's clock 3 s ahead: every rank there measures +3 s (to 5 ms), those on mbt-h1 0, and
    // the stored spans are on the engine's clock: no receive ends before its send began (1 ms
    // allowed), in either direction across the hosts, which a misalignment of more than the
    // transfers' own slack would break.
    void clockOffsetIsMeasuredAndRemoved()
    {
        constexpr std::int64_t kSkewNs = 3'000'000'000;
        QTemporaryDir dir;
        const QString session = dir.filePath("skewed.meshbench");
        QProcess engine;
        QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
        environment.insert("MBT_CLOCK_SKEW_HOST", "mbt-h2");
        environment.insert("MBT_CLOCK_SKEW_NS", QString::number(kSkewNs));
        engine.setProcessEnvironment(environment);
        engine.start(kEngine, {"run", kDemo, "--steps", "5", "--session", session, "--hostfile", kHostfile,
                               "--collector", kCollector});
        QVERIFY(engine.waitForFinished(300000));
        QVERIFY2(engine.exitCode() == 0, engine.readAllStandardError().constData());

        const store::SessionReader reader(session.toStdString());
        std::map<std::uint32_t, int> measured;
        for (const auto& [rank, offset] : reader.clockOffsets()) {
            const std::int64_t expected = rank < 4 ? 0 : kSkewNs;
            QVERIFY2(std::abs(offset.offsetNs - expected) <= 5'000'000,
                     qPrintable(QString("rank %1 measured %2 ns, expected %3").arg(rank).arg(offset.offsetNs).arg(expected)));
            ++measured[rank];
        }
        QCOMPARE(measured.size(), std::size_t(8));

        int forward = 0, backward = 0;
        for (const auto& [key, pair] : transfers(reader)) {
            const auto& [send, receive] = pair;
            QVERIFY2(send.endNs > 0 && receive.endNs > 0, "a transfer with one side missing");
            if ((key.from < 4) == (key.to < 4))
                continue;
            (key.from < 4 ? forward : backward) += 1;
            QVERIFY2(receive.endNs >= send.beginNs - 1'000'000,
                     qPrintable(QString("rank %1 received step %2 micro-batch %3 from rank %4 %5 ns before it was sent")
                                    .arg(key.to).arg(key.step).arg(key.microbatch).arg(key.from)
                                    .arg(send.beginNs - receive.endNs)));
        }
        QVERIFY(forward > 0 && backward > 0);
    }
};

QTEST_GUILESS_MAIN(ClusterHosts)
#include "tst_cluster_hosts.moc"
