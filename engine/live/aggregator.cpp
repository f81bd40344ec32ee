#include "aggregator.h"

#include "plan/measured_bubble.h"
#include "plan/mesh.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace meshbench::live {

namespace {

constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::min();

using plan::TimeInterval;

// Nearest-rank percentile (Hyndman & Fan type 1) of sorted, non-empty values: the
// ceil(percent / 100 x n)-th smallest, computed in integers so that no rounding moves the rank.
double nearestRank(const std::vector<double>& sorted, int percent)
{
    const std::size_t n = sorted.size();
    const std::size_t rank = std::max<std::size_t>(1, (std::size_t(percent) * n + 99) / 100);
    return sorted[rank - 1];
}

std::string describeSpan(std::uint32_t rank, const wire::SpanRecord& span)
{
    return "span of rank " + std::to_string(rank) + " step " + std::to_string(span.step) + " kind " +
           std::string(wire::spanKindName(span.kind)) + " (" + std::to_string(int(span.kind)) + ")";
}

}  // namespace

struct LiveAggregator::OpenStep {
    struct RankStep {
        std::int64_t begin = std::numeric_limits<std::int64_t>::max();  // pipeline window of the rank
        std::int64_t end = kNever;
        std::vector<TimeInterval> busy;  // F, B and W spans; capacity kept for later steps
        std::vector<TimeInterval> comm;  // sends, receives and DP reductions
        std::int64_t lastBusyBegin = kNever;
        bool sorted = true;
        bool optimizer = false;

        bool reported() const { return begin <= end; }
    };
    struct LayerLoad {
        bool seen = false;
        std::vector<std::uint32_t> routed;
        std::vector<std::uint32_t> dropped;
    };

    std::int64_t step = -1;
    bool open = false;
    std::vector<RankStep> ranks;
    int optimizerRanks = 0;
    std::optional<wire::StepMetricsRecord> metrics;
    std::vector<LayerLoad> layers;  // by MoE ordinal
    int layersSeen = 0;

    void reopen(std::int64_t s)
    {
        step = s;
        open = true;
        for (RankStep& r : ranks) {
            r.begin = std::numeric_limits<std::int64_t>::max();
            r.end = kNever;
            r.busy.clear();
            r.comm.clear();
            r.lastBusyBegin = kNever;
            r.sorted = true;
            r.optimizer = false;
        }
        optimizerRanks = 0;
        metrics.reset();
        for (LayerLoad& l : layers)
            l.seen = false;
        layersSeen = 0;
    }
};

std::int64_t RankMemory::currentTotal() const
{
    std::int64_t total = 0;
    for (std::int64_t bytes : current)
        total += bytes;
    return total;
}

