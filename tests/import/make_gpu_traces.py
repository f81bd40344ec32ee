#!/usr/bin/env python3
"""Synthetic GPU traces of a pipeline-parallel job, with the answers an importer must find.

    make_gpu_traces.py OUTDIR --case {1f1b,interleaved,unannotated,megatron,megatron-interleaved,cpu-array}
                       [--steps 3] [--seed N]
    make_gpu_traces.py OUTDIR --big-gb X [--case ...] [--seed N]

Pure Python 3, standard library only. The generator simulates one job (8 GPUs on one node,
pp 2 x tp 2 x dp 2, ep 1, 4 micro-batches; interleaved: 2 chunks per stage) kernel by kernel,
on one true clock, and writes what two profilers would have recorded of it:

  job.json                  the Meshbench job spec of the simulated job
  rank{R}_trace.json.gz     torch.profiler (Kineto) trace of rank R, in rank R's own (skewed) clock
  report.{R}.sqlite         the same timeline as an Nsight Systems SQLite export (schema 3.11-like)
  answers.json              what the importer must compute, worked out here from the true timeline

megatron, megatron-interleaved: the job as Megatron-LM runs it with --nvtx-ranges (interleaved: 6
micro-batches, since with m = p Megatron runs them all in the warm-up), as nsys exports only, with no
clock skew (one node's reports share its clock; nsys kernels carry no communicator to align by):
Megatron's p2p calls (megatron/core/pipeline_parallel/p2p_communication.py) and the interleaved
schedule's phases (schedules.py) as NVTX push/pop ranges named as megatron/core/utils.py names them;
every send/recv kernel launched inside its call's range; backward kernels launched from a second host
thread (torch's autograd device thread). torch.profiler does not record torch.cuda.nvtx ranges, so no
Kineto traces are written for these cases.

cpu-array: torch 1.13's CPU-only traces of a pp 4 job (tp 1, dp 1, 8 micro-batches, 1F1B) on the CPU
backend, written as rank-R.json (a bare JSON array of host ranges, times in us from each rank's own
profiler start): ProfilerStep#N and PP:{stage}{F|B|SEND_F|RECV_F|SEND_B|RECV_B}{mb} ranges, every step
whole. There are no collectives; sends are isend, receives block until the data arrived. The ranks'
clocks differ by their profilers' starts (answers' clock_offset_ns).

--big-gb X writes rank{R}_trace.json (uncompressed, streamed to disk) with as many whole steps as
it takes for the eight files to reach X * 10^9 bytes together, and an answers.json without the
op list; no SQLite files.

The true timeline (how it is built)
-----------------------------------
* Rank mapping: engine/plan/mesh.cpp, default order tp-dp-pp (RankOrder::TpDpPp): TP innermost,
  then DP, PP outermost.  rank = tp + dp * tp_size + pp * tp_size * dp_size, so here
  rank = tp + 2 dp + 4 pp: stage 0 = ranks 0-3, stage 1 = ranks 4-7; TP groups {0,1} {2,3} {4,5}
  {6,7}; DP groups {0,2} {1,3} {4,6} {5,7}; PP groups {0,4} {1,5} {2,6} {3,7}.
  Rank r runs on device r (mpirun's by-slot fill on one node of 8).
* Schedules: the op lists of engine/plan/schedule.cpp (buildOneFOneB, buildInterleaved with
  Megatron's groups of p micro-batches): warm-up forwards, steady 1F1B, cool-down backwards, with
  recv-act before an F, send-act after it, recv-grad before a B and send-grad after it wherever
  the neighbouring virtual stage (virtual stage = chunk * pp + stage) is on the other stage.
* Host: one thread per rank launches every kernel (cudaLaunchKernel) and runs ahead of the GPU; it
  blocks only at the end of a step (cudaDeviceSynchronize).  ProfilerStep#N ranges are contiguous.
* Device streams: 7 compute; 20 TP all-reduce (NCCL); 24 pipeline sends; 28 pipeline receives;
  32 data-parallel gradient all-reduce.  A kernel starts no earlier than a few us after its launch,
  after the previous kernel of its stream, and after the kernels it waits for (the compute stream
  waits for each TP all-reduce; a TP all-reduce waits for the GEMM before it; an F or B waits for
  its receive; a send waits for the op it sends the output of; the optimizer waits for the DP
  all-reduces).
* Collectives: every member's kernel ENDS at the same true time, max(member starts) + transfer
  time; a member that starts early waits.  One rank is a straggler: its compute is 4 % slower and
  each of its NCCL kernels starts 15-40 us late.
* F ~ 1.0 ms / v and B ~ 2.0 ms / v of device time (v = chunks per stage), in GEMMs, a flash
  attention kernel, norms and elementwise kernels, with two TP all-reduces per layer.  The first
  virtual stage's F starts with the embedding, the last one's F ends with the loss.
* Data-parallel gradient reduction: two buckets, launched after the step's last B has been
  launched; bucket 1 waits for the middle of that B (so it runs under the rest of it), bucket 2
  for its end (exposed); then the optimizer kernels.
* Clock skew: rank r writes every time as true time + skew_r (skew_0 = 0, the others distinct,
  within +-500 us).  Nothing else is jittered at write time, so collective ends match exactly
  after the offset is applied.
* The trace of each rank starts in the middle of its first ProfilerStep and ends in the middle of
  its last one (each cut by the capture window; the importer must drop both); events wholly inside
  the window are kept, the two partial ProfilerStep ranges are clipped to it.

The Kineto traces
-----------------
  CPU (pid = host pid, tid = host thread id): ProfilerStep#N (cat user_annotation); in the annotated
  cases PP:{global stage}{F|B}{mb} (cat user_annotation, torch.distributed.pipelining's names;
  global stage = chunk * pp + pp rank); cudaLaunchKernel / cudaMemcpyAsync / cudaMemsetAsync /
  cudaStreamWaitEvent / cudaDeviceSynchronize (cat cuda_runtime, args correlation + External id).
  Every compute kernel of an F or B, and its TP all-reduces, is launched inside that op's PP: range;
  pipeline sends/receives, the DP buckets, the optimizer and the input copies are launched outside
  any PP: range (inside the ProfilerStep).
  GPU (pid = device index, tid = stream): cat kernel / gpu_memcpy / gpu_memset, args with
  correlation, External id, device, stream, ...; NCCL kernels carry torch's record_param_comms args
  (Collective name, In/Out msg nelems, dtype, Group size, Process Group Name/Description/Ranks,
  Seq; send/recv also Src Rank / Dst Rank as global ranks).  Seq counts the group's collectives on
  that rank (equal on all members); for send/recv it counts the transfers between that ordered
  (src, dst) pair, so the k-th send from a to b matches the k-th recv on b from a.
  Flow events ac2g ("s" at the launch, "f" with bp "e" at the kernel), id = correlation.

The SQLite exports
------------------
  Times are ns since TARGET_INFO_SESSION_START_TIME.utcEpochNs, which is the rank's (skewed) clock
  at its session start: rank-clock ns since the epoch = utcEpochNs + start.  globalTid =
  (pid << 24) | tid, globalPid = pid << 24.  Runtime names are nsys's (cudaLaunchKernel_v7000, ...).
  NVTX: eventType 75 creates domain 1 "NCCL"; 60 (start/end) ProfilerStep#N per step; 59 push/pop
  pipeline ranges named as meshbench's agent names spans ("F mb3 chunk0"; annotated cases only);
  59 ranges ncclAllReduce / ncclSend / ncclRecv in domain 1 around each NCCL launch, each with NCCL's
  extended payload as nsys exports it, JSON in jsonText or via jsonTextId -> StringIds (mixed):
  {"NCCL communicator ID": commHash, "Message size [bytes]": n, "Reduction operation": "Sum"} or, for
  send/recv, "Peer rank" (the peer's rank in the pair's 2-rank communicator); a mark (34)
  "dataloader: batch ready" per step.  Names are in `text` or via `textId` -> StringIds, mixed.
  Kernels carry no communicator; the ranges' payloads name it, so answers.json's comm holds for the
  exports too (a communicator's dimension: the ranks whose exports use it, matched to the mesh).
"""

import argparse
import gzip
import io
import json
import os
import random
import re
import sqlite3
import sys
import time

# ---------------------------------------------------------------------------------------------
# The job.

PP, TP, DP, EP = 2, 2, 2, 1
WORLD = PP * TP * DP
M = 4                 # micro-batches per step and replica
M_MEGATRON_INTERLEAVED = 6   # with m = p Megatron runs every interleaved micro-batch in the warm-up


def is_interleaved(case):
    return case in ("interleaved", "megatron-interleaved")


def microbatches(case):
    return M_MEGATRON_INTERLEAVED if case == "megatron-interleaved" else M
DEVICES_PER_NODE = 8
FIRST_STEP = 10       # the partial step the trace starts in; whole steps follow

STREAM_COMPUTE, STREAM_TP, STREAM_SEND, STREAM_RECV, STREAM_DP = 7, 20, 24, 28, 32

US = 1000
MS = 1000 * US


def rank_of(dp, pp, tp):
    # engine/plan/mesh.cpp Mesh::rankOf with RankOrder::TpDpPp: dpStride = tp, ppStride = tp * dp.
    return tp + dp * TP + pp * TP * DP


def coord_of(rank):
    return {"tp": rank % TP, "dp": rank // TP % DP, "pp": rank // (TP * DP) % PP}


def group_of(kind, rank):
    c = coord_of(rank)
    if kind == "tp":
        return [rank_of(c["dp"], c["pp"], t) for t in range(TP)]
    if kind == "dp":
        return [rank_of(d, c["pp"], c["tp"]) for d in range(DP)]
    return [rank_of(c["dp"], p, c["tp"]) for p in range(PP)]


def all_groups(kind):
    seen = []
    for r in range(WORLD):
        g = group_of(kind, r)
        if g not in seen:
            seen.append(g)
    return seen


# Process groups as torch names them: created in one order on every rank, so the names agree.
PG_DESC = {"tp": "TENSOR_MODEL_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP",
           "pp": "PIPELINE_MODEL_PARALLEL_GROUP"}


def process_groups():
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
            "pg_size": WORLD, "ranks": list(range(WORLD)), "kind": None}]
    for kind in ("tp", "dp", "pp"):
        for g in all_groups(kind):
            pgs.append({"pg_name": str(len(pgs)), "pg_desc": PG_DESC[kind], "backend_config": "cuda:nccl",
                        "pg_size": len(g), "ranks": g, "kind": kind})
    return pgs


PGS = process_groups()


def pg_for(kind, rank):
    g = group_of(kind, rank)
    for pg in PGS:
        if pg["kind"] == kind and pg["ranks"] == g:
            return pg
    raise AssertionError


def job_spec(case):
    interleaved = is_interleaved(case)
    return {
        "name": "synthetic import test: %s, pp 2 x tp 2 x dp 2 on one H100 node" % case,
        "model": {"layers": 8, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
                  "vocab": 128256, "seq_len": 2048, "norm": "rmsnorm", "activation": "swiglu",
                  "tied_embeddings": False},
        "parallel": {"dp": DP, "pp": PP, "tp": TP, "ep": EP, "zero": 0, "sequence_parallel": False,
                     "recompute": "selective", "schedule": "interleaved" if interleaved else "1f1b",
                     "virtual_stages": 2 if interleaved else 1, "microbatches": microbatches(case),
                     "micro_batch_size": 1, "order": "tp-dp-pp", "grad_bucket_mb": 25,
                     "overlap_grad_reduce": True},
        "precision": {"grads": "fp32"},
        "cluster": {"nodes": 1, "devices_per_node": DEVICES_PER_NODE, "device": "h100-sxm"},
        "train": {"steps": 100, "seed": 1234},
        "backend": "cuda",
    }


