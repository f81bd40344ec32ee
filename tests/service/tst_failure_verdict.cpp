// The failure verdicts as a table, without starting a job: each row is the evidence the engine
// would hold (the ranks' heartbeats, their processes' states, the launcher's output and its end)
// and the verdict a user must read. The launcher's lines are Open MPI's, ssh's and Slurm's own
// words, read through readLauncherLine as the job runner reads them.

#include "service/failure_verdict.h"

#include <QtTest>

#include <csignal>
#include <map>

using namespace meshbench;
using service::ExitStatus;
using service::RankLiveness;
using store::Outcome;
using wire::RankState;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kNow = 1000 * kSecond;
constexpr std::int64_t kTimeout = 5 * kSecond;

// A job's evidence, made rank by rank: every rank heard a moment ago, running, on its host.
struct Scenario {
    std::vector<RankLiveness> ranks;
    std::vector<plan::MeshCoord> coords;
    std::vector<std::string> lastErrors;
    std::map<std::uint32_t, char> processStates;  // the ranks this machine started
    service::LauncherReport launcher;
    bool launcherCrashed = false;
    std::string launcherName = "mpirun";
    bool oneDevice = false;
    bool leftRanksStopped = false;
    bool startTimedOut = false;
    std::int64_t teardownNs = 0;
    std::string rootHint;

    explicit Scenario(const std::vector<std::string>& hosts)
    {
        for (std::size_t r = 0; r < hosts.size(); ++r) {
            RankLiveness live;
            live.everHeard = true;
            live.lastHeardNs = kNow - kSecond / 2;
            live.state = RankState::Running;
            live.pid = std::int32_t(100 + r);
            live.host = hosts[r];
            live.completedSteps = 3;
            ranks.push_back(live);
            coords.push_back({int(r / 2), int(r % 2), 0, 0, 0});
        }
        lastErrors.resize(hosts.size());
    }
    Scenario& ended(std::uint32_t rank, RankState state, int detail, std::int64_t agoNs)
    {
        ranks[rank].state = state;
        ranks[rank].detail = detail;
        ranks[rank].endedNs = ranks[rank].lastHeardNs = kNow - agoNs;
        return *this;
    }
    Scenario& silentFor(std::uint32_t rank, std::int64_t ns)
    {
        ranks[rank].lastHeardNs = kNow - ns;
        return *this;
    }
    Scenario& state(std::uint32_t rank, char letter)
    {
        processStates[rank] = letter;
        return *this;
    }
    Scenario& said(const std::vector<std::string>& lines, bool fromStderr = true)
    {
        for (const std::string& line : lines)
            service::readLauncherLine(line, launcher, fromStderr);
        return *this;
    }
    // A launch command's job in which no rank ever reported.
    Scenario& noneHeard()
    {
        for (RankLiveness& live : ranks)
            live.everHeard = false, live.pid = 0;
        return *this;
    }

    service::RunEvidence evidence() const
    {
        service::RunEvidence e;
        e.ranks = ranks;
        e.coords = coords;
        e.lastErrors = lastErrors;
        e.processState = [this](std::uint32_t rank) -> std::optional<char> {
            const auto it = processStates.find(rank);
            return it == processStates.end() ? std::nullopt : std::optional<char>(it->second);
        };
        e.launcher = launcher;
        e.launcherCrashed = launcherCrashed;
        e.launcherName = launcherName;
        e.oneDevice = oneDevice;
        e.leftRanksStopped = leftRanksStopped;
        e.nowNs = kNow;
        e.teardownNs = teardownNs;
        e.heartbeatTimeoutNs = kTimeout;
        e.lastStep = 10;
        e.startTimedOut = startTimedOut;
        e.rootHint = rootHint;
        return e;
    }
};

struct Case {
    Case() = default;
    explicit Case(Scenario s) : scenario(std::move(s)) {}

    Scenario scenario{{}};
    std::optional<ExitStatus> exit;  // judged on the launcher's end; without, while it runs
    std::optional<Outcome> outcome;  // nothing: no verdict yet
    int failedRank = -1;
    std::string cause;                       // the whole cause, in the user's words
    std::vector<std::uint32_t> unanswering;  // while running: ranks lost with their host or network
    std::vector<std::uint32_t> pastAnswering;
};

