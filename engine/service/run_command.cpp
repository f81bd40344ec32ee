#include "run_command.h"

#include "job_runner.h"
#include "plan_commands.h"

#include "plan/report.h"
#include "plan/units.h"
#include "store/session_store.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace meshbench::service {

namespace {

// A figure the run may not have (yet): "n/a" then.
std::string optionalNumber(const char* pattern, std::optional<double> value, double scale)
{
    return value ? plan::formatNumber(pattern, scale * *value) : "n/a";
}

std::string percent(std::optional<double> share) { return share ? plan::formatPercent(*share) : "n/a"; }
std::string milliseconds(std::optional<double> seconds) { return optionalNumber("%.0f ms", seconds, 1e3); }

// Progress on the terminal: one line per step, problems on stderr.
class TerminalObserver : public RunObserver {
public:
    TerminalObserver(int totalSteps, bool verbose) : m_total(totalSteps), m_verbose(verbose) {}

    void started(const std::string& sessionPath, const std::string& collector, int ranks) override
    {
        std::printf("session %s\ncollector %s, %d rank%s\n", sessionPath.c_str(), collector.c_str(), ranks,
                    ranks == 1 ? "" : "s");
        std::fflush(stdout);
    }
    void stepCompleted(const live::StepAggregate& s) override
    {
        char line[512];
        int n = std::snprintf(line, sizeof line, "step %5d/%d", s.step, m_total);
        auto add = [&](const char* format, auto... values) {
            if (n < int(sizeof line))
                n += std::snprintf(line + n, sizeof line - std::size_t(n), format, values...);
        };
        if (s.loss)
            add("  loss %.6f", *s.loss);
        if (s.auxLoss)
            add("  aux %.5f", *s.auxLoss);
        if (s.stepSeconds)
            add("  step %.0f ms (plan %s)", 1e3 * *s.stepSeconds, milliseconds(s.plannedStepSeconds).c_str());
        if (s.tokensPerSecond)
            add("  tokens/s %.0f", *s.tokensPerSecond);
        if (s.bubble)
            add("  bubble %s (plan %s)", percent(s.bubble).c_str(), percent(s.plannedBubble).c_str());
        if (s.imbalanceP95)
            add("  experts max/mean p95 %.2f dropped %s", *s.imbalanceP95, percent(s.droppedFraction).c_str());
        if (s.mfu)
            add("  MFU %s", percent(s.mfu).c_str());
        if (s.partial)
            add("  (partial: not every rank reported this step)");
        std::printf("%s\n", line);
        std::fflush(stdout);
    }
    void memoryChanged(const live::RankMemory&) override {}
    void batchArrived(const wire::Batch&) override {}
    void message(wire::LogLevel level, const std::string& text) override
    {
        // The job's own output is in the session; shown here when asked, or when it is a problem.
        if (level >= wire::LogLevel::Warning || m_verbose)
            std::fprintf(level >= wire::LogLevel::Warning ? stderr : stdout, "%s\n", text.c_str());
    }

private:
    int m_total;
    bool m_verbose;
};

void printSummary(const RunResult& r)
{
    std::printf("\n%s", std::string(store::outcomeName(r.outcome.outcome)).c_str());
    if (!r.outcome.cause.empty())
        std::printf(": %s", r.outcome.cause.c_str());
    std::printf("\nsteps %d", r.steps);
    if (r.finalLoss)
        std::printf(", final loss %.6f", *r.finalLoss);
    if (r.meanTokensPerSecond)
        std::printf(", %.0f tokens/s", *r.meanTokensPerSecond);
    if (r.meanBubble)
        std::printf(", bubble %s measured vs %s planned", percent(r.meanBubble).c_str(),
                    percent(r.plannedBubble).c_str());
    if (r.meanMfu)
        std::printf(", MFU %s", percent(r.meanMfu).c_str());
    if (r.worstImbalance)
        std::printf(", expert imbalance p95 up to %.2f", *r.worstImbalance);
    std::printf("\nrecords %llu stored, %llu lost", static_cast<unsigned long long>(r.records),
                static_cast<unsigned long long>(r.lostRecords));
    if (r.rejectedFrames > 0)
        std::printf(", %llu frames rejected", static_cast<unsigned long long>(r.rejectedFrames));
    if (!r.findings.empty())
        std::printf("\nfindings:");
    constexpr std::size_t kMaxFindings = 8;  // the worst; the GUI lists them all
    for (std::size_t i = 0; i < std::min(r.findings.size(), kMaxFindings); ++i)
        std::printf("\n  %s", live::describe(r.findings[i]).c_str());
    std::printf("\nsession %s\n", r.sessionPath.c_str());
    std::fflush(stdout);
}

}  // namespace