# ---------------------------------------------------------------------------------------------
# Schedules: engine/plan/schedule.cpp, for 1F1B and interleaved.

def warmup_count(kind, p, m, v, stage):
    if kind == "1f1b":
        return min(p - stage - 1, m)
    total = m * v
    if m == p:
        return total
    return min(2 * (p - stage - 1) + (v - 1) * p, total)


def stage_ops(kind, p, m, v, stage):
    """The op list of a physical stage: tuples (kind, mb, chunk, peer stage)."""
    ops = []
    last_vs = p * v - 1

    def remote(vs):
        if vs < 0 or vs > last_vs:
            return -1
        s = vs % p
        return -1 if s == stage else s

    def vstage(chunk):
        return chunk * p + stage

    def transfer(k, mb, chunk, step):
        peer = remote(vstage(chunk) + step)
        if peer >= 0:
            ops.append((k, mb, chunk, peer))

    def forward(mb, chunk):
        transfer("recv-act", mb, chunk, -1)
        ops.append(("F", mb, chunk, -1))
        transfer("send-act", mb, chunk, +1)

    def backward(mb, chunk):
        transfer("recv-grad", mb, chunk, +1)
        ops.append(("B", mb, chunk, -1))
        transfer("send-grad", mb, chunk, -1)

    warm = warmup_count(kind, p, m, v, stage)
    if kind == "1f1b":
        for mb in range(warm):
            forward(mb, 0)
        for i in range(m - warm):
            forward(warm + i, 0)
            backward(i, 0)
        for mb in range(m - warm, m):
            backward(mb, 0)
        return ops
    table = []
    for first in range(0, m, p):
        last = min(first + p, m)
        for chunk in range(v):
            for mb in range(first, last):
                table.append((mb, chunk))
    total = len(table)
    for k in range(warm):
        forward(*table[k])
    for i in range(total - warm):
        forward(*table[warm + i])
        backward(table[i][0], v - 1 - table[i][1])
    for k in range(total - warm, total):
        backward(table[k][0], v - 1 - table[k][1])
    return ops


MEGATRON_P2P = "megatron.core.pipeline_parallel.p2p_communication."
MEGATRON_PHASE = "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving."


def megatron_program(kind, p, m, v, stage):
    """What Megatron-LM's schedule does on a physical stage with --nvtx-ranges, in order (the calls of
    megatron/core/pipeline_parallel/schedules.py without overlap_p2p_comm): ("push"/"pop", phase range),
    ("call", p2p range name, [transfers as stage_ops writes them]), ("op", F/B, mb, chunk).  A call's
    range is pushed even where it moves nothing (the first stage's recv_forward)."""
    last_vs = p * v - 1

    def transfer(k, mb, chunk, step):
        vs = chunk * p + stage + step
        if vs < 0 or vs > last_vs or vs % p == stage:
            return []
        return [(k, mb, chunk, vs % p)]

    def recv_act(x):
        return transfer("recv-act", x[0], x[1], -1)

    def send_act(x):
        return transfer("send-act", x[0], x[1], +1)

    def recv_grad(x):
        return transfer("recv-grad", x[0], x[1], +1)

    def send_grad(x):
        return transfer("send-grad", x[0], x[1], -1)

    prog = []

    def call(name, transfers):
        prog.append(("call", MEGATRON_P2P + name, transfers))

    warm = warmup_count(kind, p, m, v, stage)
    if kind == "1f1b":   # forward_backward_pipelining_without_interleaving: no phase ranges
        for i in range(warm):
            call("recv_forward", recv_act((i, 0)))
            prog.append(("op", "F", i, 0))
            call("send_forward", send_act((i, 0)))
        if m - warm > 0:
            call("recv_forward", recv_act((warm, 0)))
        for i in range(m - warm):
            f, b = (warm + i, 0), (i, 0)
            prog.append(("op", "F", f[0], 0))
            call("send_forward_recv_backward", send_act(f) + recv_grad(b))
            prog.append(("op", "B", b[0], 0))
            if i == m - warm - 1:
                call("send_backward", send_grad(b))
            else:
                call("send_backward_recv_forward", send_grad(b) + recv_act((warm + i + 1, 0)))
        for i in range(m - warm, m):
            call("recv_backward", recv_grad((i, 0)))
            prog.append(("op", "B", i, 0))
            call("send_backward", send_grad((i, 0)))
        return prog
    table = []
    for first in range(0, m, p):
        for chunk in range(v):
            for mb in range(first, min(first + p, m)):
                table.append((mb, chunk))
    total = len(table)

    def fwd(k):
        return table[k]

    def bwd(k):
        return (table[k][0], v - 1 - table[k][1])

    all_warm = warm == total
    prog.append(("push", MEGATRON_PHASE + "warmup"))
    call("recv_forward", recv_act(fwd(0)))
    for k in range(warm):
        prog.append(("op", "F") + fwd(k))
        nxt = recv_act(fwd(k + 1)) if k + 1 < total else []
        if k == warm - 1 and not all_warm:
            call("send_forward_backward_recv_forward_backward", send_act(fwd(k)) + nxt + recv_grad(bwd(0)))
        else:
            call("send_forward_recv_forward", send_act(fwd(k)) + nxt)
    prog.append(("pop", MEGATRON_PHASE + "warmup"))
    prog.append(("push", MEGATRON_PHASE + "steady"))
    for i in range(total - warm):
        f = warm + i
        prog.append(("op", "F") + fwd(f))
        prog.append(("op", "B") + bwd(i))
        nxt = recv_act(fwd(f + 1)) if i < total - warm - 1 else []
        call("send_forward_backward_recv_forward_backward",
             send_act(fwd(f)) + send_grad(bwd(i)) + nxt + (recv_grad(bwd(i + 1)) if i + 1 < total else []))
    prog.append(("pop", MEGATRON_PHASE + "steady"))
    prog.append(("push", MEGATRON_PHASE + "cooldown"))
    if all_warm:
        call("recv_backward", recv_grad(bwd(0)))
    for k in range(total - warm, total):
        prog.append(("op", "B") + bwd(k))
        call("send_backward_recv_backward", send_grad(bwd(k)) + (recv_grad(bwd(k + 1)) if k + 1 < total else []))
    prog.append(("pop", MEGATRON_PHASE + "cooldown"))
    return prog


def program_ops(prog):
    """A Megatron program as stage_ops's op list (transfers in call order)."""
    ops = []
    for item in prog:
        if item[0] == "call":
            ops.extend(item[2])
        elif item[0] == "op":
            ops.append((item[1], item[2], item[3], -1))
    return ops


# ---------------------------------------------------------------------------------------------
# Kernel names.

GEMM_TN = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_NN = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_NT = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
NORM_F = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
NORM_B = "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)"
FLASH_F = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(Flash_fwd_params)"
FLASH_B = "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, false>(Flash_bwd_params)"
FLASH_B_CVT = "void flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false>(Flash_bwd_params, int)"
SILU_F = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2>)"
SILU_B = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_backward_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::silu_backward_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3>)"
EMBED_F = "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, int, int, unsigned int, unsigned int, long)"
EMBED_B = "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, float, long>(long const*, c10::BFloat16 const*, float*, int, long, int, int)"
LOSS_F = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
LOSS_B = "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)"
ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, bool*, double*, double, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, bool*, double*, double, double, double, double, double, double, bool, float*, float*)"
CAST = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
NCCL_AR_BF16 = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_AR_F32 = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_P2P = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"

SHORT = {}
for _n in (GEMM_TN, GEMM_NN, GEMM_NT):
    SHORT[_n] = _n
for _n in (NORM_F, NORM_B, FLASH_F, FLASH_B, FLASH_B_CVT, SILU_F, SILU_B, EMBED_F, EMBED_B, LOSS_F, LOSS_B,
           ADAM, CAST, NCCL_AR_BF16, NCCL_AR_F32, NCCL_P2P):
    _base = _n[5:] if _n.startswith("void ") else _n
    _base = _base.replace("(anonymous namespace)", "")
    _cut = min(i for i in (_base.find("<"), _base.find("("), len(_base)) if i >= 0)
    SHORT[_n] = _base[:_cut].split("::")[-1]

# (name, grid, block, registers, static smem, dynamic smem)
LAUNCH = {
    GEMM_TN: ((132, 1, 1), (384, 1, 1), 168, 0, 213000),
    GEMM_NN: ((132, 1, 1), (384, 1, 1), 168, 0, 213000),
    GEMM_NT: ((132, 1, 1), (256, 1, 1), 154, 0, 147000),
    NORM_F: ((2048, 1, 1), (128, 1, 1), 40, 0, 0),
    NORM_B: ((2048, 1, 1), (128, 1, 1), 48, 0, 0),
    FLASH_F: ((16, 32, 1), (128, 1, 1), 255, 0, 49152),
    FLASH_B: ((32, 1, 32), (256, 1, 1), 255, 0, 98304),
    FLASH_B_CVT: ((16, 1, 32), (256, 1, 1), 32, 0, 0),
    SILU_F: ((8192, 1, 1), (128, 1, 1), 24, 0, 0),
    SILU_B: ((8192, 1, 1), (128, 1, 1), 26, 0, 0),
    EMBED_F: ((1024, 1, 1), (128, 1, 1), 30, 0, 0),
    EMBED_B: ((512, 1, 1), (256, 1, 1), 38, 1024, 0),
    LOSS_F: ((2048, 1, 1), (1024, 1, 1), 32, 0, 4096),
    LOSS_B: ((2048, 1, 1), (1024, 1, 1), 30, 0, 0),
    ADAM: ((320, 1, 1), (512, 1, 1), 72, 0, 0),
    CAST: ((4096, 1, 1), (128, 1, 1), 20, 0, 0),
    NCCL_AR_BF16: ((2, 1, 1), (640, 1, 1), 96, 4352, 0),
    NCCL_AR_F32: ((16, 1, 1), (640, 1, 1), 96, 4352, 0),
    NCCL_P2P: ((1, 1, 1), (640, 1, 1), 96, 4352, 0),
}

# One transformer layer's kernels: (name, share of the layer's compute) or "AR" for a TP all-reduce.
FWD_LAYER = [(NORM_F, .03), (GEMM_TN, .13), (FLASH_F, .18), (GEMM_TN, .07), "AR",
             (NORM_F, .03), (GEMM_TN, .26), (SILU_F, .04), (GEMM_NN, .26), "AR"]
BWD_LAYER = [(GEMM_NN, .12), (GEMM_NT, .12), (SILU_B, .04), (GEMM_NN, .12), (GEMM_NT, .12), "AR",
             (NORM_B, .03), (GEMM_NN, .035), (GEMM_NT, .035), (FLASH_B, .23), (FLASH_B_CVT, .02),
             (GEMM_NN, .045), (GEMM_NT, .045), "AR", (NORM_B, .03)]

TP_NELEMS = 2048 * 4096          # seq x hidden, bf16
PP_NELEMS = 2048 * 4096
DP_BUCKET_NELEMS = 25 * 1024 * 1024 // 4   # 25 MiB fp32 buckets


# ---------------------------------------------------------------------------------------------
# Simulation.

