#include "agent_activations.h"

#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace meshbench::plan {
namespace {

constexpr double kFp32 = 4.0;

// The sizes the agent's buffers are made of, elements, for one micro-batch on one rank.
struct Dims {
    double T = 0;   // tokens of the micro-batch, b s (every TP region sees all of them)
    double Tl = 0;  // rows of the residual stream on this rank: T / tp with sequence parallelism
    double h = 0;
    double Hd = 0;    // this rank's query heads x head dim
    double Hkvd = 0;  // this rank's key/value heads x head dim
    double H = 0;     // this rank's query heads
    double f = 0;     // this rank's dense MLP width
    double fm = 0;    // this rank's expert MLP width
    double g = 1;     // fc1's outputs per MLP unit: 2 for SwiGLU (gate and up), 1 for GELU
    double E = 0;
    double R = 0;       // rows of an MoE layer's expert buffers: E x capacity
    double routed = 0;  // rows its experts get when routing is balanced: min(T k, E x capacity)
    double V = 0;       // this rank's block of the vocabulary
    bool sp = false;
};

// kernels::routerCapacity: ceil(T k / E x capacity_factor), with the same slack against a factor
// that decimal text makes inexact, and at least one row.
double routerCapacity(double tokens, int experts, int topK, double capacityFactor)
{
    const double exact = tokens * topK / experts * capacityFactor;
    if (!(exact > 0.0))
        return 1.0;
    return std::ceil(exact - exact * 1e-12);
}

Dims dimsOf(const JobSpec& spec)
{
    const ModelSpec& m = spec.model;
    const ParallelSpec& p = spec.parallel;
    // The agent's integer shapes (GptModel's m_headDim, heads / tp, ...).
    const std::int64_t t = p.tp, d = m.hidden / m.heads;
    Dims x;
    x.T = double(p.microBatchSize) * double(m.seqLen);
    x.sp = p.sequenceParallel && t > 1;  // TensorParallel's m_sp: a group of one has no SP
    x.Tl = x.sp ? double(std::int64_t(x.T) / t) : x.T;
    x.h = double(m.hidden);
    x.H = double(m.heads / t);
    x.Hd = x.H * double(d);
    x.Hkvd = double(m.kvHeads / t) * double(d);
    x.f = double(m.ffnHidden / t);
    x.g = m.activation == Activation::SwiGlu ? 2.0 : 1.0;
    x.V = double(m.vocab / t);
    if (m.moe.enabled()) {
        x.E = m.moe.experts;
        x.fm = double(m.moe.ffnHidden / t);
        x.R = x.E * routerCapacity(x.T, m.moe.experts, m.moe.topK, m.moe.capacityFactor);
        x.routed = std::min(x.T * m.moe.topK, x.R);
    }
    return x;
}

// The head's part of the chunk that ends the model (GptModel::forward after the last layer), elements.
struct Head {
    double kept = 0;       // from F to B
    double dLogits = 0;    // part of kept, freed as soon as the backward has used it
    double transient = 0;  // more at the end of F
    double stash = 0;      // zb-h1: the output layer's deferred weight gradient
};

Head headOf(const Dims& x)
{
    Head head;
    head.dLogits = x.T * x.V;  // dLogits [T, V/tp]: the loss gradient the forward computes, kept for B
    head.kept =
        x.Tl * x.h    // xFinal: the last layer's output, the final norm's input
        + 2.0 * x.Tl  // meanF, rstdF: the final norm's statistics
        + x.T * x.h   // normOut: the final norm's output [T, h], gathered over TP with SP, for dW of the output layer
        + head.dLogits;
    head.transient = x.sp ? x.Tl * x.h : 0.0;  // SP: this rank's rows of the final norm, freed when F returns
    head.stash = x.T * x.V + x.T * x.h;        // deferred dW of the output layer: copies of dLogits and normOut
    return head;
}

// One layer, elements.
AgentLayerActivations layerOf(const Dims& x, Recompute recompute, bool moe)
{
    // GptModel::LayerActivations, allocated in this order by forwardLayer.
    const double gathered = x.sp ? x.T * x.h : 0.0;
    const double attentionNorm = x.Tl * x.h    // a: the attention norm's output (this rank's rows)
                                 + 2.0 * x.Tl  // mean1, rstd1: its statistics (mean is allocated for RMSNorm too)
                                 + gathered;   // aFull: SP's gather of a, the qkv GEMMs' input and dW's x
    const double qkv = x.T * x.Hd              // q after RoPE, for core attention's backward
                       + 2.0 * x.T * x.Hkvd;   // k and v after RoPE
    const double core = x.T * x.Hd             // att: the attention output, kept for the output projection's dW
                        + x.T * x.H;           // lse: the row log-sum-exp [b, H, s], for flash attention's backward
    const double residual = x.Tl * x.h;        // xMid: the stream after the attention residual, the MLP norm's input
    const double mlpNorm = x.Tl * x.h + 2.0 * x.Tl + gathered;  // c, mean2, rstd2 and SP's cFull, as for attention
    double mlp = 0;
    if (moe)
        mlp = x.R * x.h           // expertIn: the rows dispatched to this rank's experts, [E x capacity, h]
              + x.R * x.g * x.fm  // eu: the experts' fc1 outputs
              + x.R * x.fm        // eg: their activation, fc2's input
              + x.R * x.h;        // eout: the experts' outputs back at their tokens' rank, for the combine's backward
    else
        mlp = x.T * x.g * x.f  // u: fc1's output, the activation's input
              + x.T * x.f;     // g: the activation's output, fc2's input

    AgentLayerActivations layer;
    layer.input = x.Tl * x.h;  // xIn
    layer.working = attentionNorm + qkv + core + residual + mlpNorm + mlp;
    switch (recompute) {
    case Recompute::None:
        layer.kept = layer.working;
        break;
    case Recompute::Selective:
        layer.kept = layer.working - core;  // att and lse are dropped; B rebuilds them as workspace
        break;
    case Recompute::Full:
        layer.kept = 0;  // releaseAllButInput
        break;
    }
    // A split backward's DeferredWeightGrad per linear layer: copies of dy [n, out] and x [n, in].
    const double attention = (x.h + x.Hd)             // proj: dy, and att as x
                             + (x.Hd + x.h)           // q block of qkv: dq, and the attention input
                             + 2.0 * (x.Hkvd + x.h);  // k and v blocks: dk, dv, and the attention input again each
    if (moe)
        layer.stash =
            x.T * attention + x.T * (x.E + x.h)            // router: the logits' gradient [T, E], and the MLP input
            + x.routed * (x.h + x.fm + x.g * x.fm + x.h);  // each expert's fc2 (dy, eg) and fc1 (deu, expertIn) rows
    else
        layer.stash = x.T * attention + x.T * (x.h + x.f)  // fc2: dy, and g
                      + x.T * (x.g * x.f + x.h);           // fc1: du, and the MLP input
    return layer;
}

AgentLayerActivations toBytes(AgentLayerActivations layer)
{
    layer.input *= kFp32;
    layer.kept *= kFp32;
    layer.working *= kFp32;
    layer.stash *= kFp32;
    return layer;
}

}  // namespace

