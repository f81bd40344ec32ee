#include "simulator.h"

#include "units.h"

#include <algorithm>

namespace meshbench::plan {

namespace {

constexpr std::size_t kNoMessage = static_cast<std::size_t>(-1);

struct Layout {
    ScheduleShape shape;
    int p;
    int m;
    int v;

    explicit Layout(const ScheduleShape& s) : shape(s), p(s.stages), m(s.microbatches), v(s.virtualStages) {}

    int virtualStages() const { return p * v; }
    int virtualStage(int stage, int chunk) const { return shape.virtualStageOf(stage, chunk); }
    std::size_t slot(int mb, int vs) const { return static_cast<std::size_t>(mb) * virtualStages() + vs; }
    std::size_t slotCount() const { return static_cast<std::size_t>(m) * virtualStages(); }
    std::size_t messages() const { return 2 * slotCount(); }
};

// A message is named by its direction, micro-batch and receiving virtual stage, so a send and
// the recv that consumes it get the same key. kNoMessage: a transfer off either end of the pipeline.
std::size_t messageKey(const Layout& layout, int stage, const Op& op)
{
    const int vs = layout.virtualStage(stage, op.chunk);
    int receiver = vs;
    std::size_t direction = 0;
    switch (op.kind) {
    case OpKind::SendActivation:
        receiver = vs + 1;
        break;
    case OpKind::RecvActivation:
        receiver = vs == 0 ? -1 : vs;
        break;
    case OpKind::SendGradient:
        receiver = vs - 1;
        direction = 1;
        break;
    case OpKind::RecvGradient:
        receiver = vs == layout.virtualStages() - 1 ? -1 : vs;
        direction = 1;
        break;
    default:
        return kNoMessage;
    }
    if (receiver < 0 || receiver >= layout.virtualStages())
        return kNoMessage;
    return direction * layout.slotCount() + layout.slot(op.microbatch, receiver);
}

// The physical stage on the other side of a transfer: the one holding the next virtual stage
// (activations out, gradients in) or the previous one.
int expectedPeer(const Layout& layout, int stage, const Op& op)
{
    const bool towardsNext = op.kind == OpKind::SendActivation || op.kind == OpKind::RecvGradient;
    return layout.shape.stageOf(layout.virtualStage(stage, op.chunk) + (towardsNext ? 1 : -1));
}

std::string describeOp(const Op& op)
{
    return std::string(opKindName(op.kind)) + " mb " + std::to_string(op.microbatch) + " chunk " +
           std::to_string(op.chunk);
}

std::string describeAt(int stage, std::size_t index, const Op& op)
{
    return "stage " + std::to_string(stage) + " op " + std::to_string(index) + " (" + describeOp(op) + ")";
}

// Shape and index sanity shared by simulate and checkDependencies.
std::string checkOpList(const Schedule& schedule)
{
    const Layout layout(schedule.shape);
    if (layout.p < 1 || layout.m < 1 || layout.v < 1)
        return "schedule shape needs stages, micro-batches and virtual stages >= 1 (got " + std::to_string(layout.p) +
               ", " + std::to_string(layout.m) + ", " + std::to_string(layout.v) + ")";
    if (static_cast<int>(schedule.stages.size()) != layout.p)
        return "schedule has " + std::to_string(schedule.stages.size()) + " op lists for " + std::to_string(layout.p) +
               " stages";
    for (int s = 0; s < layout.p; ++s) {
        const auto& ops = schedule.stages[s];
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const Op& op = ops[i];
            if (op.microbatch < 0 || op.microbatch >= layout.m || op.chunk < 0 || op.chunk >= layout.v)
                return describeAt(s, i, op) + ": micro-batch or chunk out of range (m = " + std::to_string(layout.m) +
                       ", v = " + std::to_string(layout.v) + ")";
            if (!isCompute(op.kind) && messageKey(layout, s, op) == kNoMessage)
                return describeAt(s, i, op) + ": transfer past the end of the pipeline";
        }
    }
    return "";
}

// Every recv needs a send, and a message may be sent and received at most once, or its arrival
// time (and who waits for it) would be ambiguous. A complete schedule also receives every send.
std::string checkMessages(const Schedule& schedule, bool requireReceiver)
{
    const Layout layout(schedule.shape);
    std::vector<int> sends(layout.messages(), 0);
    std::vector<int> recvs(layout.messages(), 0);
    for (int s = 0; s < layout.p; ++s)
        for (const Op& op : schedule.stages[s]) {
            if (op.kind == OpKind::SendActivation || op.kind == OpKind::SendGradient)
                ++sends[messageKey(layout, s, op)];
            else if (op.kind == OpKind::RecvActivation || op.kind == OpKind::RecvGradient)
                ++recvs[messageKey(layout, s, op)];
        }
    for (int s = 0; s < layout.p; ++s) {
        const auto& ops = schedule.stages[s];
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const Op& op = ops[i];
            if (isCompute(op.kind))
                continue;
            const std::size_t key = messageKey(layout, s, op);
            const std::string peer = "stage " + std::to_string(op.peerStage);
            if (op.kind == OpKind::SendActivation || op.kind == OpKind::SendGradient) {
                if (sends[key] > 1)
                    return describeAt(s, i, op) + ": the same message is sent " + std::to_string(sends[key]) + " times";
                if (requireReceiver && recvs[key] != 1)
                    return describeAt(s, i, op) + ": " + std::to_string(recvs[key]) + " matching recvs on " + peer +
                           ", expected exactly one";
            } else if (recvs[key] > 1) {
                return describeAt(s, i, op) + ": the same message is received " + std::to_string(recvs[key]) + " times";
            } else if (sends[key] == 0) {
                return describeAt(s, i, op) + ": no matching send on " + peer;
            }
        }
    }
    return "";
}

