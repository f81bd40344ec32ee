#include "wall_clock.h"

#include <chrono>
#include <climits>
#include <cstdlib>

namespace meshbench::wire {

namespace {

std::int64_t nanosecondsOf(std::chrono::nanoseconds t) { return static_cast<std::int64_t>(t.count()); }

std::int64_t monotonicNowNs() { return nanosecondsOf(std::chrono::steady_clock::now().time_since_epoch()); }

// Brackets a wall-clock read between two monotonic reads and keeps the tightest of a few tries,
// so the offset is off by at most half that bracket (tens of nanoseconds unless preempted).
std::int64_t measureWallOffsetNs()
{
    std::int64_t best = 0;
    std::int64_t bestBracket = INT64_MAX;
    for (int attempt = 0; attempt < 5; ++attempt) {
        const std::int64_t before = monotonicNowNs();
        const std::int64_t wall = nanosecondsOf(std::chrono::system_clock::now().time_since_epoch());
        const std::int64_t after = monotonicNowNs();
        if (after - before < bestBracket) {
            bestBracket = after - before;
            best = wall - (before + (after - before) / 2);
        }
    }
    return best;
}

std::int64_t clockSkewNs()
{
    const char* skew = std::getenv("MESHBENCH_CLOCK_SKEW_NS");
    return skew ? std::strtoll(skew, nullptr, 10) : 0;
}

std::int64_t wallOffsetNs()
{
    static const std::int64_t offset = measureWallOffsetNs() + clockSkewNs();
    return offset;
}

}  // namespace

std::int64_t toWallAligned(std::int64_t monotonicNs) { return monotonicNs + wallOffsetNs(); }

std::int64_t wallAlignedNowNs() { return toWallAligned(monotonicNowNs()); }

}  // namespace meshbench::wire