LiveAggregator::LiveAggregator(const plan::JobSpec& spec, const plan::Plan* plan, AggregatorOptions options)
{
    if (const auto errors = plan::validateLayout(spec); !errors.empty()) {
        std::string message = "live aggregator: the job's layout is invalid:";
        for (const plan::SpecError& e : errors)
            message += " " + e.path + ": " + e.message + ";";
        throw std::invalid_argument(message + " fix the job spec");
    }
    if (options.maxOpenSteps < 1)
        throw std::invalid_argument("live aggregator: maxOpenSteps is " + std::to_string(options.maxOpenSteps) +
                                    "; it must be at least 1");
    const plan::ParallelSpec& p = spec.parallel;
    if (plan != nullptr &&
        (plan->worldSize != p.worldSize() || plan->spec.parallel.pp != p.pp ||
         plan->spec.parallel.schedule != p.schedule || plan->spec.parallel.microbatches != p.microbatches ||
         plan->spec.parallel.virtualStages != p.virtualStages))
        throw std::invalid_argument("live aggregator: the plan was made for another layout (" +
                                    std::to_string(plan->worldSize) + " ranks, pp " +
                                    std::to_string(plan->spec.parallel.pp) + ") than the job (" +
                                    std::to_string(p.worldSize()) + " ranks, pp " + std::to_string(p.pp) +
                                    "); pass the plan made from this job spec");

    const plan::Mesh mesh(p);
    m_world = mesh.worldSize();
    m_stages = p.pp;
    m_maxOpen = options.maxOpenSteps;
    // A rank runs at most 3 compute ops (F, B, W) per micro-batch and chunk; far more means a
    // broken sender, and the bound keeps one step's state small.
    m_maxSpansPerRankStep = 8 * std::size_t(p.microbatches) * std::size_t(p.virtualStages) + 64;
    m_ranksPerStage.assign(std::size_t(m_stages), 0);
    for (int r = 0; r < m_world; ++r) {
        const int stage = mesh.coordOf(r).pp;
        m_stageOf.push_back(stage);
        ++m_ranksPerStage[std::size_t(stage)];
    }
    for (int layer = 0; layer < spec.model.layers; ++layer)
        m_moeOrdinal.push_back(spec.model.isMoeLayer(layer) ? m_moeLayers++ : -1);
    m_experts = spec.model.moe.experts;
    m_peakFlops = spec.cluster.device.peakFlops;

    m_plannedStageBubble.assign(std::size_t(m_stages), std::nullopt);
    if (plan != nullptr) {
        m_flopsPerStep = plan->flopsPerStep;
        const plan::SimulationResult& sim = plan->simulation;
        if (plan->step.total > 0)
            m_plannedStepSeconds = plan->step.total;
        if (plan->tokensPerSecond > 0)
            m_plannedTokensPerSecond = plan->tokensPerSecond;
        if (sim.completed && sim.bubbleRatio.size() == std::size_t(m_stages)) {
            m_plannedBubble = sim.overallBubbleRatio;
            for (int s = 0; s < m_stages; ++s)
                m_plannedStageBubble[std::size_t(s)] = sim.bubbleRatio[std::size_t(s)];
        }
    }

    m_slots.resize(std::size_t(m_maxOpen));
    for (OpenStep& slot : m_slots) {
        slot.ranks.resize(std::size_t(m_world));
        slot.layers.resize(std::size_t(m_moeLayers));
    }
    m_lastOptimizer.assign(std::size_t(m_world), kNever);
    m_minLastOptimizer = kNever;
    m_ranksAtMin = m_world;

    for (int r = 0; r < m_world; ++r) {
        RankMemory m;
        m.rank = std::uint32_t(r);
        m.stage = m_stageOf[std::size_t(r)];
        m_memory.push_back(m);
    }
    std::array<std::int64_t, wire::kMemoryCategories> never;
    never.fill(kNever);
    m_memoryTime.assign(std::size_t(m_world), never);
    m_memoryChanged.assign(std::size_t(m_world), 0);
}

LiveAggregator::~LiveAggregator() = default;

AddOutcome LiveAggregator::add(std::uint32_t rank, const wire::Record& record)
{
    AddOutcome outcome = AddOutcome::Ignored;
    if (rank >= std::uint32_t(m_world)) {
        outcome = reject("record from rank " + std::to_string(rank) + ", but the job has ranks 0.." +
                         std::to_string(m_world - 1) + "; the sender is not part of this job");
    } else if (const auto* span = std::get_if<wire::SpanRecord>(&record)) {
        outcome = addSpan(rank, *span);
    } else if (const auto* load = std::get_if<wire::ExpertLoadRecord>(&record)) {
        outcome = addExpertLoad(*load);
    } else if (const auto* sample = std::get_if<wire::MemorySampleRecord>(&record)) {
        outcome = addMemory(rank, *sample);
    } else if (const auto* metrics = std::get_if<wire::StepMetricsRecord>(&record)) {
        outcome = addMetrics(*metrics);
    }
    switch (outcome) {
    case AddOutcome::Accepted:
        ++m_counters.accepted;
        break;
    case AddOutcome::Ignored:
        ++m_counters.ignored;
        break;
    case AddOutcome::Duplicate:
        ++m_counters.duplicates;
        break;
    case AddOutcome::Late:
        ++m_counters.late;
        break;
    case AddOutcome::Rejected:
        ++m_counters.rejected;
        break;
    }
    if (m_recheck) {
        m_recheck = false;
        emitFinalSteps();
    }
    return outcome;
}

