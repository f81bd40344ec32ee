#include "agent_activations.h"

#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshbench::plan {
namespace {

constexpr double kFp32 = 4.0;

// kernels::routerCapacity: ceil(T k / E x capacity_factor), with the same slack against a factor
// that decimal text makes inexact, and at least one row.
std::int64_t routerCapacity(std::int64_t tokens, int experts, int topK, double capacityFactor)
{
    const double exact = double(tokens) * topK / experts * capacityFactor;
    if (!(exact > 0.0))
        return 1;
    const double rounded = std::ceil(exact - exact * 1e-12);
    return rounded < 1.0 ? 1 : std::int64_t(rounded);
}

using Shape = AgentActivationShape;

// The sizes the table's entries are made of, elements.
std::int64_t streamRows(const Shape& x) { return x.streamTokens * x.hidden; }  // [Tl, h]
std::int64_t statistics(const Shape& x) { return x.streamTokens; }             // [Tl]
std::int64_t gathered(const Shape& x) { return x.sequenceParallel ? x.tokens * x.hidden : 0; }
std::int64_t wholeRows(const Shape& x) { return x.tokens * x.hidden; }  // [T, h]
std::int64_t queries(const Shape& x) { return x.tokens * x.heads * x.headDim; }
std::int64_t keysOrValues(const Shape& x) { return x.tokens * x.kvHeads * x.headDim; }
std::int64_t expertRows(const Shape& x) { return x.expertRows() * x.hidden; }

std::vector<AgentBufferInfo> bufferTable()
{
    using B = AgentBuffer;
    using P = AgentBufferPart;
    using K = AgentBufferKeep;
    std::vector<AgentBufferInfo> table{
        {B::Input, "xIn", P::Layer, K::Always, streamRows},
        {B::AttnNorm, "a", P::Layer, K::UnlessFullRecompute, streamRows},
        {B::AttnMean, "mean1", P::Layer, K::UnlessFullRecompute, statistics},
        {B::AttnRstd, "rstd1", P::Layer, K::UnlessFullRecompute, statistics},
        {B::AttnGathered, "aFull", P::Layer, K::UnlessFullRecompute, gathered},
        {B::Query, "q", P::Layer, K::UnlessFullRecompute, queries},
        {B::Key, "k", P::Layer, K::UnlessFullRecompute, keysOrValues},
        {B::Value, "v", P::Layer, K::UnlessFullRecompute, keysOrValues},
        {B::Attention, "att", P::Layer, K::WithoutRecompute, queries},
        {B::LogSumExp, "lse", P::Layer, K::WithoutRecompute, [](const Shape& x) { return x.tokens * x.heads; }},
        {B::Residual, "xMid", P::Layer, K::UnlessFullRecompute, streamRows},
        {B::MlpNorm, "c", P::Layer, K::UnlessFullRecompute, streamRows},
        {B::MlpMean, "mean2", P::Layer, K::UnlessFullRecompute, statistics},
        {B::MlpRstd, "rstd2", P::Layer, K::UnlessFullRecompute, statistics},
        {B::MlpGathered, "cFull", P::Layer, K::UnlessFullRecompute, gathered},
        {B::Fc1Out, "u", P::DenseMlp, K::UnlessFullRecompute,
         [](const Shape& x) { return x.tokens * x.gated * x.ffn; }},
        {B::ActOut, "g", P::DenseMlp, K::UnlessFullRecompute, [](const Shape& x) { return x.tokens * x.ffn; }},
        {B::ExpertIn, "expertIn", P::MoeMlp, K::UnlessFullRecompute, expertRows},
        {B::ExpertFc1Out, "eu", P::MoeMlp, K::UnlessFullRecompute,
         [](const Shape& x) { return x.expertRows() * x.gated * x.expertFfn; }},
        {B::ExpertActOut, "eg", P::MoeMlp, K::UnlessFullRecompute,
         [](const Shape& x) { return x.expertRows() * x.expertFfn; }},
        {B::ExpertOut, "eout", P::MoeMlp, K::UnlessFullRecompute, expertRows},
        {B::FinalInput, "xFinal", P::Head, K::Always, streamRows},
        {B::FinalMean, "meanF", P::Head, K::Always, statistics},
        {B::FinalRstd, "rstdF", P::Head, K::Always, statistics},
        {B::FinalNormRows, "normLocal", P::Head, K::ForwardOnly,
         [](const Shape& x) { return x.sequenceParallel ? streamRows(x) : 0; }},
        {B::FinalNorm, "normOut", P::Head, K::Always, wholeRows},
        {B::Logits, "dLogits", P::Head, K::Always, [](const Shape& x) { return x.tokens * x.vocab; }},
    };
    for (std::size_t i = 0; i < table.size(); ++i)
        if (int(table[i].buffer) != int(i))
            throw std::logic_error(std::string("agentBuffers: ") + table[i].name + " is out of AgentBuffer's order");
    if (int(table.size()) != kAgentBufferCount)
        throw std::logic_error("agentBuffers: not every AgentBuffer is in the table");
    return table;
}

std::vector<AgentDeferredGemm> deferredGemmTable()
{
    using P = AgentBufferPart;
    auto tokens = [](const Shape& x) { return x.tokens; };
    auto hidden = [](const Shape& x) { return x.hidden; };
    auto queryWidth = [](const Shape& x) { return x.heads * x.headDim; };
    auto kvWidth = [](const Shape& x) { return x.kvHeads * x.headDim; };
    auto routed = [](const Shape& x) { return x.routedRows(); };
    return {
        {"attn.proj", P::Layer, tokens, hidden, queryWidth},          // dy, and att as x
        {"attn.qkv (q rows)", P::Layer, tokens, queryWidth, hidden},  // dq, and the attention input
        {"attn.qkv (k rows)", P::Layer, tokens, kvWidth, hidden},
        {"attn.qkv (v rows)", P::Layer, tokens, kvWidth, hidden},
        {"mlp.fc2", P::DenseMlp, tokens, hidden, [](const Shape& x) { return x.ffn; }},            // dy, and g
        {"mlp.fc1", P::DenseMlp, tokens, [](const Shape& x) { return x.gated * x.ffn; }, hidden},  // du, the MLP input
        {"moe.router", P::MoeMlp, tokens, [](const Shape& x) { return x.experts; }, hidden},  // the logits' gradient
        {"moe.experts.fc2", P::MoeMlp, routed, hidden, [](const Shape& x) { return x.expertFfn; }},  // dy, eg
        {"moe.experts.fc1", P::MoeMlp, routed, [](const Shape& x) { return x.gated * x.expertFfn; }, hidden},
        {"lm_head", P::Head, tokens, [](const Shape& x) { return x.vocab; }, hidden},  // dLogits, normOut
    };
}

bool inLayer(AgentBufferPart part, bool moe)
{
    return part == AgentBufferPart::Layer || part == (moe ? AgentBufferPart::MoeMlp : AgentBufferPart::DenseMlp);
}

// The head's part of the chunk that ends the model (GptModel::forward after the last layer), elements.
struct Head {
    double kept = 0;       // from F to B
    double dLogits = 0;    // part of kept, freed as soon as the backward has used it
    double transient = 0;  // more at the end of F
    double stash = 0;      // zb-h1: the output layer's deferred weight gradient
};

Head headOf(const Shape& x)
{
    Head head;
    for (const AgentBufferInfo& b : agentBuffers()) {
        if (b.part != AgentBufferPart::Head)
            continue;
        const double n = double(b.elements(x));
        (b.keep == AgentBufferKeep::ForwardOnly ? head.transient : head.kept) += n;
        if (b.buffer == AgentBuffer::Logits)
            head.dLogits = n;
    }
    for (const AgentDeferredGemm& w : agentDeferredGemms())
        if (w.part == AgentBufferPart::Head)
            head.stash += double(w.rows(x)) * double(w.out(x) + w.in(x));
    return head;
}

// One layer, elements.
AgentLayerActivations layerOf(const Shape& x, Recompute recompute, bool moe)
{
    AgentLayerActivations layer;
    for (const AgentBufferInfo& b : agentBuffers()) {
        if (!inLayer(b.part, moe))
            continue;
        const double n = double(b.elements(x));
        if (b.buffer == AgentBuffer::Input) {
            layer.input = n;
            continue;
        }
        layer.working += n;
        if (agentBufferKept(b.keep, recompute))
            layer.kept += n;
    }
    // A split backward's DeferredWeightGrad per linear layer: copies of dy [n, out] and x [n, in].
    for (const AgentDeferredGemm& w : agentDeferredGemms())
        if (inLayer(w.part, moe))
            layer.stash += double(w.rows(x)) * double(w.out(x) + w.in(x));
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

AgentActivationShape shapeOf(const JobSpec& spec)
{
    const ParallelSpec& p = spec.parallel;
    return agentActivationShape(spec.model, p.tp, p.sequenceParallel, p.microBatchSize);
}

}  // namespace

std::int64_t AgentActivationShape::routedRows() const { return std::min(tokens * topK, expertRows()); }

AgentActivationShape agentActivationShape(const ModelSpec& m, int tp, bool sequenceParallel, int microBatchSize)
{
    const std::int64_t t = tp;
    AgentActivationShape x;
    x.tokens = std::int64_t(microBatchSize) * m.seqLen;
    x.sequenceParallel = sequenceParallel && tp > 1;  // TensorParallel's m_sp: a group of one has no SP
    x.streamTokens = x.sequenceParallel ? x.tokens / t : x.tokens;
    x.hidden = m.hidden;
    x.heads = m.heads / t;
    x.kvHeads = m.kvHeads / t;
    x.headDim = m.hidden / m.heads;
    x.ffn = m.ffnHidden / t;
    x.gated = m.activation == Activation::SwiGlu ? 2 : 1;
    x.vocab = m.vocab / t;
    if (m.moe.enabled()) {
        x.experts = m.moe.experts;
        x.topK = m.moe.topK;
        x.expertFfn = m.moe.ffnHidden / t;
        x.capacity = routerCapacity(x.tokens, m.moe.experts, m.moe.topK, m.moe.capacityFactor);
    }
    return x;
}

const std::vector<AgentBufferInfo>& agentBuffers()
{
    static const std::vector<AgentBufferInfo> table = bufferTable();
    return table;
}

std::int64_t agentBufferElements(AgentBuffer buffer, const AgentActivationShape& shape)
{
    return agentBuffers()[std::size_t(buffer)].elements(shape);
}

bool agentBufferKept(AgentBufferKeep keep, Recompute recompute)
{
    switch (keep) {
    case AgentBufferKeep::Always:
        return true;
    case AgentBufferKeep::UnlessFullRecompute:
        return recompute != Recompute::Full;
    case AgentBufferKeep::WithoutRecompute:
        return recompute == Recompute::None;
    case AgentBufferKeep::ForwardOnly:
        return false;
    }
    return false;
}

const std::vector<AgentDeferredGemm>& agentDeferredGemms()
{
    static const std::vector<AgentDeferredGemm> table = deferredGemmTable();
    return table;
}

bool agentSplitsBackward(const ParallelSpec& p)
{
    // Trainer: a PipelineExecutor only with pp > 1, and it defers W's only for the schedules that
    // split the backward.
    return p.pp > 1 && splitsBackward(p.schedule);
}

AgentLayerActivations agentLayerActivations(const JobSpec& spec, bool moe)
{
    return toBytes(layerOf(shapeOf(spec), spec.parallel.recompute, moe));
}

AgentChunkActivations agentChunkActivations(const JobSpec& spec, int virtualStage)
{
    const ModelSpec& m = spec.model;
    const ParallelSpec& p = spec.parallel;
    const AgentActivationShape x = shapeOf(spec);
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
        const double next = i + 1 < count || ends ? double(agentBufferElements(AgentBuffer::Input, x)) : 0.0;
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
    chunks.reserve(std::size_t(v));
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
