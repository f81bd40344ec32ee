#include "live_alignment.h"

#include "import_error.h"

#include "plan/units.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace meshbench::import {
namespace {

// An op within its step. A rank runs a micro-batch's op once a step, but a span of the whole step
// (micro-batch -1: a data-parallel reduction's buckets, say) may repeat: repeats are told apart by
// their order in the step.
using OpKey = std::tuple<int, int, int, int, int>;  // stage, chunk, micro-batch, kind, repeat

// Each span's key within its step, in the spans' order (`spans` sorted by begin).
std::vector<OpKey> opKeys(const std::vector<const wire::SpanRecord*>& spans)
{
    std::map<std::tuple<int, int, int, int, int>, int> seen;  // step, stage, chunk, micro-batch, kind
    std::vector<OpKey> keys;
    keys.reserve(spans.size());
    for (const wire::SpanRecord* s : spans) {
        const int repeat = seen[{s->step, s->stage, s->chunk, s->microbatch, int(s->kind)}]++;
        keys.emplace_back(s->stage, s->chunk, s->microbatch, int(s->kind), repeat);
    }
    return keys;
}

std::vector<const wire::SpanRecord*> inBeginOrder(const std::vector<wire::SpanRecord>& spans,
                                                  const std::set<int>& kinds)
{
    std::vector<const wire::SpanRecord*> sorted;
    for (const wire::SpanRecord& s : spans)
        if (kinds.count(int(s.kind)))
            sorted.push_back(&s);
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto* a, const auto* b) { return a->beginNs < b->beginNs; });
    return sorted;
}

}  // namespace

LiveAlignment alignToLive(const std::vector<wire::SpanRecord>& traced, const std::vector<wire::SpanRecord>& live,
                          std::int64_t handedNs)
{
    std::set<int> tracedSteps, kinds;
    for (const wire::SpanRecord& s : traced) {
        tracedSteps.insert(s.step);
        kinds.insert(int(s.kind));
    }
    if (traced.empty())
        throw ImportError("it names no pipeline op, so nothing places it among the rank's live ops; annotate the "
                          "ops (meshbench's op, torch.distributed.pipelining or record_function 'PP:' names)");
    const std::vector<const wire::SpanRecord*> liveOps = inBeginOrder(live, kinds);
    const std::vector<OpKey> liveKeys = opKeys(liveOps);
    std::map<std::pair<int, OpKey>, const wire::SpanRecord*> byStep;  // live ops by step and op
    std::set<int> liveSteps;
    for (std::size_t i = 0; i < liveOps.size(); ++i) {
        byStep.emplace(std::pair{liveOps[i]->step, liveKeys[i]}, liveOps[i]);
        liveSteps.insert(liveOps[i]->step);
    }
    const std::vector<const wire::SpanRecord*> tracedOps = inBeginOrder(traced, kinds);
    const std::vector<OpKey> tracedKeys = opKeys(tracedOps);
    if (liveSteps.empty())
        throw ImportError("the rank reported none of its ops live before it handed the trace over");

    // The latest shift first: the one whose last step is the last before the hand-over.
    const int lastTraced = *tracedSteps.rbegin();
    const int highest = *liveSteps.rbegin() - lastTraced;
    const int lowest = *liveSteps.begin() - *tracedSteps.begin();
    // The best of the shifts that do not fit, for the message: the most ops matched, then the latest.
    struct Miss {
        int matched = -1;
        int shift = 0;
        std::int64_t lateNs = 0;  // how long after the hand-over its last step began
        bool operator<(const Miss& o) const { return std::tie(matched, shift) < std::tie(o.matched, o.shift); }
    } nearest;
    for (int shift = highest; shift >= lowest; --shift) {
        std::vector<std::int64_t> offsets;
        offsets.reserve(traced.size());
        std::int64_t lastStepBegin = std::numeric_limits<std::int64_t>::max();
        for (std::size_t i = 0; i < tracedOps.size(); ++i) {
            const auto match = byStep.find({tracedOps[i]->step + shift, tracedKeys[i]});
            if (match == byStep.end())
                break;
            offsets.push_back(match->second->beginNs - tracedOps[i]->beginNs);
            if (tracedOps[i]->step == lastTraced)
                lastStepBegin = std::min(lastStepBegin, match->second->beginNs);
        }
        if (offsets.size() != traced.size() || lastStepBegin >= handedNs) {
            nearest = std::max(nearest, Miss{int(offsets.size()), shift, lastStepBegin - handedNs});
            continue;
        }
        LiveAlignment a;
        a.stepShift = shift;
        std::vector<std::int64_t> sorted = offsets;
        std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(sorted.size() / 2), sorted.end());
        a.offsetNs = sorted[sorted.size() / 2];
        for (std::int64_t o : offsets)
            a.residualNs = std::max(a.residualNs, o > a.offsetNs ? o - a.offsetNs : a.offsetNs - o);
        a.matchedOps = int(offsets.size());
        a.firstStep = *tracedSteps.begin() + shift;
        a.lastStep = *tracedSteps.rbegin() + shift;
        return a;
    }
    const std::string steps = std::to_string(tracedSteps.size());
    std::string nearestWords;
    if (nearest.matched == int(traced.size()))
        nearestWords = " (live steps " + std::to_string(*tracedSteps.begin() + nearest.shift) + "-" +
                       std::to_string(lastTraced + nearest.shift) + " hold them all, but began their last " +
                       plan::formatNumber("%.3f ms", double(nearest.lateNs) / 1e6) + " after it)";
    else if (nearest.matched >= 0)
        nearestWords = " (at most " + std::to_string(nearest.matched) + " of them are in any " + steps + " live steps)";
    throw ImportError("its " + std::to_string(traced.size()) + " pipeline ops over " + steps +
                      " steps are not the ops the rank reported live in any " + steps +
                      " steps it ran before handing the trace over" + nearestWords +
                      ": is it the trace of another run, or of another rank?");
}

void moveOntoLive(RankAnalysis& rank, const LiveAlignment& a)
{
    for (wire::SpanRecord& s : rank.spans) {
        s.step += a.stepShift;
        s.beginNs += a.offsetNs;
        s.endNs += a.offsetNs;
    }
    for (store::KernelRow& k : rank.kernels) {
        if (k.step >= 0)
            k.step += a.stepShift;
        k.beginNs += a.offsetNs;
        k.endNs += a.offsetNs;
    }
    for (StepWindow& w : rank.steps) {
        w.step += a.stepShift;
        w.hostBeginNs += a.offsetNs;
        w.hostEndNs += a.offsetNs;
        w.deviceBeginNs += a.offsetNs;
        w.deviceEndNs += a.offsetNs;
    }
    for (store::DeviceTimeRow& row : rank.deviceTime)
        row.step += a.stepShift;
    for (CollectiveEnd& c : rank.collectives)
        c.endNs += a.offsetNs;
}

}  // namespace meshbench::import
