#pragma once
// Megatron-LM's NVTX ranges (--nvtx-ranges) read as the boundaries of pipeline ops. Megatron names
// a range by the module and function that pushes it (megatron/core/utils.py, nvtx_range_push and
// nvtx_decorator: "{module}.{function}", ".{suffix}" appended):
//   the interleaved schedule's phases (megatron/core/pipeline_parallel/schedules.py):
//     megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving.warmup,
//     .steady, .cooldown and .misc; the non-interleaved 1F1B pushes none;
//   the p2p calls of P2PCommunicator (megatron/core/pipeline_parallel/p2p_communication.py):
//     megatron.core.pipeline_parallel.p2p_communication.recv_forward, recv_backward, send_forward,
//     send_backward, send_forward_recv_backward, send_backward_recv_forward, send_forward_recv_forward,
//     send_backward_recv_backward, send_forward_backward_recv_forward_backward.
// forward_step and backward_step push no range, so an op is the time between two p2p calls: the
// call after an op sends what it produced (an F's activation, a B's gradient). Every call pushes
// its range even where it moves nothing (the first stage's recv_forward), so the sequence is the
// same on every stage. torch.cuda.nvtx calls NVTX directly, which torch.profiler does not record:
// the ranges are found in Nsight Systems exports only.

#include "wire/telemetry.h"

#include <optional>
#include <string_view>
#include <vector>

namespace meshbench::import {

enum class MegatronPhase { None, Warmup, Steady, Cooldown, Misc };

struct MegatronRange {
    MegatronPhase phase = MegatronPhase::None;  // set for a schedule phase range, None for a p2p call
    bool sendsForward = false;                  // a p2p call's directions, as its name says
    bool sendsBackward = false;
    bool receivesForward = false;
    bool receivesBackward = false;
    bool isCall() const { return phase == MegatronPhase::None; }
};

std::optional<MegatronRange> parseMegatronRange(std::string_view name);

// The compute ops that ran just before a p2p call, in order: what the call sends. In the
// interleaved schedule the phase holding the call decides where the name says more: the warm-up
// runs forwards only (its last call also receives the first backward's gradient through
// send_forward_backward_recv_forward_backward, sending no gradient), the cool-down backwards only,
// and a steady-state send_forward_backward_recv_forward_backward follows an F and a B run back to
// back.
std::vector<wire::SpanKind> opsBeforeCall(const MegatronRange& call, MegatronPhase phase);

// The transfer a p2p call's kernels are stored as. nsys does not say which way an NCCL kernel
// moved data, and a call that sends and receives runs as one grouped NCCL operation: its kernels
// take its first direction, the send.
std::optional<wire::SpanKind> transferOfCall(const MegatronRange& call);

}  // namespace meshbench::import
