#include "gpt_model.h"

#include <algorithm>
#include <cmath>

namespace meshbench::agent {

using kernels::ConstDevPtr;
using kernels::DevPtr;

// Everything one layer keeps between its forward and its backward for one micro-batch.
struct GptModel::LayerActivations {
    DeviceBuffer xIn;              // [T, h] the layer's input (kept under every recompute mode)
    DeviceBuffer a, mean1, rstd1;  // attention norm output and statistics (this rank's rows)
    DeviceBuffer aFull, cFull;     // sequence parallelism: the norm outputs gathered over the tensor group
    DeviceBuffer q, k, v;          // [T, H d], [T, Hkv d], after RoPE
    DeviceBuffer att, lse;         // attention output [T, H d] and row log-sum-exp [B, H, S]
    DeviceBuffer xMid;             // [T, h] after the attention residual
    DeviceBuffer c, mean2, rstd2;  // MLP norm output and statistics
    DeviceBuffer u, g;             // dense MLP: fc1 output [T, gated f], activation [T, f]
    // MoE
    std::vector<float> probs, weightOf, dRouterLogits;
    std::vector<int> expertOf, rowOf, tokenOfRow, countOf, routedOf;
    // Expert rows at their owner (Megatron's all-to-all dispatcher: permute, all-to-all over EP,
    // experts, all-to-all back, combine). The owner's buffers hold, for each source EP rank, its
    // block of rows for each local expert: [E x C] rows in all, as the source's permuted buffer.
    DeviceBuffer expertIn, eu, eg;  // [E C, h], [E C, gated f], [E C, f]
    DeviceBuffer eout;              // expert outputs back at the source, [E C, h]
    ExpertRoute route;              // the rows of each block, both sides

