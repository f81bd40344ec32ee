#pragma once
// Layout search: every valid (tp, pp, dp, ep, sequence parallel, virtual stages, micro-batch
// size, ZeRO stage, recompute, schedule) for a model, cluster and global batch that this build's
// meshbench-agent runs (agentCanRun), ranked by predicted step time. Each layout is priced with
// every set of the overlaps that apply to it (overlap_grad_reduce; with plannedOnly also
// overlap_param_gather and tp_comm_overlap) and takes the fastest.

#include "job_spec.h"

#include <cstdint>
#include <vector>

namespace meshbench::plan {

struct SearchOptions {
    int top = 10;
    std::int64_t globalBatch = 0;  // sequences per step; 0 takes dp x micro_batch_size x microbatches of the spec
    // Also rank what only the planner prices: Megatron-LM's overlaps the agent does not perform
    // and layouts the agent refuses. Implied when the spec turns either of those overlaps on.
    bool plannedOnly = false;
};

struct SearchCandidate {
    ParallelSpec parallel;
    double stepTime = 0;  // seconds, from the full simulation of the plan
    double tokensPerSecond = 0;
    double mfu = 0;
    double memoryBytes = 0;  // the most loaded GPU
    double bubbleRatio = 0;
};

struct SearchResult {
    std::vector<SearchCandidate> best;  // fastest first
    std::int64_t globalBatch = 0;
    bool plannedOnly = false;       // the options' plannedOnly, or implied by the spec
    std::uint64_t refused = 0;      // valid layouts the agent refuses (agentCanRun), skipped unpriced
    std::uint64_t evaluated = 0;    // candidates priced by the closed-form model
    std::uint64_t fitting = 0;      // of those, the ones that fit in device memory
    double evaluationSeconds = 0;   // time spent pricing candidates
    double totalSeconds = 0;        // including the simulation of the best ones
    std::vector<SpecError> errors;  // why the search could not run (the agent runs no layout of it, …)
};

// Only the model, precision and cluster of `spec` matter, plus its global batch when the options
// don't give one. Candidates are priced with the closed-form pipeline estimate; the best are
// then planned in full (simulated schedule, every stage's memory) and re-ranked.
SearchResult searchLayouts(const JobSpec& spec, const SearchOptions& options);

}  // namespace meshbench::plan
