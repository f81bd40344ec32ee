#include "search.h"

#include "capability.h"
#include "cost_model.h"
#include "mesh.h"
#include "planner.h"
#include "schedule.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

namespace meshbench::plan {
namespace {

// divisorsOf, as ints (every search dimension fits one).
std::vector<int> divisors(std::int64_t n)
{
    std::vector<int> out;
    for (std::int64_t d : divisorsOf(n))
        out.push_back(int(d));
    return out;
}

// The schedules in groups that place the model chunks alike (the V schedules put the model's two
// ends on stage 0), so that each group's stages are priced once, with its own placement.
const std::vector<std::vector<ScheduleKind>> kSchedulePlacements = {
    {ScheduleKind::OneFOneB, ScheduleKind::GPipe, ScheduleKind::ZeroBubbleH1},
    {ScheduleKind::Interleaved},
    {ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV},
};

struct Priced {
    ParallelSpec parallel;
    double stepTime;
};

// Keeps the `capacity` cheapest candidates seen so far (a max-heap on step time).
class BestList {
public:
    explicit BestList(std::size_t capacity) : m_capacity(capacity) {}

    double worst() const { return m_heap.size() < m_capacity ? 1e300 : m_heap.front().stepTime; }

    void offer(const ParallelSpec& parallel, double stepTime)
    {
        if (stepTime >= worst())
            return;
        const auto slower = [](const Priced& a, const Priced& b) { return a.stepTime < b.stepTime; };
        m_heap.push_back({parallel, stepTime});
        std::push_heap(m_heap.begin(), m_heap.end(), slower);
        if (m_heap.size() > m_capacity) {
            std::pop_heap(m_heap.begin(), m_heap.end(), slower);
            m_heap.pop_back();
        }
    }

