#pragma once
// Discrete-event simulation of a pipeline schedule: every stage runs its op list in order,
// compute ops take their cost, receives wait for the matching send plus the link time.

#include "schedule.h"

#include <string>
#include <vector>

namespace meshbench::plan {

// Cost of one op for one micro-batch, per virtual stage (in model order; ScheduleShape places
// them on stages), in seconds (or any unit, as long as all costs share it).
struct OpCosts {
    std::vector<double> forward;      // size p * v
    std::vector<double> backward;     // B: full backward, or input-gradient only when split
    std::vector<double> weightGrad;   // W: used only by schedules that split the backward
    double activationTransfer = 0.0;  // time for an activation to cross a stage boundary
    double gradientTransfer = 0.0;    // time for a gradient to cross a stage boundary

    // Every virtual stage costs the same.
    static OpCosts uniform(const ScheduleShape& shape, double f, double b, double w, double transfer = 0.0);
};

struct TimedOp {
    Op op;
    double begin = 0.0;
    double end = 0.0;
};

struct SimulationResult {
    bool completed = false;  // false: deadlock or malformed op list (see error)
    std::string error;
    double makespan = 0.0;                       // from 0 to the end of the last op on any stage
    std::vector<std::vector<TimedOp>> timeline;  // per stage, in executed order
    std::vector<double> busy;                    // compute time per stage
    std::vector<double> bubbleRatio;             // per stage: (makespan - busy) / makespan
    double overallBubbleRatio = 0.0;             // sum of idle / (p * makespan)
    std::vector<int> peakInFlight;               // per stage: most micro-batch chunks with live activations
};

SimulationResult simulate(const Schedule& schedule, const OpCosts& costs);

// Structural and timing checks of a simulated schedule: every (micro-batch, virtual stage)
// has exactly one F and one B (and one W when split); F after the previous virtual stage's F,
// B after the next virtual stage's B and after its own F, W after its B. Empty when all hold.
std::string checkDependencies(const Schedule& schedule, const SimulationResult& result);

}  // namespace meshbench::plan