class Kernel:
    __slots__ = ("rank", "stream", "name", "kind", "op", "launch_begin", "launch_end", "min_start", "deps",
                 "dur", "group", "start", "end", "corr", "ext", "args", "step", "bytes", "seq_in_stream")

    def __init__(self, rank, stream, name, kind):
        self.rank = rank
        self.stream = stream
        self.name = name
        self.kind = kind      # compute | tp | dp | send | recv | memcpy | memset
        self.op = None        # (kind F/B, mb, chunk) for the kernels of a pipeline op
        self.deps = []
        self.group = None
        self.start = None
        self.end = None
        self.args = None
        self.bytes = 0
        self.ext = None
        self.corr = None
        self.dur = 0
        self.step = None


class CpuEvent:
    __slots__ = ("name", "cat", "begin", "end", "args", "corr", "ext", "kernel", "nvtx", "tid")

    def __init__(self, name, cat, begin, end, args=None):
        self.name = name
        self.cat = cat
        self.begin = begin
        self.end = end
        self.args = args
        self.corr = None
        self.ext = None
        self.kernel = None
        self.nvtx = None
        self.tid = None       # the host thread; None: the rank's main thread


class StepRecord:
    """What one rank did in one step (true times)."""
    __slots__ = ("step", "rank", "begin", "end", "cpu", "kernels", "ops", "nccl_ranges", "mark", "megatron",
                 "thread")

    def __init__(self, step, rank):
        self.step = step
        self.rank = rank
        self.cpu = []        # CpuEvent: runtime calls
        self.kernels = []    # Kernel, in launch order
        self.ops = []        # (kind, mb, chunk, annot_begin, annot_end, ext)
        self.nccl_ranges = []  # (name, begin, end, payload JSON, thread) NCCL's own ranges around its launches
        self.mark = None
        self.megatron = []   # (name, begin, end) Megatron-LM's NVTX ranges (megatron cases)
        self.thread = None   # the thread launching now; None: the main thread