std::string agentExecutable()
{
    if (const char* agent = std::getenv("MESHBENCH_AGENT"); agent && *agent)
        return agent;
    std::error_code error;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
    if (!error) {
        const std::filesystem::path beside = self.parent_path() / "meshbench-agent";
        if (std::filesystem::exists(beside))
            return beside.string();
    }
    return "meshbench-agent";
}

namespace {

struct RunArguments {
    RunRequest request;
    std::string jobPath;
    std::string sessionPath;
    std::string profile;
    std::string hostfile;
    std::vector<std::string> mpiArgs;
    double heartbeatSeconds = std::chrono::duration<double>(RunRequest().heartbeatTimeout).count();
    bool verbose = false;
};

// mpirunAsked: --mpirun or --hostfile was given.
int runRun(RunArguments& args, bool mpirunAsked)
{
    RunRequest& request = args.request;
    if (!args.hostfile.empty())
        request.mpirunArgs = {"--hostfile", args.hostfile};
    request.mpirunArgs.insert(request.mpirunArgs.end(), args.mpiArgs.begin(), args.mpiArgs.end());
    request.heartbeatTimeout = std::chrono::milliseconds(std::llround(args.heartbeatSeconds * 1000));
    const std::string& jobPath = args.jobPath;
    std::string& sessionPath = args.sessionPath;
    // Inside an allocation (salloc, sbatch) the ranks belong to it: srun, unless mpirun was asked for.
    if (const char* allocation = std::getenv("SLURM_JOB_ID");
        allocation && *allocation && !request.slurm && !mpirunAsked && !request.oneDevice) {
        request.slurm = true;
        std::printf("inside Slurm allocation %s: launching with srun (--mpirun mpirun to use mpirun)\n", allocation);
    }

    // Invalid layouts are refused here, before anything is launched.
    std::optional<SpecFile> file = loadSpecFile(jobPath, false, true);
    if (!file || (!args.profile.empty() && !applyProfileFile(args.profile, file->spec)))
        return 1;
    // So is what the agent of this build would refuse, asked of the layout as it will run.
    if (const std::vector<plan::SpecError> refusals = runRefusals(file->spec, request.oneDevice); !refusals.empty()) {
        std::cerr << jobPath << ": meshbench-agent of this build does not run this job"
                  << (request.oneDevice ? " on one device" : "") << ":\n"
                  << plan::errorsToText(refusals);
        return 1;
    }
    request.jobPath = std::filesystem::absolute(jobPath).string();
    request.specText = std::move(file->text);
    request.spec = std::move(file->spec);
    request.agent = agentExecutable();
    try {
        if (sessionPath.empty()) {
            const std::string dir = defaultSessionDir();
            std::filesystem::create_directories(dir);
            sessionPath = newSessionPath(dir, request.spec.name);
        } else if (const auto dir = std::filesystem::path(sessionPath).parent_path(); !dir.empty()) {
            std::filesystem::create_directories(dir);
        }
    } catch (const std::exception& e) {
        std::cerr << "meshbench-engine: cannot create the folder for the session: " << e.what() << "\n";
        return 5;
    }
    request.sessionPath = sessionPath;

    // Ctrl-C (or a SIGTERM) stops the job cleanly and marks the session stopped.
    const std::atomic<bool>& stop = stopOnSignals();

    TerminalObserver observer(request.steps.value_or(request.spec.train.steps), args.verbose);
    RunResult result;
    try {
        result = runJob(request, observer, stop);
    } catch (const std::exception& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 5;
    }
    printSummary(result);
    switch (result.outcome.outcome) {
    case store::Outcome::Completed:
        return 0;
    case store::Outcome::Stopped:
        return 4;
    default:
        return 3;
    }
}

}  // namespace

