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
//   late collectives   lateness x collectives per step / step window: the share of the step the
//                      rank's group waits for it
//   exposed comm       exposed time of the dimension / step window: the device waiting on it alone
//   launch bound       short idle gaps / step window: device time lost between launches
// The last three read device time and kernels (an imported trace's, DeviceEvidence): the recent
// steps of those the device time holds, chosen by the same rule.
//
// Entries that do not belong to the spec's layout (a stage, rank or layer out of range, expert
// arrays of another size, non-finite figures) are skipped, never trusted.

#include "aggregator.h"
#include "device_evidence.h"

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

// A rank whose collectives start late holds its group in them: each peer waits inside the kernel
// for the last member. The late start must exceed both a floor and a fraction of the collective:
//   the floor: the import aligns the ranks' clocks to within 5 µs (issue 29's bound), so two ranks'
//   begins can be 10 µs apart from the clocks alone, plus a few µs of launch-to-start jitter; twice
//   that is beyond both.
constexpr std::int64_t kLateCollectiveFloorNs = 20'000;
//   the fraction: peers spending a quarter of the collective waiting for one rank is a wait of the
//   collective's own order, where moving the rank or fixing its host is worth it; below, shortening
//   the transfer (a faster link, overlap) gains more.
constexpr double kLateCollectiveFraction = 0.25;
// Exposed communication of one dimension above a tenth of the step: a tenth of the throughput is
// worth a layout or overlap change (the remedies below each cost memory or a schedule change);
// under it, the exposed part is mostly the last DP bucket and the first TP collective of a layer,
// which overlap cannot hide.
constexpr double kExposedCommShare = 0.10;
// Launch-bound when the idle gaps under kLaunchGapNs add up to a tenth of the step's device window
// AND are many: at least a quarter of the boundaries between consecutive kernels. A few short gaps
// (a synchronisation, an event wait) are not the host falling behind; a quarter of all boundaries
// is a host that cannot keep ahead of the device. The tenth is where capturing the step in CUDA
// graphs (one launch for its kernels) pays for the static shapes and memory it requires.
constexpr double kLaunchGapShare = 0.10;
constexpr double kLaunchGapBoundaries = 0.25;

// Index of the first of `count` steps (in step order) that findings read: the last kRecentSteps
// after warm-up (see above).
std::size_t firstRecentStep(std::size_t count);

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

enum class FindingKind {
    BoundingStage,
    Straggler,
    HotExpert,
    MemoryPressure,
    BubbleAbovePlan,
    StepTimeOffPlan,
    LateCollectives,
    ExposedCommunication,
    LaunchBound,
};
// "bounding_stage", "straggler", "hot_expert", "memory_pressure", "bubble_above_plan",
// "step_time_off_plan", "late_collectives", "exposed_communication", "launch_bound".
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
//   LateCollectives  (category: the dimension, "tp", "dp" or "ep") lateness_s (the rank's begin
//                    minus its group's other members' median begin, median over the step's
//                    collectives and the steps), collective_s (the collective's median duration),
//                    collectives (per step), group_size, wait_share (the severity), compute_ratio
//                    (its compute busy time / its group's median) when the device time has it,
//                    explained_by_compute_s (the lateness its slower compute accounts for). When a
//                    whole data-parallel replica is late at its DP collectives, one finding for it:
//                    the figures of its member computing the most (rank), replica_ranks, and the
//                    severity of the median member
//   ExposedCommunication (category: "tp", "pp", "dp" or "ep") share (the median rank's), exposed_s
//                    and window_s (the median rank's per step), worst_share of the worst rank (rank)
//   LaunchBound      (rank: the worst) short_gap_share, idle_share, short_gaps (per step),
//                    gap_boundaries (short gaps / kernel boundaries), mean_gap_s, ranks (how many
//                    ranks are launch-bound)
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
                                          // StepTimeOffPlan: the cause; LateCollectives,
                                          // ExposedCommunication: the dimension

    std::optional<double> figure(std::string_view key) const;
};

struct FindingsInput {
    const plan::JobSpec& spec;               // must pass plan::validateLayout
    const plan::Plan* plan = nullptr;        // optional: the planned per-stage imbalance
    std::span<const StepAggregate> steps;    // in step order, from the run's first step (see above)
    std::span<const RankMemory> memory;      // the latest per rank
    const RankTimes* rankTimes = nullptr;    // optional: without it, no stragglers
    int coresPerNode = 0;                    // 0: std::thread::hardware_concurrency() of this machine
    const DeviceEvidence* device = nullptr;  // optional: without it, none of the last three kinds
};

// Sorted by severity, worst first. Throws std::invalid_argument when the spec's layout is invalid.
std::vector<Finding> findFindings(const FindingsInput& input);

// One line for the terminal: the title, then the suggestion.
std::string describe(const Finding& finding);
// For the live feed: type "finding", kind, severity, title, suggestion, figures {key: value},
// stage, rank, layer, expert, category (null when not applicable).
nlohmann::json toJson(const Finding& finding);

}  // namespace meshbench::live