class Simulator:
    def __init__(self, case, seed):
        self.case = case
        self.seed = seed
        self.comm_hashes = {}
        self.rng = random.Random(seed)
        rng = self.rng
        self.v = 2 if is_interleaved(case) else 1
        self.sched = "interleaved" if is_interleaved(case) else "1f1b"
        self.m = microbatches(case)
        self.megatron = case.startswith("megatron")
        if self.megatron:
            self.programs = [megatron_program(self.sched, PP, self.m, self.v, s) for s in range(PP)]
            self.ops = [program_ops(prog) for prog in self.programs]
        else:
            self.ops = [stage_ops(self.sched, PP, self.m, self.v, s) for s in range(PP)]
        self.layers_per_op = 2 if self.v == 1 else 1
        self.f_ns = 1.0 * MS / self.v
        self.b_ns = 2.0 * MS / self.v
        # clocks
        self.epoch0 = 1718000000 * 1000 * MS + rng.randrange(0, 10 ** 9)
        skews = [0]
        while len(skews) < WORLD:
            s = rng.randint(-500 * US, 500 * US)
            if s != 0 and all(abs(s - o) > 10 * US for o in skews):
                skews.append(s)
        # Megatron cases: nsys on one node, where every report's clock is the node's (nsys exports
        # carry no communicator to align clocks by).
        self.skew = [0] * WORLD if self.megatron else skews
        self.straggler = rng.choice([r for r in range(1, WORLD)])
        self.pid = [100000 + 37 * r + rng.randrange(0, 30) for r in range(WORLD)]
        self.tid = list(self.pid)
        # torch's autograd engine runs a CUDA backward on a device thread of its own
        self.autograd_tid = [t + 3 for t in self.tid]
        self.corr = [0] * WORLD
        self.ext = [0] * WORLD
        self.pg_seq = {}       # (pg name, rank) -> collectives so far
        self.p2p_seq = {}      # (src, dst) -> sends so far / (src, dst, 'r') receives so far
        self.xfer = {}         # group key -> (transfer ns, members)
        self.host_t = [self.epoch0 + rng.randrange(0, 200 * US) for _ in range(WORLD)]
        self.check_p2p_orders()

    def comm_hash(self, key):
        """A communicator's commHash (NCCL hashes its unique id): any 64-bit number, one per communicator."""
        h = self.comm_hashes.get(key)
        if h is None:
            h = random.Random("%s/%s" % (self.seed, key)).getrandbits(64)
            self.comm_hashes[key] = h
        return h

    def check_p2p_orders(self):
        # NCCL matches the k-th send a->b with the k-th recv on b from a: the schedules must agree.
        for s in range(PP):
            for peer in range(PP):
                if peer == s:
                    continue
                sends = [(o[1], o[2], o[0]) for o in self.ops[s] if o[0].startswith("send") and o[3] == peer]
                recvs = [(o[1], o[2], o[0]) for o in self.ops[peer] if o[0].startswith("recv") and o[3] == s]
                mapped = []
                for mb, chunk, k in sends:
                    vs = chunk * PP + s
                    to_vs = vs + 1 if k == "send-act" else vs - 1
                    mapped.append((mb, to_vs // PP, "recv-act" if k == "send-act" else "recv-grad"))
                assert mapped == recvs, "p2p order mismatch %s" % ((s, peer, mapped, recvs),)

    # -- host programs ---------------------------------------------------------------------------

    def u(self, lo_us, hi_us):
        return self.rng.randint(int(lo_us * US), int(hi_us * US))

    def next_corr(self, rank):
        self.corr[rank] += 1
        return self.corr[rank]

    def next_ext(self, rank):
        self.ext[rank] += 1
        return self.ext[rank]

    def op_template(self, rank, kind, chunk):
        """Kernels of one F or B: list of (name, compute ns) or ('AR', None)."""
        stage = coord_of(rank)["pp"]
        vs = chunk * PP + stage
        first, last = vs == 0, vs == PP * self.v - 1
        L = self.layers_per_op
        total = self.f_ns if kind == "F" else self.b_ns
        ar_budget = 45 * US
        per_layer = total / L - 2 * ar_budget
        layer = FWD_LAYER if kind == "F" else BWD_LAYER
        out = []
        if kind == "F" and first:
            out.append((EMBED_F, 30 * US))
        if kind == "B" and last:
            out.append((LOSS_B, 40 * US))
            out.append((GEMM_NN, 60 * US))
        for _ in range(L):
            for item in layer:
                if item == "AR":
                    out.append(("AR", None))
                else:
                    out.append((item[0], per_layer * item[1]))
        if kind == "F" and last:
            out.append((NORM_F, 12 * US))
            out.append((GEMM_TN, 60 * US))
            out.append((LOSS_F, 25 * US))
        if kind == "B" and first:
            out.append((EMBED_B, 35 * US))
        return out

    def launch(self, rec, k, t, api="cudaLaunchKernel"):
        """Host launch of kernel k at host time t; returns the host time after it."""
        rank = rec.rank
        rng = self.rng
        dur = self.u(3.5, 8.5)
        k.launch_begin = t
        k.launch_end = t + dur
        k.min_start = k.launch_end + self.u(1.5, 4.5)
        k.corr = self.next_corr(rank)
        k.step = rec.step
        ev = CpuEvent(api, "cuda_runtime", t, t + dur)
        ev.corr = k.corr
        ev.kernel = k
        ev.tid = rec.thread
        rec.cpu.append(ev)
        rec.kernels.append(k)
        return t + dur + self.u(5, 13)

    def nccl(self, rec, k, t, kind, nelems, dtype, peer=None, send=False):
        rank = rec.rank
        pg = pg_for(kind if kind in ("tp", "dp") else "pp", rank)
        if kind in ("tp", "dp"):
            key = (pg["pg_name"], rank)
            seq = self.pg_seq.get(key, 0)
            self.pg_seq[key] = seq + 1
            group = (pg["pg_name"], seq)
            members = pg["ranks"]
            args = [("Collective name", "allreduce"), ("In msg nelems", nelems), ("Out msg nelems", nelems),
                    ("Group size", len(pg["ranks"])), ("dtype", dtype),
                    ("In split size", "[]"), ("Out split size", "[]"),
                    ("Process Group Name", pg["pg_name"]), ("Process Group Description", pg["pg_desc"]),
                    ("Process Group Ranks", "[" + ", ".join(str(x) for x in pg["ranks"]) + "]"),
                    ("Seq", seq)]
        else:
            src, dst = (rank, peer) if send else (peer, rank)
            key = (src, dst, "s" if send else "r")
            seq = self.p2p_seq.get(key, 0)
            self.p2p_seq[key] = seq + 1
            group = ("p2p", src, dst, seq)
            members = [src, dst]
            args = [("Collective name", "send" if send else "recv"),
                    ("In msg nelems", nelems if send else 0), ("Out msg nelems", 0 if send else nelems),
                    ("Group size", 2), ("dtype", dtype), ("In split size", "[]"), ("Out split size", "[]"),
                    ("Process Group Name", pg["pg_name"]), ("Process Group Description", pg["pg_desc"]),
                    ("Process Group Ranks", "[" + ", ".join(str(x) for x in pg["ranks"]) + "]"),
                    ("Src Rank", src), ("Dst Rank", dst), ("Seq", seq)]
        k.group = group
        k.args = args
        if group not in self.xfer:
            if kind == "tp":
                x = self.u(35, 55)
            elif kind == "dp":
                x = self.u(260, 380)
            else:
                x = self.u(28, 48)
            self.xfer[group] = [x, members, {}]
        name = {"tp": "ncclAllReduce", "dp": "ncclAllReduce"}.get(kind, "ncclSend" if send else "ncclRecv")
        # NCCL's payload (src/include/nvtx_payload_schemas.h): the communicator's hash, the same on every
        # member; torch runs a pair's sends and receives on a 2-rank communicator of its own, ranked in
        # order of global rank, so the peer's rank in it is 0 or 1.
        if kind in ("tp", "dp"):
            payload = {"NCCL communicator ID": self.comm_hash(pg["pg_name"]), "Message size [bytes]": nelems * (4 if dtype == "Float" else 2),
                       "Reduction operation": "Sum"}
        else:
            payload = {"NCCL communicator ID": self.comm_hash("p2p %d %d" % (min(rank, peer), max(rank, peer))),
                       "Message size [bytes]": nelems * 2, "Peer rank": 0 if peer < rank else 1}
        r0 = t
        t = self.launch(rec, k, t + self.u(1, 2))
        # pushed by the thread that calls NCCL, the one that launches its kernel
        rec.nccl_ranges.append((name, r0, k.launch_end + self.u(0.5, 1.5), json.dumps(payload), rec.thread))
        if rank == self.straggler:
            k.min_start += self.u(15, 40)
        return t

    def host_step(self, step, rank):
        rec = StepRecord(step, rank)
        rng = self.rng
        stage = coord_of(rank)["pp"]
        slow = 1.04 if rank == self.straggler else 1.0
        t = self.host_t[rank]
        rec.begin = t
        rec.mark = t + self.u(2, 6)
        t += self.u(60, 160)   # data loader
        # zero the gradient buffer, copy the batch in
        k = Kernel(rank, STREAM_COMPUTE, "Memset (Device)", "memset")
        k.dur = self.u(8, 14)
        k.bytes = 134217728
        t = self.launch(rec, k, t, "cudaMemsetAsync")
        k = Kernel(rank, STREAM_COMPUTE, "Memcpy HtoD (Pinned -> Device)", "memcpy")
        k.dur = self.u(3, 6)
        k.bytes = 16384
        t = self.launch(rec, k, t, "cudaMemcpyAsync")
        pending_recv = {}
        last_of_op = {}
        ops = self.ops[stage]
        last_b = max(i for i, o in enumerate(ops) if o[0] == "B")
        mid_kernel = end_kernel = None
        barrier = None
        if self.megatron:   # the op list with Megatron's ranges around its calls and phases
            seq = []
            for item in self.programs[stage]:
                if item[0] == "call":
                    seq.append(("call-begin", item[1]))
                    seq.extend(("x", x) for x in item[2])
                    seq.append(("call-end", item[1]))
                elif item[0] == "op":
                    seq.append(("x", (item[1], item[2], item[3], -1)))
                else:
                    seq.append(item)
        else:
            seq = [("x", o) for o in ops]
        opened = {}
        i = -1
        for what, item in seq:
            if what in ("push", "call-begin"):
                t += self.u(2, 6)
                opened[item] = t
                t += self.u(2, 6)
                continue
            if what in ("pop", "call-end"):
                t += self.u(2, 6)
                rec.megatron.append((item, opened.pop(item), t))
                continue
            i += 1
            kind, mb, chunk, peer = item
            t += self.u(20, 55)
            if kind in ("recv-act", "recv-grad"):
                k = Kernel(rank, STREAM_RECV, NCCL_P2P, "recv")
                t = self.nccl(rec, k, t, "pp", PP_NELEMS, "BFloat16", peer=peer_rank(rank, peer), send=False)
                pending_recv[(mb, chunk, "F" if kind == "recv-act" else "B")] = k
                continue
            if kind in ("send-act", "send-grad"):
                k = Kernel(rank, STREAM_SEND, NCCL_P2P, "send")
                k.deps = [last_of_op[(mb, chunk, "F" if kind == "send-act" else "B")]]
                t = self.nccl(rec, k, t, "pp", PP_NELEMS, "BFloat16", peer=peer_rank(rank, peer), send=True)
                continue
            ext = self.next_ext(rank)
            if kind == "B":  # torch's autograd engine launches a CUDA backward from its device thread
                rec.thread = self.autograd_tid[rank]
            a_begin = t
            t += self.u(6, 14)
            prev = None
            recv = pending_recv.pop((mb, chunk, kind), None)
            template = self.op_template(rank, kind, chunk)
            n_compute = sum(1 for x in template if x[0] != "AR")
            seen = 0
            for name, ns in template:
                if name == "AR":
                    k = Kernel(rank, STREAM_TP, NCCL_AR_BF16, "tp")
                    k.op = (kind, mb, chunk)
                    k.ext = ext
                    k.deps = [prev] if prev else []
                    t = self.nccl(rec, k, t, "tp", TP_NELEMS, "BFloat16")
                    barrier = k
                else:
                    k = Kernel(rank, STREAM_COMPUTE, name, "compute")
                    k.op = (kind, mb, chunk)
                    k.ext = ext
                    k.dur = max(2 * US, int(ns * slow * rng.uniform(0.95, 1.05)))
                    # torch's work.wait() makes the compute stream wait for every TP all-reduce
                    k.deps = [barrier] if barrier is not None else []
                    barrier = None
                    if recv is not None and prev is None:
                        k.deps.append(recv)
                    t = self.launch(rec, k, t)
                    seen += 1
                    if i == last_b and seen == n_compute // 2:
                        mid_kernel = k
                prev = k
            last_of_op[(mb, chunk, kind)] = prev
            if i == last_b:
                end_kernel = prev
            t += self.u(4, 9)
            rec.ops.append((kind, mb, chunk, a_begin, t, ext))
            rec.thread = None
            t += self.u(2, 5)
        # data-parallel gradient buckets (Megatron's interleaved schedule: in its misc phase), then the optimizer
        t += self.u(15, 30)
        misc = MEGATRON_PHASE + "misc" if self.megatron and self.sched == "interleaved" else None
        if misc:
            opened[misc] = t
            t += self.u(2, 6)
        buckets = []
        for dep in (mid_kernel, end_kernel):
            ev = CpuEvent("cudaStreamWaitEvent", "cuda_runtime", t, t + self.u(1, 3))
            ev.corr = self.next_corr(rank)
            rec.cpu.append(ev)
            t = ev.end + self.u(2, 5)
            k = Kernel(rank, STREAM_DP, NCCL_AR_F32, "dp")
            k.deps = [dep]
            t = self.nccl(rec, k, t, "dp", DP_BUCKET_NELEMS, "Float")
            buckets.append(k)
        if misc:
            t += self.u(2, 6)
            rec.megatron.append((misc, opened.pop(misc), t))
        t += self.u(30, 60)
        prev = None
        for name, ns in ((ADAM, 180 * US), (ADAM, 170 * US), (CAST, 40 * US)):
            k = Kernel(rank, STREAM_COMPUTE, name, "compute")
            k.dur = int(ns * slow * rng.uniform(0.95, 1.05))
            k.deps = list(buckets) + ([barrier] if barrier is not None else []) if prev is None else []
            barrier = None
            t = self.launch(rec, k, t)
            prev = k
        rec.end = t  # host time when cudaDeviceSynchronize is called (completed after the solve)
        return rec

    # -- device ----------------------------------------------------------------------------------

    def solve(self, recs):
        """Start and end of every kernel of one step, all ranks together."""
        queues = {}
        for rec in recs:
            for k in rec.kernels:
                queues.setdefault((k.rank, k.stream), []).append(k)
        heads = {q: 0 for q in queues}
        prev_end = {q: None for q in queues}
        remaining = sum(len(v) for v in queues.values())
        progress = True
        while remaining and progress:
            progress = False
            for q, lst in queues.items():
                i = heads[q]
                while i < len(lst):
                    k = lst[i]
                    if k.start is None:
                        ready = True
                        s = k.min_start
                        if prev_end[q] is not None and prev_end[q] > s:
                            s = prev_end[q]
                        for d in k.deps:
                            if d.end is None:
                                ready = False
                                break
                            if d.end > s:
                                s = d.end
                        if not ready:
                            break
                        k.start = s
                        progress = True
                        if k.group is None:
                            k.end = s + k.dur
                        else:
                            x, members, started = self.xfer[k.group]
                            started[k.rank] = k
                            if len(started) == len(members):
                                end = max(m.start for m in started.values()) + x
                                for m in started.values():
                                    m.end = end
                                del self.xfer[k.group]
                    if k.end is None:
                        break
                    prev_end[q] = k.end
                    i += 1
                    remaining -= 1
                    progress = True
                heads[q] = i
        if remaining:
            raise RuntimeError("device simulation deadlocked")

    def step(self, step):
        recs = [self.host_step(step, r) for r in range(WORLD)]
        self.solve(recs)
        for rec in recs:
            rank = rec.rank
            done = max(k.end for k in rec.kernels)
            b = rec.end
            e = max(b + self.u(2, 4), done + self.u(2, 6))
            ev = CpuEvent("cudaDeviceSynchronize", "cuda_runtime", b, e)
            ev.corr = self.next_corr(rank)
            rec.cpu.append(ev)
            rec.end = e + self.u(8, 20)
            self.host_t[rank] = rec.end + self.u(1, 3)
        return recs


def peer_rank(rank, peer_stage):
    c = coord_of(rank)
    return rank_of(c["dp"], peer_stage, c["tp"])


# ---------------------------------------------------------------------------------------------
# Answers from the true timeline.

def union(intervals):
    total = 0
    covered = None
    merged = []
    for b, e in sorted(intervals):
        if covered is None or b > covered:
            merged.append([b, e])
            covered = e
        elif e > covered:
            merged[-1][1] = e
            covered = e
    for b, e in merged:
        total += e - b
    return total, merged


def overlap_len(a, b):
    """Length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def op_spans(rec):
    spans = {}
    for k in rec.kernels:
        if k.op is None:
            continue
        s = spans.get(k.op)
        if s is None:
            spans[k.op] = [k.start, k.end]
        else:
            if k.start < s[0]:
                s[0] = k.start
            if k.end > s[1]:
                s[1] = k.end
    return spans


def step_answers(recs, v):
    """ops, bubble, comm of one whole step from its records (true times)."""
    ops = []
    phases = []
    comm = {}
    for rec in recs:
        rank = rec.rank
        stage = coord_of(rank)["pp"]
        spans = op_spans(rec)
        for (kind, mb, chunk), (b, e) in spans.items():
            ops.append({"rank": rank, "step": rec.step, "stage": chunk * PP + stage, "chunk": chunk,
                        "microbatch": mb, "kind": kind, "begin_ns": b, "end_ns": e})
        pipe = [(b, e) for b, e in spans.values()]
        pipe += [(k.start, k.end) for k in rec.kernels if k.kind in ("send", "recv")]
        busy, _ = union([(b, e) for b, e in spans.values()])
        phases.append((stage, min(b for b, _ in pipe), max(e for _, e in pipe), busy))
        compute = union([(k.start, k.end) for k in rec.kernels if k.kind == "compute"])[1]
        c = {}
        for dim, kinds in (("tp", ("tp",)), ("pp", ("send", "recv")), ("dp", ("dp",))):
            length, merged = union([(k.start, k.end) for k in rec.kernels if k.kind in kinds])
            c[dim] = length
            c[dim + "_exposed"] = length - overlap_len(merged, compute)
        ar_len, ar_merged = union([(k.start, k.end) for k in rec.kernels if k.kind in ("tp", "dp")])
        c_sql = {"tp": "unknown-by-args", "dp": "unknown-by-args", "pp": c["pp"], "pp_exposed": c["pp_exposed"],
                 "allreduce": ar_len, "allreduce_exposed": ar_len - overlap_len(ar_merged, compute)}
        comm[str(rank)] = (c, c_sql)
    begin = min(p[1] for p in phases)
    end = max(p[2] for p in phases)
    window = end - begin
    stage_idle = [0] * PP
    stage_n = [0] * PP
    idle = 0
    for stage, _, _, busy in phases:
        stage_idle[stage] += window - busy
        stage_n[stage] += 1
        idle += window - busy
    bubble = {"per_stage": [stage_idle[s] / (stage_n[s] * window) for s in range(PP)],
              "overall": idle / (len(phases) * window),
              "window_begin_ns": begin, "window_end_ns": end}
    ops.sort(key=lambda o: (o["rank"], o["begin_ns"]))
    return ops, bubble, {r: c[0] for r, c in comm.items()}, {r: c[1] for r, c in comm.items()}


RULES = [
    "Times: ns since the Unix epoch on rank 0's clock (the true clock: skew_0 = 0). Rank R writes true + "
    "clock_skew_ns; the importer adds clock_offset_ns = -(skew_R - skew_0) to rank R's times.",
    "Step of a kernel: the ProfilerStep#N (Kineto) / NVTX start-end range ProfilerStep#N (nsys) whose host "
    "range contains the kernel's launch (cudaLaunchKernel etc., joined by correlation id). The first and the "
    "last ProfilerStep of every trace are cut by the capture window and are dropped with all their kernels.",
    "Op of a kernel: the PP:{stage}{F|B}{mb} range (Kineto) / 'F mb3 chunk0' NVTX push-pop range (nsys) that "
    "contains its launch on the same host thread; an op's kernels are its compute kernels and its TP "
    "all-reduces. Pipeline sends/receives, DP all-reduces, optimizer kernels and memcpy/memset are launched "
    "outside every op range.",
    "Unannotated (no PP: / NVTX op ranges): on each rank, the step's kernels on the compute and TP streams in "
    "launch order, leaving out the optimizer (multi_tensor_apply_kernel, direct_copy) and memcpy/memset, split "
    "into ops: a new op starts where a pipeline SendRecv was launched since the previous kernel, or where a kernel "
    "of definite direction disagrees with the current op's (forward only: indexSelectLargeIndex, "
    "vectorized_layer_norm_kernel, flash_fwd_kernel, silu_kernel, the tn GEMM, cunn_SoftMaxForward; backward only: "
    "cunn_SoftMaxBackward, layer_norm_grad_input_kernel_vectorized, flash_bwd_*, silu_backward_kernel, the nt GEMM, "
    "embedding_backward_feature_kernel; a kernel whose name says neither, as the nn GEMM, the TP all-reduce and "
    "every kernel under --neutral-kernel-names, is a backward's when launched from another thread than the "
    "ProfilerStep's: torch's autograd thread). The k-th F of a step "
    "on a rank is micro-batch k, and so is the k-th B; stage = the rank's pp coordinate in job.json's mesh "
    "(order tp-dp-pp). The send/recv kernels' Src/Dst Rank and Seq confirm the pairing.",
    "Megatron cases: an op is the device work launched (any thread) between two consecutive Megatron p2p call "
    "ranges of a step; the call after it says which: send_forward* follows an F, send_backward* a B, "
    "send_forward_backward_recv_forward_backward an F then a B in the steady phase (an F in the warm-up), recv_* "
    "nothing; the B of an F+B pair begins at the first launch from the autograd thread. Micro-batch and chunk: "
    "the stage's schedule in order.",
    "Op span (ops[].begin_ns/end_ns): first kernel begin to last kernel end of the op's kernels.",
    "Bubble: engine/plan/measured_bubble: pipeline spans of a rank = its F/B op spans and its pipeline "
    "send/recv kernels (ncclDevKernel_SendRecv) of the step; window = earliest pipeline span begin to latest "
    "end over all ranks; busy = union of the rank's F/B spans; stage = pp coordinate; per_stage[s] = mean over "
    "the stage's ranks of (window - busy) / window; overall = sum of idle / (ranks x window).",
    "Comm: per rank and step, tp / pp / dp = length of the union of that dimension's NCCL kernels of the step "
    "(dimension from the kernel's Process Group Description); *_exposed = that union minus its overlap with "
    "the union of the rank's compute kernels (every non-NCCL kernel; memcpy/memset are not kernels).",
    "nsys: NCCL kernels carry no communicator; NCCL's NVTX range around each launch names it (payload "
    "'NCCL communicator ID'), and the ranks whose exports use a communicator are its group: comm is the same.",
    "Collectives: all members of one collective end at the same true time (start times differ).",
    "kernels: number of cat 'kernel' events in rank R's Kineto trace = rows of CUPTI_ACTIVITY_KIND_KERNEL in "
    "report.R.sqlite (memcpy/memset not counted); partial steps included.",
]


# ---------------------------------------------------------------------------------------------
# Kineto writer.

def fmt_us(ns):
    if ns < 0:
        raise ValueError("negative time")
    return "%d.%03d" % (ns // 1000, ns % 1000)


def jstr(s):
    return json.dumps(s)


def args_json(pairs):
    return "{" + ",".join("%s:%s" % (jstr(k), jstr(v) if isinstance(v, str) else
                                     ("true" if v is True else "false" if v is False else
                                      json.dumps(v))) for k, v in pairs) + "}"


# --neutral-kernel-names: kernel names (Kineto's and nsys's) that say no direction, as many real kernels' do (cuBLAS's, a
# fused one's), so that only the launching thread tells a backward's kernels (autograd's own thread).
DIRECTION_WORDS = re.compile(r"fwd|bwd|forward|backward|grad", re.IGNORECASE)


class KinetoWriter:
    def __init__(self, path, sim, rank, window, gz, neutral_names=False):
        self.neutral_names = neutral_names
        self.sim = sim
        self.rank = rank
        self.skew = sim.skew[rank]
        self.t0, self.t1 = window          # true times
        self.base = self.t0 + self.skew - 20 * MS - sim.rng.randrange(0, 10 ** 6)
        if gz:   # mtime 0 and no file name in the header: the same seed gives the same bytes
            self.raw = open(path, "wb")
            self.f = io.TextIOWrapper(gzip.GzipFile(filename="", mode="wb", fileobj=self.raw, compresslevel=6,
                                                    mtime=0), encoding="ascii")
        else:
            self.raw = None
            self.f = open(path, "w", encoding="ascii")
        self.bytes = 0
        self.first = True
        self.kernels = 0
        dev = rank % DEVICES_PER_NODE
        self.dev = dev
        pg_config = [{"pg_name": pg["pg_name"], "pg_desc": pg["pg_desc"], "backend_config": pg["backend_config"],
                      "pg_size": pg["pg_size"], "ranks": pg["ranks"]}
                     for pg in PGS if rank in pg["ranks"]]
        head = ('{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    %s\n  ],\n  "distributedInfo": %s,\n'
                '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": %d,\n  "traceEvents": [\n') % (
            json.dumps({"id": dev, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85045346304,
                        "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
                        "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
                        "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
                        "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448}),
            json.dumps({"backend": "nccl", "rank": rank, "world_size": WORLD, "pg_count": len(pg_config),
                        "pg_config": pg_config, "nccl_version": "2.21.5"}),
            self.base)
        self.write_raw(head)
        pid, tid = sim.pid[rank], sim.tid[rank]
        meta = [
            '{"name":"process_name","ph":"M","ts":%s,"pid":%d,"tid":0,"args":{"name":"python3"}}' % (fmt_us(self.l(self.t0)), pid),
            '{"name":"process_labels","ph":"M","ts":%s,"pid":%d,"tid":0,"args":{"labels":"CPU"}}' % (fmt_us(self.l(self.t0)), pid),
            '{"name":"thread_name","ph":"M","ts":%s,"pid":%d,"tid":%d,"args":{"name":"thread %d (python3)"}}' % (fmt_us(self.l(self.t0)), pid, tid, tid),
            '{"name":"process_name","ph":"M","ts":%s,"pid":%d,"tid":0,"args":{"name":"python3"}}' % (fmt_us(self.l(self.t0)), dev),
            '{"name":"process_labels","ph":"M","ts":%s,"pid":%d,"tid":0,"args":{"labels":"GPU %d"}}' % (fmt_us(self.l(self.t0)), dev, dev),
        ]
        for s in (STREAM_COMPUTE, STREAM_TP, STREAM_SEND, STREAM_RECV, STREAM_DP):
            meta.append('{"name":"thread_name","ph":"M","ts":%s,"pid":%d,"tid":%d,"args":{"name":"stream %d "}}'
                        % (fmt_us(self.l(self.t0)), dev, s, s))
        for m in meta:
            self.event(m)

    def l(self, t):
        return t + self.skew - self.base

    def write_raw(self, s):
        self.f.write(s)
        self.bytes += len(s)

    def event(self, s):
        if self.first:
            self.first = False
            self.write_raw("  " + s)
        else:
            self.write_raw(",\n  " + s)

    def step(self, rec, annotated, cut):
        """Writes one step of this rank; cut = 'first' / 'last' / None."""
        sim = self.sim
        pid, tid = sim.pid[self.rank], sim.tid[self.rank]
        t0, t1 = self.t0, self.t1

        def inside(b, e):
            return b >= t0 and e <= t1

        b, e = rec.begin, rec.end
        if cut == "first":
            b = max(b, t0)
        if cut == "last":
            e = min(e, t1)
        ext_step = rec.step * 1000000 + self.rank   # unique, not used by anything else
        self.event('{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":%d,"tid":%d,"ts":%s,"dur":%s,'
                   '"args":{"External id":%d}}' % (rec.step, pid, tid, fmt_us(self.l(b)), fmt_us(e - b), ext_step))
        if annotated:
            stage = coord_of(self.rank)["pp"]
            for kind, mb, chunk, ab, ae, ext in rec.ops:
                if inside(ab, ae):
                    self.event('{"ph":"X","cat":"user_annotation","name":"PP:%d%s%d","pid":%d,"tid":%d,"ts":%s,'
                               '"dur":%s,"args":{"External id":%d}}'
                               % (chunk * PP + stage, kind, mb, pid, tid, fmt_us(self.l(ab)), fmt_us(ae - ab), ext))
        kept = set()
        for ev in rec.cpu:
            if not inside(ev.begin, ev.end):
                continue
            k = ev.kernel
            ext = k.ext if (k is not None and k.ext is not None) else ext_step
            self.event('{"ph":"X","cat":"cuda_runtime","name":"%s","pid":%d,"tid":%d,"ts":%s,"dur":%s,'
                       '"args":{"cbid":%d,"correlation":%d,"External id":%d}}'
                       % (ev.name, pid, tid if ev.tid is None else ev.tid, fmt_us(self.l(ev.begin)),
                          fmt_us(ev.end - ev.begin), CBID.get(ev.name, 0), ev.corr, ext))
            if k is not None:
                kept.add(k.corr)
        for k in rec.kernels:
            if not inside(k.start, k.end):
                continue
            ext = k.ext if k.ext is not None else ext_step
            if k.kind in ("memcpy", "memset"):
                cat = "gpu_memcpy" if k.kind == "memcpy" else "gpu_memset"
                dur = k.end - k.start
                self.event('{"ph":"X","cat":"%s","name":"%s","pid":%d,"tid":%d,"ts":%s,"dur":%s,"args":{'
                           '"External id":%d,"device":%d,"context":1,"stream":%d,"correlation":%d,"bytes":%d,'
                           '"memory bandwidth (GB/s)":%.3f}}'
                           % (cat, k.name, self.dev, k.stream, fmt_us(self.l(k.start)), fmt_us(dur), ext, self.dev,
                              k.stream, k.corr, k.bytes, k.bytes / max(dur, 1)))
            else:
                grid, block, regs, ssm, dsm = LAUNCH[k.name]
                extra = ""
                if k.args is not None:
                    extra = args_json(k.args)[1:-1] + ","
                self.event('{"ph":"X","cat":"kernel","name":%s,"pid":%d,"tid":%d,"ts":%s,"dur":%s,"args":{%s'
                           '"External id":%d,"queued":0,"device":%d,"context":1,"stream":%d,"correlation":%d,'
                           '"registers per thread":%d,"shared memory":%d,"blocks per SM":%.6f,"warps per SM":%.6f,'
                           '"grid":[%d, %d, %d],"block":[%d, %d, %d],"est. achieved occupancy %%":%d}}'
                           % (jstr(DIRECTION_WORDS.sub("x", k.name) if self.neutral_names else k.name), self.dev,
                              k.stream, fmt_us(self.l(k.start)), fmt_us(k.end - k.start),
                              extra, ext, self.dev, k.stream, k.corr, regs, ssm + dsm,
                              grid[0] * grid[1] * grid[2] / 132.0,
                              grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2] / 32 / 132.0,
                              grid[0], grid[1], grid[2], block[0], block[1], block[2], 25))
                self.kernels += 1
            if k.corr in kept:
                self.event('{"ph":"s","id":%d,"pid":%d,"tid":%d,"ts":%s,"cat":"ac2g","name":"ac2g"}'
                           % (k.corr, pid, tid, fmt_us(self.l(k.launch_begin))))
                self.event('{"ph":"f","id":%d,"pid":%d,"tid":%d,"ts":%s,"cat":"ac2g","name":"ac2g","bp":"e"}'
                           % (k.corr, self.dev, k.stream, fmt_us(self.l(k.start))))

    def close(self):
        self.write_raw('\n  ],\n  "traceName": %s\n}\n'
                       % jstr("/workspace/traces/rank%d_trace.json" % self.rank))
        self.f.close()
        if self.raw is not None:
            self.raw.close()


CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51, "cudaStreamWaitEvent": 147,
        "cudaDeviceSynchronize": 165}


# ---------------------------------------------------------------------------------------------
# Nsight Systems SQLite writer.

NSYS_API = {"cudaLaunchKernel": "cudaLaunchKernel_v7000", "cudaMemcpyAsync": "cudaMemcpyAsync_v3020",
            "cudaMemsetAsync": "cudaMemsetAsync_v3020", "cudaStreamWaitEvent": "cudaStreamWaitEvent_v3020",
            "cudaDeviceSynchronize": "cudaDeviceSynchronize_v3020"}

SQL_SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER NOT NULL, duration INTEGER NOT NULL, startTime INTEGER NOT NULL,
  stopTime INTEGER NOT NULL);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT,
  isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER,
  smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER, ctxswDevPath TEXT,
  ctrlDevPath TEXT, revision INTEGER, nodeMask INTEGER, constantMemory INTEGER, maxIPC INTEGER,
  maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER, maxShmemPerSm INTEGER,
  maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, asyncEngines INTEGER, maxWarpsPerSm INTEGER,
  maxBlocksPerSm INTEGER, maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER, maxBlockDimY INTEGER,
  maxBlockDimZ INTEGER, maxGridDimX INTEGER, maxGridDimY INTEGER, maxGridDimZ INTEGER, computeMajor INTEGER,
  computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER);
CREATE TABLE TARGET_INFO_CUDA_STREAM (streamId INTEGER NOT NULL, hwId INTEGER NOT NULL, vmId INTEGER NOT NULL,
  processId INTEGER NOT NULL, contextId INTEGER NOT NULL, priority INTEGER NOT NULL, flag INTEGER NOT NULL);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER,
  cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
  gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL,
  staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
  localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER,
  sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
  callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER,
  srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER,
  graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
  int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
"""


class SqliteWriter:
    def __init__(self, path, sim, rank, window, neutral_names=False):
        self.neutral_names = neutral_names
        if os.path.exists(path):
            os.remove(path)
        self.sim = sim
        self.rank = rank
        self.skew = sim.skew[rank]
        self.t0, self.t1 = window
        self.session = self.t0 + self.skew - 37 * MS - sim.rng.randrange(0, 10 ** 6)
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.executescript("BEGIN;" + SQL_SCHEMA + "COMMIT;")
        self.strings = {}
        self.kernel_rows = []
        self.runtime_rows = []
        self.memcpy_rows = []
        self.memset_rows = []
        self.nvtx_rows = []
        self.range_id = 0
        self.grid_id = 0
        pid, tid = sim.pid[rank], sim.tid[rank]
        self.gpid = pid << 24
        self.gtid = (pid << 24) | tid
        self.nvtx_rng = random.Random(rank * 7919 + 1)
        db = self.db
        db.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
            ("EXPORT_SCHEMA_VERSION", "3.11.1"), ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
            ("EXPORT_SCHEMA_VERSION_MINOR", "11"), ("EXPORT_SCHEMA_VERSION_MICRO", "1"),
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", "2024.2.1.106"),
            ("EXPORT_TIME_UTC", "2024-06-10T06:42:17.116Z"), ("EXPORT_OS", "Linux"),
            ("EXPORT_RELATIVE_TIMESTAMPS", "1")])
        db.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)", [
            (34, "NvtxMark", "NVTX Mark"), (59, "NvtxPushPopRange", "NVTX PushPop Range"),
            (60, "NvtxStartEndRange", "NVTX StartEnd Range"), (75, "NvtxDomainCreate", "NVTX Domain Create"),
            (79, "CudaRuntime", "CUDA Runtime")])
        db.executemany("INSERT INTO ENUM_NSYS_EVENT_CLASS VALUES (?, ?, ?)", [
            (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA Runtime API")])
        db.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", [
            (1, "CUDA_MEMCPY_OPER_HTOD", "Host-to-Device")])
        db.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", [
            (1, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"), (2, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
            (3, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device")])
        utc = self.session
        tstr = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(utc // 10 ** 9)) + ".%09dZ" % (utc % 10 ** 9)
        db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)", (utc, tstr, tstr))
        db.execute("INSERT INTO ANALYSIS_DETAILS VALUES (0, ?, 0, ?)",
                   (self.l(self.t1) + 5 * MS, self.l(self.t1) + 5 * MS))
        dev = rank % DEVICES_PER_NODE
        self.dev = dev
        db.execute("INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, l2CacheSize, totalMemory,"
                   " memoryBandwidth, clockRate, smCount, uuid, chipName, cuDevice, maxRegistersPerBlock,"
                   " maxShmemPerBlock, threadsPerWarp, computeMajor, computeMinor, smMajor, smMinor)"
                   " VALUES (0, ?, 'NVIDIA H100 80GB HBM3', ?, 1, 52428800, 85045346304, 3352320000000,"
                   " 1980000000, 132, ?, 'GH100', ?, 65536, 49152, 32, 9, 0, 9, 0)",
                   (dev, "0000:%02x:00.0" % (0x18 + 0x10 * dev), "GPU-5a1c%04d-0000-4000-8000-0000000000%02d" % (dev, dev),
                    dev))
        for s in (STREAM_COMPUTE, STREAM_TP, STREAM_SEND, STREAM_RECV, STREAM_DP):
            db.execute("INSERT INTO TARGET_INFO_CUDA_STREAM VALUES (?, 0, 0, ?, 1, 0, 1)", (s, pid))
        db.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (self.gpid, pid, "python3"))
        db.execute("INSERT INTO ThreadNames VALUES (?, 0, ?)", (self.sid("python3"), self.gtid))
        # the NCCL domain
        self.nvtx(self.l(self.t0) + 1000, None, 75, text="NCCL", domain=1, force_text=True)

    def l(self, t):
        return t + self.skew - self.session

    def sid(self, s):
        i = self.strings.get(s)
        if i is None:
            i = len(self.strings) + 1
            self.strings[s] = i
        return i

    def nvtx(self, start, end, etype, text, domain=0, force_text=False, range_id=None, payload=None, tid=None):
        use_text = force_text or self.nvtx_rng.random() < 0.5
        json_inline = payload is not None and self.nvtx_rng.random() < 0.5
        self.nvtx_rows.append((start, end, etype, range_id, None, None if etype == 75 else 0xff76b900,
                               text if use_text else None, self.gtid if tid is None else (self.gpid | tid),
                               self.gtid if etype == 60 else None, None if use_text else self.sid(text), domain,
                               None, None, None, None, None, None,
                               self.sid(payload) if payload is not None and not json_inline else None,
                               payload if json_inline else None))

    @property
    def kernels(self):
        return len(self.kernel_rows)

    def step(self, rec, annotated, cut):
        sim = self.sim
        t0, t1 = self.t0, self.t1

        def inside(b, e):
            return b >= t0 and e <= t1

        b, e = rec.begin, rec.end
        if cut == "first":
            b = max(b, t0)
        if cut == "last":
            e = min(e, t1)
        self.range_id += 1
        self.nvtx(self.l(b), self.l(e), 60, "ProfilerStep#%d" % rec.step, range_id=self.range_id)
        if inside(rec.mark, rec.mark):
            self.nvtx(self.l(rec.mark), None, 34, "dataloader: batch ready")
        if annotated:
            for kind, mb, chunk, ab, ae, ext in rec.ops:
                if inside(ab, ae):
                    self.nvtx(self.l(ab), self.l(ae), 59, "%s mb%d chunk%d" % (kind, mb, chunk))
        for name, nb, ne, payload, tid in rec.nccl_ranges:
            if inside(nb, ne):
                self.nvtx(self.l(nb), self.l(ne), 59, name, domain=1, payload=payload, tid=tid)
        for name, nb, ne in rec.megatron:   # torch.cuda.nvtx.range_push / range_pop: push-pop ranges
            if inside(nb, ne):
                self.nvtx(self.l(nb), self.l(ne), 59, name)
        for ev in rec.cpu:
            if inside(ev.begin, ev.end):
                gtid = self.gtid if ev.tid is None else (self.gpid | ev.tid)
                self.runtime_rows.append((self.l(ev.begin), self.l(ev.end), 0, gtid, ev.corr,
                                          self.sid(NSYS_API[ev.name]), 0, None))
        for k in rec.kernels:
            if not inside(k.start, k.end):
                continue
            if k.kind == "memcpy":
                self.memcpy_rows.append((self.l(k.start), self.l(k.end), self.dev, 1, k.stream, k.corr, self.gpid,
                                         k.bytes, 1, None, 2, 3, None, None, self.dev, 1, None, None, None))
            elif k.kind == "memset":
                self.memset_rows.append((self.l(k.start), self.l(k.end), self.dev, 1, k.stream, k.corr, self.gpid,
                                         0, k.bytes, None, 3))
            else:
                grid, block, regs, ssm, dsm = LAUNCH[k.name]
                self.grid_id += 1
                self.kernel_rows.append((self.l(k.start), self.l(k.end), self.dev, 1, k.stream, k.corr, self.gpid,
                                         self.sid(DIRECTION_WORDS.sub("x", k.name) if self.neutral_names else k.name),
                                         self.sid(SHORT[k.name]), None, 0, 0, regs,
                                         grid[0], grid[1], grid[2], block[0], block[1], block[2], ssm, dsm, 0, 0,
                                         self.grid_id, ssm + dsm, None, 1))

    def close(self):
        db = self.db
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (%s)" % ",".join("?" * 27), self.kernel_rows)
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", self.runtime_rows)
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (%s)" % ",".join("?" * 19), self.memcpy_rows)
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (%s)" % ",".join("?" * 11), self.memset_rows)
        db.executemany("INSERT INTO NVTX_EVENTS VALUES (%s)" % ",".join("?" * 19), self.nvtx_rows)
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in self.strings.items()])
        db.commit()
        db.close()


