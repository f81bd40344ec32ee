#include "planner.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace meshbench::plan {

Plan makePlan(const JobSpec& spec, const std::optional<UnitCosts>& unitCosts)
{
    Plan plan;
    plan.spec = spec;
    plan.unitCosts = unitCosts;
    const ParallelSpec& p = spec.parallel;
    const Mesh mesh(p);
    plan.worldSize = mesh.worldSize();
    plan.warnings = placementWarnings(mesh, spec.cluster);

    const LinkClasses links = linkClasses(mesh, spec.cluster);
    const CostModel model(plan.spec, links);
    plan.parameters = model.parameters();
    plan.deviceMemory = spec.cluster.device.memoryBytes;
    double heaviest = -1;
    for (int s = 0; s < p.pp; ++s) {
        StageMemory stage;
        stage.stage = s;
        stage.parameters = model.denseParametersOnStage(s) + model.expertParametersOnStage(s);
        stage.memory = model.stageMemory(s);
        stage.fits = stage.memory.total() <= plan.deviceMemory;
        plan.fits = plan.fits && stage.fits;
        plan.parametersPerGpuMax = std::max(plan.parametersPerGpuMax, stage.parameters);
        if (stage.memory.total() > heaviest) {
            heaviest = stage.memory.total();
            plan.mostLoadedStage = s;
        }
        plan.stages.push_back(stage);
    }
    if (!plan.fits)
        plan.warnings.push_back(
            "stage " + std::to_string(plan.mostLoadedStage) + " needs " + std::to_string(std::lround(heaviest / 1e9)) +
            " GB but a " + spec.cluster.device.kind + " has " + std::to_string(std::lround(plan.deviceMemory / 1e9)) +
            " GB; raise tp or pp, use a higher ZeRO stage, recompute, or a smaller micro_batch_size");

    plan.schedule = buildSchedule(p.scheduleShape());
    // Unit costs are per stage and micro-batch: an interleaved chunk does 1/v of it, and schedules
    // that don't split the backward run B and W as one op.
    const bool split = plan.schedule.splitBackward();
    const double chunk = 1.0 / p.virtualStages;
    const OpCosts costs =
        unitCosts
            ? OpCosts::uniform(p.scheduleShape(), unitCosts->forward * chunk,
                               (split ? unitCosts->backward : unitCosts->backward + unitCosts->weightGrad) * chunk,
                               split ? unitCosts->weightGrad * chunk : 0.0)
            : model.opCosts();
    plan.simulation = simulate(plan.schedule, costs);
    // Ranks that share cores get more of them while others wait in the bubble: price again with
    // the simulated busy share (the bubble ratio itself does not depend on the common speed).
    std::optional<CostModel> busyModel;
    if (!unitCosts && model.performance().device.rateShare < 1.0 && plan.simulation.completed) {
        busyModel.emplace(plan.spec, links, 1.0 - plan.simulation.overallBubbleRatio);
        plan.simulation = simulate(plan.schedule, busyModel->opCosts());
    }
    const CostModel& timing = busyModel ? *busyModel : model;

    plan.flopsPerStep = model.flopsPerStep();
    StepBreakdown& step = plan.step;
    if (!unitCosts) {
        // The critical stage is the busiest one; the rest of the makespan is its bubble.
        int critical = 0;
        for (int s = 1; s < p.pp; ++s)
            if (plan.simulation.busy[std::size_t(s)] > plan.simulation.busy[std::size_t(critical)])
                critical = s;
        const StageWork work = timing.stageWork(critical);
        const double m = p.microbatches;
        step.compute = m * work.compute;
        step.tensorComm = m * work.tensorComm;
        step.expertComm = m * work.expertComm;
        step.pipelineBubble = plan.simulation.makespan - plan.simulation.busy[std::size_t(critical)];
        step.tensorCommHidden = m * work.tensorCommHidden;
        // Each stage reduces its gradients under its last backward (and while it waits for the
        // stages still draining), then steps its optimizer and gathers the weights, under its
        // first forward when overlapped; the step ends when the last stage is done.
        double end = 0, optimizer = 0, exposedComm = 0, hiddenComm = 0;
        for (int s = 0; s < p.pp; ++s) {
            const std::vector<TimedOp>& ops = plan.simulation.timeline[std::size_t(s)];
            const double finish = ops.empty() ? 0.0 : ops.back().end;
            double lastBackward = 0, firstForward = 0;
            for (const TimedOp& op : ops) {
                if (op.op.kind == OpKind::Forward && firstForward == 0)
                    firstForward = op.end - op.begin;
                if (op.op.microbatch == p.microbatches - 1 &&
                    (op.op.kind == OpKind::Backward || op.op.kind == OpKind::WeightGrad))
                    lastBackward += op.end - op.begin;
            }
            const DataParallelCosts dp = timing.dataParallelCosts(s);
            const double reduce = timing.exposedReduction(dp, lastBackward + plan.simulation.makespan - finish);
            const double gather = timing.exposedGather(dp, firstForward);
            const double stageEnd = finish + reduce + timing.optimizerTime(s) + gather;
            if (stageEnd > end) {
                end = stageEnd;
                optimizer = timing.optimizerTime(s);
                exposedComm = std::max(0.0, stageEnd - plan.simulation.makespan - optimizer);
                hiddenComm = dp.reduce + dp.gather + dp.layerGathers - reduce - gather;
            }
        }
        step.optimizer = optimizer;
        step.dataParallelComm = exposedComm;
        step.dataParallelHidden = std::max(0.0, hiddenComm);
        step.total = plan.simulation.makespan + step.dataParallelComm + step.optimizer;
        plan.tokensPerSecond = timing.tokensPerStep() / step.total;
        // MFU as Megatron-LM reports it: model FLOPs / (step time x GPUs x peak).
        plan.mfu = plan.flopsPerStep / (step.total * plan.worldSize * spec.cluster.device.peakFlops);
    }
    return plan;
}

}  // namespace meshbench::plan
