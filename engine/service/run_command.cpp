#include "run_command.h"

#include "command_line.h"
#include "job_runner.h"
#include "plan_commands.h"

#include "plan/capability.h"
#include "plan/report.h"
#include "store/session_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

namespace meshbench::service {

namespace {

constexpr const char* kUsage =
    "meshbench-engine run JOB.json [--session FILE] [--steps N] [--one-device] [--collector ENDPOINT]\n"
    "                            [--hostfile FILE] [--mpirun PATH] [--slurm] [--mpi-arg ARG]...\n"
    "                            [--allow-run-as-root]\n"
    "                            [--heartbeat-timeout S]\n"
    "                            [--profile PROFILE.json] [--verbose]";

// A figure the run may not have (yet): "n/a" then.
std::string optionalNumber(const char* pattern, std::optional<double> value, double scale)
{
    return value ? plan::formatNumber(pattern, scale * *value) : "n/a";
}

std::string percent(std::optional<double> value) { return optionalNumber("%.1f%%", value, 100); }
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
        std::printf(", bubble %s measured vs %s planned", percent(r.meanBubble).c_str(), percent(r.plannedBubble).c_str());
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
    constexpr std::size_t kMaxFindings = 8;   // the worst; the GUI lists them all
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

int runRunCommand(const std::vector<std::string>& args)
{
    RunRequest request;
    std::string jobPath;
    std::string sessionPath;
    std::string profile;
    bool verbose = false;
    bool mpirunAsked = false;   // --mpirun or --hostfile
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        mpirunAsked = mpirunAsked || a == "--mpirun" || a == "--hostfile";
        const bool takesValue = a == "--session" || a == "--steps" || a == "--collector" || a == "--hostfile" ||
                                a == "--mpirun" || a == "--mpi-arg" || a == "--heartbeat-timeout" || a == "--profile";
        if (a == "--one-device") {
            request.oneDevice = true;
        } else if (a == "--slurm") {
            request.slurm = true;
        } else if (a == "--allow-run-as-root") {
            request.allowRunAsRoot = true;
        } else if (a == "--verbose") {
            verbose = true;
        } else if (takesValue) {
            if (i + 1 >= args.size())
                return usageError(a + " needs a value", kUsage);
            const std::string& value = args[++i];
            double number = 0;
            if (a == "--session") {
                sessionPath = value;
            } else if (a == "--profile") {
                profile = value;
            } else if (a == "--collector") {
                request.collectorBind = value;
            } else if (a == "--hostfile") {
                request.mpirunArgs.insert(request.mpirunArgs.end(), {"--hostfile", value});
            } else if (a == "--mpirun") {
                request.mpirun = value;
            } else if (a == "--mpi-arg") {
                request.mpirunArgs.push_back(value);
            } else if (!parsePositive(value, number)) {
                return usageError(a + " needs a number, got '" + value + "'", kUsage);
            } else if (a == "--steps") {
                if (number > 1e9 || std::floor(number) != number)
                    return usageError("--steps needs a whole number up to 1,000,000,000", kUsage);
                request.steps = int(number);
            } else {
                if (number < 0.5 || number > 3600)
                    return usageError("--heartbeat-timeout needs seconds from 0.5 to 3600", kUsage);
                request.heartbeatTimeout = std::chrono::milliseconds(std::llround(number * 1000));
            }
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option '" + a + "'", kUsage);
        } else if (jobPath.empty()) {
            jobPath = a;
        } else {
            return usageError("one job at a time ('" + jobPath + "' and '" + a + "')", kUsage);
        }
    }
    if (jobPath.empty())
        return usageError("run needs a job spec", kUsage);
    if (request.slurm && mpirunAsked)
        return usageError("--slurm launches with srun; --mpirun and --hostfile are mpirun's (Slurm places the ranks)",
                          kUsage);
    // Inside an allocation (salloc, sbatch) the ranks belong to it: srun, unless mpirun was asked for.
    if (const char* allocation = std::getenv("SLURM_JOB_ID");
        allocation && *allocation && !request.slurm && !mpirunAsked && !request.oneDevice) {
        request.slurm = true;
        std::printf("inside Slurm allocation %s: launching with srun (--mpirun mpirun to use mpirun)\n", allocation);
    }

    // Invalid layouts are refused here, before anything is launched.
    std::optional<SpecFile> file = loadSpecFile(jobPath, false, true);
    if (!file || (!profile.empty() && !applyProfileFile(profile, file->spec)))
        return 1;
    // So is what the agent of this build would refuse, asked of the layout as it will run.
    if (const std::vector<plan::SpecError> refusals =
            plan::agentRefusals(request.oneDevice ? plan::singleDeviceSpec(file->spec) : file->spec);
        !refusals.empty()) {
        std::cerr << jobPath << ": meshbench-agent of this build does not run this job"
                  << (request.oneDevice ? " on one device" : "") << ":\n" << plan::errorsToText(refusals);
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

    TerminalObserver observer(request.steps.value_or(request.spec.train.steps), verbose);
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

}  // namespace meshbench::service
