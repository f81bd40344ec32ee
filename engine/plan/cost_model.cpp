#include "cost_model.h"

#include <algorithm>
#include <cmath>

namespace meshbench::plan {
namespace {

constexpr double kBf16 = 2.0;

double gradBytes(GradDtype grads) { return grads == GradDtype::Fp32 ? 4.0 : 2.0; }

// Ring collectives in the alpha-beta model (Thakur et al. 2005; the model NCCL's tuner uses):
// `bytes` is the full buffer, n the group size.
double allReduce(double bytes, int n, double bandwidth, double latency)
{
    return n <= 1 ? 0.0 : 2.0 * (n - 1) * latency + 2.0 * (n - 1) / n * bytes / bandwidth;
}
double allGather(double bytes, int n, double bandwidth, double latency)
{
    return n <= 1 ? 0.0 : (n - 1) * latency + double(n - 1) / n * bytes / bandwidth;
}
// Reduce-scatter and all-to-all move the same volume as an all-gather in a ring.
double reduceScatter(double bytes, int n, double bandwidth, double latency) { return allGather(bytes, n, bandwidth, latency); }
double allToAll(double bytes, int n, double bandwidth, double latency) { return allGather(bytes, n, bandwidth, latency); }

}  // namespace

LinkClasses linkClasses(const Mesh& mesh, const ClusterSpec& cluster)
{
    return {groupsStayInDomain(mesh, GroupKind::Tensor, cluster), groupsStayInDomain(mesh, GroupKind::Pipeline, cluster),
            groupsStayInDomain(mesh, GroupKind::Data, cluster), groupsStayInDomain(mesh, GroupKind::Expert, cluster),
            groupsStayInDomain(mesh, GroupKind::ExpertData, cluster)};
}

ParameterCounts countParameters(const ModelSpec& m)
{
    // Megatron-LM megatron/training/theoretical_memory_usage.py, compute_weight_and_optimizer_memory:
    // attention 2h^2 (1 + n_kv/n_heads)(q/h) with q = kv_channels x n_heads = h here; a layer adds
    // 2h (f g + n) for its MLP and two norms (g = 3/2 for SwiGLU, n = 1 for RMSNorm, 2 for
    // LayerNorm); an MoE layer has E experts of moe_ffn_hidden instead of the dense MLP. Like
    // Megatron we leave out biases of linear layers and the router's h x E weights.
    const double h = double(m.hidden);
    const double g = m.activation == Activation::SwiGlu ? 1.5 : 1.0;
    const double n = m.norm == Norm::RmsNorm ? 1.0 : 2.0;
    ParameterCounts p;
    p.attentionPerLayer = 2.0 * h * h * (1.0 + double(m.kvHeads) / m.heads);
    p.normsPerLayer = 2.0 * h * n;
    p.denseMlp = 2.0 * h * double(m.ffnHidden) * g;
    p.expertMlp = m.moe.enabled() ? 2.0 * h * double(m.moe.ffnHidden) * m.moe.experts * g : 0.0;
    p.denseLayer = p.attentionPerLayer + p.normsPerLayer + p.denseMlp;
    p.moeLayer = p.attentionPerLayer + p.normsPerLayer + p.expertMlp;
    p.moeLayers = m.moeLayersIn(0, m.layers);
    p.denseLayers = m.layers - p.moeLayers;
    p.finalNorm = n * h;
    p.embedding = double(m.vocab) * h;
    p.block = p.denseLayer * p.denseLayers + p.moeLayer * p.moeLayers + p.finalNorm;
    p.total = p.block + p.embedding * (m.tiedEmbeddings ? 1.0 : 2.0);
    return p;
}

ModelStateBytes modelStateBytes(double params, int shardGroup, int zero, GradDtype grads)
{
    const double d = std::max(1, shardGroup);
    ModelStateBytes bytes;
    bytes.weights = kBf16 * params / (zero >= 3 ? d : 1.0);
    bytes.grads = gradBytes(grads) * params / (zero >= 2 ? d : 1.0);
    bytes.optimizer = 12.0 * params / (zero >= 1 ? d : 1.0);
    return bytes;
}

double estimatedMakespan(const ScheduleShape& shape, const std::vector<StageWork>& stages, double transfer)
{
    // Steady state runs at the pace of the slowest stage; filling and draining the pipeline costs
    // one pass through the other stages (1/v of it when interleaved). Bubbles (p-1)(F+B) for
    // 1F1B/GPipe, (p-1)(F+B)/v interleaved and (p-1)(F+B-W) for ZB-H1 (Qi et al. 2024) follow
    // when stages are equal.
    const double m = shape.microbatches;
    double slowest = 0, sum = 0, slowestFill = 0, sumFill = 0;
    for (const StageWork& s : stages) {
        const double fill = shape.kind == ScheduleKind::ZeroBubbleH1 ? s.forward + s.backward - s.weightGrad : s.total();
        if (s.total() >= slowest) {
            slowest = s.total();
            slowestFill = fill;
        }
        sum += s.total();
        sumFill += fill;
    }
    const double v = shape.kind == ScheduleKind::Interleaved ? shape.virtualStages : 1.0;
    return m * slowest + (sumFill - slowestFill) / v + 2.0 * (shape.stages - 1) * transfer;
}

CostModel::CostModel(const JobSpec& spec, const LinkClasses& links)
    : m_spec(spec), m_links(links), m_params(countParameters(spec.model))
{
    m_dense = layerCosts(false);
    m_moe = layerCosts(true);
    for (int stage = 0; stage < spec.parallel.pp; ++stage) {
        m_maxDenseParams = std::max(m_maxDenseParams, denseParametersOnStage(stage));
        m_maxExpertParams = std::max(m_maxExpertParams, expertParametersOnStage(stage));
    }
}

void CostModel::virtualStageLayers(int virtualStage, int& first, int& count) const
{
    const ParallelSpec& p = m_spec.parallel;
    count = m_spec.model.layers / (p.pp * p.virtualStages);
    first = virtualStage * count;
}

double CostModel::denseParametersOnStage(int stage) const
{
    // Megatron's most loaded shard: (block / pp + V h) / tp on the first stage, plus V h / tp more
    // when untied and pp = 1. The last stage holds the output layer (or the tied copy of the
    // embedding), so it carries V h as well. Expert weights are taken out of the block here and
    // sharded over ep too (expertParametersOnStage).
    const ParallelSpec& p = m_spec.parallel;
    const double expertTotal = m_params.expertMlp * m_params.moeLayers;
    double params = (m_params.block - expertTotal) / p.pp;
    if (stage == 0 || stage == p.pp - 1)
        params += m_params.embedding;
    if (!m_spec.model.tiedEmbeddings && p.pp == 1)
        params += m_params.embedding;
    return params / p.tp;
}

double CostModel::expertParametersOnStage(int stage) const
{
    const ParallelSpec& p = m_spec.parallel;
    int moeLayers = 0;
    for (int chunk = 0; chunk < p.virtualStages; ++chunk) {
        int first = 0, count = 0;
        virtualStageLayers(chunk * p.pp + stage, first, count);
        moeLayers += m_spec.model.moeLayersIn(first, count);
    }
    return m_params.expertMlp * moeLayers / (double(p.tp) * p.ep);
}

double CostModel::inFlightMicrobatches(int stage) const
{
    // Micro-batches whose activations a stage holds at its peak, from the schedule itself: the
    // warm-up forwards plus the one in progress (1F1B: min(p - r, m); GPipe: m; interleaved
    // counts chunk-micro-batches, so divide by v: stage 0 gets p + (p - 1)/v, Megatron's
    // 1 + (p - 1)/(p v) penalty times p). ZB-H1 keeps 1F1B's peak of p on every stage
    // (Qi et al. 2024, Table 1), since deferred W's hold their inputs.
    const ParallelSpec& p = m_spec.parallel;
    const ScheduleShape shape = p.scheduleShape();
    if (p.schedule == ScheduleKind::ZeroBubbleH1)
        return std::min(p.pp, p.microbatches);
    const int total = p.microbatches * p.virtualStages;
    return double(std::min(warmupCount(shape, stage) + 1, total)) / p.virtualStages;
}

double CostModel::activationBytes(int stage) const
{
    // Korthikanti et al. 2022, Table 2, as Megatron-LM's compute_activation_memory (sequence
    // parallel + selective recompute: s b h (18 + 4 f/h) / t per layer) and
    // compute_activation_memory_without_sp (s b h (10 + 24/t) per layer, x 1.05 overall).
    // Both count the first stage with p micro-batches in flight; we count each stage with its
    // own in-flight micro-batches (inFlightMicrobatches), which gives Megatron's numbers on
    // stage 0. Attention is flash-style (ours; Megatron's with flash or Transformer Engine):
    // it keeps no s x s scores, so `none` keeps what `selective` keeps, and Megatron-LM's
    // report_theoretical_memory uses the same formulas for both. Extensions: only the layer
    // input kept with full recompute (plus one layer's working set); an MoE layer's MLP holds
    // k x capacity_factor routed copies of each token (2 s b h) and its expert activations
    // (4 s b f_moe).
    const ModelSpec& m = m_spec.model;
    const ParallelSpec& p = m_spec.parallel;
    const double s = double(m.seqLen), b = p.microBatchSize, h = double(m.hidden), t = p.tp;
    const double sbh = s * b * h;
    const bool megatronSp = p.sequenceParallel;
    const double routed = m.moe.enabled() ? m.moe.topK * m.moe.capacityFactor : 0.0;
    const double expertTerm = routed * (2.0 + 4.0 * double(m.moe.ffnHidden) / h);

    // Bytes one layer keeps for one micro-batch with selective recompute.
    const double denseLayer = megatronSp ? sbh * (18.0 + 4.0 * double(m.ffnHidden) / h) / t : sbh * (10.0 + 24.0 / t);
    const double moeLayer = megatronSp ? sbh * (18.0 + expertTerm) / t : sbh * (10.0 + (8.0 + expertTerm) / t);

    int first = 0, count = 0, moeLayers = 0, layers = 0;
    for (int chunk = 0; chunk < p.virtualStages; ++chunk) {
        virtualStageLayers(chunk * p.pp + stage, first, count);
        moeLayers += m.moeLayersIn(first, count);
        layers += count;
    }
    const int denseLayers = layers - moeLayers;
    const double inFlight = inFlightMicrobatches(stage);

    double perMicrobatch = 0;     // layers' activations for one micro-batch in flight
    double working = 0;           // held once, whatever the number in flight
    switch (p.recompute) {
    case Recompute::Selective:
    case Recompute::None:
        perMicrobatch = denseLayers * denseLayer + moeLayers * moeLayer;
        break;
    case Recompute::Full:
        // Only each layer's input survives (bf16, split along the sequence with SP); the layer
        // being recomputed briefly holds everything.
        perMicrobatch = layers * 2.0 * sbh / (megatronSp ? t : 1.0);
        working = moeLayers > 0 ? moeLayer : denseLayer;
        break;
    }
    double bytes = perMicrobatch * inFlight + working;
    if (stage == 0)
        bytes += (8.0 * s * b + sbh) * inFlight / (megatronSp ? t : 1.0);   // embedding input and its dropout
    if (stage == p.pp - 1) {
        // Inputs to the output layer and the loss (Megatron adds them when p = 1, the only case
        // where they share a stage with the first layer).
        bytes += megatronSp ? sbh * 4.0 * (1.0 + double(m.vocab) / h) / t : (s * b * double(m.vocab) / t + sbh) * 2.0;
    }
    return megatronSp ? bytes : bytes * 1.05;
}

MemoryBreakdown CostModel::stageMemory(int stage) const
{
    const ParallelSpec& p = m_spec.parallel;
    const ModelStateBytes dense = modelStateBytes(denseParametersOnStage(stage), p.dp, p.zero, m_spec.precision.grads);
    // Expert weights are replicated over the expert-data-parallel group only (dp / ep ranks).
    const ModelStateBytes expert =
        modelStateBytes(expertParametersOnStage(stage), p.dp / p.ep, p.zero, m_spec.precision.grads);
    MemoryBreakdown mem;
    mem.weights = dense.weights + expert.weights;
    mem.grads = dense.grads + expert.grads;
    mem.optimizer = dense.optimizer + expert.optimizer;
    if (p.zero >= 3) {
        // ZeRO-3 gathers one layer's weights (and keeps its unsharded gradients until the
        // reduce-scatter) at a time: DeepSpeed's estimate_zero3_model_states_mem_needs counts
        // 4 x largest_layer bytes for bf16 weights and gradients.
        const double largest = std::max({m_params.denseLayer / p.tp, m_params.moeLayer / (double(p.tp) * p.ep),
                                         m_params.embedding / p.tp});
        mem.weights += kBf16 * largest;
        mem.grads += gradBytes(m_spec.precision.grads) * largest;
    }
    mem.activations = activationBytes(stage);
    return mem;
}

CostModel::LayerCosts CostModel::layerCosts(bool moe) const
{
    // FLOPs per layer and micro-batch, from Megatron-LM's num_floating_point_operations
    // (Narayanan et al. 2021): the forward pass is one third of 12 B s h^2 [...], i.e.
    // 4 b s h^2 (1 + n_kv/n_heads) for the projections, 4 b s^2 h for attention scores and
    // 4 b s h f k g for the MLP. The backward splits into the input gradient (projections + 2x
    // the scores, which have no weights) and the weight gradient (projections + MLP).
    const ModelSpec& m = m_spec.model;
    const ParallelSpec& p = m_spec.parallel;
    const ClusterSpec& c = m_spec.cluster;
    const double s = double(m.seqLen), b = p.microBatchSize, h = double(m.hidden);
    const double g = m.activation == Activation::SwiGlu ? 1.5 : 1.0;
    const double ffn = moe ? double(m.moe.ffnHidden) * m.moe.topK : double(m.ffnHidden);
    const double linear = 4.0 * b * s * h * h * (1.0 + double(m.kvHeads) / m.heads) + 4.0 * b * s * h * ffn * g;
    const double scores = 4.0 * b * s * s * h;
    const double rate = c.device.peakFlops * c.computeEfficiency * p.tp;   // TP splits every GEMM

    double recompute = 0;
    if (p.recompute == Recompute::Selective)
        recompute = scores;
    else if (p.recompute == Recompute::Full)
        recompute = linear + scores;

    // Megatron TP: two all-reduces per layer forward (attention and MLP outputs, operator g) and
    // two in the input-gradient pass (operator f); sequence parallelism swaps each for an
    // all-gather plus a reduce-scatter of the same volume.
    const double activationBytes = kBf16 * s * b * h;
    const double tpBandwidth = m_links.tensor ? c.intraBandwidth : c.interBandwidth;
    const double tpLatency = m_links.tensor ? c.intraLatency : c.interLatency;
    const double tpPass = 2.0 * allReduce(activationBytes, p.tp, tpBandwidth, tpLatency);

    // EP: Megatron's all-to-all dispatcher sends each token's k copies out and back (two
    // all-to-alls) in the forward pass and twice again for the gradients.
    double epPass = 0;
    if (moe) {
        const double tokensBytes = activationBytes * m.moe.topK / (p.sequenceParallel ? p.tp : 1);
        const double epBandwidth = m_links.expert ? c.intraBandwidth : c.interBandwidth;
        const double epLatency = m_links.expert ? c.intraLatency : c.interLatency;
        epPass = 2.0 * allToAll(tokensBytes, p.ep, epBandwidth, epLatency);
    }

    LayerCosts costs;
    costs.tensorComm = tpPass;
    costs.expertComm = epPass;
    costs.forward = (linear + scores) / rate + tpPass + epPass;
    costs.backward = (linear + 2.0 * scores + recompute) / rate + tpPass + epPass;
    costs.weightGrad = linear / rate;
    return costs;
}

StageWork CostModel::virtualStageWork(int virtualStage) const
{
    const ModelSpec& m = m_spec.model;
    const ParallelSpec& p = m_spec.parallel;
    const ClusterSpec& c = m_spec.cluster;
    int first = 0, count = 0;
    virtualStageLayers(virtualStage, first, count);
    const int moeLayers = m.moeLayersIn(first, count);
    const int denseLayers = count - moeLayers;
    StageWork w;
    w.forward = denseLayers * m_dense.forward + moeLayers * m_moe.forward;
    w.backward = denseLayers * m_dense.backward + moeLayers * m_moe.backward;
    w.weightGrad = denseLayers * m_dense.weightGrad + moeLayers * m_moe.weightGrad;
    w.tensorComm = 2.0 * (denseLayers * m_dense.tensorComm + moeLayers * m_moe.tensorComm);
    w.expertComm = 2.0 * (denseLayers * m_dense.expertComm + moeLayers * m_moe.expertComm);
    if (virtualStage == p.pp * p.virtualStages - 1) {
        // Output layer: 2 b s h V FLOPs forward (the V / (2 L h) term of Megatron's formula), the
        // same again for each half of the backward.
        const double logits = 2.0 * p.microBatchSize * double(m.seqLen) * double(m.hidden) * double(m.vocab);
        const double time = logits / (c.device.peakFlops * c.computeEfficiency * p.tp);
        w.forward += time;
        w.backward += time;
        w.weightGrad += time;
    }
    w.compute = w.total() - w.tensorComm - w.expertComm;
    return w;
}

StageWork CostModel::stageWork(int stage) const
{
    const ParallelSpec& p = m_spec.parallel;
    StageWork sum;
    for (int chunk = 0; chunk < p.virtualStages; ++chunk) {
        const StageWork w = virtualStageWork(chunk * p.pp + stage);
        sum.forward += w.forward;
        sum.backward += w.backward;
        sum.weightGrad += w.weightGrad;
        sum.compute += w.compute;
        sum.tensorComm += w.tensorComm;
        sum.expertComm += w.expertComm;
    }
    return sum;
}

OpCosts CostModel::opCosts() const
{
    const ParallelSpec& p = m_spec.parallel;
    const bool split = p.schedule == ScheduleKind::ZeroBubbleH1;
    OpCosts costs;
    for (int vs = 0; vs < p.pp * p.virtualStages; ++vs) {
        const StageWork w = virtualStageWork(vs);
        costs.forward.push_back(w.forward);
        costs.backward.push_back(split ? w.backward : w.backward + w.weightGrad);
        costs.weightGrad.push_back(split ? w.weightGrad : 0.0);
    }
    costs.activationTransfer = costs.gradientTransfer = transferTime();
    return costs;
}

double CostModel::transferTime() const
{
    const ParallelSpec& p = m_spec.parallel;
    const ClusterSpec& c = m_spec.cluster;
    if (p.pp == 1)
        return 0.0;
    const double bytes = kBf16 * double(m_spec.model.seqLen) * p.microBatchSize * double(m_spec.model.hidden) /
                         (p.sequenceParallel ? p.tp : 1);
    return m_links.pipeline ? c.intraLatency + bytes / c.intraBandwidth : c.interLatency + bytes / c.interBandwidth;
}

double CostModel::dataParallelTime() const
{
    // Per step: ZeRO-0 all-reduces gradients; ZeRO-1 (Megatron's distributed optimizer)
    // reduce-scatters them and all-gathers the updated bf16 weights; ZeRO-2 reduce-scatters
    // after every micro-batch; ZeRO-3 also gathers the weights for each forward and backward
    // (Rajbhandari et al. 2020, Sec. 7: 1.5x the all-reduce volume per micro-batch). Dense
    // weights reduce over dp, expert weights over the expert-data-parallel group. Not overlapped
    // with compute: this is the exposed upper bound.
    const ParallelSpec& p = m_spec.parallel;
    const ClusterSpec& c = m_spec.cluster;
    const double gb = gradBytes(m_spec.precision.grads);
    auto groupTime = [&](double params, int n, bool intra) {
        const double bw = intra ? c.intraBandwidth : c.interBandwidth;
        const double lat = intra ? c.intraLatency : c.interLatency;
        const double m = p.microbatches;
        switch (p.zero) {
        case 0: return allReduce(gb * params, n, bw, lat);
        case 1: return reduceScatter(gb * params, n, bw, lat) + allGather(kBf16 * params, n, bw, lat);
        case 2: return m * reduceScatter(gb * params, n, bw, lat) + allGather(kBf16 * params, n, bw, lat);
        default: return m * (reduceScatter(gb * params, n, bw, lat) + 2.0 * allGather(kBf16 * params, n, bw, lat));
        }
    };
    return groupTime(m_maxDenseParams, p.dp, m_links.data) +
           groupTime(m_maxExpertParams, p.dp / p.ep, m_links.expertData);
}

double CostModel::optimizerTime() const
{
    // AdamW is memory bound: per parameter it reads the gradient, fp32 master and both moments
    // and writes the three back plus the bf16 weight, ~30 bytes over HBM.
    const ParallelSpec& p = m_spec.parallel;
    const double shardDense = p.zero >= 1 ? p.dp : 1;
    const double shardExpert = p.zero >= 1 ? p.dp / p.ep : 1;
    return 30.0 * (m_maxDenseParams / shardDense + m_maxExpertParams / shardExpert) /
           m_spec.cluster.device.memoryBandwidth;
}

double CostModel::flopsPerStep() const
{
    // Megatron-LM num_floating_point_operations (Narayanan et al. 2021):
    // 12 B s L h^2 [(1 + n_kv/n_heads + s/h)(q/h) + (f/h) k g + V/(2 L h)], with the MLP term
    // summed layer by layer so that dense and MoE layers (moe_ffn_hidden, top-k) can mix.
    const ModelSpec& m = m_spec.model;
    const double B = double(m_spec.parallel.globalBatch()), s = double(m.seqLen), h = double(m.hidden);
    const double g = m.activation == Activation::SwiGlu ? 1.5 : 1.0;
    const double attention = m.layers * (1.0 + double(m.kvHeads) / m.heads + s / h);
    const double mlp = (m_params.denseLayers * double(m.ffnHidden) +
                        m_params.moeLayers * double(m.moe.ffnHidden) * m.moe.topK) / h * g;
    const double logits = double(m.vocab) / (2.0 * h);
    return 12.0 * B * s * h * h * (attention + mlp + logits);
}

double CostModel::tokensPerStep() const
{
    return double(m_spec.parallel.globalBatch()) * double(m_spec.model.seqLen);
}

}  // namespace meshbench::plan
