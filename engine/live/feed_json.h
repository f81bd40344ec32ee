#pragma once
// The live feed's JSON, both ways: what the engine publishes for each step and each rank's memory
// (toJson), and the same read back by a client (fromJson). fromJson refuses a payload that is not
// one (a missing key, a wrong type, a value out of range) with a message naming the key and leaves
// its output as it was; nothing here throws.

#include "live/aggregator.h"

#include <nlohmann/json.hpp>

#include <string>

namespace meshbench::live {

// JSON for the live feed; keys are snake_case and stable, absent figures are null.
// Step: type "step", step, partial, loss, aux_loss, tokens_per_s, step_seconds, mfu,
// planned_step_seconds, planned_tokens_per_s, comm_seconds, bubble, planned_bubble, agent_bubble,
// pipeline_begin_ns, pipeline_end_ns, ranks_reporting, ranks_finished, stages [{stage, bubble, planned_bubble, ranks}],
// expert_layers [{layer, routed, dropped, imbalance, dropped_fraction, hottest_expert}], imbalance_p50, imbalance_p95,
// dropped_fraction.
nlohmann::json toJson(const StepAggregate& step);
// Memory: type "memory", rank, stage, step, time_ns, samples, current {category: bytes},
// peak {category: bytes}, current_total; categories by wire::memoryCategoryName.
nlohmann::json toJson(const RankMemory& memory);

// A "step" message. routedTotal and droppedTotal, which the feed leaves out, are the sums of the
// per-expert arrays, as the aggregator computes them.
bool fromJson(const nlohmann::json& json, StepAggregate& step, std::string& error);
// A "memory" message. A category the payload does not name reads as 0 bytes; current_total is
// derived, so it is not read.
bool fromJson(const nlohmann::json& json, RankMemory& memory, std::string& error);

}  // namespace meshbench::live
