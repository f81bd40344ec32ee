#pragma once
// Plans and search results as text (for people) and JSON (for tools and the GUI).

#include "planner.h"
#include "search.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace meshbench::plan {

nlohmann::json errorsToJson(const std::vector<SpecError>& errors);
nlohmann::json planToJson(const Plan& plan);
nlohmann::json searchToJson(const SearchResult& result);

std::string planToText(const Plan& plan);
std::string searchToText(const SearchResult& result, const JobSpec& spec);
std::string errorsToText(const std::vector<SpecError>& errors);

// "1.2 GB", "350 MB"; decimal units as datasheets use them.
std::string formatBytes(double bytes);
// "12.3 ms", "1.50 s".
std::string formatSeconds(double seconds);

}  // namespace meshbench::plan
