// The job spec's own arithmetic and the specs derived from one: the MoE layers of a range, and
// the job as one device runs it.

#include "job_spec.h"

namespace meshbench::plan {

int ModelSpec::moeLayersIn(int first, int count) const
{
    if (!moe.enabled() || count <= 0)
        return 0;
    // Multiples of everyNLayers in [first, first + count).
    const int every = moe.everyNLayers;
    const auto upTo = [every](int end) { return end <= 0 ? 0 : (end - 1) / every + 1; };
    return upTo(first + count) - upTo(first);
}

JobSpec singleDeviceSpec(JobSpec spec)
{
    ParallelSpec& p = spec.parallel;
    p.microbatches = int(p.globalBatch() / p.microBatchSize);
    p.dp = p.pp = p.tp = p.ep = 1;
    p.virtualStages = 1;
    // One stage has no pipeline to interleave or fold into a V: those schedules run as the
    // one-stage schedule with the same backward (zb-h1 splits W off as zb-v and dualpipev do).
    if (p.schedule == ScheduleKind::Interleaved)
        p.schedule = ScheduleKind::OneFOneB;
    else if (p.scheduleShape().vShaped())
        p.schedule = ScheduleKind::ZeroBubbleH1;
    p.zero = 0;
    p.sequenceParallel = false;
    spec.cluster.nodes = 1;
    spec.cluster.devicesPerNode = 1;
    spec.cluster.nvlinkDomain = 1;
    return spec;
}

JobSpec specAsRun(JobSpec spec, std::size_t ranks)
{
    if (ranks == 1 && spec.parallel.worldSize() > 1)
        return singleDeviceSpec(std::move(spec));
    return spec;
}

}  // namespace meshbench::plan
