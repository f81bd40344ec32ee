#pragma once
// Plans and search results as text (for people) and JSON (for tools and the GUI).

#include "planner.h"
#include "search.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace meshbench::plan {

nlohmann::json errorsToJson(const std::vector<SpecError>& errors);
// The plan as JSON. The schedule's op list is given up to kMaxReportedOps ops; a longer one would make
// a reply of hundreds of megabytes (at 1M pipeline slots), so it is left out with a warning that says
// which field to lower, while each stage's bubble and busy time stay.
constexpr std::size_t kMaxReportedOps = 100'000;
nlohmann::json planToJson(const Plan& plan);
nlohmann::json searchToJson(const SearchResult& result);

std::string planToText(const Plan& plan);
// The overlaps a layout runs, as the search table keys them: g the data-parallel reduction, p
// ZeRO's weight gather, t the TP collectives ("g,p,t"); "-" for none.
std::string overlapLetters(const ParallelSpec& p);
// A layout in a few words, as sessions are listed by it: "dp2 pp2 tp2 ep1 1f1b zero1".
std::string layoutWords(const ParallelSpec& p);
std::string searchToText(const SearchResult& result, const JobSpec& spec);
std::string errorsToText(const std::vector<SpecError>& errors);

}  // namespace meshbench::plan
