#pragma once
// The live feed's JSON read back into the engine's aggregates: the inverse of live::toJson.
// A payload that is not one (a missing key, a wrong type, a value out of range) is refused with a
// message naming the key, and the output is left as it was; nothing here throws.

#include "live/aggregator.h"

#include <nlohmann/json.hpp>

#include <string>

namespace meshbench::app {

// A "step" message. routedTotal and droppedTotal, which the feed leaves out, are the sums of the
// per-expert arrays, as the aggregator computes them.
bool fromJson(const nlohmann::json& json, live::StepAggregate& step, std::string& error);
// A "memory" message. A category the payload does not name reads as 0 bytes; current_total is
// derived, so it is not read.
bool fromJson(const nlohmann::json& json, live::RankMemory& memory, std::string& error);

}  // namespace meshbench::app