bool agentSplitsBackward(const ParallelSpec& p)
{
    // Trainer: a PipelineExecutor only with pp > 1, and it defers W's only for the schedules that
    // split the backward.
    return p.pp > 1 && splitsBackward(p.schedule);
}

AgentLayerActivations agentLayerActivations(const JobSpec& spec, bool moe)
{
    return toBytes(layerOf(dimsOf(spec), spec.parallel.recompute, moe));
}

AgentChunkActivations agentChunkActivations(const JobSpec& spec, int virtualStage)
{
    const ModelSpec& m = spec.model;
    const ParallelSpec& p = spec.parallel;
    const Dims x = dimsOf(spec);
    const int count = m.layers / (p.pp * p.virtualStages);  // ModelSlice::ofStage
    const int first = virtualStage * count;                 // virtual stages count in model order
    const bool ends = virtualStage == p.pp * p.virtualStages - 1;
    const bool split = agentSplitsBackward(p);
    const bool full = p.recompute == Recompute::Full;
    const AgentLayerActivations dense = layerOf(x, p.recompute, false), moe = layerOf(x, p.recompute, true);
    auto layer = [&](int i) -> const AgentLayerActivations& { return m.isMoeLayer(first + i) ? moe : dense; };
    const Head head = ends ? headOf(x) : Head{};

    AgentChunkActivations chunk;
    // Forward: the chunk's input, then for each layer the next one's input (the chunk that ends the
    // model keeps the last as xFinal; any other writes it to the pipeline's send buffer) and the
    // layer's working set, of which it keeps `kept`.
    double held = 0;
    for (int i = 0; i < count; ++i) {
        const double next = i + 1 < count || ends ? x.Tl * x.h : 0.0;
        chunk.forwardPeak = std::max(chunk.forwardPeak, held + layer(i).input + next + layer(i).working);
        held += layer(i).input + layer(i).kept;
    }
    chunk.kept = held + head.kept;
    chunk.forwardPeak = std::max(chunk.forwardPeak, chunk.kept + head.transient);

    // Backward, last layer first: the output layer's dLogits goes first; full recompute rebuilds a
    // layer's working set before its backward; a split backward copies every linear layer's dy and x
    // (stash); a layer's activations go when its backward ends. The head's other tensors go with the
    // Activations object once the backward returns.
    double live = chunk.kept;
    chunk.backwardPeak = live;
    if (split) {
        chunk.backwardPeak = std::max(chunk.backwardPeak, live + head.stash);
        chunk.stash += head.stash;
    }
    live += chunk.stash - head.dLogits;
    for (int i = count - 1; i >= 0; --i) {
        const AgentLayerActivations& l = layer(i);
        const double rebuilt = full ? l.working : 0.0;
        const double stash = split ? l.stash : 0.0;
        chunk.backwardPeak = std::max(chunk.backwardPeak, live + rebuilt + stash);
        chunk.stash += stash;
        live += stash - l.input - l.kept;
    }
    chunk.kept *= kFp32;
    chunk.forwardPeak *= kFp32;
    chunk.backwardPeak *= kFp32;
    chunk.stash *= kFp32;
    return chunk;
}

