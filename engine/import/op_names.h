#pragma once
// The names other stacks give pipeline ops and steps, read into what Meshbench stores.
//   torch.distributed.pipelining: record_function "PP:{stage}{action}{microbatch}", stage global
//     (stage s of an interleaved schedule runs on pipeline rank s % pp as chunk s / pp); actions
//     F forward, I backward for inputs, W backward for weights, B whole backward, and the
//     communication actions SEND_F, RECV_F, SEND_B, RECV_B (torch/distributed/pipelining/schedules.py).
//   ScheduleGPipe's older record_function names "Forward {i}" and "Backward {i}".
//   Meshbench's own NVTX ranges (wire::spanLabel): "F mb3 chunk0", "send-act mb3 chunk0", ...
//   Steps: torch.profiler's "ProfilerStep#N", or a marker the user names.

#include "wire/telemetry.h"

#include <optional>
#include <string>
#include <string_view>

namespace meshbench::import {

struct OpName {
    wire::SpanKind kind = wire::SpanKind::Forward;
    int stage = -1;  // global stage as the name gives it; -1 when the name has none
    int microbatch = -1;
    int chunk = -1;  // -1 when the name has none
};

std::optional<OpName> parseOpName(std::string_view name);

// The step a range marks: "ProfilerStep#N" gives N. With a marker, a range named by it, optionally
// followed by a number ("train_step 12" gives 12); a marker range without one gives -1 (numbered
// in order by the caller).
class StepMarker {
public:
    explicit StepMarker(std::string marker = {}) : m_marker(std::move(marker)) {}
    std::optional<int> step(std::string_view name) const;
    const std::string& marker() const { return m_marker; }

private:
    std::string m_marker;
};

}  // namespace meshbench::import
