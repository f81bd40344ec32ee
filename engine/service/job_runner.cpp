#include "job_runner.h"

#include "clock_server.h"
#include "collector.h"
#include "curve_guard.h"
#include "failure_verdict.h"
#include "launcher.h"
#include "launcher_report.h"
#include "live/steady_state.h"
#include "live_trace_importer.h"
#include "wire/curve_keys.h"
#include "wire/endpoints.h"
#include "wire/wall_clock.h"

#include "plan/capability.h"
#include "plan/mesh.h"
#include "plan/planner.h"
#include "plan/report.h"

#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>

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

using Environment = std::vector<std::pair<std::string, std::string>>;

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
        for (std::uint32_t r = 0; r < m_world; ++r)
            m_coords.push_back(m_mesh.coordOf(int(r)));
        m_lastStep = request.steps.value_or(request.spec.train.steps);
    }

    RunResult execute();

private:
    store::SessionHeader header() const;
    // What every rank runs: meshbench-agent, or the spec's launch command.
    std::vector<std::string> rankCommand(const std::string& collector) const;
    // The variables every rank gets over the engine's own environment: the run's CURVE keys, and for
    // a launch command where to report and the command's own.
    Environment rankEnvironment(const std::string& collector) const;
    std::vector<std::string> launchCommand(const std::string& collector, const Environment& environment) const;
    SocketSetup secureSocket()
    {
        return [this](zmq::socket_t& socket, const std::string& name) {
            if (m_keys)
                m_keys->guard.guard(socket, m_keys->server.secretKey, name);
        };
    }
    void readLauncher(LaunchedProcess& job, int fd, wire::LogLevel level);
    // What the engine knows of the run now, for the failure verdicts (failure_verdict.h).
    RunEvidence evidence() const;
    // A rank's process state letter (/proc; '?' once it is gone), when this machine started it.
    std::optional<char> launchedProcessState(std::uint32_t rank) const;
    bool launcherCrashed() const { return m_job && m_launcherReport.crashPid == m_job->pid(); }
    void noteNewlyHeardRanks(LaunchedProcess& job);
    // What the importer of handed-over traces has to say, into the session's log.
    void logImports(LiveTraceImporter& traces)
    {
        for (auto& [level, text] : traces.takeMessages())
            m_collector.engineLog(level, std::move(text));
    }
    // What to do when mpirun failed because this engine runs as root; empty otherwise.
    std::string rootHint() const;
    const RankLiveness& liveness(std::uint32_t rank) const { return m_collector.ingest().liveness(rank); }
    // The job spec's folder, which a launch command's relative paths are taken from.
    std::filesystem::path specFolder() const { return std::filesystem::absolute(m_request.jobPath).parent_path(); }

    const RunRequest& m_request;
    const std::atomic<bool>& m_stop;
    plan::JobSpec m_spec;  // the layout the agents run (one rank with oneDevice)
    plan::Plan m_plan;
    plan::Mesh m_mesh;
    std::uint32_t m_world;
    std::vector<plan::MeshCoord> m_coords;  // each rank's
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
    Clock::time_point m_launched;              // when the launcher started
    bool m_networkLost = false;                // the verdict found every host silent together: no rank can answer
    std::vector<std::uint32_t> m_unanswering;  // the ranks the verdict found lost with their host or network
    bool m_orderlyStop = false;                // the user's stop is under way
};

store::SessionHeader Run::header() const
{
    store::SessionHeader h;
    h.name = m_request.spec.name;
    h.jobSpec = m_request.specText;
    h.planJson = plan::planToJson(m_plan).dump();
    h.layout = plan::layoutWords(m_request.spec.parallel) + (m_request.oneDevice ? " on one device" : "");
    h.createdNs = wire::wallAlignedNowNs();
    h.engineVersion = MESHBENCH_VERSION;
    for (std::uint32_t r = 0; r < m_world; ++r) {
        const plan::MeshCoord c = m_mesh.coordOf(int(r));
        const plan::DevicePlace place = plan::placeRank(int(r), m_spec.cluster);
        h.ranks.push_back({std::int32_t(r), c.dp, c.pp, c.tp, c.ep, place.node, place.device, "", 0});
    }
    return h;
}

