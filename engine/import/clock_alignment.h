#pragma once
// Each rank's clock offset from the ends of its collectives. The members of one collective finish
// together (NCCL's ring or tree completes on every member within a hop's latency), so the same
// collective's end times on two ranks differ by the difference of their clocks. Offsets are
// solved against the lowest rank, whose offset is 0, by repeated medians over the shared
// collectives (robust to a few collectives that do not end together); the residual is the
// median distance of a rank's corrected ends from its collectives' mean.

#include "rank_analysis.h"

#include <cstdint>
#include <map>
#include <vector>

namespace meshbench::import {

struct ClockOffset {
    std::int64_t offsetNs = 0;    // add to the rank's times to put them on the reference clock
    std::int64_t residualNs = 0;  // how well its collectives then end together
    int collectives = 0;          // shared with others; 0: not aligned
};

std::map<int, ClockOffset> alignClocks(const std::vector<const RankAnalysis*>& ranks);

}  // namespace meshbench::import
