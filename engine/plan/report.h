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
std::string searchToText(const SearchResult& result, const JobSpec& spec);
std::string errorsToText(const std::vector<SpecError>& errors);

// A decimal byte unit (1 kB = 1000 B), as datasheets and the whole workbench use them.
struct ByteUnit {
    double bytes;      // bytes per unit
    const char* name;  // "TB", "GB", "MB", "kB", "B"
};
// The largest of TB, GB, MB, kB not above `bytes`; B below 1 kB (zero and negative included),
// so that a chart topping out at 8e6 bytes reads 0-8 MB rather than 0.008 GB.
ByteUnit byteUnitFor(double bytes);

// "1.2 GB", "350 MB": in byteUnitFor's unit.
std::string formatBytes(double bytes);

// A time unit, as the planner's tables and the timeline print durations.
struct TimeUnit {
    double seconds;    // seconds per unit
    const char* name;  // "s", "ms", "us", "ns"
};
// The largest of s, ms, us whose size |seconds| reaches; ns below 1 us (zero included).
TimeUnit timeUnitFor(double seconds);
// "12.34 ms", "1.500 s", "4.2 us", "350 ns": in timeUnitFor's unit.
std::string formatSeconds(double seconds);
// One number through a printf pattern, e.g. formatNumber("%.1f%%", 42.0).
std::string formatNumber(const char* pattern, double value);

}  // namespace meshbench::plan
