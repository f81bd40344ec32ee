#!/usr/bin/python3
"""An fp32 PyTorch re-implementation of meshbench-agent's training step, written only from docs/agent.md
("Training on one device: meshbench-agent", once a section of README.md). It loads a checkpoint the agent
saved, trains N steps on the job's token file and prints one JSON line per step: {"step", "loss" (mean
cross-entropy), "aux_loss" (load-balancing term), "lr", "grad_norm"}, as the agent's --metrics file has them.

Usage: /usr/bin/python3 torch_reference.py --job JOB.json --checkpoint step-000000.safetensors --steps N
                        [--random-tokens]
Each line also carries the step's wall time in "seconds", which bench_training uses to compare throughput;
--random-tokens trains on uniform random tokens instead of the job's data (timing only).
"""
import argparse
import json
import math
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    """Tensors in file order, and the __metadata__ dict."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = memoryview(blob)[8 + n:]
    tensors = {}
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        assert info["dtype"] == "F32", f"{name}: dtype {info['dtype']}"
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
        tensors[name] = torch.tensor(array.copy(), dtype=torch.float32)
    return tensors, meta


def norm(x, p, name, kind):
    if kind == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), p[name + ".weight"], p[name + ".bias"], eps=1e-5)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * p[name + ".weight"]


def mlp(z, w1, w2, activation, f):
    u = z @ w1.t()
    g = F.gelu(u) if activation == "gelu" else F.silu(u[:, :f]) * u[:, f:]
    return g @ w2.t()


def rope(x, positions):
    """x: [b, heads, s, d]; rotates halves (i, i + d/2) by p·θᵢ, θᵢ = 10000^(−2i/d)."""
    d = x.shape[-1]
    theta = 10000.0 ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    angle = positions.to(torch.float64)[:, None] * theta[None, :]
    cos, sin = angle.cos().float(), angle.sin().float()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(a, p, i, m, b, s):
    h, H, Hkv = m["hidden"], m["heads"], m["kv_heads"]
    d = h // H
    qkv = a @ p[f"layers.{i}.attn.qkv.weight"].t()
    q = qkv[:, : H * d].reshape(b, s, H, d).transpose(1, 2)
    k = qkv[:, H * d:(H + Hkv) * d].reshape(b, s, Hkv, d).transpose(1, 2)
    v = qkv[:, (H + Hkv) * d:].reshape(b, s, Hkv, d).transpose(1, 2)
    positions = torch.arange(s)
    q, k = rope(q, positions), rope(k, positions)
    k = k.repeat_interleave(H // Hkv, dim=1)  # query head j reads kv head j // (H / Hkv)
    v = v.repeat_interleave(H // Hkv, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # [b, H, s, d]
    out = out.transpose(1, 2).reshape(b * s, H * d)
    return out @ p[f"layers.{i}.attn.proj.weight"].t()


def moe(c, p, i, m):
    """Returns (output, load-balancing loss) of MoE layer i for the micro-batch's tokens c [T, h]."""
    cfg = m["moe"]
    E, k, f = cfg["experts"], cfg["top_k"], cfg["moe_ffn_hidden"]
    T = c.shape[0]
    P = torch.softmax(c @ p[f"layers.{i}.moe.router.weight"].t(), dim=-1)  # [T, E]
    # Top-k by P, ties to the lower expert index: a stable descending sort keeps index order among equals.
    order = torch.sort(P.detach(), dim=1, descending=True, stable=True).indices[:, :k]
    routed = torch.zeros(T, E, dtype=torch.bool)
    routed[torch.arange(T)[:, None], order] = True
    capacity = math.ceil(T * k / E * cfg["capacity_factor"])
    out = torch.zeros_like(c)
    for e in range(E):
        tokens = routed[:, e].nonzero().flatten()  # in token order
        if tokens.numel() > capacity:  # keep the C with the highest P, ties to the earlier token
            keep = torch.sort(P.detach()[tokens, e], descending=True, stable=True).indices[:capacity]
            tokens = tokens[keep.sort().values]
        if tokens.numel() == 0:
            continue
        y = mlp(c[tokens], p[f"layers.{i}.moe.experts.fc1.weight"][e], p[f"layers.{i}.moe.experts.fc2.weight"][e],
                m["activation"], f)
        out = out.index_add(0, tokens, P[tokens, e:e + 1] * y)
    share = routed.sum(0).to(torch.float32) / (T * k)  # f_i, before dropping, no gradient
    aux = cfg["aux_loss_coef"] * E * (share * P.mean(0)).sum()
    return out, aux


