#include "job_runner.h"

#include "clock_server.h"
#include "collector.h"
#include "curve_guard.h"
#include "launcher.h"
#include "live/steady_state.h"
#include "wire/curve_keys.h"
#include "wire/endpoints.h"

#include "plan/mesh.h"
#include "plan/planner.h"
#include "plan/report.h"

#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <variant>

#include <unistd.h>

namespace meshbench::service {

namespace {

using Clock = std::chrono::steady_clock;

// After the launcher ends, records still in flight get this long to arrive.
constexpr std::chrono::milliseconds kDrainTime{2000};
// Teardown: how long the ranks asked to stop get to say so, then how long they get to go before
// SIGKILL.
constexpr std::chrono::milliseconds kSettleLimit{10000};
constexpr std::chrono::milliseconds kTerminateGrace{3000};
constexpr const char* kTelemetryKeysVariable = "MESHBENCH_TELEMETRY_KEYS";

store::SessionOutcome failedRank(std::uint32_t rank, std::string cause)
{
    return {store::Outcome::Failed, std::move(cause), std::int32_t(rank), 0};
}

bool communicationFailed(const RankLiveness& live)
{
    return live.state == wire::RankState::Failed && live.detail == wire::kCommunicationFailedStatus;
}

std::string layoutWords(const plan::ParallelSpec& p)
{
    return "dp" + std::to_string(p.dp) + " pp" + std::to_string(p.pp) + " tp" + std::to_string(p.tp) + " ep" +
           std::to_string(p.ep) + " " + std::string(plan::scheduleName(p.schedule)) +
           (p.zero > 0 ? " zero" + std::to_string(p.zero) : "");
}

// mpirun's own account of the first rank that ended the job (Open MPI 4), in one of three forms:
//   "mpirun noticed that process rank 3 with PID 0 on node n1 exited on signal 9 (Killed)."
//   "mpirun detected that one or more processes exited with non-zero status, ... The first process
//    to do so was:" / "Process name: [[39481,1],3]" / "Exit code:    143"
//   "mpirun has exited due to process rank 3 with PID 0 on" / "node n1 exiting improperly." (an
//    exit, with status 0 too, before MPI_Finalize)
// Messages wrap, so each line is read together with the one before.
struct LauncherReport {
    int rank = -1;
    int signal = 0;
    std::optional<int> exitCode;
    bool improper = false;  // exited with status 0 before MPI_Finalize (a non-zero status is the second form)
    // Slurm's account of a cancelled step or job (srun relays slurmstepd's line):
    //   "slurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2026-12-01T21:20:00 ***"
    //   "... *** JOB 12 ON n1 CANCELLED AT 2026-12-01T21:20:00 DUE TO TIME LIMIT ***"
    std::string slurmCancelledAt;
    bool slurmTimeLimit = false;
    std::string previousLine;
    int namedRank = -1;  // "Process name: [[j,1],R]", waiting for its "Exit code"
    // A host the launch could not reach, in one of Open MPI's (4.x) or ssh's words:
    //   "A process or daemon was unable to complete a TCP connection" / "to another process:" /
    //   "  Local host:    n2" / "  Remote host:   login" (n2's daemon cannot connect back to mpirun)
    //   "ssh: connect to host n2 port 22: No route to host" / "ssh: Could not resolve hostname n2: ..."
    //   "ORTE has lost communication with a remote daemon." / ... / "  Remote daemon: [[j,0],1] on node n2"
    // followed, at launch, by "ORTE was unable to reliably start one or more daemons."
    std::string unreachableHost;
    std::string unreachableFrom;     // the other end, when Open MPI names it
    std::string unreachableWhy;      // ssh's reason, or what Open MPI's block says
    bool daemonsNotStarted = false;  // "ORTE was unable to reliably start one or more daemons"
    bool inConnectionBlock = false;  // between "unable to complete a TCP connection" and its hosts
    bool inLostDaemonBlock = false;  // between "lost communication with a remote daemon" and its node
    // A crash report ("[host:pid] *** Process received signal ***", then its signal and a
    // backtrace, as Open MPI's handler prints it): the first process to crash, its signal, and the
    // first named frame after the handler's.
    int crashPid = 0;
    std::string crashSignal;  // "Segmentation fault (11)"
    std::string crashFrame;   // "PMIx_Finalize"