std::vector<std::string> Run::rankCommand(const std::string& collector) const
{
    const plan::LaunchSpec& launch = m_request.spec.launch;
    if (launch.enabled()) {
        std::vector<std::string> command = launch.command;
        // A program named by a path is found from the job spec's folder, a bare name on the PATH.
        if (command.front().find('/') != std::string::npos)
            command.front() = (specFolder() / command.front()).lexically_normal().string();
        return command;
    }
    std::vector<std::string> agent{m_request.agent, "--job",   m_request.jobPath, "--telemetry",
                                   collector,       "--clock", m_clock.endpoint()};
    if (m_request.steps)
        agent.insert(agent.end(), {"--steps", std::to_string(*m_request.steps)});
    return agent;
}

Environment Run::rankEnvironment(const std::string& collector) const
{
    Environment environment;
    if (m_keys)
        environment.emplace_back(kTelemetryKeysVariable, m_keys->environment());
    const plan::LaunchSpec& launch = m_request.spec.launch;
    if (launch.enabled()) {
        // What the agent has on its command line, the launched program finds here (docs/job-spec.md).
        environment.insert(environment.end(), {{"MESHBENCH_COLLECTOR", collector},
                                               {"MESHBENCH_CLOCK", m_clock.endpoint()},
                                               {"MESHBENCH_JOB", std::filesystem::absolute(m_request.jobPath).string()},
                                               {"MESHBENCH_WORLD_SIZE", std::to_string(m_world)}});
        environment.insert(environment.end(), launch.env.begin(), launch.env.end());
    }
    return environment;
}

