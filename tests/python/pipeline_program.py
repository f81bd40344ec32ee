#!/usr/bin/env python3
"""A real PyTorch training program, for the acceptance test of issue 29 (tests/service/tst_pytorch_live).

Run under `meshbench-engine run JOB.json` by the job's launch.command, one process per rank under
mpirun. It follows the job spec the engine hands it (MESHBENCH_JOB): pipeline stages × data-parallel
replicas (tp 1), the schedule (gpipe or 1f1b), micro-batches, micro-batch size, model sizes and
train.steps. Ranks are laid out as the engine lays them out (plan::Mesh, order tp-dp-pp: tp innermost,
then dp, pp outermost), so rank r is replica r % dp of stage r // dp.

The model, on Debian's python3-torch (CPU, gloo):
    stage 0: token embedding, then MoE layer 0
    stage 1: MoE layer 1, a layer norm and the output projection, cross-entropy
Each MoE layer has a top-1 router over model.moe.experts experts with capacity
ceil(capacity_factor × tokens / experts) per micro-batch: tokens over capacity skip the experts
(residual only) and are counted as dropped.

Per step: the schedule's ops, activations and gradients moving between stages with torch.distributed
send/recv (sends are isend, waited for at the step's end, so that two stages never wait on each other's
blocking send); then the data-parallel all-reduce of the gradients and an SGD step. Every op is wrapped
both in `with mb.op(...)` (the live client) and in record_function("PP:{stage}{action}{microbatch}")
(torch.distributed.pipelining's names), and the steps run in torch.profiler.profile with a schedule
(wait 0, warm-up 1, then every step but the last active, once), whose trace meshbench.profiler_handler
exports to TRACE_DIR/rankR.stepN.1.pt.trace.json and hands to the engine while the last step runs.
Rank 0 first hands over two paths the engine must refuse (relative, and absent).

What the program itself knows goes to LOG_DIR/rank-R.json (rewritten after every step): for each step
its number as the live client numbers it, the loss it reported (mean over the data-parallel replicas),
this rank's own share, and for its stage's MoE layer the tokens routed to and dropped by each expert,
this rank's own and summed over the replicas (what dp rank 0 of the stage reports with
mb.expert_load). The test compares them with the session.

Options: --die-rank R --die-step S make rank R kill itself with SIGKILL in step S, after its first
forward op of the step.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.profiler import record_function

import meshbench


def schedule_of(kind: str, stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The stage's ops in order: ("F", m) and ("B", m)."""
    if kind == "gpipe":
        return [("F", m) for m in range(microbatches)] + [("B", m) for m in range(microbatches)]
    if kind != "1f1b":
        raise SystemExit(f"pipeline_program: schedule {kind!r} is not one this program runs (gpipe, 1f1b)")
    warmup = min(stages - stage - 1, microbatches)
    ops = [("F", m) for m in range(warmup)]
    forward, backward = warmup, 0
    while backward < microbatches:
        if forward < microbatches:
            ops.append(("F", forward))
            forward += 1
        ops.append(("B", backward))
        backward += 1
    return ops


class MoE(nn.Module):
    """A residual top-1 mixture of experts with a capacity per expert."""

    def __init__(self, hidden: int, ffn: int, experts: int, capacity_factor: float):
        super().__init__()
        self.router = nn.Linear(hidden, experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden)) for _ in range(experts)
        )
        self.capacity_factor = capacity_factor

    def forward(self, x):
        tokens, experts = x.shape[0], len(self.experts)
        gate, choice = torch.softmax(self.router(x), dim=-1).max(dim=-1)
        capacity = math.ceil(self.capacity_factor * tokens / experts)
        routed = torch.bincount(choice, minlength=experts)
        dropped = torch.zeros(experts, dtype=torch.long)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            chosen = (choice == e).nonzero().squeeze(1)
            kept = chosen[:capacity]
            dropped[e] = chosen.numel() - kept.numel()
            if kept.numel():
                out = out.index_add(0, kept, expert(x[kept]) * gate[kept].unsqueeze(1))
        return x + out, routed, dropped


