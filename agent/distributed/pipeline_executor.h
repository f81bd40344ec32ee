#pragma once
// Executes one pipeline stage's op list for one training step: exactly the list engine/plan
// builds and simulates (one source of truth), with activations and gradients crossing stage
// boundaries over the pipeline group.

#include "agent/model/gpt_model.h"
#include "agent/runtime/communicator.h"
#include "agent/telemetry/measurements.h"

#include "plan/schedule.h"

#include <functional>
#include <vector>

namespace meshbench::agent {

class PipelineExecutor {
public:
    // pipelineRanks: the world rank of each member of the pipeline group, to name span peers.
    PipelineExecutor(GptModel& model, kernels::Backend& backend, Communicator& pipeline, plan::Schedule schedule,
                     int stage, std::vector<int> pipelineRanks);

    // Runs every op of this stage. tokensOf(mb) gives micro-batch mb's tokens (batch rows of
    // seq_len + 1). Forward results (losses, expert loads) are added into `result`.
    // Every op becomes a span of step `step` in `measurements`. `finished` hears of each chunk's
    // tensors as the last micro-batch's backward (or W) finishes their gradients.
    void runStep(const std::function<const std::int32_t*(int microbatch)>& tokensOf, int batch, float lossScale,
                 float auxScale, ForwardResult& result, int step, Measurements& measurements,
                 GradientListener* finished);

    const plan::Schedule& schedule() const { return m_schedule; }

private:
    // MPI tag of a message: the receiving (micro-batch, virtual stage) and the direction.
    int tagOf(int microbatch, int virtualStage, bool gradient) const;

    GptModel& m_model;
    kernels::Backend& m_backend;
    Communicator& m_pipeline;
    plan::Schedule m_schedule;
    int m_stage;
    std::vector<int> m_pipelineRanks;
};

}  // namespace meshbench::agent
