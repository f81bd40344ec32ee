#include "measured_bubble.h"

#include <algorithm>
#include <limits>

namespace meshbench::plan {

std::int64_t unionLength(std::vector<TimeInterval>& intervals, bool sorted)
{
    if (!sorted)
        std::sort(intervals.begin(), intervals.end(),
                  [](const TimeInterval& a, const TimeInterval& b) { return a.beginNs < b.beginNs; });
    std::int64_t total = 0;
    std::int64_t coveredUntil = std::numeric_limits<std::int64_t>::min();
    for (const TimeInterval& i : intervals) {
        const std::int64_t from = std::max(i.beginNs, coveredUntil);
        if (i.endNs > from)
            total += i.endNs - from;
        coveredUntil = std::max(coveredUntil, i.endNs);
    }
    return total;
}

RankPipelinePhase rankPipelinePhase(int stage, std::span<const wire::SpanRecord> spans)
{
    RankPipelinePhase phase;
    phase.stage = stage;
    phase.beginNs = std::numeric_limits<std::int64_t>::max();
    phase.endNs = std::numeric_limits<std::int64_t>::min();
    std::vector<TimeInterval> busy;
    for (const wire::SpanRecord& span : spans) {
        if (!wire::isPipelineKind(span.kind))
            continue;
        phase.beginNs = std::min(phase.beginNs, span.beginNs);
        phase.endNs = std::max(phase.endNs, span.endNs);
        if (wire::isComputeKind(span.kind))
            busy.push_back({span.beginNs, span.endNs});
    }
    phase.busyNs = unionLength(busy, false);
    return phase;
}

MeasuredBubble measuredBubble(std::span<const RankPipelinePhase> ranks, int stages)
{
    MeasuredBubble out;
    const std::size_t stageCount = std::size_t(std::max(stages, 0));
    out.stageRanks.assign(stageCount, 0);
    out.stages.assign(stageCount, std::nullopt);
    std::int64_t begin = std::numeric_limits<std::int64_t>::max();
    std::int64_t end = std::numeric_limits<std::int64_t>::min();
    for (const RankPipelinePhase& r : ranks)
        if (r.reported() && r.stage >= 0 && std::size_t(r.stage) < stageCount) {
            begin = std::min(begin, r.beginNs);
            end = std::max(end, r.endNs);
            ++out.ranksReporting;
        }
    if (out.ranksReporting == 0)
        return out;
    out.beginNs = begin;
    out.endNs = end;
    const std::int64_t window = end - begin;
    std::vector<std::int64_t> stageIdle(stageCount, 0);
    std::int64_t idle = 0;
    for (const RankPipelinePhase& r : ranks)
        if (r.reported() && r.stage >= 0 && std::size_t(r.stage) < stageCount) {
            const std::int64_t rankIdle = window - r.busyNs;
            stageIdle[std::size_t(r.stage)] += rankIdle;
            ++out.stageRanks[std::size_t(r.stage)];
            idle += rankIdle;
        }
    // A window of zero length (every span empty and at one instant) has no ratio.
    if (window <= 0)
        return out;
    for (std::size_t s = 0; s < stageCount; ++s)
        if (out.stageRanks[s] > 0)
            out.stages[s] = double(stageIdle[s]) / (double(out.stageRanks[s]) * double(window));
    out.overall = double(idle) / (double(out.ranksReporting) * double(window));
    return out;
}

}  // namespace meshbench::plan
