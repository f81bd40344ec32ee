#include "units.h"

#include <cmath>
#include <cstdio>

namespace meshbench::plan {

ByteUnit byteUnitFor(double bytes)
{
    for (const ByteUnit unit : {ByteUnit{1e12, "TB"}, ByteUnit{1e9, "GB"}, ByteUnit{1e6, "MB"}, ByteUnit{1e3, "kB"}})
        if (bytes >= unit.bytes)
            return unit;
    return {1, "B"};
}

std::string formatBytes(double bytes)
{
    const ByteUnit unit = byteUnitFor(bytes);
    // The precision the planner's tables print: "31.41 GB", "350.0 MB", "512 B".
    const int decimals = unit.bytes >= 1e9 ? 2 : unit.bytes >= 1e3 ? 1 : 0;
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f %s", decimals, bytes / unit.bytes, unit.name);
    return buffer;
}

std::string formatNumber(const char* pattern, double value)
{
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, pattern, value);
    return buffer;
}

TimeUnit timeUnitFor(double seconds)
{
    for (const TimeUnit unit : {TimeUnit{1, "s"}, TimeUnit{1e-3, "ms"}, TimeUnit{1e-6, "us"}})
        if (std::fabs(seconds) >= unit.seconds)
            return unit;
    return {1e-9, "ns"};
}

std::string formatSeconds(double seconds)
{
    const TimeUnit unit = timeUnitFor(seconds);
    // The precision the planner's tables print: "1.500 s", "12.34 ms", "4.2 us", "350 ns".
    const int decimals = unit.seconds >= 1 ? 3 : unit.seconds >= 1e-3 ? 2 : unit.seconds >= 1e-6 ? 1 : 0;
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f %s", decimals, seconds / unit.seconds, unit.name);
    return buffer;
}

std::string withThousands(std::int64_t value)
{
    const std::string digits = std::to_string(value);
    const std::size_t sign = value < 0 ? 1 : 0;
    std::string out = digits.substr(0, sign);
    for (std::size_t i = sign; i < digits.size(); ++i) {
        if (i > sign && (digits.size() - i) % 3 == 0)
            out += ',';
        out += digits[i];
    }
    return out;
}

std::string formatPercent(double share) { return formatNumber("%.1f%%", 100 * share); }

}  // namespace meshbench::plan
