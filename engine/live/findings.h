#pragma once
// Findings: what a run's aggregates say is wrong with it, worst first, each with the measured
// figures and a concrete suggestion. The engine prints them at the end of `meshbench-engine run`;
// the GUI lists them live and for a session under replay.
//
// Every finding reads the recent steps: of the last kRecentSteps steps of the list, the complete
// (not partial) ones. The list's first entry is never among them: it is the run's first step and
// carries its start-up costs (first touches, allocations), as RunResult's means leave it out.
// Figures are medians over those steps, so a few disturbed steps do not raise a finding and a
// persistent problem does.
//
// Severity puts findings of every kind on one scale: the share of the work at stake, 0 healthy.
//   bounding stage     1 - mean stage busy / its busy: the step time an even split would save
//   straggler          1 - stage median busy / its busy: what its stage waits for it
//   hot expert         1 - 1 / overload + dropped share: the layer's expert time spent waiting for
//                      the hottest expert's device, plus the tokens that skipped their expert
//   memory pressure    (peak / capacity - kMemoryFraction) / (1 - kMemoryFraction): 0 at the
//                      threshold, 1 at the capacity, where the run dies
//   bubble above plan  measured - planned bubble: pipeline time idle beyond the plan
//   step time off plan |measured - planned| / the larger: the step time the plan does not explain
//
// Entries that do not belong to the spec's layout (a stage, rank or layer out of range, expert
// arrays of another size, non-finite figures) are skipped, never trusted.

#include "aggregator.h"

#include "plan/job_spec.h"
#include "plan/planner.h"
#include "wire/telemetry.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::live {

// Long enough for a median to ignore a few disturbed steps, short enough to follow a run whose
// behaviour changes (a node that starts throttling).
constexpr int kRecentSteps = 20;
// Stage costs legitimately differ by the embedding on the first stage and the output layer and
// loss on the last; under 10% above the mean, moving a whole layer usually overshoots.
constexpr double kStageExcess = 0.10;
// A rank 10% slower than its stage's median is beyond run-to-run noise on dedicated devices and
// holds its whole stage back (pipeline peers and TP collectives wait for it).
constexpr double kStragglerExcess = 0.10;
// Capacity factors of 1.0 to 1.25 are the common choice (Fedus et al. 2021, Switch Transformer,
// table 1): a hottest expert persistently above 1.2x the mean is at that headroom, and its
// device sets the pace of the layer's expert computation.
constexpr double kExpertOverload = 1.20;
// More than 1% of a layer's tokens skipping their expert is a loss of training signal worth fixing.
constexpr double kDroppedTokens = 0.01;
// Allocator fragmentation, communication buffers and library workspaces the agents do not
// report take roughly the last 10-15% of a device's memory.
constexpr double kMemoryFraction = 0.85;
// The bubble is far above the plan when both hold: the ratio alone would flag small planned
// bubbles (2% measured vs 1% planned), the points alone ordinary noise on large ones.
constexpr double kBubbleOverPlanRatio = 1.5;
constexpr double kBubbleOverPlanPoints = 0.05;
// The planner's device tables and analytic costs land within about 10-20% of a calibrated device;
// beyond 25% either way the plan misleads about step time and its layout advice.
constexpr double kStepOffPlanRatio = 0.25;
// Communication spans taking 5 points more of the step than the plan's communication share is
// beyond jitter and points at a link slower than the spec's.
constexpr double kCommOverPlanPoints = 0.05;

// Compute (F, B and W) time per rank and step, summed from the ranks' spans, for stragglers.
// Keeps the newest `keepSteps` steps; spans of older steps are ignored.
class RankTimes {
public:
    // Throws std::invalid_argument when worldSize or keepSteps is below 1.
    explicit RankTimes(int worldSize, int keepSteps = 64);

    // Ignores spans that are not compute, of a rank outside the world, of a negative step, of a
    // step too old to keep, or that end before they begin.
    void add(std::uint32_t rank, const wire::SpanRecord& span);
    void add(const wire::Batch& batch);