    std::string describe() const
    {
        if (signal != 0)
            return ExitStatus{0, signal}.describe();
        if (improper)
            return "exited with status 0 before the job ended, without its last heartbeat or MPI_Finalize";
        return "exited with status " + std::to_string(exitCode.value_or(0));
    }
};

void readUnreachableHost(const std::string& line, LauncherReport& report)
{
    static const std::regex connection(R"(unable to complete a TCP connection)");
    static const std::regex localHost(R"(^\s*Local host:\s*(\S+))");
    static const std::regex remoteHost(R"(^\s*Remote host:\s*(\S+))");
    static const std::regex sshConnect(R"(ssh: connect to host (\S+) port \d+: (.+))");
    static const std::regex sshResolve(R"(ssh: Could not resolve hostname ([^:\s]+): (.+))");
    static const std::regex lostDaemon(R"(lost communication with a remote daemon)");
    static const std::regex remoteDaemon(R"(Remote daemon:\s*\S+ on node (\S+))");
    static const std::regex notStarted(R"(ORTE was unable to reliably start one or more daemons)");
    std::smatch m;
    if (std::regex_search(line, notStarted))
        report.daemonsNotStarted = true;
    if (!report.unreachableHost.empty()) {
        if (report.inConnectionBlock && report.unreachableFrom.empty() && std::regex_search(line, m, remoteHost)) {
            report.unreachableFrom = m[1];
            report.inConnectionBlock = false;
        }
        return;  // the first host named is the one reported
    }
    if (std::regex_search(line, connection)) {
        report.inConnectionBlock = true;
    } else if (report.inConnectionBlock && std::regex_search(line, m, localHost)) {
        report.unreachableHost = m[1];
        report.unreachableWhy = "Open MPI's daemon there could not open a TCP connection back to mpirun";
    } else if (std::regex_search(line, m, sshConnect)) {
        report.unreachableHost = m[1];
        report.unreachableWhy = "ssh could not connect to it: " + m[2].str();
    } else if (std::regex_search(line, m, sshResolve)) {
        report.unreachableHost = m[1];
        report.unreachableWhy = "ssh could not resolve its name: " + m[2].str();
    } else if (std::regex_search(line, lostDaemon)) {
        report.inLostDaemonBlock = true;
    } else if (report.inLostDaemonBlock && std::regex_search(line, m, remoteDaemon)) {
        report.unreachableHost = m[1];
        report.unreachableWhy = "mpirun lost its connection to Open MPI's daemon there";
        report.inLostDaemonBlock = false;
    }
}

void readLauncherCrash(const std::string& line, LauncherReport& report)
{
    static const std::regex received(R"(\[[^\]:]*:(\d+)\] \*\*\* Process received signal \*\*\*)");
    static const std::regex signal(R"(:(\d+)\] Signal: (.+))");
    static const std::regex frame(R"(:(\d+)\] \[ *[1-9]\d*\] .*\(([A-Za-z_]\w*)\+0x)");
    std::smatch m;
    if (report.crashPid == 0) {
        if (std::regex_search(line, m, received))
            report.crashPid = std::stoi(m[1]);
        return;
    }
    // Only that process's lines: a rank's crash report may be interleaved.
    if (report.crashSignal.empty() && std::regex_search(line, m, signal) && std::stoi(m[1]) == report.crashPid)
        report.crashSignal = m[2];
    else if (report.crashFrame.empty() && std::regex_search(line, m, frame) && std::stoi(m[1]) == report.crashPid)
        report.crashFrame = m[2];
}

void readLauncherLine(const std::string& line, LauncherReport& report)
{
    static const std::regex signalled(R"(process rank (\d+) with PID \d+ on\s+node \S+ exited on signal (\d+))");
    static const std::regex improper(R"(process rank (\d+) with PID \d+ on\s+node \S+ exiting improperly)");
    static const std::regex processName(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\])");
    static const std::regex exitCode(R"(Exit code:\s*(\d+))");
    static const std::regex cancelled(R"(\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT (\S+)( DUE TO TIME LIMIT)?)");
    const std::string joined = report.previousLine + " " + line;
    report.previousLine = line;
    std::smatch m;
    if (report.slurmCancelledAt.empty() && std::regex_search(line, m, cancelled)) {
        report.slurmCancelledAt = m[1];
        report.slurmTimeLimit = m[2].matched;
    }
    readUnreachableHost(line, report);
    readLauncherCrash(line, report);
    if (report.rank >= 0)
        return;  // the first report names the cause; the rest are consequences
    if (std::regex_search(joined, m, signalled)) {
        report.rank = std::stoi(m[1]);
        report.signal = std::stoi(m[2]);
    } else if (std::regex_search(joined, m, improper)) {
        report.rank = std::stoi(m[1]);
        report.improper = true;
    } else if (std::regex_search(line, m, processName)) {
        report.namedRank = std::stoi(m[1]);
    } else if (report.namedRank >= 0 && std::regex_search(line, m, exitCode)) {
        report.rank = report.namedRank;
        report.exitCode = std::stoi(m[1]);
    }
}

// Ranks as runs of consecutive ones: "0-3, 6".
std::string rankRanges(const std::vector<std::uint32_t>& ranks)
{
    std::string out;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        std::size_t j = i;
        while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
            ++j;
        out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
        i = j;
    }
    return out;
}

// Keeps the figures of the summary, and what its findings read, while passing everything on to
// the caller's observer.
class SummaryObserver : public RunObserver {
public:
    SummaryObserver(RunObserver& next, RunResult& result, int world)
        : m_next(next), m_result(result), m_rankTimes(world)
    {
    }

    void started(const std::string& sessionPath, const std::string& collector, int ranks) override
    {
        m_next.started(sessionPath, collector, ranks);
    }
    void stepCompleted(const live::StepAggregate& step) override
    {
        m_next.stepCompleted(step);
        m_recentSteps.add(step);
        ++m_result.steps;
        if (step.loss)
            m_result.finalLoss = step.loss;
        const bool warmup = std::size_t(m_result.steps) <= live::kWarmupSteps;
        m_tokensPerSecond.add(step.tokensPerSecond, warmup);
        m_bubble.add(step.bubble, warmup);
        m_mfu.add(step.mfu, warmup);
        if (step.imbalanceP95)
            m_result.worstImbalance = std::max(m_result.worstImbalance.value_or(0.0), *step.imbalanceP95);
        if (step.plannedBubble)
            m_result.plannedBubble = step.plannedBubble;
    }
    void memoryChanged(const live::RankMemory& memory) override { m_next.memoryChanged(memory); }
    void batchArrived(const wire::Batch& batch) override
    {
        m_rankTimes.add(batch);
        m_next.batchArrived(batch);
    }
    void message(wire::LogLevel level, const std::string& text) override { m_next.message(level, text); }

    void finish(const plan::JobSpec& spec, const plan::Plan& plan, std::span<const live::RankMemory> memory)
    {
        m_result.meanTokensPerSecond = m_tokensPerSecond.mean();
        m_result.meanBubble = m_bubble.mean();
        m_result.meanMfu = m_mfu.mean();
        m_result.findings = live::findFindings({spec, &plan, m_recentSteps.steps(), memory, &m_rankTimes});
    }

private:
    // A mean over the steady steps, as every reader of the session takes it (live/steady_state.h),
    // or over the warm-up for a run that had no more.
    class SteadyMean {
    public:
        void add(const std::optional<double>& value, bool warmup)
        {
            if (value)
                (warmup ? m_warmup : m_steady).add(*value);
        }
        std::optional<double> mean() const { return m_steady.count > 0 ? m_steady.mean() : m_warmup.mean(); }

    private:
        struct Sum {
            double sum = 0;
            int count = 0;
            void add(double v)
            {
                sum += v;
                ++count;
            }
            std::optional<double> mean() const { return count > 0 ? std::optional<double>(sum / count) : std::nullopt; }
        };
        Sum m_warmup, m_steady;
    };
    RunObserver& m_next;
    RunResult& m_result;
    SteadyMean m_tokensPerSecond, m_bubble, m_mfu;
    live::RecentSteps m_recentSteps;
    live::RankTimes m_rankTimes;
};

// The keys of a run whose collector other machines can reach: the collector's and clock server's
// pair, and one pair for all the run's agents, made for the run and handed to them through the
// launcher's environment (MESHBENCH_TELEMETRY_KEYS); only that agents' key is let in.
struct RunKeys {
    explicit RunKeys(zmq::context_t& context)
        : server(newKeyPair()), agents(newKeyPair()), guard(context, {agents.publicKey}, "this run's agents' key")
    {
    }
    static wire::KeyPair newKeyPair()
    {
        char publicKey[41] = {}, secretKey[41] = {};
        if (zmq_curve_keypair(publicKey, secretKey) != 0)
            throw std::runtime_error("cannot make CURVE keys for the collector: this libzmq has no CURVE (libsodium)");
        return {publicKey, secretKey};
    }
    std::string environment() const { return server.publicKey + " " + agents.publicKey + " " + agents.secretKey; }

    wire::KeyPair server;
    wire::KeyPair agents;
    CurveGuard guard;
};

