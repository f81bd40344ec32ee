#pragma once
// Megatron-LM's per-expert token counts (save_tokens_per_expert_interval): tokens_per_expert/
// rank{r}.jsonl, one line per MoE layer and saved iteration, {"iter": 100, "block": "decoder",
// "layer": 3, "tpe": [[...], ...]}: for each micro-batch, the tokens routed to each of the rank's
// local experts. "layer" is the layer's index on its pipeline stage.

#include "rank_analysis.h"
#include "read_options.h"

#include "wire/telemetry.h"

#include <string>
#include <vector>

namespace meshbench::import {

struct ExpertCounts {
    std::vector<wire::ExpertLoadRecord> loads;  // routed over every expert of the model; others 0
    std::uint64_t lines = 0;
    std::string digest;  // as store::ImportSource::digest
};

// Local experts are placed by the job's expert-parallel coordinate and layers by its stage when the
// job is known; otherwise as the file numbers them. Throws ImportError naming the file and line.
ExpertCounts readExpertCounts(const std::string& path, int rank, const JobContext& job, const ReadOptions& options);

// Whether a file looks like Megatron's counts: its first line is an object with "tpe".
bool looksLikeExpertCounts(const std::string& path);

}  // namespace meshbench::import
