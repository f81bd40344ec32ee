#pragma once
// Live aggregates of a running (or replayed) job, computed incrementally as telemetry records
// arrive: per step the measured pipeline bubble per stage and overall, expert load statistics,
// loss, tokens/s and MFU; per rank the memory by category. The engine feeds every decoded record
// to add() and publishes what takeCompletedSteps() and takeChangedMemory() return.
//
// Measured bubble: plan::measuredBubble (plan/measured_bubble.h), the one definition, over every
// rank's pipeline spans of the step.
//
// Expert load: per (step, MoE layer), tokens routed to (before capacity) and dropped by each
// expert. The first record for a (step, layer) counts; a later one (each pipeline stage's sender
// reports its own layers, but a repeat must not double them) is a duplicate and ignored.
// Imbalance = max routed / mean routed over the layer's experts; p50 and p95 over the step's
// layers use the nearest-rank method (the ceil(P/100 x n)-th smallest value, Hyndman & Fan
// type 1), so they are always one of the layers' own values. The step's dropped fraction is the
// tokens dropped / tokens routed summed over all its layers.
//
// MFU = model FLOPs of the step / (step seconds x world size x device peak FLOP/s), Megatron-LM's
// and PaLM's (Chowdhery et al. 2022, section 4.1 and appendix B) model FLOPs utilisation: the plan's
// flopsPerStep is Megatron's num_floating_point_operations, which leaves recomputation out. The
// step seconds are the step metrics' end - begin. The peak is the job's device (for the "cpu"
// device a nominal 96 GFLOP/s per core, see plan/presets.cpp).
//
// When a step is final: records of one rank arrive in the order the rank sent them (one ZeroMQ
// PUSH stream per rank); ranks interleave freely. Step s is final when
//   (a) its step metrics, an optimizer span (the last span of a rank's step) from every rank and
//       the expert loads of every MoE layer have arrived, or
//   (b) every rank has sent an optimizer span of a later step, so nothing more of s is coming.
// Final steps are emitted exactly once, in step order. A step is `partial` when any of (a)'s
// parts is missing. At most `maxOpenSteps` steps are kept open: a record of a step further ahead
// emits the oldest open steps as they are (partial), so a rank that died cannot make memory grow;
// flush() emits every open step at the end of a run. Records of a step already emitted are late
// and ignored. Span state is per (open step, rank): window bounds and the F/B/W intervals, whose
// buffers are reused for the next steps, so adding a span allocates nothing in the steady state.
//
// Not thread-safe: one thread (the engine's ingest thread) feeds and drains it.

#include "plan/job_spec.h"
#include "plan/planner.h"
#include "wire/telemetry.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshbench::live {

struct StageBubble {
    int stage = 0;
    std::optional<double> measured;  // empty when no rank of the stage sent a pipeline span
    std::optional<double> planned;   // the plan's simulated bubble ratio of the stage
    int ranks = 0;                   // ranks of the stage that sent pipeline spans
};

struct ExpertLayerStats {
    int layer = 0;                       // global layer index
    std::vector<std::uint32_t> routed;   // per expert
    std::vector<std::uint32_t> dropped;  // per expert
    std::uint64_t routedTotal = 0;
    std::uint64_t droppedTotal = 0;
    std::optional<double> imbalance;        // max / mean routed; empty when nothing was routed
    std::optional<double> droppedFraction;  // droppedTotal / routedTotal; empty likewise
    int hottestExpert = 0;                  // most tokens routed; the lowest index on a tie
};

struct StepAggregate {
    std::int32_t step = 0;
    bool partial = false;

    // Pipeline phase: the common window (0 when no pipeline span arrived) and the bubbles.
    std::int64_t pipelineBeginNs = 0;
    std::int64_t pipelineEndNs = 0;
    std::vector<StageBubble> stages;      // one per pipeline stage
    std::optional<double> bubble;         // overall measured
    std::optional<double> plannedBubble;  // the plan's simulated overall bubble ratio
    std::optional<double> agentBubble;    // what the agent reported in its step metrics
    int ranksReporting = 0;               // ranks that sent pipeline spans
    int ranksFinished = 0;                // ranks that sent the step's optimizer span

    // From the step metrics (empty when they did not arrive) and the plan.
    std::optional<double> loss;
    std::optional<double> auxLoss;
    std::optional<double> tokensPerSecond;
    std::optional<double> stepSeconds;
    std::optional<double> mfu;                 // empty also without a plan or a positive step time
    std::optional<double> plannedStepSeconds;  // the plan's step.total
    std::optional<double> plannedTokensPerSecond;
    // Mean over the ranks that sent spans of the time each spent in communication spans (pipeline
    // sends and receives, DP reduction; their union, as overlapping transfers share the time).
    std::optional<double> commSeconds;

    std::vector<ExpertLayerStats> expertLayers;  // by layer index, only the layers that arrived
    std::optional<double> imbalanceP50;
    std::optional<double> imbalanceP95;
    std::optional<double> droppedFraction;
};

struct RankMemory {
    std::uint32_t rank = 0;
    int stage = 0;
    int samples = 0;        // memory samples received from this rank
    std::int32_t step = 0;  // of the newest sample (by its time)
    std::int64_t timeNs = 0;
    std::array<std::int64_t, wire::kMemoryCategories> current{};  // by wire::MemoryCategory
    std::array<std::int64_t, wire::kMemoryCategories> peak{};     // the largest seen, ever
    std::int64_t currentTotal() const;
};

