#pragma once
// Runs one job from launch to outcome: binds the telemetry collector, creates the session file,
// starts the agents (under mpirun or Slurm's srun, one per rank), stores every record that arrives, feeds the live
// aggregates, watches for failure, and tears the job down when it fails or is stopped.
//
// Failure detection: a rank whose last heartbeat says it failed by itself or finished early; a rank
// silent for longer than the heartbeat timeout (hung, stopped or killed without mpirun noticing);
// mpirun ending with an error. The culprit and cause come from the evidence in order of trust: the
// ranks' own last words, the rank mpirun's report names, how mpirun itself ended, then what the
// last heartbeats leave to infer (see launcherVerdict). Teardown asks every rank to stop
// (wire::kEngineStopSignal through mpirun), waits for their last heartbeats, then signals the
// whole process tree and kills what is left; every record received before stays in the session,
// which is marked failed (or stopped) with the cause.

#include "live/aggregator.h"
#include "live/findings.h"
#include "plan/job_spec.h"
#include "store/session_store.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshbench::service {

struct RunRequest {
    std::string jobPath;   // handed to the agents
    std::string specText;  // stored verbatim
    plan::JobSpec spec;
    std::string sessionPath;
    std::string collectorBind = "tcp://127.0.0.1:*";  // the clock server binds beside it
    std::string mpirun = "mpirun";
    std::vector<std::string> mpirunArgs;  // the launcher's own, e.g. --hostfile FILE (srun's with slurm)
    bool slurm = false;                   // launch with srun --mpi=pmix (a Slurm job step) instead of mpirun
    std::string agent;                    // meshbench-agent executable, unless the spec has a launch command
    std::optional<int> steps;             // overrides train.steps
    bool oneDevice = false;               // run the global batch in one agent, without mpirun
    // Pass Open MPI's --allow-run-as-root to mpirun when the engine runs as root (the user said so:
    // run/serve --allow-run-as-root, the workbench's Run > Allow Open MPI as Root).
    bool allowRunAsRoot = false;
    std::chrono::milliseconds heartbeatTimeout{5000};
    std::chrono::milliseconds startTimeout{120000};  // launch to a rank's first heartbeat
};

// What a run tells whoever watches it; every call comes from the thread that runs the job.
class RunObserver {
public:
    virtual ~RunObserver() = default;
    virtual void started(const std::string& sessionPath, const std::string& collector, int ranks) = 0;
    virtual void stepCompleted(const live::StepAggregate& step) = 0;
    virtual void memoryChanged(const live::RankMemory& memory) = 0;
    // Every batch as it arrives, before it is stored (the live timeline takes its spans from here).
    virtual void batchArrived(const wire::Batch& batch) = 0;
    // A line the job printed (its launcher's output) or a problem the engine saw.
    virtual void message(wire::LogLevel level, const std::string& text) = 0;
};

struct RunResult {
    store::SessionOutcome outcome;
    std::string sessionPath;
    int steps = 0;  // steps with aggregates
    std::optional<double> finalLoss;
    // Means over the steps after the warm-up (live/steady_state.h), or over the warm-up for a run
    // that had no more.
    std::optional<double> meanTokensPerSecond;
    std::optional<double> meanBubble;
    std::optional<double> plannedBubble;
    std::optional<double> meanMfu;
    std::optional<double> worstImbalance;  // the largest per-step p95 expert imbalance
    std::vector<live::Finding> findings;   // worst first
    std::uint64_t records = 0;
    std::uint64_t lostRecords = 0;  // lost on the way or dropped by agents
    std::uint64_t rejectedFrames = 0;
};

// What refuses the job before anything is launched, each on the key to change: what meshbench-agent
// of this build does not run of its layout as it will run (all of it, or on one device), or a launch
// command asked to run on one device.
std::vector<plan::SpecError> runRefusals(const plan::JobSpec& spec, bool oneDevice);

// Throws store::StoreError when the session cannot be created and std::runtime_error when the
// collector cannot bind or the job cannot be launched; once launched, every outcome is a result.
// `stop` is polled: setting it stops the job and marks the session stopped.
RunResult runJob(const RunRequest& request, RunObserver& observer, const std::atomic<bool>& stop);

// The session file's name for a new run of a job: DIR/YYYYmmdd-HHMMSS-<job name>.meshbench.
std::string newSessionPath(const std::string& dir, const std::string& jobName);
// $XDG_DATA_HOME/meshbench/sessions, or ~/.local/share/meshbench/sessions.
std::string defaultSessionDir();

}  // namespace meshbench::service
