#include "timeline/timeline_loaders.h"

#include "plan/op_span_kind.h"

#include <cmath>
#include <unordered_map>

namespace meshbench::app {

namespace {

constexpr std::size_t kChunk = 4096;  // spans buffered per rank before an append

std::int64_t toNs(double units, double nsPerUnit) { return std::llround(units * nsPerUnit); }

// "stage 1", or with chunks the virtual stages it holds in model order: "stage 1 · chunks 1, 6"
// (the V schedules' V reads down the first numbers and up the second).
std::string stageLabel(const plan::ScheduleShape& shape, int stage)
{
    std::string label = "stage " + std::to_string(stage);
    if (shape.virtualStages < 2)
        return label;
    label += " \u00b7 chunks ";
    for (int c = 0; c < shape.virtualStages; ++c)
        label += (c ? ", " : "") + std::to_string(shape.virtualStageOf(stage, c));
    return label;
}

}  // namespace

std::vector<RowInfo> rowsForRanks(const std::vector<store::RankInfo>& ranks)
{
    std::vector<RowInfo> rows;
    rows.reserve(ranks.size());
    for (const store::RankInfo& r : ranks)
        rows.push_back({r.rank, r.pp, rankLabel(r.rank, r.dp, r.pp, r.tp)});
    return rows;
}

std::vector<RowInfo> rowsForMesh(const plan::Mesh& mesh)
{
    std::vector<RowInfo> rows;
    rows.reserve(std::size_t(mesh.worldSize()));
    for (int rank = 0; rank < mesh.worldSize(); ++rank) {
        const plan::MeshCoord c = mesh.coordOf(rank);
        rows.push_back({rank, c.pp, rankLabel(rank, c.dp, c.pp, c.tp)});
    }
    return rows;
}

TimelineStore loadSessionTimeline(const store::SessionReader& reader,
                                  std::optional<std::pair<std::int64_t, std::int64_t>> window)
{
    TimelineStore timeline;
    timeline.setRows(rowsForRanks(reader.header().ranks));
    const auto all = reader.timeRange();
    const auto [t0, t1] = window.value_or(all);
    const std::uint64_t count = reader.spanCount();
    if (count > 0 && all.second > all.first) {
        const double ranks = double(std::max<std::size_t>(1, reader.header().ranks.size()));
        timeline.setBaseShift(TimelineStore::shiftForSpacing(double(all.second - all.first) * ranks / double(count)));
    }
    std::unordered_map<std::uint32_t, std::vector<TimelineSpan>> pending;
    reader.spans(t0, t1, {}, [&](const store::StoredSpan& stored) {
        auto& buffer = pending[stored.rank];
        buffer.push_back(TimelineSpan::fromRecord(stored.span));
        if (buffer.size() >= kChunk) {
            timeline.append(int(stored.rank), buffer);
            buffer.clear();
        }
    });
    for (auto& [rank, buffer] : pending)
        timeline.append(int(rank), buffer);
    return timeline;
}

double planNsPerUnit(const plan::Plan& plan) { return plan.unitCosts ? 1e6 : 1e9; }

TimelineStore::OverlappedOps overlappedOpsOf(const plan::Schedule& schedule)
{
    TimelineStore::OverlappedOps ops;
    for (std::size_t s = 0; s < schedule.stages.size(); ++s)
        for (const plan::Op& op : schedule.stages[s])
            if (op.overlapped)
                ops.insert(TimelineStore::overlappedKey(int(s), plan::spanKindOf(op.kind), op.microbatch, op.chunk));
    return ops;
}

TimelineStore loadPlanTimeline(const plan::Plan& plan, PlanRows rows, double nsPerUnit)
{
    if (nsPerUnit <= 0)
        nsPerUnit = planNsPerUnit(plan);
    const auto& stages = plan.simulation.timeline;

    // One step of one stage, with `peerOf` turning a peer stage into the row's notion of peer.
    const auto stageSpans = [&](std::size_t s, const auto& peerOf) {
        std::vector<TimelineSpan> spans;
        spans.reserve(stages[s].size() + 2);
        for (const plan::TimedOp& op : stages[s]) {
            TimelineSpan span;
            span.beginNs = toNs(op.begin, nsPerUnit);
            span.endNs = toNs(op.end, nsPerUnit);
            span.kind = plan::spanKindOf(op.op.kind);
            span.microbatch = op.op.microbatch;
            span.chunk = std::int16_t(op.op.chunk);
            span.stage = std::int16_t(s);
            span.overlapped = op.op.overlapped;
            span.peer = op.op.peerStage < 0 ? -1 : peerOf(op.op.peerStage);
            spans.push_back(span);
        }
        // After the pipeline: the gradient reduction, then the optimizer (the planner's step total).
        double at = plan.simulation.makespan;
        for (const auto& [kind, length] : {std::pair(wire::SpanKind::DataParallelReduce, plan.step.dataParallelComm),
                                           std::pair(wire::SpanKind::Optimizer, plan.step.optimizer)}) {
            if (length <= 0)
                continue;
            TimelineSpan span;
            span.beginNs = toNs(at, nsPerUnit);
            span.endNs = toNs(at + length, nsPerUnit);
            span.kind = kind;
            span.stage = std::int16_t(s);
            spans.push_back(span);
            at += length;
        }
        return spans;
    };

    TimelineStore timeline;
    const double opsPerStage = stages.empty() ? 1.0 : double(std::max<std::size_t>(1, stages[0].size()));
    timeline.setBaseShift(TimelineStore::shiftForSpacing(plan.simulation.makespan * nsPerUnit / opsPerStage));
    if (rows == PlanRows::PerStage) {
        std::vector<RowInfo> infos;
        for (std::size_t s = 0; s < stages.size(); ++s)
            infos.push_back({int(s), int(s), stageLabel(plan.schedule.shape, int(s))});
        timeline.setRows(infos);
        for (std::size_t s = 0; s < stages.size(); ++s)
            timeline.append(int(s), stageSpans(s, [](int peerStage) { return peerStage; }));
    } else {
        const plan::Mesh mesh(plan.spec.parallel);
        timeline.setRows(rowsForMesh(mesh));
        for (int rank = 0; rank < mesh.worldSize(); ++rank) {
            const plan::MeshCoord c = mesh.coordOf(rank);
            if (std::size_t(c.pp) >= stages.size())
                continue;
            timeline.append(
                rank, stageSpans(std::size_t(c.pp), [&](int peerStage) { return mesh.rankOf(c.dp, peerStage, c.tp); }));
        }
    }
    return timeline;
}

}  // namespace meshbench::app