def forward(p, m, ids):
    """ids [b, s] → (logits [b·s, V], summed load-balancing loss over the MoE layers)."""
    b, s = ids.shape
    x = p["embed.weight"][ids.flatten()]
    aux = torch.zeros(())
    for i in range(m["layers"]):
        x = x + attention(norm(x, p, f"layers.{i}.attn_norm", m["norm"]), p, i, m, b, s)
        c = norm(x, p, f"layers.{i}.mlp_norm", m["norm"])
        if "moe" in m and i % m["moe"]["every_n_layers"] == 0:
            y, layer_aux = moe(c, p, i, m)
            aux = aux + layer_aux
        else:
            y = mlp(c, p[f"layers.{i}.mlp.fc1.weight"], p[f"layers.{i}.mlp.fc2.weight"], m["activation"],
                    m["ffn_hidden"])
        x = x + y
    head = p["embed.weight"] if m["tied_embeddings"] else p["lm_head.weight"]
    return norm(x, p, "final_norm", m["norm"]) @ head.t(), aux


def learning_rate(t, tr):
    """Step t counts from 1."""
    if t < tr["warmup_steps"]:
        return tr["lr"] * t / tr["warmup_steps"]
    if tr["decay_steps"] == 0:
        return tr["lr"]
    if t >= tr["decay_steps"]:
        return tr["min_lr"]
    progress = (t - tr["warmup_steps"]) / (tr["decay_steps"] - tr["warmup_steps"])
    return tr["min_lr"] + 0.5 * (tr["lr"] - tr["min_lr"]) * (1.0 + math.cos(math.pi * progress))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--random-tokens", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)

    with open(args.job) as f:
        job = json.load(f)
    tensors, meta = load_safetensors(args.checkpoint)
    # The checkpoint's copy of the job has every default filled in; the model must be the one of --job.
    full = json.loads(meta["job"])
    assert full["model"]["layers"] == job["model"]["layers"], "checkpoint and job disagree"
    m, par, tr = full["model"], full["parallel"], full["train"]
    start = int(meta.get("step", 0))

    params = {name: torch.nn.Parameter(t) for name, t in tensors.items() if not name.startswith("optimizer.")}
    decay = [t for t in params.values() if t.dim() >= 2]
    no_decay = [t for t in params.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": tr["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=tr["lr"], betas=(tr["beta1"], tr["beta2"]), eps=tr["eps"], foreach=False)
    for name, t in params.items():
        opt.state[t] = {"step": torch.tensor(float(start)),
                        "exp_avg": tensors["optimizer.exp_avg." + name].clone(),
                        "exp_avg_sq": tensors["optimizer.exp_avg_sq." + name].clone()}

    data = tr["data"]
    if args.random_tokens:
        tokens = torch.randint(0, m["vocab"], (1 << 20,), generator=torch.Generator().manual_seed(0))
    else:
        assert data["source"] == "file", "only token-file data is reproduced here"
        tokens = torch.from_numpy(np.fromfile(data["path"], dtype="<u2" if data["dtype"] == "uint16" else "<u4")
                                  .astype(np.int64))
    s, mbs = m["seq_len"], par["micro_batch_size"]
    M = par["dp"] * par["microbatches"]
    B = M * mbs
    N = tokens.numel()

    def sample(g):
        offset = (g * s) % (N - s)
        return tokens[offset:offset + s + 1]

    for i in range(start, start + args.steps):
        began = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        ce_total, aux_total = 0.0, 0.0
        for j in range(M):
            batch = torch.stack([sample(i * B + j * mbs + r) for r in range(mbs)])  # [mbs, s + 1]
            logits, aux = forward(params, m, batch[:, :s])
            ce = F.cross_entropy(logits, batch[:, 1:].flatten(), reduction="sum")
            ((ce / (B * s)) + aux / M).backward()
            ce_total += ce.item()
            aux_total += aux.item() / M
        grad_norm = torch.nn.utils.clip_grad_norm_(list(params.values()), tr["grad_clip"])
        lr = learning_rate(i + 1, tr)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        print(json.dumps({"step": i + 1, "loss": ce_total / (B * s), "aux_loss": aux_total, "lr": lr,
                          "grad_norm": grad_norm.item(), "seconds": time.perf_counter() - began}), flush=True)


if __name__ == "__main__":
    main()