std::unique_ptr<RunKeys> keysFor(const RunRequest& request, zmq::context_t& context)
{
    return request.oneDevice || wire::isLocalEndpoint(request.collectorBind) ? nullptr
                                                                             : std::make_unique<RunKeys>(context);
}

class Run {
public:
    Run(const RunRequest& request, RunObserver& observer, const std::atomic<bool>& stop)
        : m_request(request), m_stop(stop),
          m_spec(request.oneDevice ? plan::singleDeviceSpec(request.spec) : request.spec),
          m_plan(plan::makePlan(m_spec)), m_mesh(m_spec.parallel), m_world(std::uint32_t(m_mesh.worldSize())),
          m_aggregator(m_spec, &m_plan), m_observer(observer, m_result, int(m_world)),
          m_keys(keysFor(request, m_context)),
          m_collector(m_context, request.collectorBind, m_world, m_aggregator, m_observer, secureSocket()),
          m_clock(m_context, clockBindBeside(request.collectorBind), secureSocket())
    {
        if (m_keys)
            m_keys->guard.start();
        m_lastStep = request.steps.value_or(request.spec.train.steps);
    }

    RunResult execute();

private:
    store::SessionHeader header() const;
    std::vector<std::string> launchCommand(const std::string& collector) const;
    SocketSetup secureSocket()
    {
        return [this](zmq::socket_t& socket, const std::string& name) {
            if (m_keys)
                m_keys->guard.guard(socket, m_keys->server.secretKey, name);
        };
    }
    std::string rankWords(std::uint32_t rank) const;
    std::string failedRankCause(std::uint32_t rank) const;
    void readLauncher(LaunchedProcess& job, int fd, wire::LogLevel level);
    // The verdict while the launcher runs, widened to a host or to the network when the evidence
    // says so; nothing while there is none yet, or while the silence of a rank leaves the others'
    // fate open (see fatesAfter).
    std::optional<store::SessionOutcome> rankVerdict(Clock::time_point launched);
    // The cause once the launcher has ended (or, without `exit`, while it goes on regardless).
    store::SessionOutcome launcherVerdict(const std::optional<ExitStatus>& exit) const;
    // A cause a rank gave of itself: it failed by itself, or finished before the last step.
    std::optional<store::SessionOutcome> ownVerdict() const;
    // The rank whose last heartbeat, sent before any teardown, came first (by the engine's clock)
    // among those `said` picks.
    std::optional<std::uint32_t> firstEnded(const std::function<bool(const RankLiveness&)>& said) const;
    bool endedBeforeTeardown(const RankLiveness& live) const;
    std::string terminatedRankCause(std::uint32_t rank) const;
    // A rank's process state letter (/proc; '?' once it is gone), when this machine started it.
    std::optional<char> launchedProcessState(std::uint32_t rank) const;
    void noteNewlyHeardRanks(LaunchedProcess& job);
    // What a silent rank's process is doing, in words, when this machine started it; empty otherwise.
    std::string silentRankState(std::uint32_t rank) const;
    enum class Fate { NotHeard, WentOn, Silent };
    // The ranks lost with `rank` when its whole host went: every rank there silent or ended without
    // a word while a rank of another host went on; empty when the rank went alone.
    // With `fates` (fatesAfter's, while the launcher runs), the host's ranks must all have fallen
    // silent and a rank elsewhere gone on.
    std::vector<std::uint32_t> hostLostWith(std::uint32_t rank, const std::vector<Fate>* fates = nullptr) const;
    // What became of every rank once `silent` went quiet (for its heartbeat timeout): each heard
    // rank went on (spoke its last word, or was heard after `silent` had been silent for the
    // timeout) or fell silent too (silent for the timeout itself); nothing while some rank is
    // neither yet, which within one more timeout it is. Deciding on this rather than on how long
    // ago each rank was last heard keeps a rank that was heard a moment before the silence from
    // passing for one that went on.
    std::optional<std::vector<Fate>> fatesAfter(std::uint32_t silent, std::int64_t nowNs) const;
    // The verdict when every heard rank fell silent together: the network between the engine and
    // every host, named, when the ranks span hosts; nothing when they share one (a host or a job
    // that stopped whole is not a network's doing).
    std::optional<store::SessionOutcome> networkVerdict(const std::vector<Fate>& fates, std::int64_t nowNs) const;
    // The host whose launch mpirun could not reach, named, when no rank there was ever heard.
    std::optional<store::SessionOutcome> unreachableHostVerdict() const;
    // Whether the launcher printed a crash report of its own (Open MPI's signal handler), and it in
    // words: "crashed (Segmentation fault (11) in PMIx_Finalize)".
    bool launcherCrashed() const;
    std::string crashWords() const;
    // The verdict on a lost host, naming it, its ranks and what the engine can see of them.
    store::SessionOutcome hostVerdict(const std::vector<std::uint32_t>& lost, const std::string& rankCause) const;
    // A failed rank's verdict widened to its host when the host went with it.
    store::SessionOutcome widenedToHost(store::SessionOutcome verdict) const;
    // What to do when mpirun failed because this engine runs as root; empty otherwise.
    std::string rootHint() const;
    const RankLiveness& liveness(std::uint32_t rank) const { return m_collector.ingest().liveness(rank); }
    std::int64_t heartbeatTimeoutNs() const
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(m_request.heartbeatTimeout).count();
    }

    const RunRequest& m_request;
    const std::atomic<bool>& m_stop;
    plan::JobSpec m_spec;  // the layout the agents run (one rank with oneDevice)
    plan::Plan m_plan;
    plan::Mesh m_mesh;
    std::uint32_t m_world;
    live::LiveAggregator m_aggregator;
    RunResult m_result;
    SummaryObserver m_observer;
    zmq::context_t m_context{1};
    std::unique_ptr<RunKeys> m_keys;  // when the collector is reachable from off this machine
    Collector m_collector;
    ClockServer m_clock;
    std::unique_ptr<store::SessionWriter> m_writer;
    LauncherReport m_launcherReport;
    int m_lastStep = 0;                        // the step every rank's last heartbeat says when the job completes
    std::int64_t m_teardownNs = 0;             // when the engine began stopping the job, 0 before
    bool m_leftRanksStopped = false;           // the launcher ended and left ranks running, which the engine stopped
    const LaunchedProcess* m_job = nullptr;    // while it runs
    std::size_t m_ranksHeard = 0;              // ranks heard from, when the launcher's tree was last noted
    bool m_networkLost = false;                // the verdict is networkVerdict's: no rank can answer
    std::vector<std::uint32_t> m_unanswering;  // the ranks the verdict found lost with their host or network
    bool m_orderlyStop = false;                // the user's stop is under way
};

