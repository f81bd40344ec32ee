// meshbench-engine across hosts: the test hosts (tests/hosts/test_hosts.sh: network namespaces on
// a private bridge, each with its own address and host name, entered by mpirun through netns_rsh
// where it would use ssh). The engine and its collector stay on this machine's side of the bridge;
// the ranks run on the hosts, four to a host, as a hostfile places them.

#include "store/session_store.h"
#include "wire/clock.h"
#include "wire/telemetry.h"
#include "wire/wall_clock.h"

#include <zmq.hpp>

#include "common/process_run.h"
#include "common/session_checks.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <fstream>
#include <limits>
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
    // NOLINTNEXTLINE(modernize-use-nullptr): false positive, clang-tidy 14 flags the `0` of the defaulted <=>
    auto operator<=>(const TransferKey&) const = default;
};

// The session's transfers between ranks, send and receive side by side.
std::map<TransferKey, std::pair<wire::SpanRecord, wire::SpanRecord>> transfers(const store::SessionReader& session)
{
    std::map<TransferKey, std::pair<wire::SpanRecord, wire::SpanRecord>> pairs;
    session.spans(
        std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
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
    QString path = dir.filePath("long-demo.json");
    std::ofstream(path.toStdString()) << doc.dump();
    return path;
}

// Links back up, and neighbour caches fresh, after a test cut them (test_hosts.sh heal).
void heal()
{
    const ProcessRun healed = runProcess(kHostsScript, {"heal"});
    if (healed.exitCode != 0)
        qFatal("cannot give the test hosts back: %s", qPrintable(healed.err));
}

// Whether the engine got the demo going across the hosts (3 steps stored); false as soon as it
// ended without, or after 2 minutes.
bool going(QProcess& engine, const QString& session)
{
    QElapsedTimer timer;
    timer.start();
    while (timer.elapsed() < 120000) {
        if (testing::storedSteps(session) >= 3)
            return true;
        if (engine.waitForFinished(100))  // the poll's pause, and the engine's end if it comes
            return false;
    }
    return false;
}

// What an engine that did not get the demo going said, and what runs on its behalf and on the hosts.
QString notGoing(QProcess& engine)
{
    QString said = "the demo did not get going across the hosts\n";
    const qint64 pid = engine.processId();  // 0 once it has ended
    if (pid > 0)
        said += runProcess("ps", {"-o", "pid=,stat=,wchan:32=,args=", "--forest", "-g", QString::number(pid)}).out;
    for (const QString host : {"mbt-h1", "mbt-h2"})
        for (int p : hostProcesses(host))
            said += QString("%1: %2 %3\n")
                        .arg(host)
                        .arg(p)
                        .arg(runProcess("ps", {"-o", "stat=,args=", "-p", QString::number(p)}).out.trimmed());
    // Asked to stop, it says what it had done.
    if (pid > 0)
        kill(pid_t(pid), SIGINT);
    engine.waitForFinished(60000);
    return said + "the engine said:\n" + QString::fromUtf8(engine.readAllStandardOutput()) +
           QString::fromUtf8(engine.readAllStandardError());
}

// How far a rank's records, moved onto the engine's clock, can be from where they belong, from what
// the clock exchange itself knows (RFC 5905, sec. 8): a sample's offset is off by at most half its
// round trip, and the engine carries it forward at the drift it fitted (wire::RankClock), which may
// differ from the true drift by that fitted drift plus NTP's frequency tolerance PHI (15 ppm) for
// every second since the sample.
class OffsetErrorBound {
public:
    // The rank's stored offsets, in the order the engine took them (their times on its clock).
    explicit OffsetErrorBound(const std::vector<wire::ClockOffsetRecord>& samples)
    {
        wire::RankClock clock;
        for (const wire::ClockOffsetRecord& s : samples) {
            // Stored at the engine's clock as the sample itself moved it: rank time minus its offset.
            clock.add(s.timeNs + s.offsetNs, s.offsetNs);
            m_samples.push_back({s.timeNs, s.roundTripNs, std::abs(clock.driftNsPerSecond())});
        }
    }
    bool empty() const { return m_samples.empty(); }
    // The bound at `engineNs` (the engine's clock): the engine used the last sample before it, or,
    // for a record posted while the exchange ran, the one that exchange gave; the larger of the two.
    double at(std::int64_t engineNs) const
    {
        constexpr double kPhiNsPerSecond = 15e-6 * 1e9;
        const auto next = std::upper_bound(m_samples.begin(), m_samples.end(), engineNs,
                                           [](std::int64_t t, const Sample& s) { return t < s.engineNs; });
        double bound = 0;
        for (auto it : {next, next == m_samples.begin() ? next : std::prev(next)})
            if (it != m_samples.end())
                bound = std::max(bound, double(it->roundTripNs) / 2 + std::abs(double(engineNs - it->engineNs)) * 1e-9 *
                                                                          (it->driftNsPerSecond + kPhiNsPerSecond));
        return bound;
    }

private:
    struct Sample {
        std::int64_t engineNs;
        std::int64_t roundTripNs;
        double driftNsPerSecond;
    };
    std::vector<Sample> m_samples;
};

// A stopped host's processes into a freezer (cgroup v1) of their own, or out of it: a frozen
// process holds a SIGKILL pending, and stays on its way out, until it is thawed.
const QString kFreezer = QStringLiteral("/sys/fs/cgroup/freezer/meshbench-test-host");

bool freeze(const std::vector<int>& pids)
{
    if (!QDir().mkpath(kFreezer))
        return false;
    for (int pid : pids)
        std::ofstream((kFreezer + "/cgroup.procs").toStdString()) << pid << "\n";
    std::ofstream((kFreezer + "/freezer.state").toStdString()) << "FROZEN\n";
    // FREEZING until every task has stopped; the kernel says FROZEN once they all have.
    for (int i = 0; i < 1000; ++i) {
        std::ifstream state((kFreezer + "/freezer.state").toStdString());
        std::string word;
        if (state >> word && word == "FROZEN")
            return true;
        QThread::msleep(10);
    }
    return false;
}

void thaw()
{
    if (QFile::exists(kFreezer + "/freezer.state"))
        std::ofstream((kFreezer + "/freezer.state").toStdString()) << "THAWED\n";
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
        const ProcessRun twoHosts = runProcess(kEngine, {"run", kDemo, "--steps", "5", "--session", hosts, "--hostfile",
                                                         kHostfile, "--collector", kCollector});
        QVERIFY2(twoHosts.exitCode == 0, qPrintable(twoHosts.out + twoHosts.err));

        const store::SessionReader reference(local.toStdString()), across(hosts.toStdString());
        QCOMPARE(across.outcome().outcome, store::Outcome::Completed);
        const std::map<int, double> expected = lossByStep(reference), measured = lossByStep(across);
        QCOMPARE(measured.size(), std::size_t(5));
        QCOMPARE(expected.size(), measured.size());
        for (const auto& [step, loss] : expected)
            QVERIFY2(
                std::abs(measured.at(step) - loss) <= 1e-5 * std::abs(loss),
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

    // mbt-h2's clock 3 s ahead: every rank there measures +3 s, those on mbt-h1 0, each to within
    // half the round trip of its exchange; and the stored spans are on the engine's clock: no
    // receive ends before its send began, in either direction across the hosts, by more than the
    // two ranks' offsets can be wrong (OffsetErrorBound), which a misalignment beyond what the
    // exchanges measured would break.
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
        std::map<std::uint32_t, std::vector<wire::ClockOffsetRecord>> measured;
        for (const auto& [rank, offset] : reader.clockOffsets()) {
            // The skew is exact (netns_rsh adds it to the same kernel clock), so the offset is off by
            // what the exchange says, plus each process's alignment of its monotonic clock to the
            // wall clock (wire/telemetry.cpp: a bracket of tens of nanoseconds, the best of five),
            // which the exchange cannot see: 100 us allowed for that.
            const std::int64_t expected = rank < 4 ? 0 : kSkewNs;
            QVERIFY2(offset.roundTripNs > 0,
                     qPrintable(QString("rank %1: round trip %2 ns").arg(rank).arg(offset.roundTripNs)));
            QVERIFY2(std::abs(offset.offsetNs - expected) <= offset.roundTripNs / 2 + 100'000,
                     qPrintable(QString("rank %1 measured %2 ns, expected %3 to within %4 ns (half its round trip)")
                                    .arg(rank)
                                    .arg(offset.offsetNs)
                                    .arg(expected)
                                    .arg(offset.roundTripNs / 2)));
            measured[rank].push_back(offset);
        }
        QCOMPARE(measured.size(), std::size_t(8));
        std::map<std::uint32_t, OffsetErrorBound> bounds;
        for (const auto& [rank, samples] : measured)
            bounds.emplace(rank, OffsetErrorBound(samples));

        int forward = 0, backward = 0;
        for (const auto& [key, pair] : transfers(reader)) {
            const auto& [send, receive] = pair;
            QVERIFY2(send.endNs > 0 && receive.endNs > 0, "a transfer with one side missing");
            if ((key.from < 4) == (key.to < 4))
                continue;
            (key.from < 4 ? forward : backward) += 1;
            // Each span was moved with the offset at its begin; the receive's end is that much
            // further from its sample.
            const double slack = bounds.at(key.from).at(send.beginNs) + bounds.at(key.to).at(receive.beginNs) +
                                 double(receive.endNs - receive.beginNs) * 15e-6;
            QVERIFY2(double(receive.endNs) >= double(send.beginNs) - slack,
                     qPrintable(QString("rank %1 received step %2 micro-batch %3 from rank %4 %5 ns before it was "
                                        "sent, where the clock exchanges allow %6 ns")
                                    .arg(key.to)
                                    .arg(key.step)
                                    .arg(key.microbatch)
                                    .arg(key.from)
                                    .arg(send.beginNs - receive.endNs)
                                    .arg(std::llround(slack))));
        }
        QVERIFY(forward > 0 && backward > 0);
    }

    // A host lost three ways, three times each, while the demo runs across both hosts: all its
    // processes killed (the node dies), its link taken down, every rank on it stopped (it
    // freezes); and killed while frozen, so that its processes stay on their way out for as long
    // as the engine looks (a node whose dying processes take their time to go, as on a loaded
    // machine: they are gone all the same). Each time the session says failed, naming the host, its ranks and what was
    // seen; the engine says so within 5 s of the fault and has torn the job down within 10 s; the file is sound and
    // holds every step stored before the fault, with no record lost on the way.
    void aLostHostIsNamed_data()
    {
        QTest::addColumn<QString>("fault");
        QTest::addColumn<QString>("seen");
        for (int trial = 1; trial <= 3; ++trial) {
            QTest::addRow("node dies, trial %d", trial) << "kill"
                                                        << "its processes are gone: the node died";
            QTest::addRow("link down, trial %d", trial) << "link"
                                                        << "its processes run but are not heard: its network is down";
            QTest::addRow("host freezes, trial %d", trial) << "stop"
                                                           << "its processes are stopped: the host froze";
        }
        QTest::addRow("node dies slowly") << "kill-frozen"
                                          << "its processes are gone: the node died";
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
        if (!going(engine, session))
            QFAIL(qPrintable(notGoing(engine)));
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
        } else if (fault == "kill-frozen") {
            const std::vector<int> pids = hostProcesses("mbt-h2");
            QVERIFY2(freeze(pids), "cannot freeze mbt-h2's processes (cgroup v1 freezer)");
            for (int pid : pids)
                kill(pid, SIGKILL);
        } else if (fault == "link") {
            QCOMPARE(runProcess("ip", {"link", "set", "mbt-h2-v", "down"}).exitCode, 0);
        } else {
            for (int pid : ranksOnHost)
                kill(pid, SIGSTOP);
        }
        const bool ended = engine.waitForFinished(120000);
        // The engine's teardown must have ended every rank of the host, before the test cleans up
        // (frozen ones cannot end before they are thawed, whatever anyone sends them).
        QStringList outlived;  // "pid (ps state)"
        for (int pid : ranksOnHost) {
            const QString state = runProcess("ps", {"-o", "stat=", "-p", QString::number(pid)}).out.trimmed();
            if (fault != "kill-frozen" && QFile::exists(QString("/proc/%1/cmdline").arg(pid)) && !state.startsWith('Z'))
                outlived << QString("%1 (%2)").arg(pid).arg(state);
        }
        // The host is given back whole to the next test, whatever happened here.
        thaw();
        for (int pid : hostProcesses("mbt-h2")) {
            kill(pid, SIGKILL);
            kill(pid, SIGCONT);
        }
        heal();
        if (!ended)
            QFAIL(qPrintable("the engine did not end: " + engine.errorString()));
        QVERIFY2(outlived.empty(),
                 qPrintable(
                     QString("%1 ranks of mbt-h2 outlived the job: %2").arg(outlived.size()).arg(outlived.join(", "))));
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
        QVERIFY2(namedNs - faultNs <= 5'000'000'000,
                 qPrintable(QString("named %1 ms after the fault").arg((namedNs - faultNs) / 1'000'000)));
        QVERIFY2(outcome.endedNs - faultNs <= 10'000'000'000,
                 qPrintable(QString("torn down %1 ms after the fault").arg((outcome.endedNs - faultNs) / 1'000'000)));

        QCOMPARE(testing::integrityCheck(session.toStdString()), std::string("ok"));
        QVERIFY(int(reader.stepMetrics().size()) >= stepsBefore);
        const std::vector<store::RankTraffic> traffic = reader.traffic();
        QCOMPARE(traffic.size(), std::size_t(8));
        for (const store::RankTraffic& t : traffic)
            QCOMPARE(t.lost, std::uint64_t(0));
    }

    // The bridge taken down while the demo runs: the engine is cut off from both hosts at once, and
    // every rank falls silent together. The cause is the network, naming both hosts and their
    // ranks, not one rank of them; mpirun, which then cannot reach its daemons either, may crash as
    // it is taken down (Open MPI 4.1's PMIx_Finalize does), and if it does the session says that
    // this followed from the failure, which stands.
    void everyHostCutOffIsTheNetwork()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("cut-off.meshbench");
        QProcess engine;
        engine.start(kEngine, {"run", longDemo(dir), "--session", session, "--hostfile", kHostfile, "--collector",
                               kCollector, "--heartbeat-timeout", "2"});
        if (!going(engine, session))
            QFAIL(qPrintable(notGoing(engine)));
        QCOMPARE(runProcess("ip", {"link", "set", "mbt-br0", "down"}).exitCode, 0);
        const bool ended = engine.waitForFinished(120000);
        for (const QString host : {"mbt-h1", "mbt-h2"})
            for (int pid : hostProcesses(host))
                kill(pid, SIGKILL);
        heal();
        if (!ended)
            QFAIL(qPrintable("the engine did not end: " + engine.errorString()));
        QCOMPARE(engine.exitCode(), 3);

        const store::SessionReader reader(session.toStdString());
        const store::SessionOutcome outcome = reader.outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Failed);
        const QString cause = QString::fromStdString(outcome.cause);
        QVERIFY2(cause.startsWith("the engine lost its network to every host (mbt-h1: ranks 0-3, mbt-h2: ranks 4-7): "
                                  "all 8 ranks fell silent together") &&
                     cause.contains("their processes run but none is heard") && !cause.contains("telemetry thread"),
                 qPrintable(cause));
        QCOMPARE(outcome.failedRank, -1);
        const QString err = QString::fromUtf8(engine.readAllStandardError());
        QVERIFY2(err.contains(cause), qPrintable(err));
        bool crashed = false, crashExplained = false;
        for (const auto& log : reader.logs()) {
            crashed = crashed || log.record.text.find("Signal: Segmentation fault") != std::string::npos;
            crashExplained =
                crashExplained || (log.record.text.find("mpirun crashed") != std::string::npos &&
                                   log.record.text.find("a consequence of the failure above") != std::string::npos);
        }
        QVERIFY2(crashExplained == crashed, qPrintable(err));
        QCOMPARE(testing::integrityCheck(session.toStdString()), std::string("ok"));
    }

    // A host whose link is down before the job starts: Open MPI's daemon there cannot connect back
    // to mpirun, and the job never starts. The cause names that host, what could not reach what,
    // and what to do.
    void anUnreachableHostIsNamed()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("unreachable.meshbench");
        QCOMPARE(runProcess("ip", {"link", "set", "mbt-h2-v", "down"}).exitCode, 0);
        const ProcessRun run = runProcess(kEngine, {"run", kDemo, "--steps", "3", "--session", session, "--hostfile",
                                                    kHostfile, "--collector", kCollector});
        for (int pid : hostProcesses("mbt-h2"))
            kill(pid, SIGKILL);
        heal();
        QCOMPARE(run.exitCode, 3);
        const store::SessionOutcome outcome = store::SessionReader(session.toStdString()).outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Failed);
        const QString cause = QString::fromStdString(outcome.cause);
        QVERIFY2(cause.startsWith("host mbt-h2 cannot be reached from ") &&
                     cause.contains("Open MPI's daemon there could not open a TCP connection back to mpirun") &&
                     cause.contains("leave mbt-h2 out of the hostfile"),
                 qPrintable(cause));
        QCOMPARE(outcome.failedRank, -1);
        QVERIFY2(run.err.contains(cause), qPrintable(run.err));
    }

    // Stopping a run across hosts (Ctrl-C) is the engine's doing: the session says stopped, and
    // none of Open MPI's launch text reaches the terminal or the session's log (it used to print
    // "ORTE was unable to reliably start one or more daemons" on every stop, its reading of the
    // daemons' ssh sessions ended under it).
    void anOrderlyStopLeavesOpenMpiQuiet()
    {
        QTemporaryDir dir;
        const QString session = dir.filePath("stopped.meshbench");
        QProcess engine;
        engine.start(kEngine,
                     {"run", longDemo(dir), "--session", session, "--hostfile", kHostfile, "--collector", kCollector});
        if (!going(engine, session))
            QFAIL(qPrintable(notGoing(engine)));
        kill(pid_t(engine.processId()), SIGINT);
        QVERIFY(engine.waitForFinished(120000));
        const QString err = QString::fromUtf8(engine.readAllStandardError());
        QCOMPARE(engine.exitCode(), 4);
        // What Open MPI says of a stop under it: the daemons' sessions ended before mpirun ordered
        // them down, the engine's signal forwarded, ranks whose peers ended first. (What it may say
        // at launch, e.g. plm_rsh's setpgid warning on a loaded machine, is not the stop's.)
        for (const char* text : {"ORTE was unable to reliably start", "Forwarding signal", "Read -1, expected",
                                 "peer hung up", "mpirun noticed", "mpirun detected", "abort is already in progress"})
            QVERIFY2(!err.contains(text), qPrintable(err));

        const store::SessionReader reader(session.toStdString());
        QCOMPARE(reader.outcome().outcome, store::Outcome::Stopped);
        // Nothing at warning level from the moment the engine began the stop.
        std::int64_t stopNs = 0;
        int warnings = 0;
        for (const auto& log : reader.logs()) {
            if (log.rank != store::kEngineRank)
                continue;
            if (stopNs == 0 && log.record.text == "stopped by the user; stopping the job")
                stopNs = log.record.timeNs;
            if (stopNs != 0 && log.record.level >= wire::LogLevel::Warning) {
                ++warnings;
                qWarning("%s", log.record.text.c_str());
            }
        }
        QVERIFY(stopNs != 0);
        QCOMPARE(warnings, 0);
    }

    void cleanupTestCase()
    {
        thaw();
        QDir().rmdir(kFreezer);
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
        QCOMPARE(zmq_curve_keypair(serverKey, secretKey), 0);  // some other server's
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
        const std::vector<store::RankTraffic> traffic = reader.traffic();
        QCOMPARE(traffic.size(), std::size_t(8));
        for (const store::RankTraffic& t : traffic)
            QCOMPARE(t.lost, std::uint64_t(0));
    }
};

QTEST_GUILESS_MAIN(ClusterHosts)
#include "tst_cluster_hosts.moc"