const std::vector<std::string> kOneHost{"n1", "n1", "n1", "n1"};
const std::vector<std::string> kTwoHosts{"n1", "n1", "n2", "n2"};

}  // namespace

Q_DECLARE_METATYPE(Case)

class TestFailureVerdict : public QObject {
    Q_OBJECT

private slots:
    void verdicts_data();
    void verdicts();
};

void TestFailureVerdict::verdicts_data()
{
    QTest::addColumn<Case>("c");
    const auto row = [](const char* name, const Case& c) { QTest::newRow(name) << c; };

    {
        Case c{Scenario(kOneHost)};
        c.scenario.ended(2, RankState::Failed, 1, kSecond).lastErrors[2] = "CUDA out of memory";
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "rank 2 (dp1 pp0 tp0 ep0, n1 pid 102) failed (exit status 1): CUDA out of memory";
        c.pastAnswering = {2};
        row("a rank that failed by itself is the cause", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ended(3, RankState::Failed, 1, 2 * kSecond).ended(1, RankState::Failed, 2, kSecond);
        c.outcome = Outcome::Failed, c.failedRank = 3;
        c.cause = "rank 3 (dp1 pp1 tp0 ep0, n1 pid 103) failed (exit status 1)";
        c.pastAnswering = {3};
        row("of two failed ranks, the first to end", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ended(1, RankState::Finished, 0, kSecond).ranks[1].completedSteps = 4;
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0, n1 pid 101) finished after step 4 of 10 while the others went on";
        c.pastAnswering = {1};
        row("a rank that finished early", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ended(0, RankState::Failed, wire::kCommunicationFailedStatus, kSecond);
        row("a failed collective waits for the launcher's report", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ended(0, RankState::Failed, wire::kCommunicationFailedStatus, kTimeout + kSecond);
        c.outcome = Outcome::Failed, c.failedRank = 0;
        c.cause = "rank 0 (dp0 pp0 tp0 ep0, n1 pid 100) failed (exit status 3) (a peer may have ended first; see "
                  "the session's log)";
        c.pastAnswering = {0};
        row("a failed collective while the job goes on regardless", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.silentFor(2, 6 * kSecond).state(2, 'T');
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "rank 2 (dp1 pp0 tp0 ep0, n1 pid 102) sent no heartbeat for 6.0 s: its process is stopped (SIGSTOP "
                  "or job control)";
        c.pastAnswering = {2};
        row("a silent rank, stopped", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.silentFor(1, 7 * kSecond).state(1, '?');
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0, n1 pid 101) sent no heartbeat for 7.0 s: its process is gone (killed "
                  "without a word, e.g. SIGKILL or out of memory)";
        c.pastAnswering = {1};
        row("a silent rank, gone", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.silentFor(1, 6 * kSecond).state(1, 'S');
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0, n1 pid 101) sent no heartbeat for 6.0 s: its process runs but its "
                  "telemetry thread is silent (hung)";
        c.pastAnswering = {1};
        row("a silent rank, hung", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.silentFor(3, 6 * kSecond);
        c.outcome = Outcome::Failed, c.failedRank = 3;
        c.cause = "rank 3 (dp1 pp1 tp0 ep0, n1 pid 103) sent no heartbeat for 6.0 s: it hung, was stopped or was "
                  "killed";
        c.pastAnswering = {3};
        row("a silent rank out of sight", c);
    }
    {
        // Rank 0 was last heard 2 s ago: before rank 3 had been quiet for the timeout, and not
        // itself quiet for it. Whether it went on or fell silent with rank 3 is not known yet.
        Case c{Scenario(kOneHost)};
        c.scenario.silentFor(3, 6 * kSecond).silentFor(0, 2 * kSecond);
        row("a silence whose companions are not known yet", c);
    }
    {
        Case c{Scenario(kTwoHosts)};
        c.scenario.silentFor(2, 6 * kSecond).silentFor(3, 5800'000'000).state(2, '?').state(3, '?');
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "host n2 was lost with all its ranks (2-3), silent together while the other hosts went on: its "
                  "processes are gone: the node died (rank 2 (dp1 pp0 tp0 ep0, n2 pid 102) sent no heartbeat for "
                  "6.0 s: its process is gone (killed without a word, e.g. SIGKILL or out of memory))";
        c.unanswering = c.pastAnswering = {2, 3};
        row("a host lost whole, its processes gone", c);
    }
    {
        Case c{Scenario(kTwoHosts)};
        c.scenario.silentFor(2, 6 * kSecond).silentFor(3, 6 * kSecond).state(2, 'R').state(3, 'S');
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "host n2 was lost with all its ranks (2-3), silent together while the other hosts went on: its "
                  "processes run but are not heard: its network is down (rank 2 (dp1 pp0 tp0 ep0, n2 pid 102) sent "
                  "no heartbeat for 6.0 s: its process runs but its telemetry thread is silent (hung))";
        c.unanswering = c.pastAnswering = {2, 3};
        row("a host lost whole, its processes running: its network", c);
    }
    {
        Case c{Scenario(kTwoHosts)};
        c.scenario.silentFor(2, 6 * kSecond).silentFor(3, 6 * kSecond).state(2, '?').state(3, 'T');
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "host n2 was lost with all its ranks (2-3), silent together while the other hosts went on: the "
                  "host died, froze or lost its network (its ranks' processes: 2 gone, 3 in state T) (rank 2 (dp1 "
                  "pp0 tp0 ep0, n2 pid 102) sent no heartbeat for 6.0 s: its process is gone (killed without a word, "
                  "e.g. SIGKILL or out of memory))";
        c.unanswering = c.pastAnswering = {2, 3};
        row("a host lost whole, its processes disagreeing", c);
    }
    {
        Case c{Scenario(kTwoHosts)};
        for (std::uint32_t r = 0; r < 4; ++r)
            c.scenario.silentFor(r, 6 * kSecond);
        c.outcome = Outcome::Failed;
        c.cause = "the engine lost its network to every host (n1: ranks 0-1, n2: ranks 2-3): all 4 ranks fell silent "
                  "together (none heard for 6.0 s); the hosts' processes are out of this machine's sight: check this "
                  "machine's network to the hosts (its interface, the switch, a firewall)";
        c.unanswering = c.pastAnswering = {0, 1, 2, 3};
        row("every host silent at once: the engine's network", c);
    }
    {
        Case c{Scenario(kTwoHosts)};
        for (std::uint32_t r = 0; r < 4; ++r)
            c.scenario.silentFor(r, 6 * kSecond).state(r, r % 2 ? 't' : 'T');
        c.outcome = Outcome::Failed;
        c.cause = "every host went silent together (n1: ranks 0-1, n2: ranks 2-3): all 4 ranks fell silent together "
                  "(none heard for 6.0 s), and their processes are stopped: the hosts froze, or the job was stopped "
                  "(SIGSTOP)";
        c.unanswering = c.pastAnswering = {0, 1, 2, 3};
        row("every host silent at once, stopped", c);
    }
    {
        // One host silent whole is the job's or the host's, not the network's; no other host went on.
        Case c{Scenario(kOneHost)};
        for (std::uint32_t r = 0; r < 4; ++r)
            c.scenario.silentFor(r, 6 * kSecond + r * kSecond / 10);
        c.outcome = Outcome::Failed, c.failedRank = 3;
        c.cause = "rank 3 (dp1 pp1 tp0 ep0, n1 pid 103) sent no heartbeat for 6.3 s: it hung, was stopped or was "
                  "killed";
        c.pastAnswering = {3};
        row("one host silent whole: the first silent rank", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ranks[1].everHeard = false;
        c.scenario.ranks[1].pid = 0;
        c.scenario.startTimedOut = true;
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0) never reported in: check that the agents can reach the collector "
                  "(--collector)";
        c.pastAnswering = {1};
        row("a rank that never reported in", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ranks[1].everHeard = false;
        row("a rank not heard yet, within its time to start", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ended(3, RankState::Failed, wire::kCommunicationFailedStatus, kSecond)
            .said({"mpirun noticed that process rank 2 with PID 0 on node n1 exited on signal 9 (Killed)."});
        c.exit = ExitStatus{137, 0};
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "rank 2 (dp1 pp0 tp0 ep0, n1 pid 102) killed by signal 9 (Killed): by hand, or by the out-of-memory "
                  "killer (see dmesg)";
        row("the rank mpirun saw end the job, by a signal", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.said({"mpirun detected that one or more processes exited with non-zero status, thus causing",
                         "the job to be terminated. The first process to do so was:", "",
                         "  Process name: [[39481,1],1]", "  Exit code:    143"});
        c.exit = ExitStatus{143, 0};
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0, n1 pid 101) exited with status 143";
        row("the rank mpirun saw end the job, by its exit code", c);
    }
    {
        // A launch command's rank that fails before it reports anything: its shell says so, in the
        // lines mpirun tags with the rank (--tag-output: every piece written, as Python writes its
        // traceback's last line), and its last stderr line is its own.
        const std::string lastLine = "[1,1]<stderr>:ModuleNotFoundError[1,1]<stderr>:: [1,1]<stderr>:No module "
                                     "named 'torch'[1,1]<stderr>:";
        Case c{Scenario(kOneHost)};
        c.scenario.noneHeard()
            .said({"[1,0]<stderr>:loading the data", "[1,1]<stderr>:Traceback (most recent call last):",
                   "[1,1]<stderr>:  File \"train.py\", line 1, in <module>", lastLine, "[1,0]<stderr>:still loading",
                   "[1,1]<stderr>:", "[1,1]<stderr>:meshbench-launch: rank 1 exited with status 3",
                   "--------------------------------------------------------------------------",
                   "Primary job  terminated normally, but 1 process returned",
                   "a non-zero exit code. Per user-direction, the job has been aborted."})
            .said({"[1,1]<stdout>:its output, not its errors"}, false);
        c.exit = ExitStatus{3, 0};
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0) exited with status 3 before reporting anything (its last stderr line: "
                  "ModuleNotFoundError: No module named 'torch'); mpirun exited with status 3";
        row("a launch command's rank that failed before reporting anything", c);
    }
    {
        // mpirun names no rank; the first shell to say its rank failed is the cause, the rest are
        // consequences.
        Case c{Scenario(kOneHost)};
        c.scenario.noneHeard().said({"[1,0]<stderr>:meshbench-launch: rank 0 exited with status 2",
                                     "[1,2]<stderr>:peer hung up",
                                     "[1,2]<stderr>:meshbench-launch: rank 2 exited with status 1"});
        c.exit = ExitStatus{2, 0};
        c.outcome = Outcome::Failed, c.failedRank = 0;
        c.cause =
            "rank 0 (dp0 pp0 tp0 ep0) exited with status 2 before reporting anything; mpirun exited with status 2";
        row("a launch command's rank 0, which mpirun does not name", c);
    }
    {
        // srun labels its tasks' lines (--label), on its stdout and its stderr alike; only stderr's
        // count.
        Case c{Scenario(kOneHost)};
        c.scenario.launcherName = "srun";
        c.scenario.noneHeard()
            .said({"1: ImportError: cannot import name 'Trainer' from 'trainer'"})
            .said({"1: a line of its output"}, false)
            .said({"1: meshbench-launch: rank 1 exited with status 1",
                   "srun: error: n1: task 1: Exited with exit code 1"});
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0) exited with status 1 before reporting anything (its last stderr line: "
                  "ImportError: cannot import name 'Trainer' from 'trainer'); srun exited with status 1";
        row("a launch command's task that failed before reporting anything, under srun", c);
    }
    {
        // A rank that reported, killed alone: its shell outlives it and says so, after its own word
        // of the kill (dash's "Killed"), which is not the rank's last line.
        Case c{Scenario(kOneHost)};
        c.scenario.said({"[1,2]<stderr>:allocating 12 GiB for the optimizer state", "[1,2]<stderr>:Killed",
                         "[1,2]<stderr>:meshbench-launch: rank 2 exited with status 137"});
        c.exit = ExitStatus{137, 0};
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "rank 2 (dp1 pp0 tp0 ep0, n1 pid 102) was killed by signal 9 (Killed) after its last heartbeat, at "
                  "step 3 of 10 (its last stderr line: allocating 12 GiB for the optimizer state): by hand, or by the "
                  "out-of-memory killer (see dmesg); mpirun exited with status 137";
        row("a launch command's rank killed after it reported", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ended(2, RankState::Failed, 1, kSecond).lastErrors[2] = "CUDA out of memory";
        c.scenario.said({"[1,2]<stderr>:RuntimeError: CUDA out of memory",
                         "[1,2]<stderr>:meshbench-launch: rank 2 exited with status 1"});
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "rank 2 (dp1 pp0 tp0 ep0, n1 pid 102) failed (exit status 1): CUDA out of memory";
        row("a launch command's rank that said it failed is named by its own word", c);
    }
    {
        // A rank killed with its shell (its whole process group) cannot be named by it: mpirun saw
        // the shell end on the signal, before another rank's shell said it failed in consequence.
        Case c{Scenario(kOneHost)};
        c.scenario.said({"[1,0]<stderr>:meshbench-launch: rank 0 exited with status 1",
                         "mpirun noticed that process rank 3 with PID 0 on node n1 exited on signal 9 (Killed)."});
        c.exit = ExitStatus{137, 0};
        c.outcome = Outcome::Failed, c.failedRank = 3;
        c.cause = "rank 3 (dp1 pp1 tp0 ep0, n1 pid 103) killed by signal 9 (Killed): by hand, or by the out-of-memory "
                  "killer (see dmesg)";
        row("a launch command's rank killed with its shell", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.launcherName = "srun";
        c.scenario.said({"srun: error: n1: task 2: Segmentation fault (core dumped)",
                         "srun: error: n1: tasks 0-1: Killed", "srun: error: n1: task 3: Killed"});
        c.exit = ExitStatus{139, 0};
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "rank 2 (dp1 pp0 tp0 ep0, n1 pid 102) killed by signal 11 (Segmentation fault)";
        row("the task srun saw end the step, by a signal", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.launcherName = "srun";
        c.scenario.said({"srun: error: n1: task 1: Exited with exit code 4", "srun: error: n1: task 0: Killed"});
        c.exit = ExitStatus{4, 0};
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0, n1 pid 101) exited with status 4";
        row("the task srun saw end the step, by its exit code", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.said({"mpirun has exited due to process rank 0 with PID 0 on",
                         "node n1 exiting improperly. There "
                         "are three reasons this could occur:"});
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed, c.failedRank = 0;
        c.cause = "rank 0 (dp0 pp0 tp0 ep0, n1 pid 100) exited with status 0 before the job ended, without its last "
                  "heartbeat or MPI_Finalize (its last heartbeat said step 3 of 10)";
        row("a rank that exited before MPI_Finalize", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.ended(2, RankState::Terminated, SIGTERM, kSecond)
            .said({"mpirun noticed that process rank 2 with PID 0 on node n1 exited on signal 15 (Terminated)."});
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "rank 2 (dp1 pp0 tp0 ep0, n1 pid 102) was terminated by signal 15 (Terminated), which the engine "
                  "did not send";
        row("the rank mpirun names said it was terminated", c);
    }
    {
        Case c{Scenario({"n1", "n1"})};
        c.scenario.said({"ssh: connect to host n2 port 22: No route to host",
                         "ORTE was unable to reliably start one or more daemons."});
        for (RankLiveness& live : c.scenario.ranks)
            live.everHeard = false, live.pid = 0;
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed;
        c.cause = "host n2 cannot be reached: ssh could not connect to it: No route to host, so the job did not start; "
                  "check that n2 is up and reachable from this machine (ssh n2 true), or leave it out of the hostfile";
        row("a host ssh cannot reach", c);
    }
    {
        Case c{Scenario(kTwoHosts)};
        c.scenario.said({"A process or daemon was unable to complete a TCP connection",
                         "to another process:", "  Local host:    n2", "  Remote host:   login"});
        for (std::uint32_t r : {2u, 3u})
            c.scenario.ranks[r].everHeard = false, c.scenario.ranks[r].pid = 0, c.scenario.ranks[r].host = "";
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed;
        c.cause = "host n2 cannot be reached from login, where mpirun runs: Open MPI's daemon there could not open a "
                  "TCP connection back to mpirun; check that n2 has a network link and a route to login (and no "
                  "firewall between them), that Open MPI's oob_tcp_if_include / btl_tcp_if_include name a network "
                  "both are on, or leave n2 out of the hostfile";
        row("a host whose daemon cannot connect back", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.exit = ExitStatus{0, SIGKILL};
        c.scenario.leftRanksStopped = true;
        c.outcome = Outcome::Failed;
        c.cause = "mpirun was killed by signal 9 (Killed), which the engine did not send; the ranks it left running "
                  "were stopped";
        row("mpirun killed from outside", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.said({"[login:4242] *** Process received signal ***", "[login:4242] Signal: Segmentation fault (11)",
                         "[login:4242] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x3c050)[0x7f]",
                         "[login:4242] [ 1] /usr/lib/libpmix.so.2(PMIx_Finalize+0x1d)[0x7f]"});
        c.scenario.launcherCrashed = true;
        c.exit = ExitStatus{0, SIGSEGV};
        c.outcome = Outcome::Failed;
        c.cause = "mpirun crashed (Segmentation fault (11) in PMIx_Finalize) (its report is in the session's log)";
        row("mpirun crashed", c);
    }
    {
        Case c{Scenario({"n1"})};
        c.scenario.oneDevice = true;
        c.scenario.launcherName = "the agent";
        c.exit = ExitStatus{0, SIGSEGV};
        c.outcome = Outcome::Failed, c.failedRank = 0;
        c.cause = "rank 0 (dp0 pp0 tp0 ep0, n1 pid 100) killed by signal 11 (Segmentation fault)";
        row("the one-device agent crashed", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.launcherName = "srun";
        c.scenario.said({"slurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2026-12-01T21:20:00 DUE TO TIME LIMIT "
                         "***"});
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed;
        c.cause = "the Slurm job reached its time limit at 2026-12-01T21:20:00 (raise it with sbatch/salloc --time)";
        row("Slurm's time limit", c);
    }
    {
        Case c{Scenario(kOneHost)};
        c.scenario.launcherName = "srun";
        c.scenario.said({"srun: error: slurmstepd: *** JOB 12 ON n1 CANCELLED AT 2026-12-01T21:20:00 ***"});
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Stopped;
        c.cause = "cancelled in Slurm (scancel) at 2026-12-01T21:20:00";
        row("scancel is a stop", c);
    }
    {
        Case c{Scenario(kOneHost)};
        for (std::uint32_t r = 0; r < 4; ++r)
            c.scenario.ended(r, RankState::Terminated, SIGTERM, kSecond + r);
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed;
        c.cause = "every rank was terminated by signal 15 (Terminated), which the engine did not send: the job was "
                  "ended from outside (mpirun signalled, or the whole job: kill, scancel, a time limit)";
        row("every rank terminated from outside", c);
    }
    {
        // Killed without a word (SIGKILL): its peers' collectives fail, mpirun reports no rank.
        Case c{Scenario(kOneHost)};
        for (std::uint32_t r : {0u, 2u, 3u})
            c.scenario.ended(r, RankState::Failed, wire::kCommunicationFailedStatus, kSecond);
        c.scenario.silentFor(1, 2 * kSecond);
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed, c.failedRank = 1;
        c.cause = "rank 1 (dp0 pp1 tp0 ep0, n1 pid 101) ended without a word (killed, e.g. SIGKILL or out of memory); "
                  "mpirun exited with status 1";
        row("a rank that ended without a word", c);
    }
    {
        Case c{Scenario(kTwoHosts)};
        c.scenario.ended(0, RankState::Finished, 0, kSecond / 2)
            .ended(1, RankState::Finished, 0, kSecond / 2)
            .said({"mpirun noticed that process rank 2 with PID 0 on node n2 exited on signal 9 (Killed)."});
        c.scenario.ranks[0].completedSteps = c.scenario.ranks[1].completedSteps = 10;
        c.scenario.state(2, '?').state(3, '?');
        c.exit = ExitStatus{137, 0};
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "host n2 was lost with all its ranks (2-3), silent together while the other hosts went on: its "
                  "processes are gone: the node died (rank 2 (dp1 pp0 tp0 ep0, n2 pid 102) killed by signal 9 "
                  "(Killed): by hand, or by the out-of-memory killer (see dmesg))";
        row("the rank mpirun names, widened to its lost host", c);
    }
    {
        Case c{Scenario(kOneHost)};
        for (std::uint32_t r = 0; r < 4; ++r)
            c.scenario.ended(r, RankState::Finished, 0, kSecond).ranks[r].completedSteps = 10;
        c.exit = ExitStatus{0, 0};
        c.outcome = Outcome::Completed;
        row("a job that completed", c);
    }
    {
        Case c{Scenario(kOneHost)};
        for (std::uint32_t r = 0; r < 3; ++r)
            c.scenario.ended(r, RankState::Finished, 0, kSecond).ranks[r].completedSteps = 10;
        c.exit = ExitStatus{0, 0};
        c.outcome = Outcome::Completed;
        c.cause = "the job exited normally but not every rank's last heartbeat arrived";
        row("a job that completed without every last heartbeat", c);
    }
    {
        Case c{Scenario({"n1", "n1"})};
        for (RankLiveness& live : c.scenario.ranks)
            live.everHeard = false, live.pid = 0;
        c.scenario.rootHint = "; note: Open MPI refuses to run as root";
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed;
        c.cause = "mpirun exited with status 1 (its output is in the session's log); note: Open MPI refuses to run as "
                  "root";
        row("mpirun failed before any rank, as root", c);
    }
    {
        // What a rank said once the engine began tearing the job down is a consequence, not the
        // cause: here the rank mpirun saw killed is.
        Case c{Scenario(kOneHost)};
        c.scenario.teardownNs = kNow - 3 * kSecond;
        c.scenario.ended(1, RankState::Failed, 1, 2 * kSecond)
            .said({"mpirun noticed that process rank 2 with PID 0 on node n1 exited on signal 9 (Killed)."});
        c.exit = ExitStatus{1, 0};
        c.outcome = Outcome::Failed, c.failedRank = 2;
        c.cause = "rank 2 (dp1 pp0 tp0 ep0, n1 pid 102) killed by signal 9 (Killed): by hand, or by the out-of-memory "
                  "killer (see dmesg)";
        row("what a rank says after the teardown began is no cause", c);
    }
}

void TestFailureVerdict::verdicts()
{
    QFETCH(Case, c);
    const service::RunEvidence evidence = c.scenario.evidence();
    std::optional<store::SessionOutcome> outcome;
    if (c.exit) {
        outcome = service::verdictOnExit(evidence, *c.exit);
    } else {
        const service::RunningVerdict running = service::verdictWhileRunning(evidence);
        outcome = running.outcome;
        QCOMPARE(running.unanswering, c.unanswering);
        QCOMPARE(running.pastAnswering, c.pastAnswering);
        QCOMPARE(running.networkLost, c.outcome && !c.unanswering.empty() && c.failedRank < 0);
    }
    QCOMPARE(outcome.has_value(), c.outcome.has_value());
    if (!outcome)
        return;
    QCOMPARE(int(outcome->outcome), int(*c.outcome));
    QCOMPARE(outcome->failedRank, c.failedRank);
    QCOMPARE(QString::fromStdString(outcome->cause), QString::fromStdString(c.cause));
}

QTEST_GUILESS_MAIN(TestFailureVerdict)
#include "tst_failure_verdict.moc"