    // Empty when none of the rank's compute spans of that step arrived (or the step is not kept).
    std::optional<double> busySeconds(std::int32_t step, std::uint32_t rank) const;
    int worldSize() const { return m_world; }

private:
    struct Slot {
        std::int64_t step = -1;
        std::vector<double> busy;  // seconds per rank; -1 when nothing arrived
    };
    int m_world;
    std::vector<Slot> m_slots;  // ring: step s lives in slot s % size
    std::int64_t m_newest = -1;
};

// The steps findings read, kept as they complete with bounded memory: the list's first step and
// the last kRecentSteps, which is all findFindings reads of a longer list.
class RecentSteps {
public:
    void add(const StepAggregate& step);
    std::span<const StepAggregate> steps() const { return m_steps; }

private:
    std::vector<StepAggregate> m_steps;
};

enum class FindingKind { BoundingStage, Straggler, HotExpert, MemoryPressure, BubbleAbovePlan, StepTimeOffPlan };
// "bounding_stage", "straggler", "hot_expert", "memory_pressure", "bubble_above_plan",
// "step_time_off_plan".
std::string_view findingKindName(FindingKind kind);

// A measured figure: seconds, bytes or ratios (a share is 0..1, an overload 1.3 means 30% over).
struct FindingFigure {
    std::string key;
    double value = 0;
};

// Figures by kind (durations in seconds, per step):
//   BoundingStage    busy_s, mean_busy_s, excess (busy / mean - 1), layer_s (a layer's cost, from
//                    the lightest stage), layers_to_move (round((busy - mean) / layer_s), leaving
//                    at least one), and planned_excess when the plan's simulation has its stages
//   Straggler        busy_s, stage_median_s, excess (busy / median - 1)
//   HotExpert        overload (routed to the expert / mean per expert, over the recent steps),
//                    peak_step_overload, dropped_fraction (of the layer's tokens), capacity_factor
//   MemoryPressure   peak_bytes (the sum of the category peaks: an upper bound of the peak total),
//                    capacity_bytes, fraction, largest_bytes, ranks_over (of the stage)
//   BubbleAbovePlan  measured, planned
//   StepTimeOffPlan  measured_s, planned_s, off (measured / planned - 1), tokens_per_s and
//                    planned_tokens_per_s when the step metrics have them, and by cause (category):
//                    oversubscribed (ranks_per_node, cores), slow_stage (stage, stage_ratio and
//                    others_ratio: measured / planned busy), slow_link (comm_share,
//                    planned_comm_share), device_rate (none). The causes are tried in that order.
struct Finding {
    FindingKind kind = FindingKind::BoundingStage;
    double severity = 0;
    std::string title;  // with the measured figure in words
    std::vector<FindingFigure> figures;
    std::string suggestion;
    std::optional<int> stage;  // the subject, as applicable
    std::optional<int> rank;
    std::optional<int> layer;
    std::optional<int> expert;
    std::optional<std::string> category;  // MemoryPressure: the largest memory category;
                                          // StepTimeOffPlan: the cause

    std::optional<double> figure(std::string_view key) const;
};

struct FindingsInput {
    const plan::JobSpec& spec;             // must pass plan::validateLayout
    const plan::Plan* plan = nullptr;      // optional: the planned per-stage imbalance
    std::span<const StepAggregate> steps;  // in step order, from the run's first step (see above)
    std::span<const RankMemory> memory;    // the latest per rank
    const RankTimes* rankTimes = nullptr;  // optional: without it, no stragglers
    int coresPerNode = 0;                  // 0: std::thread::hardware_concurrency() of this machine
};

// Sorted by severity, worst first. Throws std::invalid_argument when the spec's layout is invalid.
std::vector<Finding> findFindings(const FindingsInput& input);

// One line for the terminal: the title, then the suggestion.
std::string describe(const Finding& finding);
// For the live feed: type "finding", kind, severity, title, suggestion, figures {key: value},
// stage, rank, layer, expert, category (null when not applicable).
nlohmann::json toJson(const Finding& finding);

}  // namespace meshbench::live
