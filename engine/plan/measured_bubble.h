#pragma once
// The measured pipeline bubble of a step, as the planner defines the simulated one (plan::simulate:
// idle / (p x makespan)); the one definition that the agent's step line, the live aggregator, and
// with it the CLI, the Monitor, Sessions > Compare and steps.csv all report.
//   * Pipeline spans are F, B, W and the four send/recv kinds (isPipelineKind). Optimizer and
//     dp-reduce spans run after the pipeline phase or beside it, and idle spans are the absence of
//     work, so none of them counts.
//   * The step's pipeline phase is one common window for every rank: from the earliest pipeline
//     span begin to the latest pipeline span end over all ranks of the step. The simulator also
//     measures every stage against the one makespan, so a last stage that finishes its cool-down
//     early shows that tail as idle instead of hiding it, and per-stage figures match the plan's.
//     Clock skew between nodes (wire timestamps agree to about a millisecond) widens the window.
//   * A rank's busy time is the union of its F, B and W spans (they should not overlap; a union
//     stays right when they do); its idle time is the window length minus that.
//   * Stage bubble = mean over the stage's ranks of idle / window; overall bubble = idle summed
//     over ranks / (ranks x window). Every stage has dp x tp ranks, so the overall figure is the
//     mean of the stage figures, as in the simulator. A rank that sent no pipeline span for the
//     step (a partial step) is left out of both rather than counted as idle.

#include "wire/telemetry.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace meshbench::plan {

struct TimeInterval {
    std::int64_t beginNs;
    std::int64_t endNs;
};

// Length of the union of the intervals; sorts them first unless they are in begin order already.
std::int64_t unionLength(std::vector<TimeInterval>& intervals, bool sorted);

// One rank's pipeline phase in one step: its first pipeline span's begin, its last one's end, and
// the union of its F, B and W spans.
struct RankPipelinePhase {
    int stage = 0;
    std::int64_t beginNs = 0;
    std::int64_t endNs = -1;  // before beginNs: the rank sent no pipeline span
    std::int64_t busyNs = 0;

    bool reported() const { return beginNs <= endNs; }
};

// The phase of one rank from its spans of the step (spans of other kinds are passed over).
RankPipelinePhase rankPipelinePhase(int stage, std::span<const wire::SpanRecord> spans);

struct MeasuredBubble {
    std::int64_t beginNs = 0;  // the common window; empty when no rank reported
    std::int64_t endNs = 0;
    int ranksReporting = 0;
    std::vector<int> stageRanks;                // per stage, the ranks that reported
    std::vector<std::optional<double>> stages;  // per stage; none where no rank reported
    std::optional<double> overall;              // none when no rank reported or the window is empty
};

// The bubble of a step over `stages` pipeline stages from the phases of its ranks (stage outside
// 0 .. stages - 1 is not counted).
MeasuredBubble measuredBubble(std::span<const RankPipelinePhase> ranks, int stages);

}  // namespace meshbench::plan
