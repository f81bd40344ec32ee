// meshbench-engine across hosts: the test hosts (tests/hosts/test_hosts.sh: network namespaces on
// a private bridge, each with its own address and host name, entered by mpirun through netns_rsh
// where it would use ssh). The engine and its collector stay on this machine's side of the bridge;
// the ranks run on the hosts, four to a host, as a hostfile places them.

#include "store/session_store.h"
#include "wire/telemetry.h"

#include <zmq.hpp>

#include "common/process_run.h"
#include "common/session_checks.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <csignal>
#include <fstream>
#include <map>
#include <set>

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

// The processes in a test host's network namespace (its shell, Open MPI's daemon, its ranks).
std::vector<int> hostProcesses(const QString& host)
{
    std::vector<int> pids;
    for (const QString& line : runProcess("ip", {"netns", "pids", host}).out.split('\n', Qt::SkipEmptyParts))
        pids.push_back(line.toInt());
    return pids;
}

// The demo made long enough to be interrupted.
QString longDemo(const QTemporaryDir& dir)
{
    std::ifstream in(kDemo.toStdString());
    nlohmann::json doc = nlohmann::json::parse(in);
    doc["train"]["steps"] = 2000;
    doc["train"]["decay_steps"] = 2000;
    const QString path = dir.filePath("long-demo.json");
    std::ofstream(path.toStdString()) << doc.dump();
    return path;
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

    // A host lost three ways, three times each, while the demo runs across both hosts: all its
    // processes killed (the node dies), its link taken down, every rank on it stopped (it
    // freezes). Each time the session says failed, naming the host, its ranks and what was seen;
    // the engine says so within 5 s of the fault and has torn the job down within 10 s; the file
    // is sound and holds every step stored before the fault, with no record lost on the way.
    void aLostHostIsNamed_data()
    {
        QTest::addColumn<QString>("fault");
        QTest::addColumn<QString>("seen");
        for (int trial = 1; trial <= 3; ++trial) {
            QTest::addRow("node dies, trial %d", trial) << "kill" << "its processes are gone: the node died";
            QTest::addRow("link down, trial %d", trial) << "link" << "its processes run but are not heard: its network is down";
            QTest::addRow("host freezes, trial %d", trial) << "stop" << "its processes are stopped: the host froze";
        }
    }

    void aLostHostIsNamed()
    {
        QFETCH(QString, fault);
        QFETCH(QString, seen);
        QTemporaryDir dir;
        const QString session = dir.filePath("fault.meshbench");
        QProcess engine;
        engine.start(kEngine, {"run", longDemo(dir), "--session", session, "--hostfile", kHostfile, "--collector",
                               kCollector, "--heartbeat-timeout", "2"});
        QVERIFY2(testing::waitForSteps(session, 3), "the demo did not get going across the hosts");
        const int stepsBefore = testing::storedSteps(session);
        const store::SessionReader running(session.toStdString());
        std::set<int> ranksOnHost;
        for (const auto& h : running.heartbeats())
            if (h.record.host == "mbt-h2")
                ranksOnHost.insert(h.record.pid);
        QCOMPARE(ranksOnHost.size(), std::size_t(4));

        const std::int64_t faultNs = wire::wallAlignedNowNs();
        if (fault == "kill") {
            for (int pid : hostProcesses("mbt-h2"))
                kill(pid, SIGKILL);
        } else if (fault == "link") {
            QCOMPARE(runProcess("ip", {"link", "set", "mbt-h2-v", "down"}).exitCode, 0);
        } else {
            for (int pid : ranksOnHost)
                kill(pid, SIGSTOP);
        }
        const bool ended = engine.waitForFinished(120000);
        // The engine's teardown must have ended every rank of the host, before the test cleans up.
        std::vector<int> outlived;
        for (int pid : ranksOnHost)
            if (QFile::exists(QString("/proc/%1/cmdline").arg(pid)) &&
                !runProcess("ps", {"-o", "stat=", "-p", QString::number(pid)}).out.trimmed().startsWith('Z'))
                outlived.push_back(pid);
        // The host is given back whole to the next test, whatever happened here.
        runProcess("ip", {"link", "set", "mbt-h2-v", "up"});
        for (int pid : hostProcesses("mbt-h2")) {
            kill(pid, SIGKILL);
            kill(pid, SIGCONT);
        }
        QVERIFY(ended);
        QVERIFY2(outlived.empty(), qPrintable(QString("%1 ranks of mbt-h2 outlived the job").arg(outlived.size())));
        QCOMPARE(engine.exitCode(), 3);

        const store::SessionReader reader(session.toStdString());
        const store::SessionOutcome outcome = reader.outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Failed);
        const QString cause = QString::fromStdString(outcome.cause);
        QVERIFY2(cause.startsWith("host mbt-h2 was lost with all its ranks (4-7)") && cause.contains(seen),
                 qPrintable(cause));
        std::int64_t namedNs = 0;
        for (const auto& log : reader.logs())
            if (log.rank == store::kEngineRank && log.record.level == wire::LogLevel::Error && namedNs == 0 &&
                log.record.text.find("host mbt-h2") != std::string::npos)
                namedNs = log.record.timeNs;
        QVERIFY(namedNs > faultNs);
        QVERIFY2(namedNs - faultNs <= 5'000'000'000, qPrintable(QString("named %1 ms after the fault").arg((namedNs - faultNs) / 1'000'000)));
        QVERIFY2(outcome.endedNs - faultNs <= 10'000'000'000,
                 qPrintable(QString("torn down %1 ms after the fault").arg((outcome.endedNs - faultNs) / 1'000'000)));

        QCOMPARE(testing::integrityCheck(session.toStdString()), std::string("ok"));
        QVERIFY(int(reader.stepMetrics().size()) >= stepsBefore);
        for (const store::RankTraffic& t : reader.traffic())
            QCOMPARE(t.lost, std::uint64_t(0));
    }

    // Off loopback the collector and the clock server take only the run's own agents, over CURVE:
    // a plaintext sender and one holding another server's key, each posing as rank 0, are refused
    // (and said so), and nothing of theirs reaches the session, while the job completes.
    void strangersCannotReachTheCollector()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("guarded.meshbench");
        QProcess engine;
        engine.start(kEngine, {"run", kDemo, "--steps", "5", "--session", session, "--hostfile", kHostfile,
                               "--collector", kCollector});
        QString endpoint;
        while (endpoint.isEmpty() && engine.waitForReadyRead(120000))
            while (engine.canReadLine()) {
                const QString line = QString::fromUtf8(engine.readLine());
                if (line.startsWith("collector "))
                    endpoint = line.section(' ', 1, 1).remove(',');
            }
        QVERIFY2(endpoint.startsWith("tcp://10.250.77.1:"), qPrintable(endpoint));

        zmq::context_t context;
        zmq::socket_t plain(context, zmq::socket_type::push), forged(context, zmq::socket_type::push);
        char serverKey[41], publicKey[41], secretKey[41];
        QCOMPARE(zmq_curve_keypair(serverKey, secretKey), 0);   // some other server's
        QCOMPARE(zmq_curve_keypair(publicKey, secretKey), 0);
        forged.set(zmq::sockopt::curve_serverkey, std::string(serverKey));
        forged.set(zmq::sockopt::curve_publickey, std::string(publicKey));
        forged.set(zmq::sockopt::curve_secretkey, std::string(secretKey));
        const std::vector<std::uint8_t> frame = wire::encodeBatch(
            {0, 0, {wire::LogRecord{wire::wallAlignedNowNs(), wire::LogLevel::Error, "a stranger's record"}}});
        for (zmq::socket_t* socket : {&plain, &forged}) {
            socket->set(zmq::sockopt::linger, 0);
            socket->connect(endpoint.toStdString());
            QVERIFY(socket->send(zmq::const_buffer(frame.data(), frame.size()), zmq::send_flags::dontwait));
        }
        QVERIFY(engine.waitForFinished(300000));
        QCOMPARE(engine.exitCode(), 0);
        const QString err = QString::fromUtf8(engine.readAllStandardError());
        QVERIFY2(err.contains("refused a client on the telemetry collector"), qPrintable(err));
        const store::SessionReader reader(session.toStdString());
        QCOMPARE(reader.outcome().outcome, store::Outcome::Completed);
        for (const auto& log : reader.logs())
            QVERIFY2(log.record.text.find("stranger") == std::string::npos, log.record.text.c_str());
        for (const store::RankTraffic& t : reader.traffic())
            QCOMPARE(t.lost, std::uint64_t(0));
    }
};

QTEST_GUILESS_MAIN(ClusterHosts)
#include "tst_cluster_hosts.moc"