store::SessionHeader Run::header() const
{
    store::SessionHeader h;
    h.name = m_request.spec.name;
    h.jobSpec = m_request.specText;
    h.planJson = plan::planToJson(m_plan).dump();
    h.layout = layoutWords(m_request.spec.parallel) + (m_request.oneDevice ? " on one device" : "");
    h.createdNs = wire::wallAlignedNowNs();
    h.engineVersion = MESHBENCH_VERSION;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const plan::MeshCoord c = m_mesh.coordOf(int(r));
        const plan::DevicePlace place = plan::placeRank(int(r), m_spec.cluster);
        h.ranks.push_back({std::int32_t(r), c.dp, c.pp, c.tp, c.ep, place.node, place.device, "", 0});
    }
    return h;
}

std::vector<std::string> Run::launchCommand(const std::string& collector) const
{
    std::vector<std::string> agent{m_request.agent, "--job",   m_request.jobPath, "--telemetry",
                                   collector,       "--clock", m_clock.endpoint()};
    if (m_request.steps)
        agent.insert(agent.end(), {"--steps", std::to_string(*m_request.steps)});
    if (m_request.oneDevice)
        return agent;
    if (m_request.slurm) {
        // One job step of world tasks, started through PMIx; a task that fails ends the step. The
        // job's name is one argument, never read by a shell.
        std::vector<std::string> argv{"srun",
                                      "--mpi=pmix",
                                      "--ntasks",
                                      std::to_string(m_world),
                                      "--kill-on-bad-exit=1",
                                      "--job-name",
                                      m_request.spec.name.empty() ? "meshbench" : m_request.spec.name};
        argv.insert(argv.end(), m_request.mpirunArgs.begin(), m_request.mpirunArgs.end());
        argv.insert(argv.end(), agent.begin(), agent.end());
        return argv;
    }
    std::vector<std::string> argv{m_request.mpirun, "-np", std::to_string(m_world)};
    if (m_keys)  // mpirun hands its ranks only the variables it is told to
        argv.insert(argv.end(), {"-x", kTelemetryKeysVariable});
    // Without a host list the ranks share this machine, which may have fewer cores than ranks.
    const bool hostsGiven =
        std::any_of(m_request.mpirunArgs.begin(), m_request.mpirunArgs.end(), [](const std::string& a) {
            return a == "--hostfile" || a == "-hostfile" || a == "--host" || a == "-H" || a == "--machinefile";
        });
    if (!hostsGiven && !std::getenv("SLURM_JOB_ID"))
        argv.push_back("--oversubscribe");
    if (m_request.allowRunAsRoot && geteuid() == 0)
        argv.push_back("--allow-run-as-root");
    argv.insert(argv.end(), m_request.mpirunArgs.begin(), m_request.mpirunArgs.end());
    argv.insert(argv.end(), agent.begin(), agent.end());
    return argv;
}

std::string Run::rankWords(std::uint32_t rank) const
{
    const plan::MeshCoord c = m_mesh.coordOf(int(rank));
    std::string words = "rank " + std::to_string(rank) + " (dp" + std::to_string(c.dp) + " pp" + std::to_string(c.pp) +
                        " tp" + std::to_string(c.tp) + " ep" + std::to_string(c.ep);
    const RankLiveness& live = liveness(rank);
    if (live.pid > 0)
        words += ", " + live.host + " pid " + std::to_string(live.pid);
    return words + ")";
}

void Run::readLauncher(LaunchedProcess& job, int fd, wire::LogLevel level)
{
    // mpirun's word that it passed the engine's own stop signal on (orterun prints it unless
    // --quiet, which would silence its diagnostics too) is the engine's doing, not the job's; so is
    // all the launcher says once the user's stop is under way: ranks that linger after the stop
    // signal still exchange data, and one whose peer ends first says so in Open MPI's words (the
    // shared-memory BTL's "Read -1, expected N, errno = 3", TCP's "peer hung up"). Kept in the
    // session at debug level, off the terminal.
    static const std::string forwarded =
        "mpirun: Forwarding signal " + std::to_string(wire::kEngineStopSignal) + " to job";
    for (std::string& line : job.readLines(fd)) {
        readLauncherLine(line, m_launcherReport);
        const bool ours = m_orderlyStop || (m_teardownNs != 0 && line == forwarded);
        m_collector.engineLog(ours ? wire::LogLevel::Debug : level, std::move(line));
    }
}

std::string Run::failedRankCause(std::uint32_t rank) const
{
    std::string cause = rankWords(rank) + " failed (exit status " + std::to_string(liveness(rank).detail) + ")";
    if (!m_collector.lastError(rank).empty())
        cause += ": " + m_collector.lastError(rank);
    return cause;
}

std::optional<store::SessionOutcome> Run::rankVerdict(Clock::time_point launched)
{
    const std::int64_t now = wire::wallAlignedNowNs();
    const std::int64_t timeoutNs = heartbeatTimeoutNs();
    if (std::optional<store::SessionOutcome> own = ownVerdict())
        return widenedToHost(*own);
    // A rank whose collective failed points at a peer that ended first, and asked mpirun to end the
    // job, whose report will say who: only if the job goes on regardless does the engine decide.
    if (const auto rank = firstEnded(communicationFailed); rank && now - liveness(*rank).endedNs > timeoutNs)
        return widenedToHost(launcherVerdict(std::nullopt));
    // Of the ranks silent for the timeout, the one that fell silent first.
    std::optional<std::uint32_t> silent;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const RankLiveness& live = liveness(r);
        if (live.everHeard && !wire::isFinal(live.state) && now - live.lastHeardNs > timeoutNs &&
            (!silent || live.lastHeardNs < liveness(*silent).lastHeardNs))
            silent = r;
    }
    if (silent) {
        const std::optional<std::vector<Fate>> fates = fatesAfter(*silent, now);
        if (!fates)
            return std::nullopt;
        if (std::optional<store::SessionOutcome> network = networkVerdict(*fates, now)) {
            m_networkLost = true;
            for (std::uint32_t r = 0; r < m_world; ++r)
                if ((*fates)[r] == Fate::Silent)
                    m_unanswering.push_back(r);
            return network;
        }
        const RankLiveness& live = liveness(*silent);
        char silence[32];
        std::snprintf(silence, sizeof silence, "%.1f", double(now - live.lastHeardNs) * 1e-9);
        const std::string state = silentRankState(*silent);
        const std::string cause = rankWords(*silent) + " sent no heartbeat for " + silence +
                                  " s: " + (state.empty() ? "it hung, was stopped or was killed" : state);
        m_unanswering = hostLostWith(*silent, &*fates);
        if (!m_unanswering.empty())
            return hostVerdict(m_unanswering, cause);
        return failedRank(*silent, cause);
    }
    for (std::uint32_t r = 0; r < m_world; ++r)
        if (!liveness(r).everHeard && Clock::now() - launched > m_request.startTimeout)
            return store::SessionOutcome{
                store::Outcome::Failed,
                rankWords(r) + " never reported in: check that the agents can reach the collector (--collector)",
                std::int32_t(r), 0};
    return std::nullopt;
}

