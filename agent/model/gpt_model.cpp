#include "gpt_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace meshbench::agent {

using kernels::ConstDevPtr;
using kernels::DevPtr;
using Buffer = plan::AgentBuffer;

// Buffers of the activation table (plan/agent_activations.h, which names and sizes each of them and
// says which recompute modes keep it), by their entry.
class GptModel::ActivationBuffers {
public:
    DeviceBuffer& operator[](Buffer buffer) { return m_buffers[std::size_t(buffer)]; }
    const DeviceBuffer& operator[](Buffer buffer) const { return m_buffers[std::size_t(buffer)]; }

private:
    std::array<DeviceBuffer, plan::kAgentBufferCount> m_buffers;
};

// Everything one layer keeps between its forward and its backward for one micro-batch: the table's
// layer buffers (its input, the norms, q, k, v, core attention, the residual, the dense MLP's or the
// experts' rows) and the MoE routing on the host.
struct GptModel::LayerActivations : ActivationBuffers {
    // An MoE layer's routing, on the host.
    struct Routing {
        std::vector<float> probs, weightOf, dRouterLogits;
        std::vector<int> expertOf, rowOf, tokenOfRow, countOf, routedOf;
        // Expert rows at their owner (Megatron's all-to-all dispatcher: permute, all-to-all over EP,
        // experts, all-to-all back, combine). The owner's buffers (ExpertIn, ExpertFc1Out,
        // ExpertActOut) hold, for each source EP rank, its block of rows for each local expert:
        // [E x C] rows in all, as the source's permuted buffer; ExpertOut holds the outputs back at
        // the source.
        ExpertRoute route;  // the rows of each block, both sides

        kernels::Routing view()
        {
            return {probs.data(),      expertOf.data(), weightOf.data(), rowOf.data(),
                    tokenOfRow.data(), countOf.data(),  routedOf.data()};
        }
    };
    Routing moe;

