#pragma once
// A trace that a rank of a running job handed over (the Python client's torch.profiler handler),
// put on the live session: its steps numbered as the rank's live steps and its times moved onto the
// session's clock. Neither the trace's clock nor its step numbers can be trusted for that (torch
// 1.13 times from the profiler's start, and numbers ProfilerStep one off from torch 2.x), so the
// trace's pipeline ops are matched to the ops the rank reported live: one step shift under which
// every traced op is a live op, and one clock offset, the median of the matched ops' differences.
//
// Steps repeat the same ops, so several shifts may match; the moment the rank handed the trace over
// decides. The profiler hands a trace over right after its last traced step, before the next one
// runs, so the right shift is the latest under which the trace's last step began before that moment.
// Its begin, not its end: a whole step from the moment either way, where an end is close to it, and
// the ranks' clocks are put on the engine's to within more than that closeness.

#include "rank_analysis.h"

#include "wire/telemetry.h"

#include <cstdint>
#include <vector>

namespace meshbench::import {

struct LiveAlignment {
    int stepShift = 0;            // live step = trace step + stepShift
    std::int64_t offsetNs = 0;    // session time = trace time + offsetNs
    std::int64_t residualNs = 0;  // the largest distance of a matched op's begin from the offset's
    int matchedOps = 0;
    int firstStep = 0, lastStep = 0;  // live steps the trace covers
};

// `live`: the rank's spans on the session's clock (kinds the trace does not name are passed over);
// `handedNs`: when the rank handed the trace over, on the same clock. Throws ImportError when the
// trace has no pipeline op, or no shift puts every one of them on a live op with its last step
// begun by then.
LiveAlignment alignToLive(const std::vector<wire::SpanRecord>& traced, const std::vector<wire::SpanRecord>& live,
                          std::int64_t handedNs);

// Renumbers the rank's steps and moves its times as `alignment` says.
void moveOntoLive(RankAnalysis& rank, const LiveAlignment& alignment);

}  // namespace meshbench::import