std::optional<std::vector<Run::Fate>> Run::fatesAfter(std::uint32_t silent, std::int64_t nowNs) const
{
    const std::int64_t timeoutNs = heartbeatTimeoutNs();
    // A rank that goes on is heard at least once a heartbeat interval (well within the timeout), so
    // one heard after `silent` had been quiet for the timeout was not silenced with it; one quiet
    // for the timeout itself went with it. A lost host's or network's ranks all fall quiet within an
    // interval of each other, so this is known at most one timeout after `silent` was found.
    const std::int64_t wentOnAfter = liveness(silent).lastHeardNs + timeoutNs;
    std::vector<Fate> fates(m_world, Fate::NotHeard);
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const RankLiveness& live = liveness(r);
        if (!live.everHeard)
            continue;
        if ((wire::isFinal(live.state) && endedBeforeTeardown(live)) || live.lastHeardNs >= wentOnAfter)
            fates[r] = Fate::WentOn;
        else if (nowNs - live.lastHeardNs > timeoutNs)
            fates[r] = Fate::Silent;
        else
            return std::nullopt;
    }
    return fates;
}

std::optional<store::SessionOutcome> Run::networkVerdict(const std::vector<Fate>& fates, std::int64_t nowNs) const
{
    std::map<std::string, std::vector<std::uint32_t>> byHost;
    std::int64_t quietSinceNs = nowNs;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        if (fates[r] == Fate::WentOn)
            return std::nullopt;
        if (fates[r] == Fate::Silent) {
            byHost[liveness(r).host].push_back(r);
            quietSinceNs = std::min(quietSinceNs, liveness(r).lastHeardNs);
        }
    }
    if (byHost.size() < 2 || byHost.count(""))
        return std::nullopt;
    std::string hosts;
    std::size_t ranks = 0;
    std::set<char> states;
    bool allSeen = true;
    for (const auto& [host, onHost] : byHost) {
        hosts += (hosts.empty() ? "" : ", ") + host + ": ranks " + rankRanges(onHost);
        ranks += onHost.size();
        for (std::uint32_t r : onHost) {
            const std::optional<char> state = launchedProcessState(r);
            allSeen = allSeen && state.has_value();
            if (state)
                states.insert(*state == 't' ? 'T' : *state == 'S' ? 'R' : *state);
        }
    }
    char quiet[32];
    std::snprintf(quiet, sizeof quiet, "%.1f", double(nowNs - quietSinceNs) * 1e-9);
    const std::string together =
        "all " + std::to_string(ranks) + " ranks fell silent together (none heard for " + quiet + " s)";
    const std::string check = "check this machine's network to the hosts (its interface, the switch, a firewall)";
    // What the engine sees of the processes, when this machine started them (test hosts); remote
    // hosts' are out of its sight, and a silence of every host at once is then the network's.
    if (allSeen && states == std::set<char>{'T'})
        return store::SessionOutcome{store::Outcome::Failed,
                                     "every host went silent together (" + hosts + "): " + together +
                                         ", and their processes are stopped: the hosts froze, or the job was "
                                         "stopped (SIGSTOP)",
                                     -1, 0};
    if (allSeen && states == std::set<char>{'?'})
        return store::SessionOutcome{store::Outcome::Failed,
                                     "every host went silent together (" + hosts + "): " + together +
                                         ", and their processes are gone: the hosts died, or the job was killed",
                                     -1, 0};
    const std::string seen = !allSeen                        ? "the hosts' processes are out of this machine's sight"
                             : states == std::set<char>{'R'} ? "their processes run but none is heard"
                                                             : "their processes are not all running, nor all gone";
    return store::SessionOutcome{
        store::Outcome::Failed,
        "the engine lost its network to every host (" + hosts + "): " + together + "; " + seen + ": " + check, -1, 0};
}

std::optional<std::uint32_t> Run::firstEnded(const std::function<bool(const RankLiveness&)>& said) const
{
    std::optional<std::uint32_t> first;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const RankLiveness& live = liveness(r);
        if (endedBeforeTeardown(live) && said(live) && (!first || live.endedNs < liveness(*first).endedNs))
            first = r;
    }
    return first;
}

bool Run::endedBeforeTeardown(const RankLiveness& live) const
{
    // What a rank said once the engine began tearing the job down is a consequence, not a cause.
    return live.endedNs > 0 && (m_teardownNs == 0 || live.endedNs < m_teardownNs);
}

std::optional<store::SessionOutcome> Run::ownVerdict() const
{
    const auto failedByItself = [](const RankLiveness& live) {
        return live.state == wire::RankState::Failed && live.detail != wire::kCommunicationFailedStatus;
    };
    if (const auto rank = firstEnded(failedByItself))
        return failedRank(*rank, failedRankCause(*rank));
    // Its peers would wait for it in their next collective for ever, heartbeats and all.
    const auto finishedEarly = [this](const RankLiveness& live) {
        return live.state == wire::RankState::Finished && live.completedSteps < m_lastStep;
    };
    if (const auto rank = firstEnded(finishedEarly))
        return failedRank(*rank, rankWords(*rank) + " finished after step " +
                                     std::to_string(liveness(*rank).completedSteps) + " of " +
                                     std::to_string(m_lastStep) + " while the others went on");
    return std::nullopt;
}

std::string Run::terminatedRankCause(std::uint32_t rank) const
{
    const int signal = liveness(rank).detail;
    return rankWords(rank) + " was terminated by signal " + std::to_string(signal) + " (" + strsignal(signal) +
           "), which the engine did not send";
}

void Run::noteNewlyHeardRanks(LaunchedProcess& job)
{
    // A rank first heard may have been forked after the launcher's tree was last noted (once a
    // second): noted now, while it runs, its process can be read whatever becomes of it later, when
    // a lost host's ranks are judged by their processes (hostVerdict).
    std::size_t heard = 0;
    for (std::uint32_t r = 0; r < m_world; ++r)
        heard += liveness(r).everHeard ? 1 : 0;
    if (heard > m_ranksHeard) {
        m_ranksHeard = heard;
        job.noteTreeNow();
    }
}

std::optional<char> Run::launchedProcessState(std::uint32_t rank) const
{
    const RankLiveness& live = liveness(rank);
    if (live.pid <= 0 || !m_job || !m_job->launched(live.pid))
        return std::nullopt;
    // A process on its way out counts as gone at once, whatever its state letter still says while
    // it lets go of its memory (on a loaded machine, for a while): the verdict reads where the
    // processes are going, not how far they have got.
    if (processEnding(live.pid))
        return '?';
    return processState(live.pid).value_or('?');
}