    kernels::Routing routing()
    {
        return {probs.data(),      expertOf.data(), weightOf.data(), rowOf.data(),
                tokenOfRow.data(), countOf.data(),  routedOf.data()};
    }
    kernels::DevPtr attentionInput() const { return aFull.empty() ? a.ptr() : aFull.ptr(); }
    kernels::DevPtr mlpInput() const { return cFull.empty() ? c.ptr() : cFull.ptr(); }
    void releaseAllButInput()
    {
        LayerActivations kept;
        kept.xIn = std::move(xIn);
        *this = std::move(kept);
    }
};

class GptModel::Activations {
public:
    int batch = 0;
    int firstLayer = 0;
    bool embeds = false;                   // the chunk starts the model
    bool ends = false;                     // the chunk ends the model
    std::vector<std::int32_t> ids;         // [T]
    std::vector<LayerActivations> layers;  // the chunk's layers, in order
    DeviceBuffer xFinal, normOut, meanF, rstdF;
    DeviceBuffer dLogits;  // [T, V], the loss gradient computed in the forward pass
    float auxScale = 0;
};

GptModel::GptModel(const plan::ModelSpec& model, plan::Recompute recompute, kernels::Backend& backend,
                   const ModelSlice* slice)
    : m_model(model), m_recompute(recompute), m_backend(backend),
      m_layout(model, slice ? *slice : ModelSlice::whole(model)),
      m_params(backend, m_layout.totalSize(), MemoryCategory::Params),
      m_grads(backend, m_layout.totalSize(), MemoryCategory::Grads), m_headDim(int(model.hidden / model.heads)),
      m_gated(model.activation == plan::Activation::SwiGlu ? 2 : 1), m_tensor(backend), m_experts(backend, nullptr)
{
}

GptModel::~GptModel() = default;

DeviceBuffer GptModel::activation(std::size_t elements)
{
    return DeviceBuffer(m_backend, elements, MemoryCategory::Activations);
}

void GptModel::zeroGradients() { m_backend.fill(m_grads.ptr(), 0.0f, m_grads.size()); }

DevPtr GptModel::param(int view, std::size_t elementOffset) const
{
    if (m_gatherer) {
        return kernels::offset(m_gatherer->param(view), elementOffset);
    }
    return m_params.at(m_layout.at(view).offset + elementOffset);
}

DevPtr GptModel::grad(int view, std::size_t elementOffset) const
{
    if (m_gatherer) {
        return kernels::offset(m_gatherer->grad(view), elementOffset);
    }
    return m_grads.at(m_layout.at(view).offset + elementOffset);
}

void GptModel::setParameterGatherer(ParameterGatherer* gatherer)
{
    m_gatherer = gatherer;
    m_params = DeviceBuffer();
    m_grads = DeviceBuffer();
}

std::vector<int> GptModel::layerViews(int layer) const
{
    const LayerViews& l = m_layout.layer(layer);
    std::vector<int> views;
    for (int v : {l.attnNormWeight, l.attnNormBias, l.qkv, l.proj, l.mlpNormWeight, l.mlpNormBias, l.fc1, l.fc2,
                  l.router, l.expertFc1, l.expertFc2})
        if (v >= 0)
            views.push_back(v);
    return views;
}

std::vector<int> GptModel::headViews() const
{
    std::vector<int> views;
    for (int v : {m_layout.finalNormWeight(), m_layout.finalNormBias(), m_layout.head()})
        if (v >= 0)
            views.push_back(v);
    return views;
}

void GptModel::acquire(const std::vector<int>& views, bool withGradients)
{
    if (m_gatherer)
        m_gatherer->acquire(views, withGradients);
}

void GptModel::release(const std::vector<int>& views, bool withGradients)
{
    if (m_gatherer)
        m_gatherer->release(views, withGradients);
}

void GptModel::linear(ConstDevPtr x, int tokens, int view, std::size_t elementOffset, int out, int in, DevPtr y,
                      float beta)
{
    m_backend.gemm(false, true, tokens, out, in, 1.0f, x, in, param(view, elementOffset), in, beta, y, out);
}

void GptModel::linearBackward(ConstDevPtr dy, ConstDevPtr x, int tokens, int view, std::size_t elementOffset, int out,
                              int in, DevPtr dx, float dxBeta)
{
    if (m_deferred) {
        // Keep copies of dy and x: the buffers they live in are freed or reused before W runs.
        DeferredWeightGrad w{view,
                             elementOffset,
                             out,
                             in,
                             tokens,
                             DeviceBuffer(m_backend, std::size_t(tokens) * out, MemoryCategory::Activations),
                             DeviceBuffer(m_backend, std::size_t(tokens) * in, MemoryCategory::Activations)};
        m_backend.copy(w.dy.ptr(), dy, w.dy.size());
        m_backend.copy(w.x.ptr(), x, w.x.size());
        m_deferred->push_back(std::move(w));
    } else {
        m_backend.gemm(true, false, out, in, tokens, 1.0f, dy, out, x, in, 1.0f, grad(view, elementOffset), in);
    }
    if (dx.data)
        m_backend.gemm(false, false, tokens, in, out, 1.0f, dy, out, param(view, elementOffset), in, dxBeta, dx, in);
}

void GptModel::normForward(int weight, int bias, ConstDevPtr x, int tokens, DevPtr out, DevPtr mean, DevPtr rstd)
{
    const int h = int(m_model.hidden);
    if (m_model.norm == plan::Norm::LayerNorm)
        m_backend.layerNormForward(x, param(weight), param(bias), tokens, h, kNormEps, out, mean, rstd);
    else
        m_backend.rmsNormForward(x, param(weight), tokens, h, kNormEps, out, rstd);
}

void GptModel::normBackward(int weight, int bias, ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr mean, ConstDevPtr rstd,
                            int tokens, DevPtr dxAccumulate)
{
    const int h = int(m_model.hidden);
    DeviceBuffer dx(m_backend, std::size_t(tokens) * h);
    if (m_model.norm == plan::Norm::LayerNorm)
        m_backend.layerNormBackward(dOut, x, param(weight), mean, rstd, tokens, h, dx.ptr(), grad(weight), grad(bias));
    else
        m_backend.rmsNormBackward(dOut, x, param(weight), rstd, tokens, h, dx.ptr(), grad(weight));
    m_backend.add(dx.ptr(), dxAccumulate, dx.size());
}

void GptModel::normThenGather(int weight, int bias, ConstDevPtr x, int batch, DeviceBuffer& out, DeviceBuffer& mean,
                              DeviceBuffer& rstd, DeviceBuffer& gathered)
{
    const std::size_t stream = streamElements(batch), h = std::size_t(m_model.hidden);
    const int localTokens = int(stream / h);
    out = activation(stream);
    mean = activation(std::size_t(localTokens));
    rstd = activation(std::size_t(localTokens));
    normForward(weight, bias, x, localTokens, out.ptr(), mean.ptr(), rstd.ptr());
    m_tensor.wholeSequence(out.ptr(), std::size_t(batch) * std::size_t(m_model.seqLen) * h, gathered,
                           MemoryCategory::Activations);
}

void GptModel::activationForward(ConstDevPtr u, int rows, int ffn, DevPtr out)
{
    if (m_gated == 2)
        m_backend.swigluForward(u, rows, ffn, out);
    else
        m_backend.geluForward(u, out, std::size_t(rows) * ffn);
}

void GptModel::activationBackward(ConstDevPtr dOut, ConstDevPtr u, int rows, int ffn, DevPtr du)
{
    if (m_gated == 2)
        m_backend.swigluBackward(dOut, u, rows, ffn, du);
    else
        m_backend.geluBackward(dOut, u, du, std::size_t(rows) * ffn);
}

void GptModel::forwardLayer(int layer, LayerActivations& a, int batch, float auxScale, DevPtr xOut,
                            ForwardResult* result, bool gather)
{
    if (gather)
        acquire(layerViews(layer), false);
    const LayerViews& w = m_layout.layer(layer);
    const int s = int(m_model.seqLen), h = int(m_model.hidden), d = m_headDim;
    const int H = m_model.heads / m_tensor.size(), Hkv = m_model.kvHeads / m_tensor.size();  // this rank's heads
    const int T = batch * s;
    const std::size_t rows = std::size_t(T);
    const int localTokens = int(streamElements(batch) / std::size_t(h));  // the stream's rows here
    const std::size_t localRows = std::size_t(localTokens);

    normThenGather(w.attnNormWeight, w.attnNormBias, a.xIn.ptr(), batch, a.a, a.mean1, a.rstd1, a.aFull);

    // q, k and v are row blocks of the qkv weight: three GEMMs write them apart.
    a.q = activation(rows * H * d);
    a.k = activation(rows * Hkv * d);
    a.v = activation(rows * Hkv * d);
    linear(a.attentionInput(), T, w.qkv, 0, H * d, h, a.q.ptr());
    linear(a.attentionInput(), T, w.qkv, std::size_t(H) * d * h, Hkv * d, h, a.k.ptr());
    linear(a.attentionInput(), T, w.qkv, std::size_t(H + Hkv) * d * h, Hkv * d, h, a.v.ptr());
    m_backend.rope(a.q.ptr(), T, s, H, d, kRopeBase, false);
    m_backend.rope(a.k.ptr(), T, s, Hkv, d, kRopeBase, false);

    const kernels::AttentionShape shape{batch, s, H, Hkv, d};
    a.att = activation(rows * H * d);
    a.lse = activation(std::size_t(batch) * H * s);
    m_backend.attentionForward(shape, a.q.ptr(), a.k.ptr(), a.v.ptr(), a.att.ptr(), a.lse.ptr());

    a.xMid = activation(localRows * h);
    m_backend.copy(a.xMid.ptr(), a.xIn.ptr(), localRows * h);
    linearInto(a.att.ptr(), T, w.proj, h, H * d, a.xMid.ptr());  // residual: xMid = xIn + att W^T

    normThenGather(w.mlpNormWeight, w.mlpNormBias, a.xMid.ptr(), batch, a.c, a.mean2, a.rstd2, a.cFull);

    m_backend.copy(xOut, a.xMid.ptr(), localRows * h);
    if (w.router >= 0) {
        // Every TP rank routes all T tokens alike; its rows of the (complete) output join its stream.
        DeviceBuffer y(m_backend, rows * h);
        forwardMoe(layer, a, T, auxScale, y.ptr(), result);
        m_backend.add(m_tensor.streamRows(y.ptr(), T, h), xOut, localRows * h);
    } else {
        const int f = int(m_model.ffnHidden) / m_tensor.size();
        a.u = activation(rows * m_gated * f);
        a.g = activation(rows * f);
        linear(a.mlpInput(), T, w.fc1, 0, m_gated * f, h, a.u.ptr());
        activationForward(a.u.ptr(), T, f, a.g.ptr());
        linearInto(a.g.ptr(), T, w.fc2, h, f, xOut);  // residual: xOut = xMid + g W2^T
    }

    if (m_recompute == plan::Recompute::Full) {
        a.releaseAllButInput();
    } else if (m_recompute == plan::Recompute::Selective) {
        // Core attention is recomputed in the backward from q, k and v.
        a.att = DeviceBuffer();
        a.lse = DeviceBuffer();
    }
    if (gather)
        release(layerViews(layer), false);
}

void GptModel::forwardMoe(int layer, LayerActivations& a, int T, float auxScale, DevPtr y, ForwardResult* result)
{
    const LayerViews& w = m_layout.layer(layer);
    const plan::MoeSpec& moe = m_model.moe;
    const int h = int(m_model.hidden), E = moe.experts, k = moe.topK, f = int(moe.ffnHidden) / m_tensor.size();
    a.route.capacity = kernels::routerCapacity(T, E, k, moe.capacityFactor);
    const kernels::RouterShape shape{T, E, k, a.route.capacity};
    const std::size_t rows = std::size_t(E) * a.route.capacity;

    DeviceBuffer logits(m_backend, std::size_t(T) * E);
    linear(a.mlpInput(), T, w.router, 0, E, h, logits.ptr());
    std::vector<float> hostLogits(std::size_t(T) * E);
    m_backend.download(hostLogits.data(), logits.ptr(), hostLogits.size());

    a.probs.assign(std::size_t(T) * E, 0.0f);
    a.expertOf.assign(std::size_t(T) * k, 0);
    a.weightOf.assign(std::size_t(T) * k, 0.0f);
    a.rowOf.assign(std::size_t(T) * k, -1);
    a.tokenOfRow.assign(rows, -1);
    a.countOf.assign(std::size_t(E), 0);
    a.routedOf.assign(std::size_t(E), 0);
    const kernels::Routing routing = a.routing();
    m_backend.route(shape, hostLogits.data(), routing);
    a.dRouterLogits.assign(std::size_t(T) * E, 0.0f);
    const double aux = m_backend.auxLoss(shape, routing, float(moe.auxLossCoef) * auxScale, a.dRouterLogits.data());
    if (result) {
        // auxLoss scaled its gradient by auxScale through coef; report the unscaled loss.
        result->auxLoss += auxScale != 0.0f ? aux / auxScale : 0.0;
        result->expertLoads.push_back({layer, a.routedOf, a.countOf});
    }

    // Dispatch: each EP rank receives, from every rank, the rows routed to its experts.
    const int localExperts = m_experts.localExperts(E);
    a.expertIn = activation(rows * h);
    a.route = m_experts.dispatch(shape, routing, a.mlpInput(), h, a.expertIn.ptr());

    a.eu = activation(rows * m_gated * f);
    a.eg = activation(rows * f);
    DeviceBuffer ownerOut(m_backend, rows * h);
    for (int block = 0; block < E; ++block) {  // block = source x localExperts + local expert
        const int n = a.route.received[std::size_t(block)];
        if (n == 0)
            continue;
        const std::size_t expert = std::size_t(block % localExperts);
        const std::size_t row0 = std::size_t(block) * a.route.capacity;
        linear(a.expertIn.at(row0 * h), n, w.expertFc1, expert * m_gated * f * h, m_gated * f, h,
               a.eu.at(row0 * m_gated * f));
        activationForward(a.eu.at(row0 * m_gated * f), n, f, a.eg.at(row0 * f));
        linear(a.eg.at(row0 * f), n, w.expertFc2, expert * h * f, h, f, ownerOut.at(row0 * h));
    }
    m_tensor.allReduce(ownerOut.ptr(), rows * h);  // each TP rank computed part of every expert
    a.eout = activation(rows * h);
    m_experts.combine(shape, routing, a.route, ownerOut.ptr(), h, a.eout.ptr(), y);
}

void GptModel::setTensorGroup(Communicator* group, bool sequenceParallel)
{
    m_tensor = TensorParallel(m_backend, group, sequenceParallel);
}

void GptModel::setExpertGroup(Communicator* group) { m_experts = ExpertDispatcher(m_backend, group); }

std::size_t GptModel::streamElements(int batch) const
{
    return std::size_t(m_tensor.localTokens(batch * int(m_model.seqLen))) * std::size_t(m_model.hidden);
}

void GptModel::linearInto(ConstDevPtr x, int tokens, int view, int out, int in, DevPtr dst)
{
    m_tensor.rowParallelLinear(x, tokens, param(view), out, in, dst);
}

void GptModel::backwardMoe(int layer, LayerActivations& a, int T, ConstDevPtr dy, DevPtr dc)
{
    const LayerViews& w = m_layout.layer(layer);
    const plan::MoeSpec& moe = m_model.moe;
    const int h = int(m_model.hidden), E = moe.experts, k = moe.topK, f = int(moe.ffnHidden) / m_tensor.size();
    const kernels::RouterShape shape{T, E, k, a.route.capacity};
    const kernels::Routing routing = a.routing();
    const std::size_t rows = std::size_t(E) * a.route.capacity;

    // The gradients travel the dispatcher's path backwards: to the experts' owners and back.
    std::vector<float> dWeight(std::size_t(T) * k, 0.0f);
    const int localExperts = m_experts.localExperts(E);
    DeviceBuffer dOwnerOut(m_backend, rows * h);
    m_experts.combineBackward(shape, routing, a.route, dy, a.eout.ptr(), h, dOwnerOut.ptr(), dWeight.data());
    DeviceBuffer dEg(m_backend, rows * f);
    DeviceBuffer dEu(m_backend, rows * m_gated * f);
    DeviceBuffer dExpertIn(m_backend, rows * h);
    for (int block = 0; block < E; ++block) {
        const int n = a.route.received[std::size_t(block)];
        if (n == 0)
            continue;
        const std::size_t expert = std::size_t(block % localExperts);
        const std::size_t row0 = std::size_t(block) * a.route.capacity;
        linearBackward(dOwnerOut.at(row0 * h), a.eg.at(row0 * f), n, w.expertFc2, expert * h * f, h, f,
                       dEg.at(row0 * f), 0.0f);
        activationBackward(dEg.at(row0 * f), a.eu.at(row0 * m_gated * f), n, f, dEu.at(row0 * m_gated * f));
        linearBackward(dEu.at(row0 * m_gated * f), a.expertIn.at(row0 * h), n, w.expertFc1, expert * m_gated * f * h,
                       m_gated * f, h, dExpertIn.at(row0 * h), 0.0f);
    }
    m_tensor.allReduce(dExpertIn.ptr(), rows * h);
    m_experts.dispatchBackward(shape, routing, a.route, dExpertIn.ptr(), h, dc);

    // Router: the combine weights' gradient through the softmax, plus the load-balancing loss's.
    std::vector<float> dLogits = a.dRouterLogits;
    m_backend.routerBackward(shape, routing, dWeight.data(), dLogits.data());
    DeviceBuffer dLogitsDevice(m_backend, dLogits.size());
    m_backend.upload(dLogitsDevice.ptr(), dLogits.data(), dLogits.size());
    linearBackward(dLogitsDevice.ptr(), a.mlpInput(), T, w.router, 0, E, h, dc, 1.0f);
}

void GptModel::backwardLayer(int layer, LayerActivations& a, int batch, float auxScale, DevPtr dx)
{
    const LayerViews& w = m_layout.layer(layer);
    const int s = int(m_model.seqLen), h = int(m_model.hidden), d = m_headDim;
    const int H = m_model.heads / m_tensor.size(), Hkv = m_model.kvHeads / m_tensor.size();  // this rank's heads
    const int T = batch * s;
    const std::size_t rows = std::size_t(T);
    const int localTokens = int(streamElements(batch) / std::size_t(h));
    const std::size_t localRows = std::size_t(localTokens);

    acquire(layerViews(layer), true);
    if (m_recompute == plan::Recompute::Full) {
        DeviceBuffer scratch(m_backend, localRows * h);
        const plan::Recompute mode = m_recompute;
        m_recompute = plan::Recompute::None;  // rebuild every activation of this layer once
        forwardLayer(layer, a, batch, auxScale, scratch.ptr(), nullptr, false);
        m_recompute = mode;
    }
    const kernels::AttentionShape shape{batch, s, H, Hkv, d};
    if (a.att.empty()) {
        // Selective recompute: core attention again, a transient of this backward (workspace).
        a.att = DeviceBuffer(m_backend, rows * H * d);
        a.lse = DeviceBuffer(m_backend, std::size_t(batch) * H * s);
        m_backend.attentionForward(shape, a.q.ptr(), a.k.ptr(), a.v.ptr(), a.att.ptr(), a.lse.ptr());
    }

    // With sequence parallelism dx holds this rank's rows; the TP regions need all of them.
    DeviceBuffer dxFull;

    // MLP branch: dx is d(loss)/d(xOut), which is also the gradient of its residual input xMid.
    const kernels::ConstDevPtr dy = m_tensor.wholeSequence(dx, rows * h, dxFull);
    DeviceBuffer dc(m_backend, rows * h), dcLocal;
    kernels::ConstDevPtr dcMine;
    if (w.router >= 0) {
        // Complete on every TP rank already: this rank's rows of it.
        backwardMoe(layer, a, T, dy, dc.ptr());
        dcMine = m_tensor.streamRows(dc.ptr(), T, h);
    } else {
        const int f = int(m_model.ffnHidden) / m_tensor.size();
        DeviceBuffer dg(m_backend, rows * f);
        DeviceBuffer du(m_backend, rows * m_gated * f);
        linearBackward(dy, a.g.ptr(), T, w.fc2, 0, h, f, dg.ptr(), 0.0f);
        activationBackward(dg.ptr(), a.u.ptr(), T, f, du.ptr());
        linearBackward(du.ptr(), a.mlpInput(), T, w.fc1, 0, m_gated * f, h, dc.ptr(), 0.0f);
        dcMine = m_tensor.completeToStream(dc.ptr(), rows * h, dcLocal);
    }
    normBackward(w.mlpNormWeight, w.mlpNormBias, dcMine, a.xMid.ptr(), a.mean2.ptr(), a.rstd2.ptr(), localTokens, dx);

    // Attention branch: dx is now d(loss)/d(xMid), the gradient of the projection's output too.
    const kernels::ConstDevPtr dOut = m_tensor.wholeSequence(dx, rows * h, dxFull);
    DeviceBuffer dAtt(m_backend, rows * H * d);
    linearBackward(dOut, a.att.ptr(), T, w.proj, 0, h, H * d, dAtt.ptr(), 0.0f);
    DeviceBuffer dq(m_backend, rows * H * d);
    DeviceBuffer dk(m_backend, rows * Hkv * d);
    DeviceBuffer dv(m_backend, rows * Hkv * d);
    m_backend.attentionBackward(shape, dAtt.ptr(), a.q.ptr(), a.k.ptr(), a.v.ptr(), a.att.ptr(), a.lse.ptr(), dq.ptr(),
                                dk.ptr(), dv.ptr());
    m_backend.rope(dq.ptr(), T, s, H, d, kRopeBase, true);
    m_backend.rope(dk.ptr(), T, s, Hkv, d, kRopeBase, true);
    DeviceBuffer da(m_backend, rows * h);
    linearBackward(dq.ptr(), a.attentionInput(), T, w.qkv, 0, H * d, h, da.ptr(), 0.0f);
    linearBackward(dk.ptr(), a.attentionInput(), T, w.qkv, std::size_t(H) * d * h, Hkv * d, h, da.ptr(), 1.0f);
    linearBackward(dv.ptr(), a.attentionInput(), T, w.qkv, std::size_t(H + Hkv) * d * h, Hkv * d, h, da.ptr(), 1.0f);
    DeviceBuffer daLocal;
    normBackward(w.attnNormWeight, w.attnNormBias, m_tensor.completeToStream(da.ptr(), rows * h, daLocal), a.xIn.ptr(),
                 a.mean1.ptr(), a.rstd1.ptr(), localTokens, dx);
    release(layerViews(layer), true);
}

void GptModel::ActivationsDeleter::operator()(Activations* activations) const { delete activations; }

GptModel::ActivationsPtr GptModel::forward(int chunk, const MicroBatch& batch, ConstDevPtr input, DevPtr output,
                                           float lossScale, float auxScale, ForwardResult& result)
{
    const ModelSlice& slice = m_layout.slice();
    const ModelSlice::Chunk& range = slice.chunks[std::size_t(chunk)];
    const int s = int(m_model.seqLen), h = int(m_model.hidden), V = int(m_model.vocab) / m_tensor.size();
    const int T = batch.batch * s;
    const std::size_t rows = std::size_t(T);
    ActivationsPtr acts(new Activations);
    acts->batch = batch.batch;
    acts->auxScale = auxScale;
    acts->firstLayer = range.firstLayer;
    acts->embeds = slice.embedding && chunk == 0;
    acts->ends = slice.head && chunk == int(slice.chunks.size()) - 1;
    std::vector<std::int32_t> targets;
    if (acts->embeds || acts->ends) {
        acts->ids.resize(rows);
        targets.resize(rows);
        for (int b = 0; b < batch.batch; ++b)
            for (int t = 0; t < s; ++t) {
                const std::int32_t* row = batch.tokens + std::size_t(b) * (s + 1);
                acts->ids[std::size_t(b) * s + t] = row[t];
                targets[std::size_t(b) * s + t] = row[t + 1];
            }
    }

    const std::size_t stream = streamElements(batch.batch);  // this rank's rows of the residual stream
    DeviceBuffer x = activation(stream);
    if (acts->embeds)
        acquire({m_layout.embedding()}, false);
    if (acts->embeds)
        m_tensor.embeddingForward(acts->ids, m_model.vocab, param(m_layout.embedding()), h, x.ptr());
    else
        m_backend.copy(x.ptr(), input, stream);
    if (acts->embeds)
        release({m_layout.embedding()}, false);
    acts->layers.resize(std::size_t(range.layers));
    for (int i = 0; i < range.layers; ++i) {
        LayerActivations& a = acts->layers[std::size_t(i)];
        a.xIn = std::move(x);
        // A chunk that hands on to the next stage writes its last layer's output straight there.
        const bool handsOn = !acts->ends && i == range.layers - 1;
        x = handsOn ? DeviceBuffer() : activation(stream);
        forwardLayer(range.firstLayer + i, a, batch.batch, auxScale, handsOn ? output : x.ptr(), &result);
    }
    if (!acts->ends)
        return acts;
    const int localTokens = int(stream / std::size_t(h));
    acquire(headViews(), false);
    acts->xFinal = std::move(x);
    acts->meanF = activation(std::size_t(localTokens));
    acts->rstdF = activation(std::size_t(localTokens));
    DeviceBuffer normLocal = activation(stream), gathered;
    normForward(m_layout.finalNormWeight(), m_layout.finalNormBias(), acts->xFinal.ptr(), localTokens, normLocal.ptr(),
                acts->meanF.ptr(), acts->rstdF.ptr());
    // The output layer sees every token.
    m_tensor.wholeSequence(normLocal.ptr(), rows * h, gathered, MemoryCategory::Activations);
    acts->normOut = gathered.empty() ? std::move(normLocal) : std::move(gathered);
    acts->dLogits = activation(rows * V);
    linear(acts->normOut.ptr(), T, m_layout.head(), 0, V, h, acts->dLogits.ptr());
    result.lossSum += m_tensor.crossEntropy(acts->dLogits.ptr(), targets, m_model.vocab, lossScale);
    release(headViews(), false);
    return acts;
}

void GptModel::applyWeightGradients(std::vector<DeferredWeightGrad>& deferred)
{
    for (DeferredWeightGrad& w : deferred)
        m_backend.gemm(true, false, w.out, w.in, w.tokens, 1.0f, w.dy.ptr(), w.out, w.x.ptr(), w.in, 1.0f,
                       grad(w.view, w.elementOffset), w.in);
    deferred.clear();
}

std::vector<int> GptModel::chunkViews(int chunk) const
{
    const ModelSlice& slice = m_layout.slice();
    const ModelSlice::Chunk& range = slice.chunks[std::size_t(chunk)];
    std::vector<int> views;
    if (slice.embedding && chunk == 0)
        views.push_back(m_layout.embedding());
    for (int layer = range.firstLayer; layer < range.firstLayer + range.layers; ++layer)
        for (int v : layerViews(layer))
            views.push_back(v);
    // A tied embedding that a V schedule's stage 0 also embeds with belongs to chunk 0 (there is
    // one tensor for both uses).
    if (slice.head && chunk == int(slice.chunks.size()) - 1)
        for (int v : headViews())
            if (chunk == 0 || !slice.embedding || v != m_layout.embedding())
                views.push_back(v);
    return views;
}

void GptModel::backward(Activations& acts, ConstDevPtr outputGrad, DevPtr inputGrad,
                        std::vector<DeferredWeightGrad>* deferred, GradientListener* finished)
{
    if (deferred)
        finished = nullptr;
    m_deferred = deferred;
    struct Reset {
        std::vector<DeferredWeightGrad>*& pointer;
        ~Reset() { pointer = nullptr; }
    } reset{m_deferred};
    const int s = int(m_model.seqLen), h = int(m_model.hidden), V = int(m_model.vocab) / m_tensor.size();
    const int T = acts.batch * s;
    const std::size_t rows = std::size_t(T);

    const std::size_t stream = streamElements(acts.batch);
    const int localTokens = int(stream / std::size_t(h));
    DeviceBuffer dx(m_backend, stream);
    if (acts.ends) {
        acquire(headViews(), true);
        DeviceBuffer dNorm(m_backend, rows * h);
        linearBackward(acts.dLogits.ptr(), acts.normOut.ptr(), T, m_layout.head(), 0, V, h, dNorm.ptr(), 0.0f);
        acts.dLogits = DeviceBuffer();
        // Each rank saw a block of the vocabulary: complete the gradient (this rank's rows under SP).
        DeviceBuffer dNormLocal;
        normBackward(m_layout.finalNormWeight(), m_layout.finalNormBias(),
                     m_tensor.completeToStream(dNorm.ptr(), rows * h, dNormLocal), acts.xFinal.ptr(), acts.meanF.ptr(),
                     acts.rstdF.ptr(), localTokens, dx.ptr());
        release(headViews(), true);
        if (finished) {
            // A tied embedding that this rank also embeds with gets more gradient at the end.
            std::vector<int> views = headViews();
            if (m_layout.slice().embedding)
                views.erase(std::remove(views.begin(), views.end(), m_layout.embedding()), views.end());
            finished->gradientsReady(views);
        }
    } else {
        m_backend.copy(dx.ptr(), outputGrad, stream);
    }
    for (int i = int(acts.layers.size()) - 1; i >= 0; --i) {
        backwardLayer(acts.firstLayer + i, acts.layers[std::size_t(i)], acts.batch, acts.auxScale, dx.ptr());
        acts.layers[std::size_t(i)] = LayerActivations();
        if (finished)
            finished->gradientsReady(layerViews(acts.firstLayer + i));
    }
    if (acts.embeds)
        acquire({m_layout.embedding()}, true);
    if (acts.embeds)
        m_tensor.embeddingBackward(acts.ids, m_model.vocab, dx.ptr(), h, grad(m_layout.embedding()));
    else
        m_backend.copy(inputGrad, dx.ptr(), stream);
    if (acts.embeds)
        release({m_layout.embedding()}, true);
    if (acts.embeds && finished)
        finished->gradientsReady({m_layout.embedding()});
}

}  // namespace meshbench::agent
