#pragma once
// Each rank's clock offset from the ends of its collectives. The members of one collective finish
// together (NCCL's ring or tree completes on every member within a hop's latency), so the same
// collective's end times on two ranks differ by the difference of their clocks. Offsets are
// solved against the lowest rank, whose offset is 0, by repeated medians over the shared
// collectives (robust to a few collectives that do not end together); the residual is the
// median distance of a rank's corrected ends from its collectives' mean.
//
// Traces without collectives (torch 1.13's CPU-only traces) are aligned by their pipeline
// transfers instead: the host ranges of a send (SEND_F / SEND_B) and of the blocking receive that
// takes it on the next or previous stage (RECV_F / RECV_B, same step and micro-batch). The receive
// cannot end before the send began, so each transfer from a to b bounds offset_a - offset_b from
// above by (receive end - send begin); transfers both ways bound every pair of neighbouring stages
// from both sides. The tightest bounds along every path to the reference rank (shortest paths over
// these difference constraints) give each rank an interval that holds its true offset; the offset
// is its middle and the bound its half-width, stored as the residual.

#include "rank_analysis.h"

#include <cstdint>
#include <map>
#include <vector>

namespace meshbench::import {

struct ClockOffset {
    std::int64_t offsetNs = 0;    // add to the rank's times to put them on the reference clock
    std::int64_t residualNs = 0;  // how well its collectives then end together
    int collectives = 0;          // shared with others
    int transfers = 0;            // send/recv pairs that bound it (no collectives); 0 with neither: not aligned
};

// `job` gives the pipeline's ranks and stages for matching transfers; without it a transfer is
// matched only where one rank sends it and one receives it.
std::map<int, ClockOffset> alignClocks(const std::vector<const RankAnalysis*>& ranks, const JobContext& job = {});

}  // namespace meshbench::import