# ---------------------------------------------------------------------------------------------
# Driver.

def cut_points(sim, first_recs, last_recs):
    """Per-rank capture window (true times): inside the first and inside the last ProfilerStep."""
    windows = []
    for r in range(WORLD):
        fb, fe = first_recs[r].begin, first_recs[r].end
        lb, le = last_recs[r].begin, last_recs[r].end
        t0 = fb + int((fe - fb) * sim.rng.uniform(0.35, 0.6))
        t1 = lb + int((le - lb) * sim.rng.uniform(0.35, 0.6))
        windows.append((t0, t1))
    return windows


def base_answers(case, sim, steps):
    return {
        "case": case, "world": WORLD, "pp": PP, "tp": TP, "dp": DP, "ep": EP, "m": sim.m, "virtual": sim.v,
        "schedule": sim.sched, "annotated": case in ("1f1b", "interleaved"), "megatron_nvtx": sim.megatron,
        "rank_order": "tp-dp-pp: rank = tp + 2*dp + 4*pp (engine/plan/mesh.cpp Mesh::rankOf)",
        "steps": steps, "dropped_partial_steps": [FIRST_STEP, steps[-1] + 1 if steps else FIRST_STEP + 1],
        "ranks": {str(r): {"stage": coord_of(r)["pp"], "tp": coord_of(r)["tp"], "dp": coord_of(r)["dp"],
                           "device": r % DEVICES_PER_NODE, "host_pid": sim.pid[r], "host_tid": sim.tid[r],
                           "clock_skew_ns": sim.skew[r], "clock_offset_ns": -(sim.skew[r] - sim.skew[0])}
                  for r in range(WORLD)},
        "stragglers": [sim.straggler],
        "rules": RULES,
    }


