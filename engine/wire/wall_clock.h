#pragma once
// The one clock of every record: nanoseconds of this process's monotonic clock moved onto the
// wall clock once per process (the offset measured at the first call), so ranks of one node agree
// to within the offset's measurement error (well under a microsecond); ranks of different nodes
// agree as well as their clocks do until the engine moves their records onto its own clock
// (ClockOffsetRecord, clock.h). The monotonic clock is std::chrono::steady_clock (CLOCK_MONOTONIC
// on Linux). MESHBENCH_CLOCK_SKEW_NS, when set, adds that many nanoseconds to this process's wall
// clock: the tests' stand-in for a host whose clock is wrong.

#include <cstdint>

namespace meshbench::wire {

std::int64_t wallAlignedNowNs();
std::int64_t toWallAligned(std::int64_t monotonicNs);

}  // namespace meshbench::wire
