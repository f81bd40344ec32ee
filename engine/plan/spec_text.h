#pragma once
// The wording the job spec's messages share: lists joined with "or", a "did you mean" for a
// near miss, and a short description of a JSON value.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace meshbench::plan {

// "a, b or c".
std::string joinOr(const std::vector<std::string>& items);
// "did you mean 'x'? " when a candidate is close enough to be a typo; empty otherwise.
std::string suggestion(std::string_view given, const std::vector<std::string>& candidates);
// "string \"24\"", "object of 3 entries": what was found where something else was expected.
std::string describe(const nlohmann::json& value);

}  // namespace meshbench::plan
