#pragma once
// Why a job failed, decided from the evidence alone: the ranks' liveness (their heartbeats, as the
// collector heard them), the state of the processes this machine started, the launcher's report and
// how it ended. Pure functions of that evidence, so every verdict can be tested as a table of cases
// without starting a job (tests/service/tst_failure_verdict.cpp); the job runner gathers the
// evidence and acts on the verdict.
//
// The evidence is weighed in order of trust: what a rank said of itself; whom the launcher saw end
// the job first; how the launcher itself ended; then what the ranks' last heartbeats leave to infer.
// A rank's failure is widened to its host when the whole host went with it, and to the network when
// every host fell silent together.

#include "ingest.h"
#include "launcher.h"
#include "launcher_report.h"

#include "plan/mesh.h"
#include "store/session_store.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace meshbench::service {

struct RunEvidence {
    std::span<const RankLiveness> ranks;      // one per rank of the job
    std::span<const plan::MeshCoord> coords;  // each rank's place in the mesh, to name it
    std::span<const std::string> lastErrors;  // the last error line each rank logged, empty if none
    // A rank's process state letter (/proc's: R, S, D, T, t; '?' once it is gone or on its way out)
    // when this machine started it; nothing when it is out of sight (a remote host's).
    std::function<std::optional<char>(std::uint32_t rank)> processState;
    LauncherReport launcher;
    bool launcherCrashed = false;  // the crash report is the launcher's own, not a rank's
    std::string launcherName;      // "mpirun", "srun", or "the agent" (one device, no launcher)
    bool oneDevice = false;
    bool leftRanksStopped = false;  // the launcher ended and left ranks running, which the engine stopped
    std::int64_t nowNs = 0;         // the engine's clock (wire::wallAlignedNowNs)
    std::int64_t teardownNs = 0;    // when the engine began stopping the job, 0 before
    std::int64_t heartbeatTimeoutNs = 0;
    int lastStep = 0;            // the step every rank's last heartbeat says when the job completes
    bool startTimedOut = false;  // the ranks have had their time to report in since the launch
    std::string rootHint;        // what to do when mpirun refused to run as root; empty otherwise
};

struct RunningVerdict {
    std::optional<store::SessionOutcome> outcome;  // nothing while there is no cause, or it is still open
    bool networkLost = false;                      // every host fell silent together: no rank can answer
    std::vector<std::uint32_t> unanswering;        // ranks lost with their host or the network
    // Ranks not to wait for in the teardown: the unanswering, or else the failed rank and its host.
    std::vector<std::uint32_t> pastAnswering;
};

// While the launcher runs: a cause once the evidence gives one, widened to a host or to the network
// when it says so; nothing while a rank's silence leaves the others' fate open.
RunningVerdict verdictWhileRunning(const RunEvidence& evidence);

// Once the launcher has ended with `exit`, and no verdict was reached while it ran.
store::SessionOutcome verdictOnExit(const RunEvidence& evidence, const ExitStatus& exit);

}  // namespace meshbench::service
