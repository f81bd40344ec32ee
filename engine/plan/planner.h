#pragma once
// A plan: everything the planner knows about one job spec, computed in one place for the CLI,
// the GUI designer and (later) the engine that stores it with a session.

#include "cost_model.h"
#include "job_spec.h"
#include "mesh.h"
#include "schedule.h"
#include "simulator.h"

#include <optional>
#include <string>
#include <vector>

namespace meshbench::plan {

// Relative F, B, W costs of one micro-batch on one stage (all of its chunks), for looking at a
// schedule's shape alone: no communication.
struct UnitCosts {
    double forward = 1;
    double backward = 1;
    double weightGrad = 1;
};

struct StageMemory {
    int stage = 0;
    double parameters = 0;  // on one GPU of the stage
    MemoryBreakdown memory;
    bool fits = true;
};

// The step of the critical (busiest) stage, split by cause. total = compute + tensorComm +
// expertComm + pipelineBubble + dataParallelComm + optimizer; the hidden figures are
// communication that overlaps compute and so adds nothing.
struct StepBreakdown {
    double compute = 0;           // the critical stage's F, B and W kernels over all micro-batches
    double tensorComm = 0;        // exposed TP collectives inside its ops
    double expertComm = 0;        // EP all-to-alls inside its ops
    double pipelineBubble = 0;    // its idle time inside the pipeline, transfers included
    double dataParallelComm = 0;  // exposed gradient reduction and weight gathering
    double optimizer = 0;
    double total = 0;
    double tensorCommHidden = 0;
    double dataParallelHidden = 0;
};

struct Plan {
    JobSpec spec;
    int worldSize = 0;
    ParameterCounts parameters;
    double parametersPerGpuMax = 0;
    std::vector<StageMemory> stages;  // one entry per pipeline stage: its ranks share a memory profile
    int mostLoadedStage = 0;
    double deviceMemory = 0;
    bool fits = true;
    double flopsPerStep = 0;
    StepBreakdown step;
    double tokensPerSecond = 0;
    double mfu = 0;
    Schedule schedule;
    SimulationResult simulation;
    std::vector<std::string> warnings;
    std::optional<UnitCosts> unitCosts;

    const MemoryBreakdown& mostLoaded() const { return stages[std::size_t(mostLoadedStage)].memory; }
};

// The spec must have passed validateLayout. With unit costs the schedule is simulated with those
// relative costs and no communication; memory, FLOPs and parameters are unaffected.
Plan makePlan(const JobSpec& spec, const std::optional<UnitCosts>& unitCosts = std::nullopt);

}  // namespace meshbench::plan
