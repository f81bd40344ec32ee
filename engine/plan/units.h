#pragma once
// Numbers for people: bytes in decimal units, durations, shares as percentages, integers with
// thousands separators. The planner's tables, the findings, the CLI, the exports and the workbench
// all print through these, so a figure reads the same everywhere.

#include <cstdint>
#include <string>

namespace meshbench::plan {

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

// 1234567 as "1,234,567".
std::string withThousands(std::int64_t value);
// A share (0.42) as a percentage with one decimal: "42.0%".
std::string formatPercent(double share);

}  // namespace meshbench::plan