def generate(outdir, case, steps, seed, neutral_names=False):
    os.makedirs(outdir, exist_ok=True)
    sim = Simulator(case, seed)
    annotated = case in ("1f1b", "interleaved")
    all_recs = [sim.step(FIRST_STEP + i) for i in range(steps + 2)]
    windows = cut_points(sim, all_recs[0], all_recs[-1])
    whole = [FIRST_STEP + 1 + i for i in range(steps)]
    with open(os.path.join(outdir, "job.json"), "w") as f:
        json.dump(job_spec(case), f, indent=2)
        f.write("\n")
    kineto, sqlw = [], []
    for r in range(WORLD):
        # Megatron's ranges are torch.cuda.nvtx calls, which go to NVTX only: torch.profiler does not
        # record them (Kineto has no NVTX activity), so the megatron cases are nsys exports only.
        if not sim.megatron:
            kineto.append(KinetoWriter(os.path.join(outdir, "rank%d_trace.json.gz" % r), sim, r, windows[r], True,
                                       neutral_names))
        sqlw.append(SqliteWriter(os.path.join(outdir, "report.%d.sqlite" % r), sim, r, windows[r], neutral_names))
    for i, recs in enumerate(all_recs):
        cut = "first" if i == 0 else "last" if i == len(all_recs) - 1 else None
        for r in range(WORLD):
            if kineto:
                kineto[r].step(recs[r], annotated, cut)
            sqlw[r].step(recs[r], annotated, cut)
    for w in kineto:
        w.close()
    for w in sqlw:
        w.close()
    ans = base_answers(case, sim, whole)
    ans["ops"] = []
    ans["bubble"] = {}
    ans["comm"] = {}
    for recs in all_recs[1:-1]:
        ops, bubble, comm, comm_sql = step_answers(recs, sim.v)
        n = str(recs[0].step)
        ans["ops"].extend(ops)
        ans["bubble"][n] = bubble
        ans["comm"][n] = comm
    ans["kernels"] = {str(r): (kineto or sqlw)[r].kernels for r in range(WORLD)}
    with open(os.path.join(outdir, "answers.json"), "w") as f:
        json.dump(ans, f, indent=1)
        f.write("\n")
    return ans