void LiveAggregator::add(const wire::Batch& batch)
{
    for (const wire::Record& record : batch.records)
        add(batch.rank, record);
}

AddOutcome LiveAggregator::reject(std::string message)
{
    m_rejection = std::move(message);
    return AddOutcome::Rejected;
}

AddOutcome LiveAggregator::addSpan(std::uint32_t rank, const wire::SpanRecord& span)
{
    if (span.step < 0)
        return reject(describeSpan(rank, span) + ": steps are numbered from 0");
    if (span.endNs < span.beginNs)
        return reject(describeSpan(rank, span) + ": ends at " + std::to_string(span.endNs) +
                      " ns, before it begins at " + std::to_string(span.beginNs) +
                      " ns; the sender's clock readings are swapped");
    switch (span.kind) {
    case wire::SpanKind::Forward:
    case wire::SpanKind::Backward:
    case wire::SpanKind::WeightGrad:
    case wire::SpanKind::SendActivation:
    case wire::SpanKind::RecvActivation:
    case wire::SpanKind::SendGradient:
    case wire::SpanKind::RecvGradient:
    case wire::SpanKind::Optimizer:
    case wire::SpanKind::DataParallelReduce:
        break;
    case wire::SpanKind::Idle:  // idle is what the window minus busy time measures
        return AddOutcome::Ignored;
    default:
        return reject(describeSpan(rank, span) + ": unknown span kind; the sender is newer than this engine");
    }
    OpenStep* state = stepState(span.step);
    if (state == nullptr)
        return AddOutcome::Late;
    OpenStep::RankStep& r = state->ranks[rank];
    const bool compute = wire::isComputeKind(span.kind);
    if (span.kind != wire::SpanKind::Optimizer && (compute ? r.busy.size() : r.comm.size()) >= m_maxSpansPerRankStep)
        return reject(describeSpan(rank, span) + ": more than " + std::to_string(m_maxSpansPerRankStep) +
                      " spans of its kind in one step, far more than the schedule runs; the sender repeats spans");
    if (span.kind != wire::SpanKind::Optimizer && !compute)
        r.comm.push_back({span.beginNs, span.endNs});
    if (span.kind == wire::SpanKind::Optimizer) {
        if (!r.optimizer) {
            r.optimizer = true;
            ++state->optimizerRanks;
        }
        noteOptimizer(rank, span.step);
        m_recheck = true;
        return AddOutcome::Accepted;
    }
    // The DP reduction is communication beside the pipeline phase, not in its window.
    if (!wire::isPipelineKind(span.kind))
        return AddOutcome::Accepted;
    if (compute) {
        r.sorted = r.sorted && span.beginNs >= r.lastBusyBegin;
        r.lastBusyBegin = span.beginNs;
        r.busy.push_back({span.beginNs, span.endNs});
    }
    r.begin = std::min(r.begin, span.beginNs);
    r.end = std::max(r.end, span.endNs);
    return AddOutcome::Accepted;
}

