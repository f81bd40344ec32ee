#pragma once
// What this build's meshbench-agent runs: the one capability rule that validation, the search,
// the Designer and the agent itself ask, so that nothing is searched, accepted or drawn as valid
// that the agent would refuse after launch.
//
// validateLayout says whether a layout is well formed (it divides, it fits the cluster) and the
// planner can price every such layout. This rule says what the training stack of this build
// cannot run yet, beyond that: it is asked about a spec that has passed validateLayout, as the
// agents will run it (specAsRun: the spec itself across its ranks, singleDeviceSpec for a
// one-device run).
//
// A spec with a launch command runs that program in the agent's place: nothing here holds it back.

#include "job_spec.h"

#include <vector>

namespace meshbench::plan {

// The most point-to-point message tags the agent's pipeline uses: MPI promises tags up to 32767
// (MPI_TAG_UB may be larger, but not everywhere). A pipeline of p stages, v chunks and m
// micro-batches names 2 x m x p x v of them (an activation and a gradient per slot).
constexpr long long kMaxPipelineMessageTags = 32767;
long long pipelineMessageTags(const ScheduleShape& shape);

// Whether meshbench-agent of this build runs `spec`. When it does not and `refusals` is given,
// every reason is appended there, each on the key to change (as SpecError: "parallel.microbatches", …)
// with the values and a fix. Without `refusals` it answers without building any message, so the
// search can ask it for every candidate.
bool agentCanRun(const JobSpec& spec, std::vector<SpecError>* refusals = nullptr);

// The same rule's reasons, as a list; empty when the agent runs the spec.
std::vector<SpecError> agentRefusals(const JobSpec& spec);

}  // namespace meshbench::plan