double computeCost(const OpCosts& costs, const Op& op, int vs)
{
    switch (op.kind) {
    case OpKind::Forward:
        return costs.forward[vs];
    case OpKind::Backward:
        return costs.backward[vs];
    default:
        return costs.weightGrad[vs];
    }
}

}  // namespace

OpCosts OpCosts::uniform(const ScheduleShape& shape, double f, double b, double w, double transfer)
{
    const auto size = static_cast<std::size_t>(shape.stages) * shape.virtualStages;
    OpCosts costs;
    costs.forward.assign(size, f);
    costs.backward.assign(size, b);
    costs.weightGrad.assign(size, w);
    costs.activationTransfer = transfer;
    costs.gradientTransfer = transfer;
    return costs;
}

SimulationResult simulate(const Schedule& schedule, const OpCosts& costs)
{
    SimulationResult result;
    if (std::string error = checkOpList(schedule); !error.empty()) {
        result.error = error;
        return result;
    }
    const Layout layout(schedule.shape);
    const auto virtualStages = static_cast<std::size_t>(layout.virtualStages());
    if (costs.forward.size() < virtualStages || costs.backward.size() < virtualStages) {
        result.error = "costs cover " + std::to_string(std::min(costs.forward.size(), costs.backward.size())) +
                       " virtual stages, the schedule has " + std::to_string(virtualStages);
        return result;
    }

    bool hasWeightGrad = false;
    for (const auto& ops : schedule.stages)
        for (const Op& op : ops)
            hasWeightGrad = hasWeightGrad || op.kind == OpKind::WeightGrad;
    if (hasWeightGrad && costs.weightGrad.size() < virtualStages) {
        result.error = "the schedule has W ops but costs give weightGrad for only " +
                       std::to_string(costs.weightGrad.size()) + " of " + std::to_string(virtualStages) +
                       " virtual stages";
        return result;
    }
    if (std::string error = checkMessages(schedule, false); !error.empty()) {
        result.error = error;
        return result;
    }

    // Topological sweep: a stage runs until it blocks on a recv whose send has not run yet and
    // is woken by that send. Times are causal, so each op is visited once: O(total ops).
    const auto p = static_cast<std::size_t>(layout.p);
    std::vector<double> arrival(layout.messages(), 0.0);
    std::vector<char> sent(layout.messages(), 0);
    std::vector<int> waiter(layout.messages(), -1);
    std::vector<std::size_t> position(p, 0);
    std::vector<double> clock(p, 0.0);
    std::vector<int> live(p, 0);
    result.timeline.resize(p);
    result.busy.assign(p, 0.0);
    result.peakInFlight.assign(p, 0);
    std::vector<int> ready;
    for (int s = layout.p - 1; s >= 0; --s) {
        ready.push_back(s);
        result.timeline[s].reserve(schedule.stages[s].size());
    }
    const OpKind lastBackward = schedule.splitBackward() ? OpKind::WeightGrad : OpKind::Backward;

    while (!ready.empty()) {
        const int s = ready.back();
        ready.pop_back();
        const auto& ops = schedule.stages[s];
        double& now = clock[s];
        for (std::size_t& i = position[s]; i < ops.size(); ++i) {
            const Op& op = ops[i];
            TimedOp timed{op, now, now};
            if (isCompute(op.kind)) {
                const double cost = computeCost(costs, op, layout.virtualStage(s, op.chunk));
                timed.end = now + cost;
                result.busy[s] += cost;
                if (op.kind == OpKind::Forward)
                    result.peakInFlight[s] = std::max(result.peakInFlight[s], ++live[s]);
                else if (op.kind == lastBackward)
                    --live[s];
            } else {
                const std::size_t key = messageKey(layout, s, op);
                if (op.kind == OpKind::SendActivation || op.kind == OpKind::SendGradient) {
                    const bool activation = op.kind == OpKind::SendActivation;
                    arrival[key] = now + (activation ? costs.activationTransfer : costs.gradientTransfer);
                    sent[key] = 1;
                    if (waiter[key] >= 0) {
                        ready.push_back(waiter[key]);
                        waiter[key] = -1;
                    }
                } else if (!sent[key]) {
                    waiter[key] = s;
                    break;
                } else {
                    timed.end = std::max(now, arrival[key]);
                }
            }
            now = timed.end;
            result.timeline[s].push_back(timed);
        }
    }

    // On a deadlock the timeline keeps what ran, up to where each stage got stuck.
    constexpr int kListedStages = 8;  // enough to see the cycle; a long list hides it
    std::string stuck;
    int stuckStages = 0;
    for (int s = 0; s < layout.p; ++s) {
        const auto& ops = schedule.stages[s];
        if (position[s] == ops.size() || ++stuckStages > kListedStages)
            continue;
        const Op& op = ops[position[s]];
        if (!stuck.empty())
            stuck += "; ";
        stuck += "stage " + std::to_string(s) + " waits for " + describeOp(op) + " from stage " +
                 std::to_string(op.peerStage) + " (op " + std::to_string(position[s]) + " of " +
                 std::to_string(ops.size()) + ")";
    }
    if (stuckStages > 0) {
        if (stuckStages > kListedStages)
            stuck += "; " + std::to_string(stuckStages - kListedStages) + " more stages stuck";
        result.error = "deadlock: " + stuck;
        return result;
    }

    result.completed = true;
    result.makespan = *std::max_element(clock.begin(), clock.end());
    result.bubbleRatio.assign(p, 0.0);
    double idle = 0.0;
    for (std::size_t s = 0; s < p; ++s) {
        idle += result.makespan - result.busy[s];
        if (result.makespan > 0.0)
            result.bubbleRatio[s] = (result.makespan - result.busy[s]) / result.makespan;
    }
    // All costs zero: nothing ran, so nothing idled either.
    if (result.makespan > 0.0)
        result.overallBubbleRatio = idle / (static_cast<double>(p) * result.makespan);
    return result;
}