std::vector<std::string> Run::launchCommand(const std::string& collector, const Environment& environment) const
{
    std::vector<std::string> program = rankCommand(collector);
    if (m_request.oneDevice)
        return program;
    const plan::LaunchSpec& launch = m_request.spec.launch;
    // A launch command may fail before it reports anything, which neither launcher reliably says of
    // a rank: its shell says how it ended, and the launcher tags its lines with the rank, so that the
    // verdict names the rank, its status and its last stderr line (launcher_report.h).
    if (launch.enabled())
        program = launchedUnderShell(program, m_request.slurm ? "SLURM_PROCID" : "OMPI_COMM_WORLD_RANK");
    // A launch command's ranks start in its folder; the agent's wherever the launcher puts them.
    const std::string folder = !launch.enabled()    ? std::string()
                               : launch.cwd.empty() ? specFolder().string()
                                                    : (specFolder() / launch.cwd).lexically_normal().string();
    if (m_request.slurm) {
        // One job step of world tasks, started through PMIx; a task that fails ends the step. The
        // job's name is one argument, never read by a shell. srun hands its tasks the whole
        // environment.
        std::vector<std::string> argv{"srun",
                                      "--mpi=pmix",
                                      "--ntasks",
                                      std::to_string(m_world),
                                      "--kill-on-bad-exit=1",
                                      "--job-name",
                                      m_request.spec.name.empty() ? "meshbench" : m_request.spec.name};
        if (!folder.empty())
            argv.push_back("--chdir=" + folder);
        if (launch.enabled())
            argv.push_back("--label");
        argv.insert(argv.end(), m_request.mpirunArgs.begin(), m_request.mpirunArgs.end());
        argv.insert(argv.end(), program.begin(), program.end());
        return argv;
    }
    std::vector<std::string> argv{m_request.mpirun, "-np", std::to_string(m_world)};
    for (const auto& [name, value] : environment)  // mpirun hands its ranks only the variables it is told to
        argv.insert(argv.end(), {"-x", name});
    if (!folder.empty())
        argv.insert(argv.end(), {"-wdir", folder});
    if (launch.enabled())
        argv.push_back("--tag-output");
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
    argv.insert(argv.end(), program.begin(), program.end());
    return argv;
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
    const bool fromStderr = fd == job.stderrFd();
    for (std::string& line : job.readLines(fd)) {
        readLauncherLine(line, m_launcherReport, fromStderr);
        const bool ours = m_orderlyStop || (m_teardownNs != 0 && line == forwarded);
        m_collector.engineLog(ours ? wire::LogLevel::Debug : level, std::move(line));
    }
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

RunEvidence Run::evidence() const
{
    RunEvidence e;
    e.ranks = m_collector.ingest().liveness();
    e.coords = m_coords;
    e.lastErrors = m_collector.lastErrors();
    e.processState = [this](std::uint32_t rank) { return launchedProcessState(rank); };
    e.launcher = m_launcherReport;
    e.launcherCrashed = launcherCrashed();
    e.launcherName = m_request.oneDevice ? "the agent" : m_request.slurm ? "srun" : "mpirun";
    e.oneDevice = m_request.oneDevice;
    e.leftRanksStopped = m_leftRanksStopped;
    e.nowNs = wire::wallAlignedNowNs();
    e.teardownNs = m_teardownNs;
    e.heartbeatTimeoutNs = std::chrono::duration_cast<std::chrono::nanoseconds>(m_request.heartbeatTimeout).count();
    e.lastStep = m_lastStep;
    e.startTimedOut = Clock::now() - m_launched > m_request.startTimeout;
    e.rootHint = rootHint();
    return e;
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
    LiveTraceImporter traces(*m_writer, m_spec);
    m_collector.handTracesTo(&traces);
    m_result.sessionPath = m_writer->path();
    m_observer.started(m_writer->path(), collector, int(m_world));

    const Environment environment = rankEnvironment(collector);
    const std::vector<std::string> argv = launchCommand(collector, environment);
    std::string commandLine;
    for (const std::string& a : argv)
        commandLine += (commandLine.empty() ? "" : " ") + a;
    m_collector.engineLog(wire::LogLevel::Info, "launching: " + commandLine);
    std::optional<LaunchedProcess> job;
    try {
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
    m_launched = Clock::now();
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
        logImports(traces);
        noteNewlyHeardRanks(*job);
        if (job->stdoutFd() >= 0)
            readLauncher(*job, job->stdoutFd(), wire::LogLevel::Info);
        if (job->stderrFd() >= 0)
            readLauncher(*job, job->stderrFd(), wire::LogLevel::Warning);

        if (!exit && (exit = job->poll()))
            drainUntil = Clock::now() + kDrainTime;
        if (!verdict && !exit) {
            std::vector<std::uint32_t> pastAnswering;
            if (m_stop.load())
                verdict = store::SessionOutcome{store::Outcome::Stopped, "stopped by the user", -1, 0};
            else if (RunningVerdict running = verdictWhileRunning(evidence()); running.outcome) {
                verdict = running.outcome;
                m_networkLost = running.networkLost;
                m_unanswering = std::move(running.unanswering);
                pastAnswering = std::move(running.pastAnswering);
            }
            if (verdict) {
                m_collector.engineLog(verdict->outcome == store::Outcome::Stopped ? wire::LogLevel::Info
                                                                                  : wire::LogLevel::Error,
                                      verdict->cause + "; stopping the job");
                m_teardownNs = wire::wallAlignedNowNs();
                m_orderlyStop = verdict->outcome == store::Outcome::Stopped;
                // Every rank is asked to say it stops; the one at fault, or its whole host, may be
                // past answering.
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
                (launcherCrashed() ? m_launcherReport.crashWords() : exit->describe()) +
                " while the engine was stopping the job" + (m_networkLost ? ", its daemons out of its reach" : "") +
                (verdict->outcome == store::Outcome::Stopped ? "; a consequence of the stop, not a failure"
                                                             : "; a consequence of the failure above, not its cause"));
    if (!verdict) {
        verdict = verdictOnExit(evidence(), *exit);
        if (verdict->outcome == store::Outcome::Failed)
            m_collector.engineLog(wire::LogLevel::Error, verdict->cause);
    }
    // Traces handed over are imported before the session is closed; a stop by the user abandons them.
    traces.finish(verdict->outcome == store::Outcome::Stopped);
    m_collector.handTracesTo(nullptr);
    logImports(traces);
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

std::vector<plan::SpecError> runRefusals(const plan::JobSpec& spec, bool oneDevice)
{
    if (oneDevice && spec.launch.enabled())
        return {{"launch.command", "runs in meshbench-agent's place under mpirun or srun, and one device is the "
                                   "agent's alone: run it without one device (Run > Run on One Device in the "
                                   "workbench), or remove the launch section"}};
    return plan::agentRefusals(oneDevice ? plan::singleDeviceSpec(spec) : spec);
}

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