    // With sequence parallelism a TP region reads the norm's output gathered over the tensor group.
    kernels::DevPtr attentionInput() const { return regionInput(Buffer::AttnNorm, Buffer::AttnGathered); }
    kernels::DevPtr mlpInput() const { return regionInput(Buffer::MlpNorm, Buffer::MlpGathered); }
    // At the end of the layer's forward: the buffers `recompute` does not keep for the backward go
    // (full recompute rebuilds them, and the routing, from the input).
    void releaseUnkept(plan::Recompute recompute)
    {
        for (const plan::AgentBufferInfo& b : plan::agentBuffers())
            if (b.part != plan::AgentBufferPart::Head && !plan::agentBufferKept(b.keep, recompute))
                (*this)[b.buffer] = DeviceBuffer();
        if (recompute == plan::Recompute::Full)
            moe = Routing();
    }

private:
    kernels::DevPtr regionInput(Buffer norm, Buffer gathered) const
    {
        const DeviceBuffer& whole = (*this)[gathered];
        return whole.empty() ? (*this)[norm].ptr() : whole.ptr();
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
    ActivationBuffers head;                // the table's head buffers: FinalInput, its norm, Logits
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

plan::AgentActivationShape GptModel::activationShape(int batch) const
{
    return plan::agentActivationShape(m_model, m_tensor.size(), m_tensor.sequenceParallel(), batch);
}

DeviceBuffer GptModel::activation(Buffer buffer, const plan::AgentActivationShape& shape)
{
    const std::int64_t elements = plan::agentBufferElements(buffer, shape);
    if (elements == 0)
        return DeviceBuffer();
    return DeviceBuffer(m_backend, std::size_t(elements), MemoryCategory::Activations);
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

void GptModel::normThenGather(int weight, int bias, ConstDevPtr x, const plan::AgentActivationShape& shape,
                              LayerActivations& a, const NormBuffers& buffers)
{
    DeviceBuffer& out = a[buffers.out];
    out = activation(buffers.out, shape);
    a[buffers.mean] = activation(buffers.mean, shape);
    a[buffers.rstd] = activation(buffers.rstd, shape);
    normForward(weight, bias, x, int(shape.streamTokens), out.ptr(), a[buffers.mean].ptr(), a[buffers.rstd].ptr());
    a[buffers.gathered] = activation(buffers.gathered, shape);  // none without sequence parallelism
    if (!a[buffers.gathered].empty())
        m_tensor.gatherSequence(out.ptr(), a[buffers.gathered].ptr(), a[buffers.gathered].size());
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
    const plan::AgentActivationShape buffers = activationShape(batch);
    const std::size_t localRows = std::size_t(buffers.streamTokens);  // the stream's rows here

    normThenGather(w.attnNormWeight, w.attnNormBias, a[Buffer::Input].ptr(), buffers, a, kAttentionNorm);

    // q, k and v are row blocks of the qkv weight: three GEMMs write them apart.
    DeviceBuffer& q = a[Buffer::Query] = activation(Buffer::Query, buffers);
    DeviceBuffer& k = a[Buffer::Key] = activation(Buffer::Key, buffers);
    DeviceBuffer& v = a[Buffer::Value] = activation(Buffer::Value, buffers);
    linear(a.attentionInput(), T, w.qkv, 0, H * d, h, q.ptr());
    linear(a.attentionInput(), T, w.qkv, std::size_t(H) * d * h, Hkv * d, h, k.ptr());
    linear(a.attentionInput(), T, w.qkv, std::size_t(H + Hkv) * d * h, Hkv * d, h, v.ptr());
    m_backend.rope(q.ptr(), T, s, H, d, kRopeBase, false);
    m_backend.rope(k.ptr(), T, s, Hkv, d, kRopeBase, false);

    const kernels::AttentionShape shape{batch, s, H, Hkv, d};
    DeviceBuffer& att = a[Buffer::Attention] = activation(Buffer::Attention, buffers);
    DeviceBuffer& lse = a[Buffer::LogSumExp] = activation(Buffer::LogSumExp, buffers);
    m_backend.attentionForward(shape, q.ptr(), k.ptr(), v.ptr(), att.ptr(), lse.ptr());

    DeviceBuffer& xMid = a[Buffer::Residual] = activation(Buffer::Residual, buffers);
    m_backend.copy(xMid.ptr(), a[Buffer::Input].ptr(), localRows * h);
    linearInto(att.ptr(), T, w.proj, h, H * d, xMid.ptr());  // residual: xMid = xIn + att W^T

    normThenGather(w.mlpNormWeight, w.mlpNormBias, xMid.ptr(), buffers, a, kMlpNorm);

    m_backend.copy(xOut, xMid.ptr(), localRows * h);
    if (w.router >= 0) {
        // Every TP rank routes all T tokens alike; its rows of the (complete) output join its stream.
        DeviceBuffer y(m_backend, rows * h);
        forwardMoe(layer, a, buffers, auxScale, y.ptr(), result);
        m_backend.add(m_tensor.streamRows(y.ptr(), T, h), xOut, localRows * h);
    } else {
        const int f = int(m_model.ffnHidden) / m_tensor.size();
        DeviceBuffer& u = a[Buffer::Fc1Out] = activation(Buffer::Fc1Out, buffers);
        DeviceBuffer& g = a[Buffer::ActOut] = activation(Buffer::ActOut, buffers);
        linear(a.mlpInput(), T, w.fc1, 0, m_gated * f, h, u.ptr());
        activationForward(u.ptr(), T, f, g.ptr());
        linearInto(g.ptr(), T, w.fc2, h, f, xOut);  // residual: xOut = xMid + g W2^T
    }

    // Selective recompute rebuilds core attention in the backward from q, k and v; full recompute
    // all but the input.
    a.releaseUnkept(m_recompute);
    if (gather)
        release(layerViews(layer), false);
}

void GptModel::forwardMoe(int layer, LayerActivations& a, const plan::AgentActivationShape& buffers, float auxScale,
                          DevPtr y, ForwardResult* result)
{
    const LayerViews& w = m_layout.layer(layer);
    const plan::MoeSpec& moe = m_model.moe;
    const int T = int(buffers.tokens);
    const int h = int(m_model.hidden), E = moe.experts, k = moe.topK, f = int(moe.ffnHidden) / m_tensor.size();
    a.moe.route.capacity = kernels::routerCapacity(T, E, k, moe.capacityFactor);
    if (a.moe.route.capacity != buffers.capacity)
        throw std::logic_error("GptModel: the expert buffers' capacity (plan/agent_activations) is not the router's");
    const kernels::RouterShape shape{T, E, k, a.moe.route.capacity};
    const std::size_t rows = std::size_t(E) * a.moe.route.capacity;

    DeviceBuffer logits(m_backend, std::size_t(T) * E);
    linear(a.mlpInput(), T, w.router, 0, E, h, logits.ptr());
    std::vector<float> hostLogits(std::size_t(T) * E);
    m_backend.download(hostLogits.data(), logits.ptr(), hostLogits.size());

    a.moe.probs.assign(std::size_t(T) * E, 0.0f);
    a.moe.expertOf.assign(std::size_t(T) * k, 0);
    a.moe.weightOf.assign(std::size_t(T) * k, 0.0f);
    a.moe.rowOf.assign(std::size_t(T) * k, -1);
    a.moe.tokenOfRow.assign(rows, -1);
    a.moe.countOf.assign(std::size_t(E), 0);
    a.moe.routedOf.assign(std::size_t(E), 0);
    const kernels::Routing routing = a.moe.view();
    m_backend.route(shape, hostLogits.data(), routing);
    a.moe.dRouterLogits.assign(std::size_t(T) * E, 0.0f);
    const double aux = m_backend.auxLoss(shape, routing, float(moe.auxLossCoef) * auxScale, a.moe.dRouterLogits.data());
    if (result) {
        // auxLoss scaled its gradient by auxScale through coef; report the unscaled loss.
        result->auxLoss += auxScale != 0.0f ? aux / auxScale : 0.0;
        result->expertLoads.push_back({layer, a.moe.routedOf, a.moe.countOf});
    }

    // Dispatch: each EP rank receives, from every rank, the rows routed to its experts.
    const int localExperts = m_experts.localExperts(E);
    DeviceBuffer& expertIn = a[Buffer::ExpertIn] = activation(Buffer::ExpertIn, buffers);
    a.moe.route = m_experts.dispatch(shape, routing, a.mlpInput(), h, expertIn.ptr());

    DeviceBuffer& eu = a[Buffer::ExpertFc1Out] = activation(Buffer::ExpertFc1Out, buffers);
    DeviceBuffer& eg = a[Buffer::ExpertActOut] = activation(Buffer::ExpertActOut, buffers);
    DeviceBuffer ownerOut(m_backend, rows * h);
    for (int block = 0; block < E; ++block) {  // block = source x localExperts + local expert
        const int n = a.moe.route.received[std::size_t(block)];
        if (n == 0)
            continue;
        const std::size_t expert = std::size_t(block % localExperts);
        const std::size_t row0 = std::size_t(block) * a.moe.route.capacity;
        linear(expertIn.at(row0 * h), n, w.expertFc1, expert * m_gated * f * h, m_gated * f, h,
               eu.at(row0 * m_gated * f));
        activationForward(eu.at(row0 * m_gated * f), n, f, eg.at(row0 * f));
        linear(eg.at(row0 * f), n, w.expertFc2, expert * h * f, h, f, ownerOut.at(row0 * h));
    }
    m_tensor.allReduce(ownerOut.ptr(), rows * h);  // each TP rank computed part of every expert
    DeviceBuffer& eout = a[Buffer::ExpertOut] = activation(Buffer::ExpertOut, buffers);
    m_experts.combine(shape, routing, a.moe.route, ownerOut.ptr(), h, eout.ptr(), y);
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
    const kernels::RouterShape shape{T, E, k, a.moe.route.capacity};
    const kernels::Routing routing = a.moe.view();
    const std::size_t rows = std::size_t(E) * a.moe.route.capacity;

    // The gradients travel the dispatcher's path backwards: to the experts' owners and back.
    std::vector<float> dWeight(std::size_t(T) * k, 0.0f);
    const int localExperts = m_experts.localExperts(E);
    DeviceBuffer dOwnerOut(m_backend, rows * h);
    m_experts.combineBackward(shape, routing, a.moe.route, dy, a[Buffer::ExpertOut].ptr(), h, dOwnerOut.ptr(),
                              dWeight.data());
    DeviceBuffer dEg(m_backend, rows * f);
    DeviceBuffer dEu(m_backend, rows * m_gated * f);
    DeviceBuffer dExpertIn(m_backend, rows * h);
    for (int block = 0; block < E; ++block) {
        const int n = a.moe.route.received[std::size_t(block)];
        if (n == 0)
            continue;
        const std::size_t expert = std::size_t(block % localExperts);
        const std::size_t row0 = std::size_t(block) * a.moe.route.capacity;
        linearBackward(dOwnerOut.at(row0 * h), a[Buffer::ExpertActOut].at(row0 * f), n, w.expertFc2, expert * h * f, h,
                       f, dEg.at(row0 * f), 0.0f);
        activationBackward(dEg.at(row0 * f), a[Buffer::ExpertFc1Out].at(row0 * m_gated * f), n, f,
                           dEu.at(row0 * m_gated * f));
        linearBackward(dEu.at(row0 * m_gated * f), a[Buffer::ExpertIn].at(row0 * h), n, w.expertFc1,
                       expert * m_gated * f * h, m_gated * f, h, dExpertIn.at(row0 * h), 0.0f);
    }
    m_tensor.allReduce(dExpertIn.ptr(), rows * h);
    m_experts.dispatchBackward(shape, routing, a.moe.route, dExpertIn.ptr(), h, dc);

    // Router: the combine weights' gradient through the softmax, plus the load-balancing loss's.
    std::vector<float> dLogits = a.moe.dRouterLogits;
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
    const plan::AgentActivationShape buffers = activationShape(batch);
    const int localTokens = int(buffers.streamTokens);
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
    const DeviceBuffer &q = a[Buffer::Query], &k = a[Buffer::Key], &v = a[Buffer::Value];
    DeviceBuffer &att = a[Buffer::Attention], &lse = a[Buffer::LogSumExp];
    if (att.empty()) {
        // Selective recompute: core attention again, a transient of this backward (workspace).
        att = DeviceBuffer(m_backend, std::size_t(plan::agentBufferElements(Buffer::Attention, buffers)));
        lse = DeviceBuffer(m_backend, std::size_t(plan::agentBufferElements(Buffer::LogSumExp, buffers)));
        m_backend.attentionForward(shape, q.ptr(), k.ptr(), v.ptr(), att.ptr(), lse.ptr());
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
        linearBackward(dy, a[Buffer::ActOut].ptr(), T, w.fc2, 0, h, f, dg.ptr(), 0.0f);
        activationBackward(dg.ptr(), a[Buffer::Fc1Out].ptr(), T, f, du.ptr());
        linearBackward(du.ptr(), a.mlpInput(), T, w.fc1, 0, m_gated * f, h, dc.ptr(), 0.0f);
        dcMine = m_tensor.completeToStream(dc.ptr(), rows * h, dcLocal);
    }
    normBackward(w.mlpNormWeight, w.mlpNormBias, dcMine, a[Buffer::Residual].ptr(), a[Buffer::MlpMean].ptr(),
                 a[Buffer::MlpRstd].ptr(), localTokens, dx);

    // Attention branch: dx is now d(loss)/d(xMid), the gradient of the projection's output too.
    const kernels::ConstDevPtr dOut = m_tensor.wholeSequence(dx, rows * h, dxFull);
    DeviceBuffer dAtt(m_backend, rows * H * d);
    linearBackward(dOut, att.ptr(), T, w.proj, 0, h, H * d, dAtt.ptr(), 0.0f);
    DeviceBuffer dq(m_backend, rows * H * d);
    DeviceBuffer dk(m_backend, rows * Hkv * d);
    DeviceBuffer dv(m_backend, rows * Hkv * d);
    m_backend.attentionBackward(shape, dAtt.ptr(), q.ptr(), k.ptr(), v.ptr(), att.ptr(), lse.ptr(), dq.ptr(), dk.ptr(),
                                dv.ptr());
    m_backend.rope(dq.ptr(), T, s, H, d, kRopeBase, true);
    m_backend.rope(dk.ptr(), T, s, Hkv, d, kRopeBase, true);
    DeviceBuffer da(m_backend, rows * h);
    linearBackward(dq.ptr(), a.attentionInput(), T, w.qkv, 0, H * d, h, da.ptr(), 0.0f);
    linearBackward(dk.ptr(), a.attentionInput(), T, w.qkv, std::size_t(H) * d * h, Hkv * d, h, da.ptr(), 1.0f);
    linearBackward(dv.ptr(), a.attentionInput(), T, w.qkv, std::size_t(H + Hkv) * d * h, Hkv * d, h, da.ptr(), 1.0f);
    DeviceBuffer daLocal;
    normBackward(w.attnNormWeight, w.attnNormBias, m_tensor.completeToStream(da.ptr(), rows * h, daLocal),
                 a[Buffer::Input].ptr(), a[Buffer::AttnMean].ptr(), a[Buffer::AttnRstd].ptr(), localTokens, dx);
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

    const plan::AgentActivationShape buffers = activationShape(batch.batch);
    const std::size_t stream = streamElements(batch.batch);  // this rank's rows of the residual stream
    DeviceBuffer x = activation(Buffer::Input, buffers);
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
        a[Buffer::Input] = std::move(x);
        // A chunk that hands on to the next stage writes its last layer's output straight there; the
        // chunk that ends the model keeps it as the final norm's input.
        const bool last = i == range.layers - 1;
        x = last && !acts->ends ? DeviceBuffer() : activation(last ? Buffer::FinalInput : Buffer::Input, buffers);
        forwardLayer(range.firstLayer + i, a, batch.batch, auxScale, last && !acts->ends ? output : x.ptr(), &result);
    }
    if (!acts->ends)
        return acts;
    const int localTokens = int(buffers.streamTokens);
    acquire(headViews(), false);
    ActivationBuffers& head = acts->head;
    head[Buffer::FinalInput] = std::move(x);
    head[Buffer::FinalMean] = activation(Buffer::FinalMean, buffers);
    head[Buffer::FinalRstd] = activation(Buffer::FinalRstd, buffers);
    // The output layer sees every token: with sequence parallelism this rank's rows of the norm
    // are gathered over the tensor group.
    DeviceBuffer normRows = activation(Buffer::FinalNormRows, buffers);  // none without SP
    DeviceBuffer& normOut = head[Buffer::FinalNorm] = activation(Buffer::FinalNorm, buffers);
    normForward(m_layout.finalNormWeight(), m_layout.finalNormBias(), head[Buffer::FinalInput].ptr(), localTokens,
                normRows.empty() ? normOut.ptr() : normRows.ptr(), head[Buffer::FinalMean].ptr(),
                head[Buffer::FinalRstd].ptr());
    if (!normRows.empty())
        m_tensor.gatherSequence(normRows.ptr(), normOut.ptr(), rows * h);
    DeviceBuffer& logits = head[Buffer::Logits] = activation(Buffer::Logits, buffers);
    linear(normOut.ptr(), T, m_layout.head(), 0, V, h, logits.ptr());
    result.lossSum += m_tensor.crossEntropy(logits.ptr(), targets, m_model.vocab, lossScale);
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

void GptModel::backward(Activations& activations, ConstDevPtr outputGrad, DevPtr inputGrad,
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
    const int T = activations.batch * s;
    const std::size_t rows = std::size_t(T);

    const std::size_t stream = streamElements(activations.batch);
    const int localTokens = int(stream / std::size_t(h));
    DeviceBuffer dx(m_backend, stream);
    if (activations.ends) {
        acquire(headViews(), true);
        DeviceBuffer dNorm(m_backend, rows * h);
        ActivationBuffers& head = activations.head;
        linearBackward(head[Buffer::Logits].ptr(), head[Buffer::FinalNorm].ptr(), T, m_layout.head(), 0, V, h,
                       dNorm.ptr(), 0.0f);
        head[Buffer::Logits] = DeviceBuffer();
        // Each rank saw a block of the vocabulary: complete the gradient (this rank's rows under SP).
        DeviceBuffer dNormLocal;
        normBackward(m_layout.finalNormWeight(), m_layout.finalNormBias(),
                     m_tensor.completeToStream(dNorm.ptr(), rows * h, dNormLocal), head[Buffer::FinalInput].ptr(),
                     head[Buffer::FinalMean].ptr(), head[Buffer::FinalRstd].ptr(), localTokens, dx.ptr());
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
    for (int i = int(activations.layers.size()) - 1; i >= 0; --i) {
        backwardLayer(activations.firstLayer + i, activations.layers[std::size_t(i)], activations.batch,
                      activations.auxScale, dx.ptr());
        activations.layers[std::size_t(i)] = LayerActivations();
        if (finished)
            finished->gradientsReady(layerViews(activations.firstLayer + i));
    }
    if (activations.embeds)
        acquire({m_layout.embedding()}, true);
    if (activations.embeds)
        m_tensor.embeddingBackward(activations.ids, m_model.vocab, dx.ptr(), h, grad(m_layout.embedding()));
    else
        m_backend.copy(inputGrad, dx.ptr(), stream);
    if (activations.embeds)
        release({m_layout.embedding()}, true);
    if (activations.embeds && finished)
        finished->gradientsReady({m_layout.embedding()});
}

}  // namespace meshbench::agent