std::string checkDependencies(const Schedule& schedule, const SimulationResult& result)
{
    if (!result.completed)
        return "simulation did not complete: " + result.error;
    if (std::string error = checkOpList(schedule); !error.empty())
        return error;
    const Layout layout(schedule.shape);
    if (result.timeline.size() != schedule.stages.size())
        return "timeline has " + std::to_string(result.timeline.size()) + " stages, the schedule " +
               std::to_string(schedule.stages.size());
    for (int s = 0; s < layout.p; ++s) {
        const auto& ops = schedule.stages[s];
        const auto& timed = result.timeline[s];
        if (timed.size() != ops.size())
            return "timeline of stage " + std::to_string(s) + " has " + std::to_string(timed.size()) +
                   " ops, the schedule " + std::to_string(ops.size());
        for (std::size_t i = 0; i < ops.size(); ++i)
            if (timed[i].op.kind != ops[i].kind || timed[i].op.microbatch != ops[i].microbatch ||
                timed[i].op.chunk != ops[i].chunk)
                return describeAt(s, i, ops[i]) + ": the timeline has " + describeOp(timed[i].op) + " there";
    }

    // Where each (micro-batch, virtual stage) ran its F, B and W.
    const bool split = schedule.splitBackward();
    std::vector<const TimedOp*> forwards(layout.slotCount(), nullptr);
    std::vector<const TimedOp*> backwards(layout.slotCount(), nullptr);
    std::vector<const TimedOp*> weightGrads(layout.slotCount(), nullptr);
    for (int s = 0; s < layout.p; ++s) {
        const auto& ops = schedule.stages[s];
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const Op& op = ops[i];
            const std::size_t slot = layout.slot(op.microbatch, layout.virtualStage(s, op.chunk));
            const TimedOp* timed = &result.timeline[s][i];
            const TimedOp** seen = nullptr;
            switch (op.kind) {
            case OpKind::Forward:
                seen = &forwards[slot];
                break;
            case OpKind::Backward:
                seen = &backwards[slot];
                break;
            case OpKind::WeightGrad:
                if (!split)
                    return describeAt(s, i, op) + ": W in a schedule that does not split the backward (" +
                           std::string(scheduleName(schedule.shape.kind)) + ")";
                seen = &weightGrads[slot];
                break;
            default:
                break;
            }
            if (seen != nullptr) {
                if (*seen != nullptr)
                    return describeAt(s, i, op) + ": a second " + std::string(opKindName(op.kind)) +
                           " for this micro-batch and chunk";
                *seen = timed;
            } else if (op.peerStage != expectedPeer(layout, s, op)) {
                return describeAt(s, i, op) + ": peer stage " + std::to_string(op.peerStage) + ", expected " +
                       std::to_string(expectedPeer(layout, s, op));
            }
        }
    }
    for (int s = 0; s < layout.p; ++s)
        for (int chunk = 0; chunk < layout.v; ++chunk)
            for (int mb = 0; mb < layout.m; ++mb) {
                const std::size_t slot = layout.slot(mb, layout.virtualStage(s, chunk));
                const char* missing = nullptr;
                if (forwards[slot] == nullptr)
                    missing = "F";
                else if (backwards[slot] == nullptr)
                    missing = "B";
                else if (split && weightGrads[slot] == nullptr)
                    missing = "W";
                if (missing != nullptr)
                    return "stage " + std::to_string(s) + " has no " + missing + " for mb " + std::to_string(mb) +
                           " chunk " + std::to_string(chunk);
            }
    if (std::string error = checkMessages(schedule, true); !error.empty())
        return error;

    for (int s = 0; s < layout.p; ++s) {
        const auto& ops = schedule.stages[s];
        for (std::size_t i = 0; i < ops.size(); ++i) {
            const Op& op = ops[i];
            const int vs = layout.virtualStage(s, op.chunk);
            const std::size_t slot = layout.slot(op.microbatch, vs);
            const double begin = result.timeline[s][i].begin;
            const TimedOp* before = nullptr;
            std::string what;
            if (op.kind == OpKind::Forward && vs > 0) {
                before = forwards[layout.slot(op.microbatch, vs - 1)];
                what = "F of the previous virtual stage";
            } else if (op.kind == OpKind::Backward) {
                if (forwards[slot]->end > begin) {
                    before = forwards[slot];
                    what = "its own F";
                } else if (vs < layout.virtualStages() - 1) {
                    before = backwards[layout.slot(op.microbatch, vs + 1)];
                    what = "B of the next virtual stage";
                }
            } else if (op.kind == OpKind::WeightGrad) {
                before = backwards[slot];
                what = "its own B";
            }
            if (before != nullptr && before->end > begin)
                return describeAt(s, i, op) + " begins at " + formatNumber("%g", begin) + " before " + what +
                       " ends at " + formatNumber("%g", before->end);
        }
    }
    return "";
}

}  // namespace meshbench::plan
