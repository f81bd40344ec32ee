#include "findings.h"

#include "plan/mesh.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "steady_state.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <thread>

namespace meshbench::live {

namespace {

bool finite(const std::optional<double>& value) { return value.has_value() && std::isfinite(*value); }

std::string plural(long long count, const std::string& word)
{
    return std::to_string(count) + " " + word + (count == 1 ? "" : "s");
}

// The recent steps (see findings.h): the last kRecentSteps after warm-up, complete ones only. None
// from warm-up alone: findings judge a run in its steady state.
std::vector<const StepAggregate*> recentSteps(std::span<const StepAggregate> steps)
{
    std::vector<const StepAggregate*> recent;
    for (std::size_t i = firstRecentStep(steps.size()); i < steps.size(); ++i)
        if (!steps[i].partial)
            recent.push_back(&steps[i]);
    return recent;
}

// Layout changes that lower the plan's bubble, best first, as "change (plan: bubble x%)": more
// micro-batches at the same global batch where the micro-batch size allows, interleaving, zb-h1,
// zb-v.
// Each candidate must pass the spec's own rules and is planned in full.
std::vector<std::string> scheduleAlternatives(const plan::JobSpec& spec, double currentBubble)
{
    const plan::ParallelSpec& p = spec.parallel;
    std::vector<std::pair<plan::JobSpec, std::string>> candidates;
    {
        plan::JobSpec more = spec;
        more.parallel.microbatches *= 2;
        std::string change = "parallel.microbatches " + std::to_string(more.parallel.microbatches);
        if (p.microBatchSize % 2 == 0) {
            more.parallel.microBatchSize /= 2;
            change += " with micro_batch_size " + std::to_string(more.parallel.microBatchSize);
        } else {
            change += " (a larger global batch)";
        }
        candidates.emplace_back(more, change);
    }
    {
        plan::JobSpec interleaved = spec;
        plan::ParallelSpec& q = interleaved.parallel;
        q.schedule = plan::ScheduleKind::Interleaved;
        q.virtualStages = p.schedule == plan::ScheduleKind::Interleaved ? 2 * p.virtualStages : 2;
        // The fewest micro-batches the schedule admits (Megatron's runs them in groups of pp).
        q.microbatches = plan::admittedMicrobatches(q.scheduleShape());
        std::string change = p.schedule == plan::ScheduleKind::Interleaved
                                 ? "parallel.virtual_stages " + std::to_string(q.virtualStages)
                                 : "schedule interleaved with virtual_stages " + std::to_string(q.virtualStages);
        if (q.microbatches != p.microbatches)
            change += " and microbatches " + std::to_string(q.microbatches);
        candidates.emplace_back(interleaved, change);
    }
    if (p.schedule != plan::ScheduleKind::ZeroBubbleH1) {
        plan::JobSpec zeroBubble = spec;
        zeroBubble.parallel.schedule = plan::ScheduleKind::ZeroBubbleH1;
        zeroBubble.parallel.virtualStages = 1;
        candidates.emplace_back(zeroBubble, "schedule zb-h1");
    }
    if (p.schedule != plan::ScheduleKind::ZeroBubbleV) {
        plan::JobSpec zeroBubbleV = spec;
        zeroBubbleV.parallel.schedule = plan::ScheduleKind::ZeroBubbleV;
        zeroBubbleV.parallel.virtualStages = 2;
        candidates.emplace_back(zeroBubbleV, "schedule zb-v with virtual_stages 2");
    }
    std::vector<std::pair<double, std::string>> better;
    for (const auto& [candidate, change] : candidates) {
        if (!plan::validateLayout(candidate).empty())
            continue;
        try {
            const plan::Plan planned = plan::makePlan(candidate);
            if (planned.simulation.completed && planned.simulation.overallBubbleRatio < currentBubble)
                better.emplace_back(planned.simulation.overallBubbleRatio, change);
        } catch (const std::exception&) {
            // A candidate the planner cannot price is not suggested.
        }
    }
    std::sort(better.begin(), better.end());
    std::vector<std::string> out;
    out.reserve(better.size());
    for (const auto& [bubble, change] : better)
        out.push_back(change + " (plan: bubble " + plan::formatPercent(bubble) + ")");
    return out;
}

std::string joinAlternatives(const std::vector<std::string>& alternatives)
{
    std::string text;
    for (std::size_t i = 0; i < alternatives.size(); ++i)
        text += (i == 0 ? "" : i + 1 == alternatives.size() ? " or " : ", ") + alternatives[i];
    return text;
}

double plannedBubble(const plan::JobSpec& spec, const plan::Plan* plan)
{
    if (plan != nullptr && plan->simulation.completed)
        return plan->simulation.overallBubbleRatio;
    try {
        const plan::Plan planned = plan::makePlan(spec);
        if (planned.simulation.completed)
            return planned.simulation.overallBubbleRatio;
    } catch (const std::exception&) {
    }
    return 1;  // unknown: every alternative the planner can price counts as better
}

// Median busy (compute) time per step of each stage's ranks; empty when no step measured every stage.
std::vector<double> medianStageBusy(int pp, const std::vector<const StepAggregate*>& recent)
{
    // Mean busy time of a stage's ranks = (1 - stage bubble) x the step's pipeline window (the
    // aggregator's definition). Only steps where every stage was measured compare like with like.
    auto busy = std::vector<std::vector<double>>(std::size_t(pp));
    for (const StepAggregate* step : recent) {
        const double window = (double(step->pipelineEndNs) - double(step->pipelineBeginNs)) * 1e-9;
        if (step->stages.size() != std::size_t(pp) || !(window > 0))
            continue;
        const bool measured = std::all_of(step->stages.begin(), step->stages.end(), [](const StageBubble& s) {
            return finite(s.measured) && *s.measured >= 0 && *s.measured <= 1;
        });
        if (!measured)
            continue;
        for (std::size_t s = 0; s < busy.size(); ++s)
            busy[s].push_back((1 - *step->stages[s].measured) * window);
    }
    std::vector<double> medians;
    if (!busy[0].empty())
        for (const std::vector<double>& b : busy)
            medians.push_back(median(b));
    return medians;
}

std::optional<Finding> boundingStage(const FindingsInput& in, const std::vector<const StepAggregate*>& recent)
{
    const int pp = in.spec.parallel.pp;
    if (pp < 2)
        return std::nullopt;
    const std::vector<double> stageBusy = medianStageBusy(pp, recent);
    if (stageBusy.empty())
        return std::nullopt;
    double mean = 0;
    for (double b : stageBusy)
        mean += b / pp;
    if (!(mean > 0))
        return std::nullopt;
    const auto worst = std::size_t(std::max_element(stageBusy.begin(), stageBusy.end()) - stageBusy.begin());
    const auto lightest = std::size_t(std::min_element(stageBusy.begin(), stageBusy.end()) - stageBusy.begin());
    const double excess = stageBusy[worst] / mean - 1;
    if (!(excess > kStageExcess))
        return std::nullopt;

    // Every stage holds layers / pp layers (over all its chunks). A layer's cost is estimated on
    // the lightest stage, where the embedding or the output layer weighs least: on the heaviest,
    // the extra work it is slow from would be counted as layers and too few would move.
    const int layersPerStage = in.spec.model.layers / pp;
    const double layerSeconds = stageBusy[lightest] / layersPerStage;
    const long moves = std::min<long>(layersPerStage - 1, std::lround((stageBusy[worst] - mean) / layerSeconds));

    Finding f;
    f.kind = FindingKind::BoundingStage;
    f.severity = 1 - mean / stageBusy[worst];
    f.stage = int(worst);
    f.figures = {{"busy_s", stageBusy[worst]},
                 {"mean_busy_s", mean},
                 {"excess", excess},
                 {"layer_s", layerSeconds},
                 {"layers_to_move", double(std::max(0L, moves))}};
    std::string planned;
    if (in.plan != nullptr && in.plan->simulation.completed && in.plan->simulation.busy.size() == std::size_t(pp)) {
        double plannedMean = 0;
        for (double b : in.plan->simulation.busy)
            plannedMean += b / pp;
        if (plannedMean > 0) {
            const double plannedExcess = in.plan->simulation.busy[worst] / plannedMean - 1;
            f.figures.push_back({"planned_excess", plannedExcess});
            planned = "; plan " + plan::formatNumber("%+.1f%%", 100 * plannedExcess);
        }
    }
    const std::string stage = "stage " + std::to_string(worst);
    f.title = stage + " bounds the pipeline: " + plan::formatPercent(excess) + " slower than the mean stage (" +
              plan::formatSeconds(stageBusy[worst]) + " vs " + plan::formatSeconds(mean) + " of compute per step" +
              planned + ")";
    if (moves >= 1)
        f.suggestion = "move " + plural(moves, "layer") + " off " + stage + " onto the lighter stages (stage " +
                       std::to_string(lightest) + " is the lightest at " + plan::formatSeconds(stageBusy[lightest]) +
                       ", about " + plan::formatSeconds(layerSeconds) + " a layer)";
    else
        f.suggestion = "its excess (" + plan::formatSeconds(stageBusy[worst] - mean) + ") is under half a layer (" +
                       plan::formatSeconds(layerSeconds) + "), so moving layers would overshoot";
    if (worst == 0)
        f.suggestion += "; the first stage also runs the embedding";
    else if (worst + 1 == std::size_t(pp))
        f.suggestion += "; the last stage also runs the output layer and the loss";
    const std::vector<std::string> alternatives = scheduleAlternatives(in.spec, plannedBubble(in.spec, in.plan));
    if (!alternatives.empty())
        f.suggestion += "; or shrink the bubble the imbalance widens: " + joinAlternatives(alternatives);
    return f;
}

void stragglers(const FindingsInput& in, const std::vector<const StepAggregate*>& recent, std::vector<Finding>& out)
{
    const plan::Mesh mesh(in.spec.parallel);
    const int world = mesh.worldSize();
    if (in.rankTimes == nullptr || in.rankTimes->worldSize() != world)
        return;
    std::vector<std::vector<int>> ranksOf(std::size_t(in.spec.parallel.pp));
    for (int r = 0; r < world; ++r)
        ranksOf[std::size_t(mesh.coordOf(r).pp)].push_back(r);

    // Per step, each rank against its stage's median; then each rank's median over the steps,
    // so that one slow step (a page fault storm, a checkpoint) does not make a straggler.
    auto ratio = std::vector<std::vector<double>>(std::size_t(world));
    auto busy = ratio;
    auto stageMedian = ratio;
    std::vector<std::pair<int, double>> present;
    std::vector<double> values;
    for (const StepAggregate* step : recent)
        for (const std::vector<int>& ranks : ranksOf) {
            present.clear();
            values.clear();
            for (int r : ranks)
                if (const auto seconds = in.rankTimes->busySeconds(step->step, std::uint32_t(r))) {
                    present.emplace_back(r, *seconds);
                    values.push_back(*seconds);
                }
            if (present.size() < 2)
                continue;
            const double m = median(values);
            if (!(m > 0))
                continue;
            for (const auto& [r, seconds] : present) {
                ratio[std::size_t(r)].push_back(seconds / m);
                busy[std::size_t(r)].push_back(seconds);
                stageMedian[std::size_t(r)].push_back(m);
            }
        }
    for (int r = 0; r < world; ++r) {
        if (ratio[std::size_t(r)].empty())
            continue;
        const double slower = median(ratio[std::size_t(r)]);
        if (!(slower - 1 > kStragglerExcess))
            continue;
        const plan::MeshCoord c = mesh.coordOf(r);
        const double rankBusy = median(busy[std::size_t(r)]);
        const double stageBusy = median(stageMedian[std::size_t(r)]);
        Finding f;
        f.kind = FindingKind::Straggler;
        f.severity = 1 - 1 / slower;
        f.rank = r;
        f.stage = c.pp;
        f.figures = {{"busy_s", rankBusy}, {"stage_median_s", stageBusy}, {"excess", slower - 1}};
        f.title = "rank " + std::to_string(r) + " (stage " + std::to_string(c.pp) + ", dp " + std::to_string(c.dp) +
                  " tp " + std::to_string(c.tp) + ") is a straggler: " + plan::formatPercent(slower - 1) +
                  " slower than its stage's median (" + plan::formatSeconds(rankBusy) + " vs " +
                  plan::formatSeconds(stageBusy) + " of compute per step)";
        // TP peers wait for each other inside their collectives, so a slow rank can drag its whole
        // TP group along; the group then stands out against the stage's other replicas.
        f.suggestion = "check the node of rank " + std::to_string(r) +
                       ": other processes on its cores, thermal or power throttling, and NUMA binding "
                       "(bind each rank to the cores and memory of its device's socket)";
        if (in.spec.parallel.tp > 1)
            f.suggestion += "; its TP peers slow down with it, so look for the rank that is slow alone";
        out.push_back(std::move(f));
    }
}

void hotExperts(const FindingsInput& in, const std::vector<const StepAggregate*>& recent, std::vector<Finding>& out)
{
    const plan::MoeSpec& moe = in.spec.model.moe;
    if (!moe.enabled())
        return;
    const auto experts = std::size_t(moe.experts);
    for (int layer = 0; layer < in.spec.model.layers; ++layer) {
        if (!in.spec.model.isMoeLayer(layer))
            continue;
        std::vector<std::uint64_t> routed(experts, 0);
        std::uint64_t routedTotal = 0;
        std::uint64_t droppedTotal = 0;
        double peakStep = 0;
        for (const StepAggregate* step : recent)
            for (const ExpertLayerStats& stats : step->expertLayers) {
                if (stats.layer != layer || stats.routed.size() != experts || stats.dropped.size() != experts)
                    continue;
                for (std::size_t e = 0; e < experts; ++e) {
                    routed[e] += stats.routed[e];
                    routedTotal += stats.routed[e];
                    droppedTotal += std::min(stats.dropped[e], stats.routed[e]);
                }
                if (finite(stats.imbalance))
                    peakStep = std::max(peakStep, *stats.imbalance);
            }
        if (routedTotal == 0)
            continue;
        const auto hottest = std::size_t(std::max_element(routed.begin(), routed.end()) - routed.begin());
        const double overload = double(routed[hottest]) / (double(routedTotal) / double(experts));
        const double dropped = double(droppedTotal) / double(routedTotal);
        if (!(overload > kExpertOverload) && !(dropped > kDroppedTokens))
            continue;

        Finding f;
        f.kind = FindingKind::HotExpert;
        f.severity = 1 - 1 / overload + dropped;
        f.layer = layer;
        f.expert = int(hottest);
        f.figures = {{"overload", overload},
                     {"peak_step_overload", peakStep},
                     {"dropped_fraction", dropped},
                     {"capacity_factor", moe.capacityFactor}};
        const std::string expert = "expert " + std::to_string(hottest);
        f.title = expert + " of layer " + std::to_string(layer) +
                  " is the hottest: " + plan::formatNumber("%.2f", overload) +
                  "x the mean load over the recent steps (peak step " + plan::formatNumber("%.2f", peakStep) + "x), " +
                  plan::formatPercent(dropped) + " of the layer's tokens dropped";
        // With the coefficient at 0 nothing balances the router: 0.01 is Switch Transformer's
        // (Fedus et al. 2021, section 2.2) and the spec's default.
        const std::string doubleAux =
            moe.auxLossCoef > 0 ? "double model.moe.aux_loss_coef (" + plan::formatNumber("%g", moe.auxLossCoef) +
                                      " -> " + plan::formatNumber("%g", 2 * moe.auxLossCoef) + ")"
                                : "set model.moe.aux_loss_coef to 0.01 (it is 0: nothing balances the router)";
        if (dropped > kDroppedTokens) {
            // Capacity = tokens x k / E x factor, so a factor at the peak step's overload holds that
            // step's load; when the step average already fits, micro-batches above it drop tokens,
            // and the next common setting up (a quarter more) is the step to try.
            const bool peakAbove = peakStep > moe.capacityFactor;
            const double target = std::ceil((peakAbove ? peakStep : moe.capacityFactor + 0.25) * 20 - 1e-9) / 20;
            f.suggestion =
                "raise model.moe.capacity_factor from " + plan::formatNumber("%g", moe.capacityFactor) +
                " to at least " + plan::formatNumber("%.2f", target) +
                (peakAbove ? " (the peak step's overload)" : " (micro-batches overflow it above the step average)") +
                " so that " + expert + " stops dropping tokens; if the imbalance persists, " + doubleAux;
        } else {
            f.suggestion = doubleAux + " so that the router spreads tokens more evenly";
        }
        out.push_back(std::move(f));
    }
}

std::string memorySuggestion(const plan::JobSpec& spec, wire::MemoryCategory largest)
{
    const plan::ParallelSpec& p = spec.parallel;
    std::string split = "more pp or tp (the model split over more devices)";
    switch (largest) {
    case wire::MemoryCategory::Activations:
        if (p.recompute == plan::Recompute::None)
            return "set parallel.recompute to selective (attention scores), or full; or " + split;
        if (p.recompute == plan::Recompute::Selective)
            return "set parallel.recompute to full; or " + split;
        return "lower parallel.micro_batch_size (now " + std::to_string(p.microBatchSize) + "); or " + split;
    case wire::MemoryCategory::Optimizer:
        if (p.zero == 0 && p.dp > 1)
            return "set parallel.zero to 1 (the optimizer state sharded over dp " + std::to_string(p.dp) + "); or " +
                   split;
        if (p.zero < 3 && p.pp == 1 && p.dp > 1)
            return "set parallel.zero to " + std::to_string(p.zero + 1) + "; or " + split;
        return split;
    case wire::MemoryCategory::Grads:
        if (p.zero < 2 && p.pp == 1 && p.dp > 1)
            return "set parallel.zero to 2 (gradients sharded over dp " + std::to_string(p.dp) + "); or " + split;
        if (spec.precision.grads == plan::GradDtype::Fp32)
            return "set precision.grads to bf16 (half the gradient memory); or " + split;
        return split;
    case wire::MemoryCategory::Params:
        if (p.zero < 3 && p.pp == 1 && p.dp > 1)
            return "set parallel.zero to 3 (weights sharded over dp " + std::to_string(p.dp) + "); or " + split;
        return split;
    case wire::MemoryCategory::Workspace:
        break;
    }
    return "lower parallel.micro_batch_size (now " + std::to_string(p.microBatchSize) + ") to shrink the workspace";
}

void memoryPressure(const FindingsInput& in, std::vector<Finding>& out)
{
    const double capacity = in.spec.cluster.device.memoryBytes;
    if (!(capacity > 0))
        return;
    const plan::Mesh mesh(in.spec.parallel);
    struct Worst {
        const RankMemory* memory = nullptr;
        double peak = 0;
        int over = 0;
        int ranks = 0;
    };
    std::vector<Worst> stages(std::size_t(in.spec.parallel.pp));
    for (const RankMemory& m : in.memory) {
        if (m.rank >= std::uint32_t(mesh.worldSize()) || m.samples <= 0)
            continue;
        // Category peaks may come from different moments: their sum bounds the peak total from above.
        double peak = 0;
        bool sound = true;
        for (std::int64_t bytes : m.peak) {
            sound = sound && bytes >= 0;
            peak += double(bytes);
        }
        if (!sound)
            continue;
        Worst& w = stages[std::size_t(mesh.coordOf(int(m.rank)).pp)];
        ++w.ranks;
        if (peak / capacity > kMemoryFraction)
            ++w.over;
        if (w.memory == nullptr || peak > w.peak) {
            w.memory = &m;
            w.peak = peak;
        }
    }
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const Worst& w = stages[s];
        if (w.over == 0)
            continue;
        const double fraction = w.peak / capacity;
        const auto largest =
            std::size_t(std::max_element(w.memory->peak.begin(), w.memory->peak.end()) - w.memory->peak.begin());
        const auto category = wire::MemoryCategory(largest);
        const std::string name(wire::memoryCategoryName(category));
        Finding f;
        f.kind = FindingKind::MemoryPressure;
        f.severity = (fraction - kMemoryFraction) / (1 - kMemoryFraction);
        f.rank = int(w.memory->rank);
        f.stage = int(s);
        f.category = name;
        f.figures = {{"peak_bytes", w.peak},
                     {"capacity_bytes", capacity},
                     {"fraction", fraction},
                     {"largest_bytes", double(w.memory->peak[largest])},
                     {"ranks_over", double(w.over)}};
        f.title = "rank " + std::to_string(w.memory->rank) + " (stage " + std::to_string(s) + ") peaks at " +
                  plan::formatPercent(fraction) + " of its " + plan::formatBytes(capacity) + " (" +
                  plan::formatBytes(w.peak) + ", " + name + " the largest at " +
                  plan::formatBytes(double(w.memory->peak[largest])) + "); " + std::to_string(w.over) + " of " +
                  std::to_string(w.ranks) + " ranks of the stage above " + plan::formatPercent(kMemoryFraction);
        f.suggestion = memorySuggestion(in.spec, category);
        out.push_back(std::move(f));
    }
}

std::optional<Finding> bubbleAbovePlan(const FindingsInput& in, const std::vector<const StepAggregate*>& recent)
{
    std::vector<double> measured, planned;
    for (const StepAggregate* step : recent)
        if (finite(step->bubble) && finite(step->plannedBubble)) {
            measured.push_back(*step->bubble);
            planned.push_back(*step->plannedBubble);
        }
    if (measured.empty())
        return std::nullopt;
    const double m = median(measured);
    const double p = median(planned);
    if (!(m > kBubbleOverPlanRatio * p && m - p > kBubbleOverPlanPoints))
        return std::nullopt;
    Finding f;
    f.kind = FindingKind::BubbleAbovePlan;
    f.severity = m - p;
    f.figures = {{"measured", m}, {"planned", p}};
    f.title = "the pipeline bubble is " + plan::formatPercent(m) +
              (p > 0 ? ", " + plan::formatNumber("%.1f", m / p) + "x the plan's " + plan::formatPercent(p)
                     : " where the plan expects none");
    if (in.spec.parallel.pp < 2) {
        f.suggestion = "with one stage no schedule is to blame: the idle time is inside the step, so check the TP and "
                       "EP collectives and stragglers";
        return f;
    }
    const std::vector<std::string> alternatives = scheduleAlternatives(in.spec, plannedBubble(in.spec, in.plan));
    f.suggestion = (alternatives.empty() ? "" : "try " + joinAlternatives(alternatives) + "; ") +
                   "the plan does not model the excess: check pipeline transfers (link bandwidth, latency) and "
                   "stragglers";
    return f;
}

// Why the steps are off the plan, as far as the aggregates show it: the title's tail, the
// suggestion, the category naming the cause, and its figures.
struct OffPlanCause {
    std::string what;
    std::string fix;
    std::string category;
    std::vector<FindingFigure> figures;
};

const char* const kCalibrate =
    "plan with rates measured here: `meshbench-engine calibrate` this session with `--out PROFILE.json`, then "
    "pass `--profile PROFILE.json` to plan and run";

std::optional<OffPlanCause> oversubscribed(const FindingsInput& in)
{
    // Only CPU ranks run on the host's cores; an accelerator rank mostly waits for its device.
    if (in.spec.cluster.device.kind != "cpu")
        return std::nullopt;
    const int cores = in.coresPerNode > 0 ? in.coresPerNode : int(std::thread::hardware_concurrency());
    const int nodes = std::max(1, in.spec.cluster.nodes);
    const int world = int(in.spec.parallel.worldSize());
    const int ranks = (world + nodes - 1) / nodes;
    if (cores <= 0 || ranks <= cores)
        return std::nullopt;
    return OffPlanCause{plural(ranks, "rank") + " share " + plural(cores, "core") + (nodes > 1 ? " on each node" : ""),
                        "run at most " + plural(cores, "rank") + " a node (fewer dp, pp or tp), or " + kCalibrate +
                            " so that the plan prices the shared cores",
                        "oversubscribed",
                        {{"ranks_per_node", double(ranks)}, {"cores", double(cores)}}};
}

std::optional<OffPlanCause> slowStage(const FindingsInput& in, const std::vector<const StepAggregate*>& recent)
{
    const int pp = in.spec.parallel.pp;
    if (pp < 2 || in.plan == nullptr || !in.plan->simulation.completed ||
        in.plan->simulation.busy.size() != std::size_t(pp))
        return std::nullopt;
    const std::vector<double> busy = medianStageBusy(pp, recent);
    if (busy.empty())
        return std::nullopt;
    // Each stage against its own plan, so that the imbalance the plan expects does not count.
    std::vector<double> ratio;
    for (int s = 0; s < pp; ++s) {
        const double planned = in.plan->simulation.busy[std::size_t(s)];
        if (!(planned > 0))
            return std::nullopt;
        ratio.push_back(busy[std::size_t(s)] / planned);
    }
    const auto worst = std::size_t(std::max_element(ratio.begin(), ratio.end()) - ratio.begin());
    std::vector<double> others = ratio;
    others.erase(others.begin() + std::ptrdiff_t(worst));
    const double rest = median(others);
    if (!(ratio[worst] / rest - 1 > kStageExcess))
        return std::nullopt;
    const std::string stage = "stage " + std::to_string(worst);
    return OffPlanCause{stage + " computes " + plan::formatNumber("%.2f", ratio[worst]) + "x its planned time (" +
                            plan::formatSeconds(busy[worst]) + " vs " +
                            plan::formatSeconds(in.plan->simulation.busy[worst]) + " per step), the others " +
                            plan::formatNumber("%.2f", rest) + "x",
                        "check the ranks of " + stage +
                            " for stragglers (other processes on their cores, throttling), or move a layer off it",
                        "slow_stage",
                        {{"stage", double(worst)}, {"stage_ratio", ratio[worst]}, {"others_ratio", rest}}};
}

std::optional<OffPlanCause> slowLink(const FindingsInput& in, const std::vector<const StepAggregate*>& recent)
{
    if (in.plan == nullptr || !(in.plan->step.total > 0))
        return std::nullopt;
    std::vector<double> shares;
    for (const StepAggregate* step : recent)
        if (finite(step->commSeconds) && finite(step->stepSeconds) && *step->stepSeconds > 0)
            shares.push_back(*step->commSeconds / *step->stepSeconds);
    if (shares.empty())
        return std::nullopt;
    // The spans time every transfer, hidden or not, so the plan's hidden DP time counts too.
    const plan::StepBreakdown& b = in.plan->step;
    const double planned = (b.tensorComm + b.expertComm + b.dataParallelComm + b.dataParallelHidden) / b.total;
    const double measured = median(shares);
    if (!(measured - planned > kCommOverPlanPoints))
        return std::nullopt;
    return OffPlanCause{"communication takes " + plan::formatPercent(measured) + " of the step against the plan's " +
                            plan::formatPercent(planned),
                        "a link is slower than the cluster spec says: measure it and correct the spec's "
                        "bandwidth and latency, or " +
                            std::string(kCalibrate),
                        "slow_link",
                        {{"comm_share", measured}, {"planned_comm_share", planned}}};
}

std::optional<Finding> stepTimeOffPlan(const FindingsInput& in, const std::vector<const StepAggregate*>& recent)
{
    std::vector<double> measured, planned, tokens, plannedTokens;
    for (const StepAggregate* step : recent) {
        if (!(finite(step->stepSeconds) && *step->stepSeconds > 0 && finite(step->plannedStepSeconds) &&
              *step->plannedStepSeconds > 0))
            continue;
        measured.push_back(*step->stepSeconds);
        planned.push_back(*step->plannedStepSeconds);
        if (finite(step->tokensPerSecond) && finite(step->plannedTokensPerSecond)) {
            tokens.push_back(*step->tokensPerSecond);
            plannedTokens.push_back(*step->plannedTokensPerSecond);
        }
    }
    if (measured.empty())
        return std::nullopt;
    const double m = median(measured);
    const double p = median(planned);
    const double off = m / p - 1;
    if (!(std::abs(off) > kStepOffPlanRatio))
        return std::nullopt;
    // Slower steps have a cause to look for; faster ones mean the device table undersells the device.
    std::optional<OffPlanCause> cause;
    if (off > 0)
        cause = oversubscribed(in);
    if (off > 0 && !cause)
        cause = slowStage(in, recent);
    if (off > 0 && !cause)
        cause = slowLink(in, recent);
    if (!cause)
        cause = OffPlanCause{std::string("the device runs ") + (off > 0 ? "slower" : "faster") + " than its table",
                             std::string("calibrate from this session: ") + kCalibrate,
                             "device_rate",
                             {}};

    Finding f;
    f.kind = FindingKind::StepTimeOffPlan;
    f.severity = std::abs(m - p) / std::max(m, p);
    f.category = cause->category;
    f.figures = {{"measured_s", m}, {"planned_s", p}, {"off", off}};
    std::string rate;
    if (!tokens.empty()) {
        const double t = median(tokens);
        const double pt = median(plannedTokens);
        f.figures.push_back({"tokens_per_s", t});
        f.figures.push_back({"planned_tokens_per_s", pt});
        rate = ", " + plan::formatNumber("%.0f", t) + " vs " + plan::formatNumber("%.0f", pt) + " tokens/s";
    }
    f.figures.insert(f.figures.end(), cause->figures.begin(), cause->figures.end());
    f.title = "steps take " + plan::formatSeconds(m) + ", " + plan::formatPercent(std::abs(off)) +
              (off > 0 ? " above" : " below") + " the plan's " + plan::formatSeconds(p) + rate + ": " + cause->what;
    f.suggestion = cause->fix;
    return f;
}

nlohmann::json orNull(const std::optional<int>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// The dimension as the spec's keys and the findings' categories name it.
const char* dimensionName(store::DeviceClass c)
{
    switch (c) {
    case store::DeviceClass::CommTensor:
        return "tp";
    case store::DeviceClass::CommPipeline:
        return "pp";
    case store::DeviceClass::CommData:
        return "dp";
    case store::DeviceClass::CommExpert:
        return "ep";
    default:
        return "other";
    }
}

std::string upper(std::string text)
{
    for (char& c : text)
        c = char(std::toupper(static_cast<unsigned char>(c)));
    return text;
}

std::string rankList(const std::vector<int>& ranks)
{
    std::string text;
    for (std::size_t i = 0; i < ranks.size(); ++i)
        text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
    return text;
}

// The device evidence applies to the spec's layout: the same world.
bool deviceMatches(const FindingsInput& in)
{
    return in.device != nullptr && in.device->mesh().worldSize() == plan::Mesh(in.spec.parallel).worldSize();
}

void lateCollectivesOfRanks(const FindingsInput& in, std::vector<Finding>& out)
{
    const DeviceEvidence& ev = *in.device;
    const plan::Mesh& mesh = ev.mesh();
    for (int r = 0; r < mesh.worldSize(); ++r)
        for (int d = 0; d < kCollectiveDims; ++d) {
            const auto dim = CollectiveDim(d);
            const std::vector<int> group = mesh.groupOf(groupKindOf(dim), r);
            std::vector<double> lateness, duration, count, window, computeRatio, compute;
            for (std::int32_t step : ev.steps()) {
                const RankStepDevice* mine = ev.at(step, r);
                if (mine == nullptr || !mine->collectives[std::size_t(d)] || !(mine->windowNs > 0))
                    continue;
                const CollectiveTiming& t = *mine->collectives[std::size_t(d)];
                lateness.push_back(double(t.latenessNs));
                duration.push_back(double(t.durationNs));
                count.push_back(double(t.count));
                window.push_back(double(mine->windowNs));
                std::vector<double> others;
                for (int peer : group)
                    if (const RankStepDevice* p = ev.at(step, peer); peer != r && p != nullptr && p->hasTime)
                        others.push_back(double(p->computeBusyNs()));
                if (mine->hasTime && !others.empty() && median(others) > 0) {
                    computeRatio.push_back(double(mine->computeBusyNs()) / median(others));
                    compute.push_back(double(mine->computeBusyNs()));
                }
            }
            if (lateness.empty())
                continue;
            const double late = median(lateness);
            const double collective = median(duration);
            if (!(late > double(kLateCollectiveFloorNs) && late > kLateCollectiveFraction * collective))
                continue;
            const double perStep = median(count);
            const double waitShare = std::min(1.0, late * perStep / median(window));
            const std::string name = dimensionName(classOf(dim));
            const plan::MeshCoord c = mesh.coordOf(r);
            Finding f;
            f.kind = FindingKind::LateCollectives;
            f.severity = waitShare;
            f.rank = r;
            f.stage = c.pp;
            f.category = name;
            f.figures = {{"lateness_s", late * 1e-9},
                         {"collective_s", collective * 1e-9},
                         {"collectives", perStep},
                         {"group_size", double(group.size())},
                         {"wait_share", waitShare}};
            std::optional<double> ratio;
            if (!computeRatio.empty()) {
                ratio = median(computeRatio);
                f.figures.push_back({"compute_ratio", *ratio});
            }
            f.title = "rank " + std::to_string(r) + " starts its " + upper(name) + " collectives " +
                      plan::formatSeconds(late * 1e-9) + " after the rest of its " + upper(name) + " group (ranks " +
                      rankList(group) + "): " + plan::formatPercent(late / collective) + " of the collective's " +
                      plan::formatSeconds(collective * 1e-9) + ", " + plan::formatNumber("%.0f", perStep) +
                      " a step, so the group waits " + plan::formatPercent(waitShare) + " of the step for it";
            // The straggler finding is about how long a rank computes; this one is about when it
            // arrives, which slow compute explains only in part: every collective realigns the group,
            // so a rank computing (ratio - 1) more arrives late by about that share of the compute
            // between two collectives. When that explains under half the lateness, the rest comes
            // before its kernels start.
            double explained = 0;
            if (ratio && perStep > 0)
                explained = std::max(0.0, *ratio - 1) * median(compute) / perStep;
            f.figures.push_back({"explained_by_compute_s", explained * 1e-9});
            const std::string node = "the node of rank " + std::to_string(r);
            if (explained >= late / 2)
                f.suggestion = "its compute takes " + plan::formatPercent(*ratio - 1) +
                               " longer than its group's, which carries it late into each collective: check " + node +
                               " for throttling and other processes on its cores";
            else
                f.suggestion =
                    std::string(ratio ? "its slower compute (" + plan::formatPercent(std::max(0.0, *ratio - 1)) +
                                            ") explains " + plan::formatSeconds(explained * 1e-9) + " of it; "
                                      : "") +
                    "the rest comes before its kernels start: the host launching them late (Python "
                    "garbage collection, the data loader, other processes on its cores, CPU and NUMA "
                    "binding on " +
                    node + ") or its stream waiting on other work";
            out.push_back(std::move(f));
        }
}

// A rank holding its pipeline back (slower compute, late TP collectives) makes its whole data-
// parallel replica late at the gradient reduction, so every member of the replica is late against
// its DP group by the same amount. That is one problem, not one per rank: it is reported once, for
// the replica, naming the member that computes the most against its own DP peers as the likely
// cause.
void lateCollectives(const FindingsInput& in, std::vector<Finding>& out)
{
    if (!deviceMatches(in))
        return;
    const plan::Mesh& mesh = in.device->mesh();
    std::vector<Finding> found;
    lateCollectivesOfRanks(in, found);
    const int replicaSize = mesh.worldSize() / std::max(1, mesh.dp());
    std::vector<std::vector<const Finding*>> replicas(std::size_t(std::max(1, mesh.dp())));
    for (const Finding& f : found)
        if (f.category == "dp")
            replicas[std::size_t(mesh.coordOf(*f.rank).dp)].push_back(&f);
    std::vector<bool> merged(replicas.size(), false);
    for (std::size_t v = 0; v < replicas.size(); ++v) {
        const std::vector<const Finding*>& members = replicas[v];
        if (replicaSize < 2 || int(members.size()) != replicaSize)
            continue;
        merged[v] = true;
        const auto ratio = [](const Finding* f) { return f->figure("compute_ratio").value_or(1.0); };
        const Finding* cause = *std::max_element(
            members.begin(), members.end(), [&](const Finding* a, const Finding* b) { return ratio(a) < ratio(b); });
        std::vector<double> lateness, shares;
        std::vector<int> ranks;
        for (const Finding* f : members) {
            lateness.push_back(*f->figure("lateness_s"));
            shares.push_back(f->severity);
            ranks.push_back(*f->rank);
        }
        Finding f = *cause;
        f.severity = median(shares);
        f.figures.push_back({"replica_ranks", double(ranks.size())});
        f.title = "data-parallel replica dp " + std::to_string(v) + " (ranks " + rankList(ranks) +
                  ") starts its DP collectives " + plan::formatSeconds(median(lateness)) +
                  " after the other replicas (the median member), so they wait " + plan::formatPercent(f.severity) +
                  " of the step for it";
        const double excess = ratio(cause) - 1;
        if (excess > 0)
            f.title += "; rank " + std::to_string(*cause->rank) + " computes " + plan::formatPercent(excess) +
                       " more than its DP peers and holds the replica's pipeline back";
        f.suggestion = "check the node of rank " + std::to_string(*cause->rank) +
                       " (throttling, other processes on its cores, NUMA binding); a replica waits for its slowest "
                       "stage and TP peer at every pipeline transfer and TP collective";
        out.push_back(std::move(f));
    }
    for (Finding& f : found)
        if (f.category != "dp" || !merged[std::size_t(mesh.coordOf(*f.rank).dp)])
            out.push_back(std::move(f));
}

std::string exposedSuggestion(const plan::JobSpec& spec, store::DeviceClass c)
{
    const plan::ParallelSpec& p = spec.parallel;
    const plan::Mesh mesh(p);
    std::vector<std::string> tries;
    switch (c) {
    case store::DeviceClass::CommTensor:
        if (!plan::groupsStayInDomain(mesh, plan::GroupKind::Tensor, spec.cluster))
            tries.push_back("keep TP inside the NVLink domain (parallel.tp " + std::to_string(p.tp) +
                            " at most cluster.nvlink_domain " + std::to_string(spec.cluster.nvlinkDomain) +
                            ", TP innermost)");
        if (!p.sequenceParallel)
            tries.push_back("set parallel.sequence_parallel (reduce-scatter and all-gather instead of "
                            "all-reduce, and the norms split over tp)");
        if (!p.tpCommOverlap)
            tries.push_back("set parallel.tp_comm_overlap (Megatron's --tp-comm-overlap pipelines the TP "
                            "collectives with the GEMMs they feed)");
        if (p.tp > 1)
            tries.push_back("lower parallel.tp (now " + std::to_string(p.tp) + ") for more pp or dp");
        break;
    case store::DeviceClass::CommData:
        if (!p.overlapGradReduce)
            tries.push_back("set parallel.overlap_grad_reduce (each bucket reduced during the backward)");
        tries.push_back("raise parallel.grad_bucket_mb (now " + plan::formatNumber("%g", p.gradBucketMb) +
                        ") so that fewer, larger reductions pay the latency");
        if (p.zero >= 1 && !p.overlapParamGather)
            tries.push_back("set parallel.overlap_param_gather (the weight all-gather under the forward)");
        tries.push_back("more parallel.microbatches, which give the reduction more backward to hide under");
        break;
    case store::DeviceClass::CommPipeline:
        tries.push_back("more parallel.microbatches (now " + std::to_string(p.microbatches) +
                        "), so that each transfer is smaller and more of them overlap compute");
        if (p.pp > 1)
            tries.push_back(
                p.schedule == plan::ScheduleKind::Interleaved
                    ? "more parallel.virtual_stages (now " + std::to_string(p.virtualStages) + ")"
                    : std::string("schedule interleaved (its transfers overlap the other chunks' compute)"));
        if (!plan::groupsStayInDomain(mesh, plan::GroupKind::Pipeline, spec.cluster))
            tries.push_back("place neighbouring stages in one NVLink domain (parallel.order)");
        break;
    case store::DeviceClass::CommExpert:
        if (!plan::groupsStayInDomain(mesh, plan::GroupKind::Expert, spec.cluster))
            tries.push_back("keep EP inside the NVLink domain (parallel.ep " + std::to_string(p.ep) +
                            " within cluster.nvlink_domain " + std::to_string(spec.cluster.nvlinkDomain) + ")");
        if (p.schedule != plan::ScheduleKind::DualPipeV)
            tries.push_back("schedule dualpipev (one micro-batch's all-to-all under another's compute, as "
                            "DeepSeek-V3 does)");
        if (spec.model.moe.capacityFactor > 1)
            tries.push_back("lower model.moe.capacity_factor (now " +
                            plan::formatNumber("%g", spec.model.moe.capacityFactor) + ": fewer padded tokens sent)");
        break;
    default:
        break;
    }
    if (tries.empty())
        return "no layout change in the spec removes it; measure the links against the cluster spec";
    std::string text = "try ";
    for (std::size_t i = 0; i < tries.size(); ++i)
        text += (i == 0 ? "" : i + 1 == tries.size() ? "; or " : "; ") + tries[i];
    return text;
}

void exposedCommunication(const FindingsInput& in, std::vector<Finding>& out)
{
    if (!deviceMatches(in))
        return;
    const DeviceEvidence& ev = *in.device;
    constexpr store::DeviceClass kDims[] = {store::DeviceClass::CommTensor, store::DeviceClass::CommPipeline,
                                            store::DeviceClass::CommData, store::DeviceClass::CommExpert};
    for (store::DeviceClass c : kDims) {
        // Each rank's median over the steps, then the median rank: what the layout costs the typical
        // device, not one rank's accident (which the late-collectives finding names).
        std::vector<double> shares, exposed, windows;
        int worstRank = -1;
        double worst = 0;
        for (int r = 0; r < ev.mesh().worldSize(); ++r) {
            std::vector<double> share, seconds, window;
            for (std::int32_t step : ev.steps())
                if (const RankStepDevice* d = ev.at(step, r); d != nullptr && d->hasTime && d->windowNs > 0) {
                    const double e = double(d->exposedNs[std::size_t(c)]);
                    share.push_back(std::min(1.0, e / double(d->windowNs)));
                    seconds.push_back(e * 1e-9);
                    window.push_back(double(d->windowNs) * 1e-9);
                }
            if (share.empty())
                continue;
            shares.push_back(median(share));
            exposed.push_back(median(seconds));
            windows.push_back(median(window));
            if (worstRank < 0 || shares.back() > worst) {
                worst = shares.back();
                worstRank = r;
            }
        }
        if (shares.empty())
            continue;
        const double share = median(shares);
        if (!(share > kExposedCommShare))
            continue;
        const std::string name = dimensionName(c);
        Finding f;
        f.kind = FindingKind::ExposedCommunication;
        f.severity = share;
        f.rank = worstRank;
        f.category = name;
        f.figures = {
            {"share", share}, {"exposed_s", median(exposed)}, {"window_s", median(windows)}, {"worst_share", worst}};
        f.title = upper(name) + " communication is exposed for " + plan::formatPercent(share) +
                  " of the step's device time (" + plan::formatSeconds(median(exposed)) + " of " +
                  plan::formatSeconds(median(windows)) + ", the median rank; rank " + std::to_string(worstRank) + " " +
                  plan::formatPercent(worst) + "): no compute runs under it";
        f.suggestion = exposedSuggestion(in.spec, c);
        out.push_back(std::move(f));
    }
}

std::optional<Finding> launchBound(const FindingsInput& in)
{
    if (!deviceMatches(in))
        return std::nullopt;
    const DeviceEvidence& ev = *in.device;
    struct Rank {
        int rank = -1;
        double shortShare = 0, idleShare = 0, gaps = 0, boundaries = 0, meanGap = 0;
    };
    std::vector<Rank> bound;
    for (int r = 0; r < ev.mesh().worldSize(); ++r) {
        std::vector<double> shortShare, idleShare, gaps, boundaries, meanGap;
        for (std::int32_t step : ev.steps()) {
            const RankStepDevice* d = ev.at(step, r);
            if (d == nullptr || !(d->windowNs > 0) || d->kernels < 2)
                continue;
            const double window = double(d->windowNs);
            shortShare.push_back(double(d->shortGapNs) / window);
            idleShare.push_back(d->hasTime ? double(d->busyNs[std::size_t(store::DeviceClass::Idle)]) / window
                                           : double(d->shortGapNs) / window);
            gaps.push_back(double(d->shortGaps));
            boundaries.push_back(double(d->shortGaps) / double(d->kernels - 1));
            meanGap.push_back(d->shortGaps > 0 ? double(d->shortGapNs) / d->shortGaps * 1e-9 : 0.0);
        }
        if (shortShare.empty())
            continue;
        Rank rank{r, median(shortShare), median(idleShare), median(gaps), median(boundaries), median(meanGap)};
        if (rank.shortShare > kLaunchGapShare && rank.boundaries > kLaunchGapBoundaries)
            bound.push_back(rank);
    }
    if (bound.empty())
        return std::nullopt;
    const Rank& w = *std::max_element(bound.begin(), bound.end(),
                                      [](const Rank& a, const Rank& b) { return a.shortShare < b.shortShare; });
    Finding f;
    f.kind = FindingKind::LaunchBound;
    f.severity = w.shortShare;
    f.rank = w.rank;
    f.stage = ev.mesh().coordOf(w.rank).pp;
    f.figures = {{"short_gap_share", w.shortShare}, {"idle_share", w.idleShare}, {"short_gaps", w.gaps},
                 {"gap_boundaries", w.boundaries},  {"mean_gap_s", w.meanGap},   {"ranks", double(bound.size())}};
    f.title = "the device waits for the host's launches: on rank " + std::to_string(w.rank) + " " +
              plan::formatPercent(w.shortShare) + " of the step goes in " + plan::formatNumber("%.0f", w.gaps) +
              " idle gaps under " + plan::formatSeconds(double(kLaunchGapNs) * 1e-9) + " (mean " +
              plan::formatSeconds(w.meanGap) + ", " + plan::formatPercent(w.boundaries) +
              " of its kernel boundaries; idle " + plan::formatPercent(w.idleShare) + " in all); " +
              plural(long(bound.size()), "rank") + " of " + std::to_string(ev.mesh().worldSize()) + " alike";
    f.suggestion = "capture the step's kernels in CUDA graphs (torch.compile mode=\"reduce-overhead\" or "
                   "torch.cuda.CUDAGraph: one launch for many kernels), or raise parallel.micro_batch_size (now " +
                   std::to_string(in.spec.parallel.microBatchSize) +
                   ") so that each kernel does more per launch; fusing small kernels helps too";
    return f;
}

}  // namespace

std::size_t firstRecentStep(std::size_t count)
{
    return count > kWarmupSteps + std::size_t(kRecentSteps) ? count - std::size_t(kRecentSteps)
                                                            : std::min(count, kWarmupSteps);
}

RankTimes::RankTimes(int worldSize, int keepSteps) : m_world(worldSize)
{
    if (worldSize < 1 || keepSteps < 1)
        throw std::invalid_argument("rank times: world size " + std::to_string(worldSize) + " and steps kept " +
                                    std::to_string(keepSteps) + " must both be at least 1");
    m_slots.resize(std::size_t(keepSteps));
}

void RankTimes::add(std::uint32_t rank, const wire::SpanRecord& span)
{
    if (!wire::isComputeKind(span.kind) || rank >= std::uint32_t(m_world) || span.step < 0 || span.endNs < span.beginNs)
        return;
    const auto keep = std::int64_t(m_slots.size());
    if (span.step <= m_newest - keep)
        return;
    m_newest = std::max(m_newest, std::int64_t(span.step));
    Slot& slot = m_slots[std::size_t(span.step % keep)];
    if (slot.step != span.step) {
        slot.step = span.step;
        slot.busy.assign(std::size_t(m_world), -1.0);
    }
    double& busy = slot.busy[rank];
    busy = std::max(busy, 0.0) + (double(span.endNs) - double(span.beginNs)) * 1e-9;
}

void RankTimes::add(const wire::Batch& batch)
{
    for (const wire::Record& record : batch.records)
        if (const auto* span = std::get_if<wire::SpanRecord>(&record))
            add(batch.rank, *span);
}

std::optional<double> RankTimes::busySeconds(std::int32_t step, std::uint32_t rank) const
{
    if (step < 0 || rank >= std::uint32_t(m_world))
        return std::nullopt;
    const Slot& slot = m_slots[std::size_t(step % std::int64_t(m_slots.size()))];
    if (slot.step != step || slot.busy[rank] < 0)
        return std::nullopt;
    return slot.busy[rank];
}

void RecentSteps::add(const StepAggregate& step)
{
    // The warm-up stays (findFindings leaves it out); of the rest, the last kRecentSteps.
    if (m_steps.size() > kWarmupSteps + std::size_t(kRecentSteps) - 1)
        m_steps.erase(m_steps.begin() + kWarmupSteps);
    m_steps.push_back(step);
}

std::string_view findingKindName(FindingKind kind)
{
    switch (kind) {
    case FindingKind::BoundingStage:
        return "bounding_stage";
    case FindingKind::Straggler:
        return "straggler";
    case FindingKind::HotExpert:
        return "hot_expert";
    case FindingKind::MemoryPressure:
        return "memory_pressure";
    case FindingKind::BubbleAbovePlan:
        return "bubble_above_plan";
    case FindingKind::StepTimeOffPlan:
        return "step_time_off_plan";
    case FindingKind::LateCollectives:
        return "late_collectives";
    case FindingKind::ExposedCommunication:
        return "exposed_communication";
    case FindingKind::LaunchBound:
        return "launch_bound";
    }
    return "unknown";
}

std::optional<double> Finding::figure(std::string_view key) const
{
    for (const FindingFigure& f : figures)
        if (f.key == key)
            return f.value;
    return std::nullopt;
}

std::vector<Finding> findFindings(const FindingsInput& input)
{
    if (const auto errors = plan::validateLayout(input.spec); !errors.empty())
        throw std::invalid_argument("findings: the job's layout is invalid: " + errors.front().path + ": " +
                                    errors.front().message);
    const std::vector<const StepAggregate*> recent = recentSteps(input.steps);
    std::vector<Finding> findings;
    if (auto f = boundingStage(input, recent))
        findings.push_back(std::move(*f));
    stragglers(input, recent, findings);
    hotExperts(input, recent, findings);
    memoryPressure(input, findings);
    if (auto f = bubbleAbovePlan(input, recent))
        findings.push_back(std::move(*f));
    if (auto f = stepTimeOffPlan(input, recent))
        findings.push_back(std::move(*f));
    lateCollectives(input, findings);
    exposedCommunication(input, findings);
    if (auto f = launchBound(input))
        findings.push_back(std::move(*f));
    std::stable_sort(findings.begin(), findings.end(),
                     [](const Finding& a, const Finding& b) { return a.severity > b.severity; });
    return findings;
}

std::string describe(const Finding& finding) { return finding.title + "; " + finding.suggestion; }

nlohmann::json toJson(const Finding& finding)
{
    nlohmann::json figures = nlohmann::json::object();
    for (const FindingFigure& f : finding.figures)
        figures[f.key] = f.value;
    return {{"type", "finding"},
            {"kind", findingKindName(finding.kind)},
            {"severity", finding.severity},
            {"title", finding.title},
            {"suggestion", finding.suggestion},
            {"figures", std::move(figures)},
            {"stage", orNull(finding.stage)},
            {"rank", orNull(finding.rank)},
            {"layer", orNull(finding.layer)},
            {"expert", orNull(finding.expert)},
            {"category", finding.category ? nlohmann::json(*finding.category) : nlohmann::json(nullptr)}};
}

}  // namespace meshbench::live