enum class AddOutcome {
    Accepted,
    Ignored,    // a record type the aggregates do not use (node samples, logs, heartbeats)
    Duplicate,  // expert loads or step metrics of a (step, layer) / step that already arrived
    Late,       // a step already emitted, or one too far behind the open steps
    Rejected,   // bad input; rejection() says what and how to fix it
};

struct AggregatorCounters {
    std::uint64_t accepted = 0;
    std::uint64_t ignored = 0;
    std::uint64_t duplicates = 0;
    std::uint64_t late = 0;
    std::uint64_t rejected = 0;
    std::uint64_t forcedSteps = 0;  // emitted early because more than maxOpenSteps were open
};

struct AggregatorOptions {
    int maxOpenSteps = 16;
};

class LiveAggregator {
public:
    // The spec must pass plan::validateLayout and the plan, when given, must be the spec's; the
    // constructor throws std::invalid_argument saying what does not. Without a plan there are no
    // planned bubbles, step times and no MFU. Nothing of the plan is referenced after construction.
    LiveAggregator(const plan::JobSpec& spec, const plan::Plan* plan, AggregatorOptions options = {});
    ~LiveAggregator();
    LiveAggregator(const LiveAggregator&) = delete;
    LiveAggregator& operator=(const LiveAggregator&) = delete;

    AddOutcome add(std::uint32_t rank, const wire::Record& record);
    void add(const wire::Batch& batch);
    // Why the last Rejected record was rejected.
    const std::string& rejection() const { return m_rejection; }

    // Steps that became final since the last call, in step order.
    std::vector<StepAggregate> takeCompletedSteps();
    // The final steps not yet taken and then every open step, in step order; for the end of a run.
    std::vector<StepAggregate> flush();

    // One entry per rank, index = rank.
    const std::vector<RankMemory>& memory() const { return m_memory; }
    // The ranks whose memory changed since the last call, in rank order.
    std::vector<RankMemory> takeChangedMemory();

    const AggregatorCounters& counters() const { return m_counters; }
    int worldSize() const { return m_world; }
    double modelFlopsPerStep() const { return m_flopsPerStep; }  // 0 without a plan
    double devicePeakFlops() const { return m_peakFlops; }

private:
    struct OpenStep;

    AddOutcome addSpan(std::uint32_t rank, const wire::SpanRecord& span);
    AddOutcome addExpertLoad(const wire::ExpertLoadRecord& load);
    AddOutcome addMemory(std::uint32_t rank, const wire::MemorySampleRecord& sample);
    AddOutcome addMetrics(const wire::StepMetricsRecord& metrics);
    AddOutcome reject(std::string message);
    // The open state of a step, opening it (and emitting old steps to make room) as needed;
    // nullptr when the step is late.
    OpenStep* stepState(std::int32_t step);
    OpenStep& slotOf(std::int64_t step);
    OpenStep* lowestOpen();
    // Rule (a) above: every part of the step arrived. Final: rule (a) or rule (b).
    bool isComplete(const OpenStep& state) const;
    bool isFinal(const OpenStep& state) const;
    void emitFinalSteps();
    void emitStep(OpenStep& state, bool forced);
    StepAggregate aggregate(OpenStep& state) const;
    void noteOptimizer(std::uint32_t rank, std::int32_t step);

    int m_world = 0;
    int m_stages = 0;
    int m_maxOpen = 0;
    std::size_t m_maxSpansPerRankStep = 0;
    std::vector<int> m_stageOf;  // per rank
    std::vector<int> m_ranksPerStage;
    std::vector<int> m_moeOrdinal;  // per global layer: index among MoE layers, or -1
    int m_moeLayers = 0;
    int m_experts = 0;
    double m_flopsPerStep = 0;
    double m_peakFlops = 0;
    std::optional<double> m_plannedBubble;
    std::optional<double> m_plannedStepSeconds;
    std::optional<double> m_plannedTokensPerSecond;
    std::vector<std::optional<double>> m_plannedStageBubble;

    std::vector<OpenStep> m_slots;  // ring: step s lives in slot s % size
    std::int64_t m_base = 0;        // lowest step that may still be open or arrive
    std::int64_t m_high = 0;        // highest open step
    bool m_started = false;         // whether any step record arrived yet
    bool m_baseFixed = false;       // set once a step was emitted: m_base only rises
    bool m_recheck = false;         // whether a step may have become final
    int m_openCount = 0;
    OpenStep* m_cached = nullptr;  // the slot of the last step looked up

    // Rule (b): the latest step of each rank's optimizer span and the minimum over ranks.
    std::vector<std::int64_t> m_lastOptimizer;
    std::int64_t m_minLastOptimizer = 0;
    int m_ranksAtMin = 0;

    std::vector<StepAggregate> m_completed;
    std::vector<RankMemory> m_memory;
    std::vector<std::array<std::int64_t, wire::kMemoryCategories>> m_memoryTime;  // newest sample time
    std::vector<char> m_memoryChanged;
    std::vector<std::uint32_t> m_changedRanks;

    AggregatorCounters m_counters;
    std::string m_rejection;
};

}  // namespace meshbench::live