std::string Run::silentRankState(std::uint32_t rank) const
{
    switch (launchedProcessState(rank).value_or(' ')) {
    case 'T':
        return "its process is stopped (SIGSTOP or job control)";
    case 't':
        return "its process is stopped by a debugger";
    case 'D':
        return "its process is waiting on the disk or a driver (state D)";
    case 'R':
    case 'S':
        return "its process runs but its telemetry thread is silent (hung)";
    case '?':
        return "its process is gone (killed without a word, e.g. SIGKILL or out of memory)";
    default:
        return {};
    }
}

std::vector<std::uint32_t> Run::hostLostWith(std::uint32_t rank, const std::vector<Fate>* fates) const
{
    // A host that goes (dies, freezes, loses its network) takes all its ranks at once, none with a
    // last word, while the others go on: they are still heard, or said their own last word (mpirun
    // stopping them). A rank that dies alone leaves its neighbours on the host talking.
    const std::string& host = liveness(rank).host;
    if (host.empty())
        return {};
    const std::int64_t now = wire::wallAlignedNowNs();
    std::vector<std::uint32_t> lost;
    bool othersWentOn = false;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const RankLiveness& live = liveness(r);
        const bool spoke = wire::isFinal(live.state) && endedBeforeTeardown(live);
        const bool wentOn = fates ? (*fates)[r] == Fate::WentOn
                                  : live.everHeard && (spoke || now - live.lastHeardNs <= heartbeatTimeoutNs());
        if (live.host == host) {
            if (spoke || !live.everHeard || (fates && wentOn))
                return {};
            lost.push_back(r);
        } else if (wentOn) {
            othersWentOn = true;
        }
    }
    if (lost.size() < 2 || !othersWentOn)
        return {};
    return lost;
}

store::SessionOutcome Run::hostVerdict(const std::vector<std::uint32_t>& lost, const std::string& rankCause) const
{
    const std::string& host = liveness(lost.front()).host;
    const std::string ranks = rankRanges(lost);
    // What the engine sees of the processes, when this machine started them (test hosts, or a host
    // that is this one); a remote host's are out of its sight. Processes killed together read as
    // gone together, however far each has got on its way out (launchedProcessState).
    std::set<char> states;
    bool allSeen = true;
    std::string each;  // rank by rank, when they disagree
    for (std::uint32_t r : lost) {
        const std::optional<char> state = launchedProcessState(r);
        allSeen = allSeen && state.has_value();
        if (state)
            states.insert(*state == 't' ? 'T' : *state == 'S' ? 'R' : *state);
        each += (each.empty() ? "" : ", ") + std::to_string(r) + " " +
                (!state          ? "out of sight"
                 : *state == '?' ? "gone"
                                 : std::string("in state ") + *state);
    }
    std::string seen = "the host died, froze or lost its network";
    if (states.size() > 1 || (!allSeen && !states.empty()))
        seen += " (its ranks' processes: " + each + ")";
    if (allSeen && states.size() == 1) {
        switch (*states.begin()) {
        case '?':
            seen = "its processes are gone: the node died";
            break;
        case 'T':
            seen = "its processes are stopped: the host froze";
            break;
        case 'R':
            seen = "its processes run but are not heard: its network is down";
            break;
        default:
            seen = silentRankState(lost.front());
            break;
        }
    }
    return failedRank(lost.front(), "host " + host + " was lost with all its ranks (" + ranks +
                                        "), silent together while the other hosts went on: " + seen + " (" + rankCause +
                                        ")");
}

store::SessionOutcome Run::widenedToHost(store::SessionOutcome verdict) const
{
    if (verdict.outcome != store::Outcome::Failed || verdict.failedRank < 0)
        return verdict;
    const std::vector<std::uint32_t> lost = hostLostWith(std::uint32_t(verdict.failedRank));
    return lost.empty() ? verdict : hostVerdict(lost, verdict.cause);
}

std::optional<store::SessionOutcome> Run::unreachableHostVerdict() const
{
    const LauncherReport& report = m_launcherReport;
    if (report.unreachableHost.empty())
        return std::nullopt;
    // A host whose ranks were heard was reached; what became of it later is the heartbeats' to say.
    for (std::uint32_t r = 0; r < m_world; ++r)
        if (liveness(r).everHeard && liveness(r).host == report.unreachableHost)
            return std::nullopt;
    const std::string& host = report.unreachableHost;
    std::string cause = "host " + host + " cannot be reached";
    if (!report.unreachableFrom.empty())
        cause += " from " + report.unreachableFrom + ", where mpirun runs";
    cause += ": " + report.unreachableWhy + (report.daemonsNotStarted ? ", so the job did not start" : "") + "; ";
    if (!report.unreachableFrom.empty())
        cause += "check that " + host + " has a network link and a route to " + report.unreachableFrom +
                 " (and no firewall between them), that Open MPI's oob_tcp_if_include / btl_tcp_if_include name a "
                 "network both are on, or leave " +
                 host + " out of the hostfile";
    else
        cause += "check that " + host + " is up and reachable from this machine (ssh " + host +
                 " true), or leave it out of the hostfile";
    return store::SessionOutcome{store::Outcome::Failed, cause, -1, 0};
}

bool Run::launcherCrashed() const { return m_job && m_launcherReport.crashPid == m_job->pid(); }

std::string Run::crashWords() const
{
    std::string words = "crashed";
    if (!m_launcherReport.crashSignal.empty())
        words += " (" + m_launcherReport.crashSignal +
                 (m_launcherReport.crashFrame.empty() ? "" : " in " + m_launcherReport.crashFrame) + ")";
    return words;
}

