#include "capability.h"

#include <string>

namespace meshbench::plan {

long long pipelineMessageTags(const ScheduleShape& shape)
{
    return 2LL * shape.microbatches * shape.stages * shape.virtualStages;
}

bool agentCanRun(const JobSpec& spec, std::vector<SpecError>* refusals)
{
    if (spec.launch.enabled())
        return true;
    const ModelSpec& m = spec.model;
    const ParallelSpec& p = spec.parallel;
    const auto str = [](long long v) { return std::to_string(v); };
    bool runs = true;
    // Each clause: when the agent refuses, note it (with a message only when asked) and go on, so
    // that every reason is reported at once.
    const auto refuse = [&](const char* key, auto message) {
        runs = false;
        if (refusals)
            refusals->push_back({key, message()});
    };

    // Rotary position embeddings rotate pairs of a head's dimensions (kernels' rope).
    if (m.heads > 0 && m.hidden % m.heads == 0 && (m.hidden / m.heads) % 2 != 0)
        refuse("model.hidden", [&] {
            return "hidden=" + str(m.hidden) + " over heads=" + str(m.heads) + " gives a head dimension of " +
                   str(m.hidden / m.heads) +
                   "; the agent's rotary embeddings need an even head dimension: use a hidden " +
                   "that is a multiple of " + str(2LL * m.heads);
        });

    // The pipeline executor names every activation and gradient message by its own MPI tag.
    const long long tags = pipelineMessageTags(p.scheduleShape());
    if (p.pp > 1 && tags > kMaxPipelineMessageTags)
        refuse("parallel.microbatches", [&] {
            return "pp=" + str(p.pp) + " x microbatches=" + str(p.microbatches) +
                   " x virtual_stages=" + str(p.virtualStages) + " needs " + str(tags) +
                   " pipeline message tags, more than the " + str(kMaxPipelineMessageTags) +
                   " MPI promises; use fewer microbatches with a larger micro_batch_size";
        });

    // Megatron's overlaps the planner can price but the agent does not perform.
    if (p.overlapParamGather)
        refuse("parallel.overlap_param_gather", [] {
            return std::string(
                "the agent all-gathers ZeRO's updated weights after the optimizer, not under the next "
                "forward; set overlap_param_gather to false to run the job (keep it to plan Megatron-LM)");
        });
    if (p.tpCommOverlap)
        refuse("parallel.tp_comm_overlap", [] {
            return std::string(
                "the agent waits for each tensor-parallel collective before its GEMM; set "
                "tp_comm_overlap to false to run the job (keep it to plan Megatron-LM's --tp-comm-overlap)");
        });

    return runs;
}

std::vector<SpecError> agentRefusals(const JobSpec& spec)
{
    std::vector<SpecError> refusals;
    agentCanRun(spec, &refusals);
    return refusals;
}

}  // namespace meshbench::plan