AddOutcome LiveAggregator::addExpertLoad(const wire::ExpertLoadRecord& load)
{
    const std::string what =
        "expert load of step " + std::to_string(load.step) + " layer " + std::to_string(load.layer);
    if (load.step < 0)
        return reject(what + ": steps are numbered from 0");
    if (load.layer < 0 || load.layer >= int(m_moeOrdinal.size()))
        return reject(what + ": the model has layers 0.." + std::to_string(int(m_moeOrdinal.size()) - 1));
    const int ordinal = m_moeOrdinal[std::size_t(load.layer)];
    if (ordinal < 0)
        return reject(what + ": not an MoE layer of this model (check model.moe.every_n_layers)");
    if (load.routed.size() != std::size_t(m_experts) || load.dropped.size() != load.routed.size())
        return reject(what + ": " + std::to_string(load.routed.size()) + " routed and " +
                      std::to_string(load.dropped.size()) + " dropped counts for a model with " +
                      std::to_string(m_experts) + " experts");
    for (std::size_t e = 0; e < load.routed.size(); ++e)
        if (load.dropped[e] > load.routed[e])
            return reject(what + ": expert " + std::to_string(e) + " dropped " + std::to_string(load.dropped[e]) +
                          " tokens but only " + std::to_string(load.routed[e]) + " were routed to it");
    OpenStep* state = stepState(load.step);
    if (state == nullptr)
        return AddOutcome::Late;
    OpenStep::LayerLoad& layer = state->layers[std::size_t(ordinal)];
    if (layer.seen)
        return AddOutcome::Duplicate;
    layer.seen = true;
    layer.routed.assign(load.routed.begin(), load.routed.end());
    layer.dropped.assign(load.dropped.begin(), load.dropped.end());
    ++state->layersSeen;
    m_recheck = true;
    return AddOutcome::Accepted;
}

AddOutcome LiveAggregator::addMetrics(const wire::StepMetricsRecord& metrics)
{
    const std::string what = "step metrics of step " + std::to_string(metrics.step);
    if (metrics.step < 0)
        return reject(what + ": steps are numbered from 0");
    if (metrics.endNs < metrics.beginNs)
        return reject(what + ": the step ends before it begins; the sender's clock readings are swapped");
    OpenStep* state = stepState(metrics.step);
    if (state == nullptr)
        return AddOutcome::Late;
    if (state->metrics)
        return AddOutcome::Duplicate;
    state->metrics = metrics;
    m_recheck = true;
    return AddOutcome::Accepted;
}

AddOutcome LiveAggregator::addMemory(std::uint32_t rank, const wire::MemorySampleRecord& sample)
{
    const auto category = std::size_t(sample.category);
    if (category >= std::size_t(wire::kMemoryCategories))
        return reject("memory sample of rank " + std::to_string(rank) + ": unknown category " +
                      std::to_string(category) + "; the sender is newer than this engine");
    if (sample.currentBytes < 0 || sample.peakBytes < 0)
        return reject("memory sample of rank " + std::to_string(rank) + ": negative byte count");
    RankMemory& m = m_memory[rank];
    auto& newest = m_memoryTime[rank];
    // Samples may arrive out of time order: the newest one by time is current, peak is the most seen.
    if (sample.timeNs >= newest[category]) {
        newest[category] = sample.timeNs;
        m.current[category] = sample.currentBytes;
    }
    m.peak[category] = std::max({m.peak[category], sample.currentBytes, sample.peakBytes});
    if (m.samples == 0 || sample.timeNs >= m.timeNs) {
        m.timeNs = sample.timeNs;
        m.step = sample.step;
    }
    ++m.samples;
    if (!m_memoryChanged[rank]) {
        m_memoryChanged[rank] = 1;
        m_changedRanks.push_back(rank);
    }
    return AddOutcome::Accepted;
}

std::vector<RankMemory> LiveAggregator::takeChangedMemory()
{
    std::sort(m_changedRanks.begin(), m_changedRanks.end());
    std::vector<RankMemory> changed;
    changed.reserve(m_changedRanks.size());
    for (std::uint32_t rank : m_changedRanks) {
        changed.push_back(m_memory[rank]);
        m_memoryChanged[rank] = 0;
    }
    m_changedRanks.clear();
    return changed;
}

LiveAggregator::OpenStep* LiveAggregator::lowestOpen()
{
    for (int k = 0; k < m_maxOpen && m_openCount > 0; ++k) {
        OpenStep& slot = slotOf(m_base + k);
        if (slot.open && slot.step == m_base + k)
            return &slot;
    }
    return nullptr;
}