store::SessionOutcome Run::launcherVerdict(const std::optional<ExitStatus>& exit) const
{
    const std::string launcher = m_request.oneDevice ? "the agent" : m_request.slurm ? "srun" : "mpirun";
    // Evidence in order of trust: what a rank said of itself; whom mpirun saw end the job first; how
    // mpirun itself ended; then what the ranks' last heartbeats leave to infer.
    if (std::optional<store::SessionOutcome> own = ownVerdict())
        return *own;
    if (std::optional<store::SessionOutcome> unreachable = unreachableHostVerdict())
        return *unreachable;
    if (m_launcherReport.rank >= 0 && std::uint32_t(m_launcherReport.rank) < m_world) {
        const auto rank = std::uint32_t(m_launcherReport.rank);
        if (liveness(rank).state == wire::RankState::Terminated)
            return failedRank(rank, terminatedRankCause(rank));
        std::string cause = rankWords(rank) + " " + m_launcherReport.describe();
        if (m_launcherReport.improper)
            cause += " (its last heartbeat said step " + std::to_string(liveness(rank).completedSteps) + " of " +
                     std::to_string(m_lastStep) + ")";
        return failedRank(rank, cause);
    }
    // The engine never signals a launcher before it has a verdict, so this signal came from elsewhere.
    if (exit && exit->signal != 0) {
        if (m_request.oneDevice)  // the agent is rank 0 itself
            return failedRank(0, rankWords(0) + " " + exit->describe());
        if (launcherCrashed())
            return {store::Outcome::Failed,
                    launcher + " " + crashWords() + " (its report is in the session's log)" +
                        (m_leftRanksStopped ? "; the ranks it left running were stopped" : ""),
                    -1, 0};
        return {store::Outcome::Failed,
                launcher + " was killed by signal " + std::to_string(exit->signal) + " (" + strsignal(exit->signal) +
                    "), which the engine did not send" +
                    (m_leftRanksStopped ? "; the ranks it left running were stopped" : ""),
                -1, 0};
    }
    // Slurm ended the step: a user's scancel is a stop, its time limit a failure.
    if (!m_launcherReport.slurmCancelledAt.empty())
        return m_launcherReport.slurmTimeLimit
                   ? store::SessionOutcome{store::Outcome::Failed,
                                           "the Slurm job reached its time limit at " +
                                               m_launcherReport.slurmCancelledAt +
                                               " (raise it with sbatch/salloc --time)",
                                           -1, 0}
                   : store::SessionOutcome{store::Outcome::Stopped,
                                           "cancelled in Slurm (scancel) at " + m_launcherReport.slurmCancelledAt, -1,
                                           0};
    std::vector<std::uint32_t> heard, terminated;
    for (std::uint32_t r = 0; r < m_world; ++r)
        if (liveness(r).everHeard) {
            heard.push_back(r);
            if (liveness(r).state == wire::RankState::Terminated && endedBeforeTeardown(liveness(r)))
                terminated.push_back(r);
        }
    if (heard.size() > 1 && terminated.size() == heard.size()) {
        const int signal = liveness(terminated.front()).detail;
        return {store::Outcome::Failed,
                "every rank was terminated by signal " + std::to_string(signal) + " (" + strsignal(signal) +
                    "), which the engine did not send: the job was ended from outside (" + launcher +
                    " signalled, or the whole job: kill, scancel, a time limit)",
                -1, 0};
    }
    // Without the launcher's end, a rank counts as gone only once it has been silent for the timeout.
    const std::string ended = exit ? "; " + launcher + " " + exit->describe() : std::string();
    const std::int64_t now = wire::wallAlignedNowNs();
    // A host lost whole outweighs a rank elsewhere that the launcher's teardown ended before it could
    // speak (on a busy machine it may not get to): the lost host's rank is named, widened to the host.
    std::optional<std::uint32_t> silent;
    for (std::uint32_t r : heard) {
        if (endedBeforeTeardown(liveness(r)) || (!exit && now - liveness(r).lastHeardNs <= heartbeatTimeoutNs()))
            continue;
        const bool hostLost = !hostLostWith(r).empty();
        if (!silent || hostLost)
            silent = r;
        if (hostLost)
            break;
    }
    if (silent)
        return failedRank(*silent,
                          rankWords(*silent) + " ended without a word (killed, e.g. SIGKILL or out of memory)" + ended);
    if (const auto rank =
            firstEnded([](const RankLiveness& live) { return live.state == wire::RankState::Terminated; }))
        return failedRank(*rank, terminatedRankCause(*rank));
    if (const auto rank = firstEnded(communicationFailed))
        return failedRank(*rank, failedRankCause(*rank) + " (a peer may have ended first; see the session's log)");
    return {store::Outcome::Failed,
            launcher + (exit ? " " + exit->describe() : std::string(" did not end the job")) +
                " (its output is in the session's log)" + rootHint(),
            -1, 0};
}

std::string Run::rootHint() const
{
    // Open MPI's mpirun refuses to start ranks as root unless two variables say so; its own
    // message lands in the session's log, where a user would not look first.
    const char* allowed = std::getenv("OMPI_ALLOW_RUN_AS_ROOT");
    if (m_request.oneDevice || m_request.slurm || m_request.allowRunAsRoot || geteuid() != 0 || (allowed && *allowed))
        return {};
    return "; note: Open MPI refuses to run as root: run as another user, or use --one-device (Run > Run on One "
           "Device in the workbench), or, if you must, pass --allow-run-as-root (Run > Allow Open MPI as Root in the "
           "workbench)";
}