double agentActivationBytes(const JobSpec& spec, int stage)
{
    const ParallelSpec& p = spec.parallel;
    const ScheduleShape shape = p.scheduleShape();
    const int m = p.microbatches, v = p.virtualStages;
    std::vector<AgentChunkActivations> chunks;
    for (int c = 0; c < v; ++c)
        chunks.push_back(agentChunkActivations(spec, shape.virtualStageOf(stage, c)));
    const AgentChunkActivations& one = chunks.front();
    const double transient = std::max(one.forwardPeak, one.backwardPeak);

    // One stage: the trainer runs each micro-batch's forward and backward before the next one's.
    if (p.pp == 1)
        return transient;

    // Every op adds to what the micro-batches in flight already hold; W's only free their stash.
    // The in-flight counts are those of the stage's op list (buildSchedule), checked op by op
    // against it in tst_agent_activations.
    const int warmup = warmupCount(shape, stage);
    switch (p.schedule) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB: {
        // The most held is with min(warmup + 1, m) micro-batches in flight (the cost model's
        // inFlightMicrobatches): the steady state's forward runs beside `warmup` kept ones and its
        // backward beside as many.
        const int inFlight = std::min(warmup + 1, m);
        return (inFlight - 1) * one.kept + transient;
    }
    case ScheduleKind::ZeroBubbleH1: {
        // Stage r defers its first d = min(r, m) W's (buildZeroBubbleH1): before steady-state step i
        // it holds `warmup` forwards and min(i, d) stashes; in the cool-down, backward j runs beside
        // m - 1 - j forwards and min(j, d) stashes.
        const double K = one.kept, S = one.stash;
        const int d = std::min(stage, m);
        double peak = warmup > 0 ? (warmup - 1) * K + one.forwardPeak : 0.0;
        if (m > warmup)
            peak = std::max(peak, warmup * K + std::min(m - warmup - 1, d) * S + transient);
        if (warmup > 0) {
            const int lo = m - warmup, hi = m - 1;
            for (int j : {lo, hi, std::clamp(d, lo, hi)})
                peak = std::max(peak, (m - 1 - j) * K + std::min(j, d) * S + one.backwardPeak);
        }
        return peak;
    }
    case ScheduleKind::Interleaved: {
        // Megatron's table (schedule.cpp interleavedTable, group size p, which divides m): entry n
        // is chunk (n mod pv) / p; backward n runs chunk v - 1 - that.
        const int pv = p.pp * v, total = m * v;
        auto chunkOf = [&](int n) { return (n % pv) / p.pp; };
        auto count = [&](int c, int n) { return (n / pv) * p.pp + std::clamp(n % pv - c * p.pp, 0, p.pp); };
        // Walked with a running total of what is held: each forward adds its chunk's kept bytes,
        // each backward takes its chunk's away, so the walk costs O(p v), not O(p v^2).
        double peak = 0, held = 0;
        auto forward = [&](int n) {
            const AgentChunkActivations& c = chunks[std::size_t(chunkOf(n))];
            peak = std::max(peak, held + c.forwardPeak);
            held += c.kept;
        };
        auto backward = [&](int n) {
            const AgentChunkActivations& c = chunks[std::size_t(v - 1 - chunkOf(n))];
            peak = std::max(peak, held - c.kept + c.backwardPeak);
            held -= c.kept;
        };
        for (int n = 0; n < warmup; ++n)
            forward(n);
        // The steady state repeats every pv steps: both counts grow by p per chunk.
        for (int i = 0; i < std::min(total - warmup, pv); ++i) {
            forward(warmup + i);
            backward(i);
        }
        // The cool-down starts with every forward done and all but the last `warmup` backwards.
        held = 0;
        for (int c = 0; c < v; ++c)
            held += (count(c, total) - count(v - 1 - c, total - warmup)) * chunks[std::size_t(c)].kept;
        for (int n = total - warmup; n < total; ++n)
            backward(n);
        return peak;
    }
    case ScheduleKind::ZeroBubbleV:
    case ScheduleKind::DualPipeV: {
        // Walked op by op over the stage's list: a forward adds its chunk's kept bytes, a backward
        // trades them for its stash, a W frees the stash.
        double peak = 0, held = 0;
        for (const Op& op : buildStageOps(shape, stage)) {
            const AgentChunkActivations& c = chunks[std::size_t(op.chunk)];
            if (op.kind == OpKind::Forward) {
                peak = std::max(peak, held + c.forwardPeak);
                held += c.kept;
            } else if (op.kind == OpKind::Backward) {
                peak = std::max(peak, held - c.kept + c.backwardPeak);
                held += c.stash - c.kept;
            } else if (op.kind == OpKind::WeightGrad) {
                held -= c.stash;
            }
        }
        return peak;
    }
    }
    return transient;
}

}  // namespace meshbench::plan