def generate_big(outdir, case, seed, gb):
    os.makedirs(outdir, exist_ok=True)
    sim = Simulator(case, seed)
    annotated = case in ("1f1b", "interleaved")
    target = int(gb * 1e9)
    with open(os.path.join(outdir, "job.json"), "w") as f:
        json.dump(job_spec(case), f, indent=2)
        f.write("\n")
    first = sim.step(FIRST_STEP)
    # The first cut is known now; the last is placed inside whichever step ends the set.
    windows = cut_points(sim, first, first)
    windows = [(w[0], 1 << 62) for w in windows]
    writers = [KinetoWriter(os.path.join(outdir, "rank%d_trace.json" % r), sim, r, windows[r], False)
               for r in range(WORLD)]
    for r in range(WORLD):
        writers[r].step(first[r], annotated, "first")
    bubble, comm = {}, {}
    step = FIRST_STEP
    whole = []
    while sum(w.bytes for w in writers) < target:
        step += 1
        recs = sim.step(step)
        for r in range(WORLD):
            writers[r].step(recs[r], annotated, None)
        _, b, c, _ = step_answers(recs, sim.v)
        bubble[str(step)] = b
        comm[str(step)] = c
        whole.append(step)
    last = sim.step(step + 1)
    for r in range(WORLD):
        lb, le = last[r].begin, last[r].end
        writers[r].t1 = lb + int((le - lb) * sim.rng.uniform(0.35, 0.6))
        writers[r].step(last[r], annotated, "last")
        writers[r].close()
    ans = base_answers(case, sim, whole)
    ans["ops_omitted"] = True
    ans["bubble"] = bubble
    ans["comm"] = comm
    ans["kernels"] = {str(r): writers[r].kernels for r in range(WORLD)}
    ans["bytes"] = {str(r): writers[r].bytes for r in range(WORLD)}
    with open(os.path.join(outdir, "answers.json"), "w") as f:
        json.dump(ans, f, indent=1)
        f.write("\n")
    return ans


# ---------------------------------------------------------------------------------------------
# cpu-array: torch 1.13's CPU-only traces (no Kineto: a bare JSON array of host ranges, times in us
# from each rank's profiler start), of a pp 4 job on the CPU backend. No collectives: the ranks are
# aligned by their PP:{stage}SEND_*/RECV_* ranges. Sends are isend (the range posts it); a receive
# blocks until the data arrived (8-20 us after the send began), so its range ends after that.

CPU_PP, CPU_M = 4, 8


def cpu_job_spec():
    spec = job_spec("1f1b")
    spec["name"] = "synthetic import test: cpu-array, pp 4 on the CPU backend (torch 1.13 traces)"
    spec["parallel"].update({"dp": 1, "pp": CPU_PP, "tp": 1, "microbatches": CPU_M})
    spec["cluster"]["devices_per_node"] = CPU_PP
    spec["backend"] = "cpu"
    return spec


def generate_cpu_array(outdir, steps, seed):
    os.makedirs(outdir, exist_ok=True)
    rng = random.Random(seed)
    p, m = CPU_PP, CPU_M
    ops = [stage_ops("1f1b", p, m, 1, s) for s in range(p)]   # rank = stage (tp = dp = 1)
    epoch = 1718000000 * 1000 * MS + rng.randrange(0, 10 ** 9)
    start = [epoch + rng.randrange(0, 5 * MS) for _ in range(p)]   # each profiler's start, true clock
    t = [epoch + 10 * MS + rng.randrange(0, 300 * US) for _ in range(p)]
    speed = [rng.uniform(0.97, 1.03) for _ in range(p)]
    events = [[] for _ in range(p)]   # (name, true begin, true end)
    ans = {"case": "cpu-array", "world": p, "pp": p, "tp": 1, "dp": 1, "ep": 1, "m": m, "virtual": 1,
           "schedule": "1f1b", "annotated": True, "megatron_nvtx": False,
           "steps": [FIRST_STEP + i for i in range(steps)], "dropped_partial_steps": [],
           "ranks": {str(r): {"stage": r, "tp": 0, "dp": 0, "clock_skew_ns": -(start[r] - start[0]),
                              "clock_offset_ns": start[r] - start[0]} for r in range(p)},
           "ops": [], "bubble": {},
           "rules": ["Times: ns on rank 0's clock, which counts from rank 0's profiler start; rank R's trace "
                     "counts from its own, clock_offset_ns later.",
                     "A RECV_* range ends after the matching send began (a blocking receive).",
                     "Op span: its PP: range. Bubble: as for the GPU cases, over the PP: ranges (F/B busy; "
                     "F, B, SEND_*, RECV_* span the window)."]}
    for step in ans["steps"]:
        sent = {}
        pos = [0] * p
        begin = list(t)
        spans = [[] for _ in range(p)]
        for r in range(p):
            t[r] += rng.randint(50 * US, 150 * US)
        while any(pos[r] < len(ops[r]) for r in range(p)):
            progress = False
            for r in range(p):
                while pos[r] < len(ops[r]):
                    kind, mb, _, peer = ops[r][pos[r]]
                    b = t[r]
                    if kind.startswith("recv"):
                        key = ("F" if kind == "recv-act" else "B", mb, peer)
                        if key not in sent:
                            break
                        arrival = sent[key] + rng.randint(8 * US, 20 * US)
                        e = max(b + rng.randint(5 * US, 12 * US), arrival + rng.randint(2 * US, 6 * US))
                        name = "PP:%dRECV_%s%d" % (r, key[0], mb)
                    elif kind.startswith("send"):
                        e = b + rng.randint(10 * US, 30 * US)
                        sent[("F" if kind == "send-act" else "B", mb, r)] = b
                        name = "PP:%dSEND_%s%d" % (r, "F" if kind == "send-act" else "B", mb)
                    else:
                        e = b + int((4 if kind == "F" else 8) * MS * speed[r] * rng.uniform(0.97, 1.03))
                        name = "PP:%d%s%d" % (r, kind, mb)
                        ans["ops"].append({"rank": r, "step": step, "stage": r, "chunk": 0, "microbatch": mb,
                                           "kind": kind, "begin_ns": b - start[0], "end_ns": e - start[0]})
                    events[r].append((name, b, e))
                    spans[r].append((kind, b, e))
                    t[r] = e + rng.randint(3 * US, 10 * US)
                    pos[r] += 1
                    progress = True
            if not progress:
                raise RuntimeError("the cpu-array schedule deadlocked")
        for r in range(p):
            t[r] += rng.randint(300 * US, 600 * US)   # the optimizer
            events[r].append(("ProfilerStep#%d" % step, begin[r], t[r]))
            t[r] += rng.randint(5 * US, 20 * US)
        lo = min(b for sp in spans for _, b, _ in sp)
        hi = max(e for sp in spans for _, _, e in sp)
        busy = [union([(b, e) for k, b, e in spans[r] if k in ("F", "B")])[0] for r in range(p)]
        ans["bubble"][str(step)] = {"per_stage": [(hi - lo - busy[r]) / (hi - lo) for r in range(p)],
                                    "overall": sum(hi - lo - x for x in busy) / (p * (hi - lo)),
                                    "window_begin_ns": lo - start[0], "window_end_ns": hi - start[0]}
    for r in range(p):
        tid = 1000 + r
        rows = ['{"name": %s, "ph": "X", "ts": %s, "dur": %s, "tid": %d, "pid": "CPU functions", "args": {}}'
                % (jstr(name), fmt_us(b - start[r]), fmt_us(e - b), tid)
                for name, b, e in sorted(events[r], key=lambda x: (x[1], -x[2]))]
        with open(os.path.join(outdir, "rank-%d.json" % r), "w") as f:
            f.write("[" + ",\n".join(rows) + "]\n")
    with open(os.path.join(outdir, "job.json"), "w") as f:
        json.dump(cpu_job_spec(), f, indent=2)
        f.write("\n")
    with open(os.path.join(outdir, "answers.json"), "w") as f:
        json.dump(ans, f, indent=1)
        f.write("\n")
    return ans


# ---------------------------------------------------------------------------------------------
# Self-check: read the files back as an importer would and compare with answers.json.

DIRECTION = {EMBED_F: "F", NORM_F: "F", FLASH_F: "F", SILU_F: "F", GEMM_TN: "F", LOSS_F: "F",
             LOSS_B: "B", NORM_B: "B", FLASH_B: "B", FLASH_B_CVT: "B", SILU_B: "B", GEMM_NT: "B", EMBED_B: "B"}