    std::vector<Priced> sorted() const
    {
        std::vector<Priced> out = m_heap;
        std::sort(out.begin(), out.end(), [](const Priced& a, const Priced& b) { return a.stepTime < b.stepTime; });
        return out;
    }

private:
    std::size_t m_capacity;
    std::vector<Priced> m_heap;
};

}  // namespace

SearchResult searchLayouts(const JobSpec& spec, const SearchOptions& options)
{
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    SearchResult result;
    const ModelSpec& model = spec.model;
    const std::int64_t world = spec.cluster.devices();
    result.globalBatch = options.globalBatch > 0 ? options.globalBatch : spec.parallel.globalBatch();
    if (world > (1 << 20)) {
        result.errors.push_back({"cluster.nodes", "the cluster has " + std::to_string(world) +
                                                      " devices; the search handles at most 1,048,576"});
        return result;
    }

    result.plannedOnly = options.plannedOnly || spec.parallel.overlapParamGather || spec.parallel.tpCommOverlap;
    const bool plannedOnly = result.plannedOnly;
    // What the agent refuses whatever the layout (the backend, the model) leaves nothing to rank;
    // one device is a layout every clause about the layout accepts. The spec's planned-only
    // overlaps are not the layout's: the search chooses them.
    if (!plannedOnly) {
        JobSpec oneDevice = singleDeviceSpec(spec);
        oneDevice.parallel.overlapParamGather = oneDevice.parallel.tpCommOverlap = false;
        if (std::vector<SpecError> refusals = agentRefusals(oneDevice); !refusals.empty()) {
            result.errors = std::move(refusals);
            return result;
        }
    }

    // The same divisibility rules as validateLayout, used to enumerate only valid layouts.
    const std::int64_t tpCommon = tensorParallelBound(model);

    JobSpec candidate = spec;
    ParallelSpec& p = candidate.parallel;
    p.order = RankOrder::TpDpPp;
    p.overlapParamGather = p.tpCommOverlap = false;
    BestList best(std::size_t(std::max(1, options.top)) * 4);  // margin for re-ranking after simulation
    std::vector<StageWork> works, overlappedWorks;
    const auto priceStages = [&](const CostModel& costs, std::vector<StageWork>& out) {
        out.clear();
        for (int s = 0; s < p.pp; ++s)
            out.push_back(costs.stageWork(s));
    };
    // The layout `p` with the set of overlaps that apply to it and price it fastest, tried
    // defaults first so that one hiding nothing stays at its default. With `tpOverlapPriced`,
    // overlappedWorks and `overlappedMakespan` price the stages with tp_comm_overlap.
    const auto offerFastestOverlaps = [&](const CostModel& costs, double makespan, bool tpOverlapPriced,
                                          double overlappedMakespan) {
        const DataParallelCosts dpCosts = costs.dataParallelCosts(0);
        const double optimizer = costs.optimizerTime();
        const bool gatherApplies = plannedOnly && p.zero >= 1 && p.dp > 1;
        ParallelSpec fastest = p;
        double fastestTime = 1e300;
        for (bool tpOverlap : {false, true}) {
            if (tpOverlap && !tpOverlapPriced)
                continue;
            const double span = tpOverlap ? overlappedMakespan : makespan;
            const StageWork& first = tpOverlap ? overlappedWorks.front() : works.front();
            p.tpCommOverlap = tpOverlap;
            for (bool gradOverlap : {true, false}) {
                if (!gradOverlap && p.dp == 1)
                    continue;
                p.overlapGradReduce = gradOverlap;
                for (bool gather : {false, true}) {
                    if (gather && !gatherApplies)
                        continue;
                    p.overlapParamGather = gather;
                    const double time = span + costs.dataParallelTime(dpCosts, first) + optimizer;
                    if (time < fastestTime) {
                        fastestTime = time;
                        fastest = p;
                    }
                }
            }
        }
        p.tpCommOverlap = p.overlapParamGather = false;
        p.overlapGradReduce = true;
        best.offer(fastest, fastestTime);
    };

    for (int tp : divisors(std::gcd(tpCommon, world))) {
        for (int pp : divisors(std::gcd(std::int64_t(model.layers), world / tp))) {
            const std::int64_t dp = world / (std::int64_t(tp) * pp);
            if (result.globalBatch % dp != 0)
                continue;
            p.tp = tp;
            p.pp = pp;
            p.dp = int(dp);
            const std::vector<int> eps =
                model.moe.enabled() ? divisors(std::gcd(dp, std::int64_t(model.moe.experts))) : std::vector<int>{1};
            for (int ep : eps) {
                p.ep = ep;
                const LinkClasses links = linkClasses(Mesh(p), spec.cluster);
                for (bool sp : {false, true}) {
                    if (sp && (tp == 1 || model.seqLen % tp != 0))
                        continue;
                    p.sequenceParallel = sp;
                    const std::int64_t perReplica = result.globalBatch / dp;
                    for (std::int64_t mbs = 1; mbs <= perReplica && mbs <= 65536; mbs *= 2) {
                        if (perReplica % mbs != 0)
                            continue;
                        p.microBatchSize = int(mbs);
                        p.microbatches = int(perReplica / mbs);
                        for (Recompute recompute : {Recompute::None, Recompute::Selective, Recompute::Full}) {
                            p.recompute = recompute;
                            for (int v : divisors(model.layers / pp)) {
                                p.virtualStages = v;
                                for (const std::vector<ScheduleKind>& placement : kSchedulePlacements) {
                                    // The kinds this layout admits; one pipeline stage runs every
                                    // schedule the same, so it lists only the first.
                                    std::vector<ScheduleKind> kinds;
                                    for (ScheduleKind kind : placement) {
                                        p.schedule = kind;
                                        if ((pp > 1 || kinds.empty()) &&
                                            validateScheduleShape(p.scheduleShape()).empty())
                                            kinds.push_back(kind);
                                    }
                                    if (kinds.empty())
                                        continue;
                                    p.schedule = kinds.front();
                                    const CostModel costs(candidate, links);
                                    priceStages(costs, works);
                                    // TP overlap changes every layer's cost: the stages priced with it.
                                    std::optional<CostModel> overlapped;
                                    if (plannedOnly && tp > 1 && links.tensor.insideDomain) {
                                        p.tpCommOverlap = true;
                                        overlapped.emplace(candidate, links);
                                        priceStages(*overlapped, overlappedWorks);
                                        p.tpCommOverlap = false;
                                    }
                                    for (ScheduleKind kind : kinds) {
                                        p.schedule = kind;
                                        if (p.scheduleShape().slotCount() > kMaxScheduleSlots)
                                            continue;
                                        const double makespan =
                                            estimatedMakespan(p.scheduleShape(), works, costs.transferTime());
                                        const double overlappedMakespan =
                                            overlapped ? estimatedMakespan(p.scheduleShape(), overlappedWorks,
                                                                           overlapped->transferTime())
                                                       : 0.0;
                                        for (int zero = 0; zero <= (pp > 1 ? 1 : 3); ++zero) {
                                            p.zero = zero;
                                            if (!plannedOnly && !agentCanRun(candidate)) {
                                                ++result.refused;
                                                continue;
                                            }
                                            ++result.evaluated;
                                            // Stage 0 holds the most activations and the embedding, the
                                            // last stage the output layer; the full plan below checks
                                            // every stage.
                                            const double memory = std::max(costs.stageMemory(0).total(),
                                                                           costs.stageMemory(pp - 1).total());
                                            if (memory > spec.cluster.device.memoryBytes)
                                                continue;
                                            ++result.fitting;
                                            offerFastestOverlaps(costs, makespan, overlapped.has_value(),
                                                                 overlappedMakespan);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    result.evaluationSeconds = std::chrono::duration<double>(Clock::now() - start).count();

    for (const Priced& priced : best.sorted()) {
        candidate.parallel = priced.parallel;
        const Plan plan = makePlan(candidate);
        if (!plan.fits || !plan.simulation.completed)
            continue;
        SearchCandidate c;
        c.parallel = priced.parallel;
        c.stepTime = plan.step.total;
        c.tokensPerSecond = plan.tokensPerSecond;
        c.mfu = plan.mfu;
        c.memoryBytes = plan.mostLoaded().total();
        c.bubbleRatio = plan.simulation.overallBubbleRatio;
        result.best.push_back(c);
    }
    std::sort(result.best.begin(), result.best.end(),
              [](const SearchCandidate& a, const SearchCandidate& b) { return a.stepTime < b.stepTime; });
    if (result.best.size() > std::size_t(std::max(1, options.top)))
        result.best.resize(std::size_t(std::max(1, options.top)));
    result.totalSeconds = std::chrono::duration<double>(Clock::now() - start).count();
    return result;
}

}  // namespace meshbench::plan