RunResult Run::execute()
{
    // The collector was bound before the session exists and the job starts, so nothing is lost.
    const std::string collector = m_collector.endpoint();
    m_writer = std::make_unique<store::SessionWriter>(m_request.sessionPath, header());
    m_collector.attach(*m_writer);
    m_result.sessionPath = m_writer->path();
    m_observer.started(m_writer->path(), collector, int(m_world));

    const std::vector<std::string> argv = launchCommand(collector);
    std::string commandLine;
    for (const std::string& a : argv)
        commandLine += (commandLine.empty() ? "" : " ") + a;
    m_collector.engineLog(wire::LogLevel::Info, "launching: " + commandLine);
    std::optional<LaunchedProcess> job;
    try {
        std::vector<std::pair<std::string, std::string>> environment;
        if (m_keys)
            environment.emplace_back(kTelemetryKeysVariable, m_keys->environment());
        job.emplace(argv, environment);
        m_job = &*job;
    } catch (const std::exception& e) {
        const std::string cause =
            std::string(e.what()) + (m_request.oneDevice ? ""
                                     : m_request.slurm   ? " (is Slurm's srun on the PATH?)"
                                                         : " (is Open MPI installed? see --mpirun)");
        m_collector.engineLog(wire::LogLevel::Error, cause);
        m_result.outcome = {store::Outcome::Failed, cause, -1, wire::wallAlignedNowNs()};
        m_writer->setOutcome(m_result.outcome);
        m_writer->flush();
        return m_result;
    }
    const Clock::time_point launched = Clock::now();
    std::optional<store::SessionOutcome> verdict;
    std::optional<ExitStatus> exit;
    Clock::time_point drainUntil;
    for (;;) {
        std::vector<zmq::pollitem_t> items{{m_collector.socket().handle(), 0, ZMQ_POLLIN, 0}};
        for (int fd : {job->stdoutFd(), job->stderrFd()})
            if (fd >= 0)
                items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
        zmq::poll(items, std::chrono::milliseconds(100));
        m_collector.receive();
        noteNewlyHeardRanks(*job);
        if (job->stdoutFd() >= 0)
            readLauncher(*job, job->stdoutFd(), wire::LogLevel::Info);
        if (job->stderrFd() >= 0)
            readLauncher(*job, job->stderrFd(), wire::LogLevel::Warning);

        if (!exit && (exit = job->poll()))
            drainUntil = Clock::now() + kDrainTime;
        if (!verdict && !exit) {
            if (m_stop.load())
                verdict = store::SessionOutcome{store::Outcome::Stopped, "stopped by the user", -1, 0};
            else
                verdict = rankVerdict(launched);
            if (verdict) {
                m_collector.engineLog(verdict->outcome == store::Outcome::Stopped ? wire::LogLevel::Info
                                                                                  : wire::LogLevel::Error,
                                      verdict->cause + "; stopping the job");
                m_teardownNs = wire::wallAlignedNowNs();
                m_orderlyStop = verdict->outcome == store::Outcome::Stopped;
                // Every rank is asked to say it stops; the one at fault, or its whole host, may be
                // past answering.
                std::vector<std::uint32_t> pastAnswering = m_unanswering;
                if (pastAnswering.empty() && verdict->failedRank >= 0) {
                    pastAnswering = hostLostWith(std::uint32_t(verdict->failedRank));
                    if (pastAnswering.empty())
                        pastAnswering.push_back(std::uint32_t(verdict->failedRank));
                }
                job->stop(
                    wire::kEngineStopSignal, kSettleLimit,
                    [this, &pastAnswering] {
                        m_collector.receive();
                        for (std::uint32_t r = 0; r < m_world; ++r)
                            if (std::find(pastAnswering.begin(), pastAnswering.end(), r) == pastAnswering.end() &&
                                liveness(r).everHeard && !wire::isFinal(liveness(r).state))
                                return false;
                        return true;
                    },
                    kTerminateGrace);
                exit = job->poll();
                drainUntil = Clock::now() + kDrainTime;
            }
        }
        if (exit) {
            // Ranks lost with their host or network will not be heard again: nothing to wait for.
            bool allFinal = true;
            for (std::uint32_t r = 0; r < m_world; ++r)
                allFinal =
                    allFinal && (wire::isFinal(liveness(r).state) ||
                                 std::find(m_unanswering.begin(), m_unanswering.end(), r) != m_unanswering.end());
            if (allFinal || Clock::now() >= drainUntil)
                break;
        }
    }
    // Whatever the launcher still had to say, and the frames that arrived meanwhile.
    for (int fd : {job->stdoutFd(), job->stderrFd()})
        if (fd >= 0)
            readLauncher(*job, fd, fd == job->stdoutFd() ? wire::LogLevel::Info : wire::LogLevel::Warning);
    m_collector.receive();
    // A launcher that died (killed, say) can leave its ranks running: they are stopped now, after
    // the evidence of what happened was gathered.
    if (job->descendantsAlive()) {
        if (m_teardownNs == 0)
            m_teardownNs = wire::wallAlignedNowNs();
        m_leftRanksStopped = true;
        m_collector.engineLog(wire::LogLevel::Warning, "the launcher ended and left ranks running; stopping them");
        job->terminate(kTerminateGrace);
        m_collector.receive();
    }

    // A launcher that crashed while the engine took the job down (mpirun's PMIx_Finalize, say, once
    // it could not reach its daemons) did so because of what the verdict says, not the other way
    // round: said as such, and the verdict stands.
    if (verdict && m_teardownNs != 0 && exit && exit->signal != 0 && exit->signal != SIGTERM && exit->signal != SIGKILL)
        m_collector.engineLog(
            wire::LogLevel::Warning,
            std::string(m_request.slurm ? "srun" : "mpirun") + " " +
                (launcherCrashed() ? crashWords() : exit->describe()) + " while the engine was stopping the job" +
                (m_networkLost ? ", its daemons out of its reach" : "") +
                (verdict->outcome == store::Outcome::Stopped ? "; a consequence of the stop, not a failure"
                                                             : "; a consequence of the failure above, not its cause"));
    if (!verdict) {
        bool allFinished = true;
        for (std::uint32_t r = 0; r < m_world; ++r)
            allFinished = allFinished && liveness(r).state == wire::RankState::Finished;
        if (exit->ok() && allFinished)
            verdict = store::SessionOutcome{store::Outcome::Completed, "", -1, 0};
        else if (exit->ok())
            verdict =
                store::SessionOutcome{store::Outcome::Completed,
                                      "the job exited normally but not every rank's last heartbeat arrived", -1, 0};
        else
            verdict = widenedToHost(launcherVerdict(*exit));
        if (verdict->outcome == store::Outcome::Failed)
            m_collector.engineLog(wire::LogLevel::Error, verdict->cause);
    }
    // Steps still open (the last ones of a failed run) are kept as they are.
    m_collector.flushAggregates();
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const RankLiveness& live = liveness(r);
        const plan::MeshCoord c = m_mesh.coordOf(int(r));
        const plan::DevicePlace place = plan::placeRank(int(r), m_spec.cluster);
        m_writer->updateRank({std::int32_t(r), c.dp, c.pp, c.tp, c.ep, place.node, place.device, live.host, live.pid});
    }
    for (const store::RankTraffic& traffic : m_collector.ingest().traffic())
        m_writer->setTraffic(traffic);
    verdict->endedNs = wire::wallAlignedNowNs();
    m_writer->setOutcome(*verdict);
    m_writer->flush();

    m_result.outcome = *verdict;
    m_result.records = m_collector.records();
    m_result.lostRecords = m_collector.ingest().lostRecords();
    m_result.rejectedFrames = m_collector.ingest().rejectedFrames();
    m_observer.finish(m_spec, m_plan, m_aggregator.memory());
    return m_result;
}

}  // namespace

RunResult runJob(const RunRequest& request, RunObserver& observer, const std::atomic<bool>& stop)
{
    Run run(request, observer, stop);
    return run.execute();
}

std::string defaultSessionDir()
{
    if (const char* data = std::getenv("XDG_DATA_HOME"); data && *data)
        return (std::filesystem::path(data) / "meshbench" / "sessions").string();
    const char* home = std::getenv("HOME");
    return (std::filesystem::path(home && *home ? home : ".") / ".local" / "share" / "meshbench" / "sessions").string();
}

std::string newSessionPath(const std::string& dir, const std::string& jobName)
{
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
    // The job's name, reduced to characters that are safe in a file name.
    std::string slug;
    for (char c : jobName.substr(0, 40)) {
        const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
        if (safe)
            slug += c;
        else if (!slug.empty() && slug.back() != '-')
            slug += '-';
    }
    while (!slug.empty() && slug.back() == '-')
        slug.pop_back();
    std::filesystem::path path = std::filesystem::path(dir) / (std::string(stamp) + (slug.empty() ? "" : "-" + slug));
    // Two runs within one second get distinct names.
    std::string candidate = path.string() + ".meshbench";
    for (int n = 2; std::filesystem::exists(candidate); ++n)
        candidate = path.string() + "-" + std::to_string(n) + ".meshbench";
    return candidate;
}

}  // namespace meshbench::service