LiveAggregator::OpenStep& LiveAggregator::slotOf(std::int64_t step) { return m_slots[std::size_t(step % m_maxOpen)]; }

LiveAggregator::OpenStep* LiveAggregator::stepState(std::int32_t step)
{
    if (m_cached != nullptr && m_cached->open && m_cached->step == step)
        return m_cached;
    if (!m_started) {
        m_started = true;
        m_base = step;
        m_high = step;
    }
    if (step < m_base) {
        // Until a step was emitted, an earlier step may still open if the window holds it.
        if (m_baseFixed || m_high - step >= m_maxOpen)
            return nullptr;
        m_base = step;
    }
    if (step >= m_base + m_maxOpen) {
        // Too far ahead: the oldest steps go out as they are, so that memory stays bounded.
        const std::int64_t newBase = std::int64_t(step) - m_maxOpen + 1;
        for (OpenStep* oldest = lowestOpen(); oldest != nullptr && oldest->step < newBase; oldest = lowestOpen())
            emitStep(*oldest, true);
        m_base = std::max(m_base, newBase);
        m_baseFixed = true;
        m_recheck = true;  // a step held back by the ones just emitted may be final
    }
    m_high = std::max(m_high, std::int64_t(step));
    OpenStep& slot = slotOf(step);
    if (!slot.open) {
        slot.reopen(step);
        ++m_openCount;
    }
    m_cached = &slot;
    return &slot;
}

void LiveAggregator::noteOptimizer(std::uint32_t rank, std::int32_t step)
{
    std::int64_t& last = m_lastOptimizer[rank];
    if (step <= last)
        return;
    const bool wasAtMin = last == m_minLastOptimizer;
    last = step;
    if (wasAtMin && --m_ranksAtMin == 0) {
        m_minLastOptimizer = *std::min_element(m_lastOptimizer.begin(), m_lastOptimizer.end());
        m_ranksAtMin = int(std::count(m_lastOptimizer.begin(), m_lastOptimizer.end(), m_minLastOptimizer));
    }
}

bool LiveAggregator::isComplete(const OpenStep& state) const
{
    return state.metrics.has_value() && state.optimizerRanks == m_world && state.layersSeen == m_moeLayers;
}

bool LiveAggregator::isFinal(const OpenStep& state) const
{
    return isComplete(state) || m_minLastOptimizer > state.step;
}

void LiveAggregator::emitFinalSteps()
{
    for (OpenStep* oldest = lowestOpen(); oldest != nullptr && isFinal(*oldest); oldest = lowestOpen())
        emitStep(*oldest, false);
}

void LiveAggregator::emitStep(OpenStep& state, bool forced)
{
    m_completed.push_back(aggregate(state));
    if (forced)
        ++m_counters.forcedSteps;
    state.open = false;
    --m_openCount;
    m_base = state.step + 1;
    m_baseFixed = true;
}

std::vector<StepAggregate> LiveAggregator::takeCompletedSteps()
{
    std::vector<StepAggregate> steps;
    steps.swap(m_completed);
    return steps;
}

std::vector<StepAggregate> LiveAggregator::flush()
{
    for (OpenStep* oldest = lowestOpen(); oldest != nullptr; oldest = lowestOpen())
        emitStep(*oldest, false);
    return takeCompletedSteps();
}