class Stage(nn.Module):
    def __init__(self, stage: int, stages: int, model: dict):
        super().__init__()
        hidden, vocab, moe = model["hidden"], model["vocab"], model["moe"]
        self.first, self.last = stage == 0, stage == stages - 1
        if self.first:
            self.embedding = nn.Embedding(vocab, hidden)
        self.moe = MoE(hidden, moe["moe_ffn_hidden"], moe["experts"], moe["capacity_factor"])
        if self.last:
            self.norm = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        if self.first:
            x = self.embedding(x).reshape(-1, self.embedding.embedding_dim)
        x, routed, dropped = self.moe(x)
        if self.last:
            x = self.head(self.norm(x))
        return x, routed, dropped


def batch(seed: int, step: int, replica: int, microbatch: int, size: int, seq: int, vocab: int):
    """A micro-batch of a learnable sequence (next = 3 × token + 1 mod vocab) from a random start."""
    generator = torch.Generator().manual_seed(((seed * 1009 + step) * 1009 + replica) * 1009 + microbatch)
    start = torch.randint(vocab, (size, 1), generator=generator)
    tokens = [start]
    for _ in range(seq):
        tokens.append((tokens[-1] * 3 + 1) % vocab)
    tokens = torch.cat(tokens, dim=1)
    return tokens[:, :-1], tokens[:, 1:].reshape(-1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--trace-dir", required=True)
    parser.add_argument("--store", required=True, help="torch.distributed's FileStore (a file that does not exist yet)")
    parser.add_argument("--die-rank", type=int, default=-1)
    parser.add_argument("--die-step", type=int, default=-1)
    args = parser.parse_args()

    spec_path = meshbench.job_spec_path()
    if not spec_path:
        raise SystemExit("pipeline_program: run it under meshbench-engine run (MESHBENCH_JOB is not set)")
    with open(spec_path) as f:
        spec = json.load(f)
    parallel, model, train = spec["parallel"], spec["model"], spec["train"]
    dp, pp = parallel["dp"], parallel["pp"]
    if parallel.get("tp", 1) != 1 or parallel.get("ep", 1) != 1 or parallel.get("order", "tp-dp-pp") != "tp-dp-pp":
        raise SystemExit("pipeline_program: runs tp 1, ep 1 in the order tp-dp-pp")
    microbatches, micro_batch_size = parallel["microbatches"], parallel["micro_batch_size"]
    seq, vocab, steps, seed = model["seq_len"], model["vocab"], train["steps"], train.get("seed", 0)

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    if world != dp * pp:
        raise SystemExit(f"pipeline_program: {world} ranks for dp {dp} x pp {pp}")
    replica, stage = rank % dp, rank // dp
    previous, following = rank - dp, rank + dp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{os.path.abspath(args.store)}", rank=rank, world_size=world)
    replicas = None
    for s in range(pp):  # every rank makes every group, in the same order
        group = dist.new_group([s * dp + d for d in range(dp)])
        if s == stage:
            replicas = group

    torch.manual_seed(seed * 31 + stage)  # one stage's replicas start alike; the all-reduce keeps them so
    net = Stage(stage, pp, model)
    optimizer = torch.optim.SGD(net.parameters(), lr=train.get("lr", 0.1))
    ops = schedule_of(parallel["schedule"], stage, pp, microbatches)
    experts = model["moe"]["experts"]
    tokens_per_step = dp * microbatches * micro_batch_size * seq
    activation_shape = (micro_batch_size * seq, model["hidden"])
    activation_bytes = math.prod(activation_shape) * 4
    log = {"rank": rank, "stage": stage, "replica": replica, "layer": stage, "steps": []}
    os.makedirs(args.log_dir, exist_ok=True)
    os.makedirs(args.trace_dir, exist_ok=True)

    def write_log():
        path = os.path.join(args.log_dir, f"rank-{rank}.json")
        with open(path + ".part", "w") as f:
            json.dump(log, f)
        os.replace(path + ".part", path)

    with meshbench.connect() as mb, torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=0, warmup=1, active=steps - 2, repeat=1),
        on_trace_ready=meshbench.profiler_handler(mb, directory=args.trace_dir),
    ) as prof:
        if rank == 0:
            # Hand-overs the engine must refuse, saying why, and then go on with the run.
            mb.log(meshbench.IMPORT_PREFIX + "relative/rank0.json")
            mb.log(meshbench.IMPORT_PREFIX + os.path.join(os.path.abspath(args.trace_dir), "absent", "rank0.json"))
        for _ in range(steps):
            step = mb.step_number
            inputs, outputs, sends = {}, {}, []
            loss_sum = torch.zeros(())
            routed, dropped = torch.zeros(experts, dtype=torch.long), torch.zeros(experts, dtype=torch.long)
            for action, m in ops:
                if action == "F":
                    tokens, targets = batch(seed, step, replica, m, micro_batch_size, seq, vocab)
                    if stage > 0:
                        x = torch.empty(activation_shape)
                        with record_function(f"PP:{stage}RECV_F{m}"), mb.op(
                            "recv-act", stage, m, peer=previous, nbytes=activation_bytes
                        ):
                            dist.recv(x, src=previous)
                        x.requires_grad_()
                        inputs[m] = x
                    else:
                        x = tokens
                    with record_function(f"PP:{stage}F{m}"), mb.op("F", stage, m):
                        y, r, d = net(x)
                        if stage == pp - 1:
                            y = F.cross_entropy(y, targets) / microbatches
                            loss_sum += y.detach()
                    routed += r
                    dropped += d
                    outputs[m] = y
                    if stage < pp - 1:
                        with record_function(f"PP:{stage}SEND_F{m}"), mb.op(
                            "send-act", stage, m, peer=following, nbytes=activation_bytes
                        ):
                            sends.append(dist.isend(y.detach().contiguous(), dst=following))
                    if rank == args.die_rank and step == args.die_step:
                        os.kill(os.getpid(), signal.SIGKILL)
                else:
                    y = outputs.pop(m)
                    grad = None
                    if stage < pp - 1:
                        grad = torch.empty(activation_shape)
                        with record_function(f"PP:{stage}RECV_B{m}"), mb.op(
                            "recv-grad", stage, m, peer=following, nbytes=activation_bytes
                        ):
                            dist.recv(grad, src=following)
                    with record_function(f"PP:{stage}B{m}"), mb.op("B", stage, m):
                        y.backward(grad)
                    if stage > 0:
                        x = inputs.pop(m)
                        with record_function(f"PP:{stage}SEND_B{m}"), mb.op(
                            "send-grad", stage, m, peer=previous, nbytes=activation_bytes
                        ):
                            sends.append(dist.isend(x.grad.contiguous(), dst=previous))
            for work in sends:
                work.wait()

            with mb.op("dp-reduce", stage):
                flat = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
                dist.all_reduce(flat, group=replicas)
                flat /= dp
                offset = 0
                for p in net.parameters():
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
            with mb.op("optimizer", stage):
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)

            # The loss (the last stage's, averaged over its replicas) for rank 0, who reports the step;
            # the layer's expert counts summed over the stage's replicas.
            loss = loss_sum.clone() if stage == pp - 1 else torch.zeros(())
            dist.all_reduce(loss)
            loss /= dp
            counts = torch.cat([routed, dropped])
            dist.all_reduce(counts, group=replicas)
            if replica == 0:
                mb.expert_load(stage, counts[:experts], dropped=counts[experts:])
            mb.step(loss=loss, tokens=tokens_per_step)
            log["steps"].append(
                {
                    "step": step,
                    "loss": float(loss),
                    "local_loss": float(loss_sum),
                    "routed_local": routed.tolist(),
                    "dropped_local": dropped.tolist(),
                    "routed": counts[:experts].tolist(),
                    "dropped": counts[experts:].tolist(),
                }
            )
            write_log()
            prof.step()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