def verify(outdir):
    with open(os.path.join(outdir, "answers.json")) as f:
        ans = json.load(f)
    with open(os.path.join(outdir, "job.json")) as f:
        json.load(f)
    annotated = ans["annotated"]
    steps = set(ans["steps"])
    offs = {int(r): v["clock_offset_ns"] for r, v in ans["ranks"].items()}
    found_ops = []
    pipe_kernels = {}      # (rank, step) -> [(b, e)] send/recv
    kernels_by_rank = {}
    coll_ends = {}         # (pg, seq) or p2p key -> set of aligned ends
    for r in range(WORLD):
        with gzip.open(os.path.join(outdir, "rank%d_trace.json.gz" % r), "rt") as f:
            tr = json.load(f)
        assert list(tr.keys()) == ["schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit",
                                   "baseTimeNanoseconds", "traceEvents", "traceName"], list(tr.keys())
        assert tr["distributedInfo"]["rank"] == r
        base = tr["baseTimeNanoseconds"]

        def ns(x):
            return base + int(round(x * 1000)) + offs[r]

        evs = tr["traceEvents"]
        steps_cpu = [(e["name"], ns(e["ts"]), ns(e["ts"]) + int(round(e["dur"] * 1000)))
                     for e in evs if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
        names = sorted(int(n.split("#")[1]) for n, _, _ in steps_cpu)
        assert names == list(range(FIRST_STEP, FIRST_STEP + len(names))), names
        assert set(names[1:-1]) == steps, (names, steps)
        pp_ranges = [(e["name"], ns(e["ts"]), ns(e["ts"]) + int(round(e["dur"] * 1000)))
                     for e in evs if e.get("cat") == "user_annotation" and e["name"].startswith("PP:")]
        assert bool(pp_ranges) == annotated
        launches = {e["args"]["correlation"]: ns(e["ts"]) for e in evs if e.get("cat") == "cuda_runtime"}
        launch_tid = {e["args"]["correlation"]: e["tid"] for e in evs if e.get("cat") == "cuda_runtime"}
        main_tid = next(e["tid"] for e in evs if e.get("cat") == "user_annotation")
        kernels = [e for e in evs if e.get("cat") == "kernel"]
        assert len(kernels) == ans["kernels"][str(r)]
        kernels_by_rank[r] = sorted((ns(k["ts"]), ns(k["ts"]) + int(round(k["dur"] * 1000)), k["name"])
                                    for k in kernels)
        flows = {(e["ph"], e["id"]) for e in evs if e.get("cat") == "ac2g"}
        per_op = {}
        seq_ops = []
        for k in kernels:
            c = k["args"]["correlation"]
            b = ns(k["ts"])
            e = b + int(round(k["dur"] * 1000))
            if "Collective name" in k["args"]:
                a = k["args"]
                if a["Collective name"] == "allreduce":
                    key = (a["Process Group Name"], a["Seq"])
                else:
                    key = ("p2p", a["Src Rank"], a["Dst Rank"], a["Seq"])
                coll_ends.setdefault(key, []).append(e)
            if c not in launches:
                continue
            assert ("s", c) in flows and ("f", c) in flows
            lt = launches[c]
            st = [n for n, sb, se in steps_cpu if sb <= lt <= se]
            assert len(st) == 1
            step = int(st[0].split("#")[1])
            if step not in steps:
                continue
            if k["name"] == NCCL_P2P:
                pipe_kernels.setdefault((r, step), []).append((b, e))
                continue
            if annotated:
                op = [n for n, ab, ae in pp_ranges if ab <= lt <= ae]
                if op:
                    per_op.setdefault((step, op[0]), []).append((b, e))
            else:
                seq_ops.append((lt, step, k, b, e))
        stage = ans["ranks"][str(r)]["stage"]
        if annotated:
            for (step, name), iv in per_op.items():
                s = name[3:]
                kind = "F" if "F" in s else "B"
                gs, mb = s.split(kind)
                found_ops.append((r, step, int(gs), kind, int(mb), min(b for b, _ in iv), max(e for _, e in iv)))
        else:
            # infer: a new op starts after a pipeline send/recv launch, or where a kernel of a definite
            # direction disagrees with the current op's; k-th F (B) of the step = micro-batch k
            seq_ops.sort(key=lambda x: x[0])
            p2p_launch = sorted(launches[k["args"]["correlation"]] for k in kernels
                                if k["name"] == NCCL_P2P and k["args"]["correlation"] in launches)
            ops_of_step = {}
            cur = None
            for lt, step, k, b, e in seq_ops:
                nm = k["name"]
                if nm in (ADAM, CAST, NCCL_AR_F32):
                    cur = None
                    continue
                d = DIRECTION.get(nm)
                if d is None:  # a name that says neither: autograd's own thread launches a backward
                    d = "F" if launch_tid[k["args"]["correlation"]] == main_tid else "B"
                boundary = (cur is None or cur["step"] != step or any(cur["last"] < p < lt for p in p2p_launch)
                            or (d is not None and cur["kind"] is not None and d != cur["kind"]))
                if boundary:
                    cur = {"step": step, "kind": None, "iv": []}
                    ops_of_step.setdefault(step, []).append(cur)
                if cur["kind"] is None:
                    cur["kind"] = d
                cur["iv"].append((b, e))
                cur["last"] = lt
            for step, lst in ops_of_step.items():
                count = {"F": 0, "B": 0}
                for o in lst:
                    mb = count[o["kind"]]
                    count[o["kind"]] += 1
                    found_ops.append((r, step, stage, o["kind"], mb, min(b for b, _ in o["iv"]),
                                      max(e for _, e in o["iv"])))
    want = sorted((o["rank"], o["step"], o["stage"], o["kind"], o["microbatch"], o["begin_ns"], o["end_ns"])
                  for o in ans["ops"])
    got = sorted(found_ops)
    assert got == want, "ops differ: %d vs %d; first difference %s" % (
        len(got), len(want), next(((a, b) for a, b in zip(got, want) if a != b), None))
    # collectives end together once the offsets are applied
    for key, ends in coll_ends.items():
        assert len(ends) <= 2
        assert len(set(ends)) == 1, (key, ends)
    # bubble, a second way: from the answers' op list and the send/recv kernels read back
    for n in ans["steps"]:
        spans = {}
        for o in ans["ops"]:
            if o["step"] == n:
                spans.setdefault(o["rank"], []).append((o["begin_ns"], o["end_ns"]))
        lo = min(min(b for b, _ in v + pipe_kernels[(r, n)]) for r, v in spans.items())
        hi = max(max(e for _, e in v + pipe_kernels[(r, n)]) for r, v in spans.items())
        w = hi - lo
        per_stage = []
        for s in range(PP):
            rs = [r for r in range(WORLD) if coord_of(r)["pp"] == s]
            per_stage.append(sum((w - union(spans[r])[0]) / w for r in rs) / len(rs))
        got_b = ans["bubble"][str(n)]
        assert all(abs(a - b) < 1e-12 for a, b in zip(per_stage, got_b["per_stage"])), (per_stage, got_b)
        assert abs(sum(per_stage) / PP - got_b["overall"]) < 1e-12
        assert 0 < got_b["overall"] < 1
    # the SQLite exports hold the same kernels, in the same (aligned) times
    for r in range(WORLD):
        db = sqlite3.connect(os.path.join(outdir, "report.%d.sqlite" % r))
        ver = db.execute("SELECT value FROM META_DATA_EXPORT WHERE name='EXPORT_SCHEMA_VERSION'").fetchone()[0]
        assert ver.startswith("3.")
        utc = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        rows = db.execute("SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                          "JOIN StringIds s ON s.id = k.demangledName").fetchall()
        got_k = sorted((utc + b + offs[r], utc + e + offs[r], n) for b, e, n in rows)
        assert got_k == kernels_by_rank[r], "rank %d: sqlite kernels differ from Kineto" % r
        nv = db.execute("SELECT COALESCE(n.text, s.value), n.eventType, n.globalTid FROM NVTX_EVENTS n "
                        "LEFT JOIN StringIds s ON s.id = n.textId").fetchall()
        pid = ans["ranks"][str(r)]["host_pid"]
        assert all(g // 0x1000000 % 0x1000000 == pid for _, _, g in nv)
        assert sum(1 for t, e, _ in nv if e == 60) == len(steps) + 2
        assert any(e == 75 and t == "NCCL" for t, e, _ in nv)
        assert any(e == 34 for t, e, _ in nv)
        ops_nv = [t for t, e, _ in nv if e == 59 and (t.startswith("F mb") or t.startswith("B mb"))]
        assert bool(ops_nv) == annotated
        corr_ok = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                             "ON r.correlationId = k.correlationId").fetchone()[0]
        assert corr_ok > 0
        assert db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()[0] > 0
        db.close()
    return True


def verify_megatron(outdir):
    """The nsys exports of a megatron case: every pipeline SendRecv kernel launched inside one of
    Megatron's p2p call ranges, no compute kernel launched inside one, each whole step holding its
    stage's calls, and the kernel counts of answers.json."""
    with open(os.path.join(outdir, "answers.json")) as f:
        ans = json.load(f)
    for r in range(WORLD):
        stage = ans["ranks"][str(r)]["stage"]
        prog = megatron_program(ans["schedule"], PP, ans["m"], ans["virtual"], stage)
        calls_per_step = sum(1 for item in prog if item[0] == "call")
        db = sqlite3.connect(os.path.join(outdir, "report.%d.sqlite" % r))
        nv = db.execute("SELECT n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                        "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 AND n.domainId = 0").fetchall()
        calls = sorted((b, e) for b, e, t in nv if t.startswith(MEGATRON_P2P))
        steps = db.execute("SELECT n.start, n.end FROM NVTX_EVENTS n WHERE n.eventType = 60").fetchall()
        for n, (b, e) in enumerate(sorted(steps)[1:-1]):
            inside = sum(1 for cb, ce in calls if b <= cb and ce <= e)
            assert inside == calls_per_step, (r, n, inside, calls_per_step)
        rows = db.execute("SELECT r.start, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                          "ON r.correlationId = k.correlationId JOIN StringIds s ON s.id = k.demangledName").fetchall()
        for launch, name in rows:
            in_call = any(cb <= launch <= ce for cb, ce in calls)
            if name == NCCL_P2P:
                assert in_call, (r, launch)
            elif not name.startswith("ncclDevKernel"):
                assert not in_call, (r, launch, name)
        count = db.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        assert count == ans["kernels"][str(r)]
        db.close()
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--case", choices=("1f1b", "interleaved", "unannotated", "megatron", "megatron-interleaved",
                                       "cpu-array"),
                    default="1f1b")
    ap.add_argument("--neutral-kernel-names", action="store_true",
                    help="kernel names without fwd/bwd/forward/backward/grad (for the unannotated case)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--big-gb", type=float, default=None,
                    help="write uncompressed rank*_trace.json until they reach X * 10^9 bytes together")
    ap.add_argument("--no-verify", action="store_true", help="skip reading the output back")
    a = ap.parse_args()
    if a.steps < 1:
        ap.error("--steps must be at least 1")
    t = time.time()
    if a.big_gb is not None:
        if a.case.startswith("megatron"):
            ap.error("--big-gb writes Kineto traces, and the megatron cases are nsys exports only")
        ans = generate_big(a.outdir, a.case, a.seed, a.big_gb)
        print("wrote %d whole steps, %d bytes in %.1f s" % (len(ans["steps"]), sum(ans["bytes"].values()),
                                                            time.time() - t))
        return 0
    if a.case == "cpu-array":
        generate_cpu_array(a.outdir, a.steps, a.seed)
        print("wrote %s (cpu-array, %d steps, seed %d)" % (a.outdir, a.steps, a.seed))
        return 0
    generate(a.outdir, a.case, a.steps, a.seed, a.neutral_kernel_names)
    if not a.no_verify:
        (verify_megatron if a.case.startswith("megatron") else verify)(a.outdir)
    print("wrote %s (%s, %d steps, seed %d) in %.2f s%s" % (a.outdir, a.case, a.steps, a.seed, time.time() - t,
                                                          "" if a.no_verify else ", verified"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