StepAggregate LiveAggregator::aggregate(OpenStep& state) const
{
    StepAggregate a;
    a.step = std::int32_t(state.step);
    a.partial = !isComplete(state);
    a.ranksFinished = state.optimizerRanks;
    a.plannedBubble = m_plannedBubble;
    a.plannedStepSeconds = m_plannedStepSeconds;
    a.plannedTokensPerSecond = m_plannedTokensPerSecond;

    std::vector<plan::RankPipelinePhase> phases;
    phases.reserve(state.ranks.size());
    for (std::size_t rank = 0; rank < state.ranks.size(); ++rank) {
        OpenStep::RankStep& r = state.ranks[rank];
        plan::RankPipelinePhase& phase = phases.emplace_back();
        phase.stage = m_stageOf[rank];
        if (r.reported()) {
            phase.beginNs = r.begin;
            phase.endNs = r.end;
            phase.busyNs = plan::unionLength(r.busy, r.sorted);
        }
    }
    const plan::MeasuredBubble bubble = plan::measuredBubble(phases, m_stages);
    a.ranksReporting = bubble.ranksReporting;
    if (bubble.ranksReporting > 0) {
        a.pipelineBeginNs = bubble.beginNs;
        a.pipelineEndNs = bubble.endNs;
    }
    a.stages.resize(std::size_t(m_stages));
    for (int s = 0; s < m_stages; ++s) {
        StageBubble& stage = a.stages[std::size_t(s)];
        stage.stage = s;
        stage.planned = m_plannedStageBubble[std::size_t(s)];
        stage.ranks = bubble.stageRanks[std::size_t(s)];
        stage.measured = bubble.stages[std::size_t(s)];
    }
    a.bubble = bubble.overall;

    std::int64_t comm = 0;
    int commRanks = 0;
    for (OpenStep::RankStep& r : state.ranks)
        if (r.reported() || !r.comm.empty()) {
            comm += plan::unionLength(r.comm, false);
            ++commRanks;
        }
    if (commRanks > 0)
        a.commSeconds = double(comm) * 1e-9 / commRanks;

    if (state.metrics) {
        const wire::StepMetricsRecord& m = *state.metrics;
        a.loss = m.loss;
        a.auxLoss = m.auxLoss;
        a.tokensPerSecond = m.tokensPerSecond;
        a.agentBubble = m.bubbleRatio;
        if (m.endNs > m.beginNs) {
            const double seconds = double(m.endNs - m.beginNs) * 1e-9;
            a.stepSeconds = seconds;
            if (m_flopsPerStep > 0 && m_peakFlops > 0)
                a.mfu = m_flopsPerStep / (seconds * double(m_world) * m_peakFlops);
        }
    }

    std::vector<double> imbalances;
    std::uint64_t routed = 0;
    std::uint64_t dropped = 0;
    for (std::size_t layer = 0; layer < m_moeOrdinal.size(); ++layer) {
        if (m_moeOrdinal[layer] < 0)
            continue;
        const OpenStep::LayerLoad& load = state.layers[std::size_t(m_moeOrdinal[layer])];
        if (!load.seen)
            continue;
        ExpertLayerStats stats;
        stats.layer = int(layer);
        stats.routed = load.routed;
        stats.dropped = load.dropped;
        std::uint32_t most = 0;
        for (std::size_t e = 0; e < load.routed.size(); ++e) {
            stats.routedTotal += load.routed[e];
            stats.droppedTotal += load.dropped[e];
            if (load.routed[e] > most) {
                most = load.routed[e];
                stats.hottestExpert = int(e);
            }
        }
        if (stats.routedTotal > 0) {
            const double mean = double(stats.routedTotal) / double(load.routed.size());
            stats.imbalance = double(most) / mean;
            stats.droppedFraction = double(stats.droppedTotal) / double(stats.routedTotal);
            imbalances.push_back(*stats.imbalance);
        }
        routed += stats.routedTotal;
        dropped += stats.droppedTotal;
        a.expertLayers.push_back(std::move(stats));
    }
    if (!imbalances.empty()) {
        std::sort(imbalances.begin(), imbalances.end());
        a.imbalanceP50 = nearestRank(imbalances, 50);
        a.imbalanceP95 = nearestRank(imbalances, 95);
    }
    if (routed > 0)
        a.droppedFraction = double(dropped) / double(routed);
    return a;
}

}  // namespace meshbench::live