Command addRunCommand(CLI::App& engine)
{
    auto args = std::make_shared<RunArguments>();
    RunRequest& request = args->request;
    CLI::App* run =
        engine.add_subcommand("run", "launch the job, show its progress, store its session, print a summary");
    run->add_option("JOB.json", args->jobPath, "the job spec")->required()->type_name("");
    run->add_option("--session", args->sessionPath,
                    "store the session here (default: a new file in ~/.local/share/meshbench/sessions)")
        ->type_name("FILE");
    run->add_option_function<int>(
           "--steps", [args](int steps) { args->request.steps = steps; },
           "steps to run, up to 1e9 (default: the spec's train.steps)")
        ->check(CLI::Range(0, 1'000'000'000).description(""))
        ->type_name("N");
    run->add_flag("--one-device", request.oneDevice, "run the whole global batch in one agent, without mpirun");
    run->add_option("--collector", request.collectorBind,
                    "bind the telemetry collector where the agents reach it (default " + request.collectorBind + ")")
        ->type_name("ENDPOINT");
    // Excluded options keep their left column short: option_text leaves out CLI11's "Excludes:" list.
    CLI::Option* hostfile =
        run->add_option("--hostfile", args->hostfile, "the hosts and slots for mpirun's ranks (not with --slurm)")
            ->check(CLI::ExistingFile.description(""))
            ->type_name("FILE")
            ->option_text("FILE");
    CLI::Option* mpirun =
        run->add_option("--mpirun", request.mpirun,
                        "the mpirun to launch with (default " + request.mpirun + "; not with --slurm)")
            ->type_name("PATH")
            ->option_text("PATH");
    run->add_flag("--slurm", request.slurm,
                  "launch the ranks with srun, as a Slurm job step (not with --mpirun, --hostfile)")
        ->excludes(hostfile)
        ->excludes(mpirun)
        ->option_text(" ");
    run->add_option("--mpi-arg", args->mpiArgs, "pass ARG to mpirun (to srun with --slurm); repeatable")
        ->type_name("ARG");
    run->add_option("--heartbeat-timeout", args->heartbeatSeconds,
                    "a rank silent for S seconds, 0.5 to 3600, has failed (default " +
                        plan::formatNumber("%g", args->heartbeatSeconds) + ")")
        ->check(numberThat([](double s) { return s >= 0.5 && s <= 3600; }, "seconds from 0.5 to 3600"))
        ->type_name("S");
    run->add_option("--profile", args->profile, "plan with the device's and links' rates that `calibrate --out` wrote")
        ->type_name("PROFILE.json");
    run->add_flag("--allow-run-as-root", request.allowRunAsRoot,
                  "pass mpirun --allow-run-as-root when the engine runs as root");
    run->add_flag("--verbose", args->verbose, "also show the job's own output (it is stored in the session)");
    run->footer(
        "exit status: 0 the job completed, 1 the job spec is wrong (nothing launched), 2 the command line is "
        "wrong,\n3 the job failed, 4 it was stopped, 5 it could not be started; the session is stored from 3 on");
    return {run, [args, hostfile, mpirun] { return runRun(*args, hostfile->count() > 0 || mpirun->count() > 0); }};
}

}  // namespace meshbench::service
