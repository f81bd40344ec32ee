#include "cost_model.h"

#include "agent_activations.h"
#include "grad_buckets.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace meshbench::plan {
namespace {

constexpr double kBf16 = 2.0;

double gradBytes(GradDtype grads) { return grads == GradDtype::Fp32 ? 4.0 : 2.0; }

}  // namespace

int ranksPerNode(const JobSpec& spec)
{
    return int(std::min<std::int64_t>(spec.parallel.worldSize(), spec.cluster.devicesPerNode));
}

LinkClasses linkClasses(const Mesh& mesh, const ClusterSpec& cluster)
{
    auto link = [&](GroupKind kind) {
        const bool inside = groupsStayInDomain(mesh, kind, cluster);
        return GroupLink{inside, inside ? mesh.groupSize(kind) : groupMembersPerDomain(mesh, kind, cluster)};
    };
    return {link(GroupKind::Tensor), link(GroupKind::Pipeline), link(GroupKind::Data), link(GroupKind::Expert),
            link(GroupKind::ExpertData)};
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
    // when stages are equal. The V schedules count a chunk (half a stage's F, B, W): ZB-V waits
    // (p-1) F (Qi et al. 2024, Sec. 6), DualPipeV (p-1)(F&B + B - 3W) = (p-1)(F + 2B - W) with B
    // the input gradient (DualPipe README), as tst_simulator checks at equal costs.
    const double m = shape.microbatches;
    double slowest = 0, sum = 0, slowestFill = 0, sumFill = 0;
    for (const StageWork& s : stages) {
        double fill = s.total();
        if (shape.kind == ScheduleKind::ZeroBubbleH1)
            fill = s.forward + s.backward - s.weightGrad;
        else if (shape.kind == ScheduleKind::ZeroBubbleV)
            fill = s.forward / 2.0;
        else if (shape.kind == ScheduleKind::DualPipeV)
            fill = (s.forward + 2.0 * s.backward - s.weightGrad) / 2.0;
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

CostModel::CostModel(const JobSpec& spec, const LinkClasses& links, double busyShare)
    : m_spec(spec), m_links(links), m_params(countParameters(spec.model)),
      m_perf(devicePerformance(spec.cluster, ranksPerNode(spec), busyShare))
{
    m_dense = layerCosts(false);
    if (spec.model.moe.enabled())
        m_moe = layerCosts(true);
}

void CostModel::virtualStageLayers(int virtualStage, int& first, int& count) const
{
    const ParallelSpec& p = m_spec.parallel;
    count = m_spec.model.layers / (p.pp * p.virtualStages);
    first = virtualStage * count;
}

int CostModel::lastModelStage() const
{
    const ParallelSpec& p = m_spec.parallel;
    return p.scheduleShape().stageOf(p.pp * p.virtualStages - 1);
}

double CostModel::denseParametersOnStage(int stage) const
{
    // Megatron's most loaded shard: (block / pp + V h) / tp on the first stage, plus V h / tp more
    // when untied and pp = 1. The last stage holds the output layer (or the tied copy of the
    // embedding), so it carries V h as well. Expert weights are taken out of the block here and
    // sharded over ep too (expertParametersOnStage).
    // The V schedules put both on stage 0, which then needs no tied copy.
    const ParallelSpec& p = m_spec.parallel;
    const double expertTotal = m_params.expertMlp * m_params.moeLayers;
    double params = (m_params.block - expertTotal) / p.pp;
    const int last = lastModelStage();
    if (stage == 0)
        params += m_params.embedding;
    if (stage == last && (last != 0 || !m_spec.model.tiedEmbeddings))
        params += m_params.embedding;
    return params / p.tp;
}

double CostModel::expertParametersOnStage(int stage) const
{
    const ParallelSpec& p = m_spec.parallel;
    int moeLayers = 0;
    for (int chunk = 0; chunk < p.virtualStages; ++chunk) {
        int first = 0, count = 0;
        virtualStageLayers(p.scheduleShape().virtualStageOf(stage, chunk), first, count);
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
    // (Qi et al. 2024, Table 1), since deferred W's hold their inputs: on stage r that is
    // min(p - r, m) forwards' activations plus up to r deferred W's, each counted as one
    // micro-batch's worth. (precision.activations = fp32 counts the two apart, in
    // agentActivationBytes: meshbench-agent's W keeps copies of dy and x, not its activations.)
    const ParallelSpec& p = m_spec.parallel;
    // One stage has no pipeline: Megatron's forward_backward_no_pipelining, and meshbench-agent's
    // trainer, run each micro-batch's forward and backward before the next one's, so one is in
    // flight whatever the schedule says (GPipe's op list would hold all m).
    if (p.pp == 1)
        return 1.0;
    const ScheduleShape shape = p.scheduleShape();
    if (p.schedule == ScheduleKind::ZeroBubbleH1)
        return std::min(p.pp, p.microbatches);
    // The V schedules hold chunks of half a stage's layers each: ZB-V 2p of them once m >= 2p - 1
    // (stage r's warm-up, 2p - r - 1 F0's and r + 1 F1's), 1F1B's p; DualPipeV 2p + 1 (DualPipe
    // README). tst_simulator checks both against the op lists.
    if (p.schedule == ScheduleKind::ZeroBubbleV)
        return (std::min(p.microbatches, 2 * p.pp - stage - 1) + std::min(p.microbatches, stage + 1)) / 2.0;
    if (p.schedule == ScheduleKind::DualPipeV)
        return (2 * p.pp + 1) / 2.0;
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
    // precision.activations = fp32: what meshbench-agent keeps instead, the Activations category
    // of its memory ledger, tensor by tensor and op by op of the stage's schedule
    // (agent_activations.h); this bf16 count is Megatron-LM's.
    if (m_spec.precision.activations == ActivationDtype::Fp32)
        return agentActivationBytes(m_spec, stage);
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
        virtualStageLayers(p.scheduleShape().virtualStageOf(stage, chunk), first, count);
        moeLayers += m.moeLayersIn(first, count);
        layers += count;
    }
    const int denseLayers = layers - moeLayers;
    const double inFlight = inFlightMicrobatches(stage);

    double perMicrobatch = 0;  // layers' activations for one micro-batch in flight
    double working = 0;        // held once, whatever the number in flight
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
        bytes += (8.0 * s * b + sbh) * inFlight / (megatronSp ? t : 1.0);  // embedding input and its dropout
    if (stage == lastModelStage()) {
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
        const double largest = std::max(
            {m_params.denseLayer / p.tp, m_params.moeLayer / (double(p.tp) * p.ep), m_params.embedding / p.tp});
        mem.weights += kBf16 * largest;
        mem.grads += gradBytes(m_spec.precision.grads) * largest;
    }
    mem.activations = activationBytes(stage);
    return mem;
}

CostModel::LayerCosts CostModel::layerCosts(bool moe) const
{
    // One layer, one micro-batch, one rank of its TP group. Every GEMM is priced by its own shape
    // (gemmTime: roofline, wave quantization, K depth), flash attention by its causal FLOPs, the
    // element-wise kernels by the bytes they stream, and the TP and EP collectives by their bus
    // bandwidth. The FLOPs agree with Megatron-LM's num_floating_point_operations (Narayanan et al.
    // 2021) except attention, which executes the causal half Megatron's formula counts in full.
    const ModelSpec& m = m_spec.model;
    const ParallelSpec& p = m_spec.parallel;
    const DevicePerformance& d = m_perf.device;
    const double t = p.tp, h = double(m.hidden), s = double(m.seqLen), b = p.microBatchSize;
    const double tokens = s * b;
    const double kvDim = h * m.kvHeads / m.heads;
    const double gated = m.activation == Activation::SwiGlu ? 2.0 : 1.0;  // SwiGLU's fc1 has two halves
    const double e = d.activationBytes;
    // With SP the norms and residuals see 1/t of the sequence (Korthikanti et al. 2022).
    const double rowsPerRank = p.sequenceParallel ? tokens / t : tokens;

    struct Gemm {
        double m, n, k, count;
    };
    // QKV, the output projection, then the MLP: router (MoE only), fc1, fc2.
    std::array<Gemm, 5> gemms = {Gemm{tokens, (h + 2.0 * kvDim) / t, h, 1}, Gemm{tokens, h, h / t, 1}};
    std::size_t count = 2;
    double mlpElements = 0;  // elements the activation function reads per pass
    double routedRows = 0;   // token copies an MoE layer dispatches
    if (moe) {
        // Balanced routing: the ep ranks' tokens times top-k spread over E experts, E/ep of them here.
        const double f = double(m.moe.ffnHidden) / t;
        const double rowsPerExpert = tokens * m.moe.topK * p.ep / m.moe.experts;
        const double localExperts = double(m.moe.experts) / p.ep;
        gemms[count++] = {tokens, double(m.moe.experts), h, 1};
        gemms[count++] = {rowsPerExpert, gated * f, h, localExperts};
        gemms[count++] = {rowsPerExpert, h, f, localExperts};
        routedRows = tokens * m.moe.topK;
        mlpElements = rowsPerExpert * localExperts * gated * f;
    } else {
        const double f = double(m.ffnHidden) / t;
        gemms[count++] = {tokens, gated * f, h, 1};
        gemms[count++] = {tokens, h, f, 1};
        mlpElements = tokens * gated * f;
    }
    std::array<double, 5> forwardTimes{};
    double forwardGemms = 0, inputGradGemms = 0, weightGradGemms = 0;
    for (std::size_t i = 0; i < count; ++i) {
        const Gemm& g = gemms[i];
        forwardTimes[i] = g.count * gemmTime(d, g.m, g.n, g.k);  // Y = X W
        forwardGemms += forwardTimes[i];
        inputGradGemms += g.count * gemmTime(d, g.m, g.k, g.n);   // dX = dY W^T
        weightGradGemms += g.count * gemmTime(d, g.k, g.n, g.m);  // dW = X^T dY
    }

    // Flash attention, causal: QK^T and PV over the lower triangle, 2 b s^2 h / t FLOPs forward;
    // the backward recomputes the scores and runs four more products, 2.5x the forward's FLOPs
    // (Dao 2023, Sec. 3.1).
    const double attentionFlops = 2.0 * b * s * s * h / t;
    const double attentionRate = d.matmulPeak * d.rateShare * d.attentionEfficiency * d.inStepShare;
    const double attentionForward = attentionFlops / attentionRate + d.kernelOverhead / d.rateShare;
    const double attentionBackward =
        2.5 * attentionFlops / (attentionRate * d.attentionBackwardRate) + d.kernelOverhead / d.rateShare;

    // Element-wise kernels, bytes per forward: two norms and two residual adds over the rows this
    // rank holds, rotary embeddings on q and k, the activation function (reads gated x f, writes
    // f), and an MoE layer's permute and unpermute copies. A backward streams about twice as much.
    const double normBytes = 2.0 * 2.0 * rowsPerRank * h * e;
    const double residualBytes = 2.0 * 3.0 * rowsPerRank * h * e;
    const double ropeBytes = 2.0 * tokens * (h + kvDim) / t * e;
    const double activationBytes = mlpElements * (1.0 + 1.0 / gated) * e;
    const double permuteBytes = 2.0 * 2.0 * routedRows * h * e;
    const double elementwiseForward = 2.0 * streamTime(d, normBytes / 2.0) + 2.0 * streamTime(d, residualBytes / 2.0) +
                                      streamTime(d, ropeBytes) + streamTime(d, activationBytes) +
                                      (moe ? 2.0 * streamTime(d, permuteBytes / 2.0) : 0.0);
    const double elementwiseBackward = 2.0 * elementwiseForward;

    // TP (Megatron, Shoeybi et al. 2019): per pass, the attention and MLP blocks each all-reduce
    // their output (g forward, f backward); with SP each all-reduce becomes an all-gather before
    // the block's first GEMM and a reduce-scatter after its last, the same bytes. With
    // tp_comm_overlap (Megatron's --tp-comm-overlap) each collective is cut into t chunks
    // pipelined with the GEMM it feeds or drains: only its first chunk, or what outlasts the
    // GEMM, stays exposed.
    const LinkPerformance tpLink = m_perf.collective(m_links.tensor);
    // Transformer Engine's overlap exchanges the chunks through CUDA IPC buffers, so only a TP
    // group inside one NVLink domain can overlap.
    const bool overlapTp = p.tpCommOverlap && p.tp > 1 && m_links.tensor.insideDomain;
    const double blockBytes = tokens * h * e;
    const double halfCollective =
        p.sequenceParallel ? allGatherTime(blockBytes, p.tp, tpLink) : allReduceTime(blockBytes, p.tp, tpLink) / 2.0;
    // The GEMMs each half overlaps with: QKV and fc1 take the gathers, the projection and fc2 feed
    // the scatters.
    const double fc2 = forwardTimes[count - 1];
    const double paired[4] = {forwardTimes[0], forwardTimes[1], forwardGemms - forwardTimes[0] - forwardTimes[1] - fc2,
                              fc2};
    double tpForward = 0, tpHidden = 0;
    for (double gemm : paired) {
        const double exposed = overlapTp ? std::max(halfCollective - gemm, halfCollective / t) : halfCollective;
        tpForward += exposed;
        tpHidden += halfCollective - exposed;
    }

    // EP (Megatron's all-to-all dispatcher): each token's k copies go out and come back, twice per
    // pass.
    const LinkPerformance epLink = m_perf.collective(m_links.expert);
    const double epPass =
        moe ? 2.0 * allToAllTime(routedRows * h * e / (p.sequenceParallel ? t : 1.0), p.ep, epLink) : 0.0;

    double recompute = 0;
    if (p.recompute == Recompute::Selective)
        recompute = attentionForward;  // Korthikanti et al.: the attention core only
    else if (p.recompute == Recompute::Full)
        recompute = forwardGemms + attentionForward + elementwiseForward + tpForward + epPass;

    LayerCosts costs;
    costs.forward = forwardGemms + attentionForward + elementwiseForward + tpForward + epPass;
    costs.backward = inputGradGemms + attentionBackward + elementwiseBackward + tpForward + epPass + recompute;
    costs.weightGrad = weightGradGemms;
    costs.tensorComm = 2.0 * tpForward + (p.recompute == Recompute::Full ? tpForward : 0.0);
    costs.tensorCommHidden = 2.0 * tpHidden;
    costs.expertComm = 2.0 * epPass + (p.recompute == Recompute::Full ? epPass : 0.0);
    const bool full = p.recompute == Recompute::Full;
    costs.gemm = forwardGemms + inputGradGemms + weightGradGemms + (full ? forwardGemms : 0.0);
    costs.attention = attentionForward + attentionBackward + (p.recompute != Recompute::None ? attentionForward : 0.0);
    costs.streaming = elementwiseForward + elementwiseBackward + (full ? elementwiseForward : 0.0);
    return costs;
}

StageWork CostModel::virtualStageWork(int virtualStage) const
{
    const ModelSpec& m = m_spec.model;
    const ParallelSpec& p = m_spec.parallel;
    const DevicePerformance& d = m_perf.device;
    int first = 0, count = 0;
    virtualStageLayers(virtualStage, first, count);
    const int moeLayers = m.moeLayersIn(first, count);
    const int denseLayers = count - moeLayers;
    StageWork w;
    w.forward = denseLayers * m_dense.forward + moeLayers * m_moe.forward;
    w.backward = denseLayers * m_dense.backward + moeLayers * m_moe.backward;
    w.weightGrad = denseLayers * m_dense.weightGrad + moeLayers * m_moe.weightGrad;
    w.tensorComm = denseLayers * m_dense.tensorComm + moeLayers * m_moe.tensorComm;
    w.tensorCommHidden = denseLayers * m_dense.tensorCommHidden + moeLayers * m_moe.tensorCommHidden;
    w.expertComm = denseLayers * m_dense.expertComm + moeLayers * m_moe.expertComm;
    w.gemm = denseLayers * m_dense.gemm + moeLayers * m_moe.gemm;
    w.attention = denseLayers * m_dense.attention + moeLayers * m_moe.attention;
    w.streaming = denseLayers * m_dense.streaming + moeLayers * m_moe.streaming;
    const double tokens = double(m.seqLen) * p.microBatchSize, h = double(m.hidden);
    if (virtualStage == 0) {
        // Embedding lookup (write the rows) and its gradient's scatter-add.
        const double lookup = streamTime(d, tokens * h * d.activationBytes);
        const double scatterAdd = streamTime(d, 2.0 * tokens * h * d.activationBytes);
        w.forward += lookup;
        w.weightGrad += scatterAdd;
        w.streaming += lookup + scatterAdd;
    }
    if (virtualStage == p.pp * p.virtualStages - 1) {
        // Final norm, the output layer's three GEMMs (2 b s h V FLOPs each, the V / (2 L h) term of
        // Megatron's formula) and the cross-entropy over the logits in fp32, as Megatron-LM's
        // vocab-parallel cross-entropy runs it unfused: forward casts the logits (e + 4 bytes
        // each), takes the max (4), subtracts it (8), exponentiates (8), sums (4) and normalises
        // (8); backward scales the saved softmax (8) and casts the gradient back (4 + e).
        const double vocab = double(m.vocab) / p.tp;
        const double logits = tokens * vocab;
        const double e = d.activationBytes;
        const double norm = streamTime(d, 2.0 * tokens * h * e), loss = 6.0 * streamTime(d, logits * (e + 36.0) / 6.0);
        const double lossGrad = 2.0 * streamTime(d, logits * (12.0 + e) / 2.0);
        const double normGrad = streamTime(d, 4.0 * tokens * h * e);
        const double forwardGemm = gemmTime(d, tokens, vocab, h), inputGradGemm = gemmTime(d, tokens, h, vocab);
        const double weightGradGemm = gemmTime(d, h, vocab, tokens);
        w.forward += norm + forwardGemm + loss;
        w.backward += lossGrad + inputGradGemm + normGrad;
        w.weightGrad += weightGradGemm;
        w.gemm += forwardGemm + inputGradGemm + weightGradGemm;
        w.streaming += norm + loss + lossGrad + normGrad;
    }
    w.compute = w.total() - w.tensorComm - w.expertComm;
    return w;
}

StageWork CostModel::stageWork(int stage) const
{
    const ParallelSpec& p = m_spec.parallel;
    StageWork sum;
    for (int chunk = 0; chunk < p.virtualStages; ++chunk) {
        const StageWork w = virtualStageWork(p.scheduleShape().virtualStageOf(stage, chunk));
        sum.forward += w.forward;
        sum.backward += w.backward;
        sum.weightGrad += w.weightGrad;
        sum.compute += w.compute;
        sum.tensorComm += w.tensorComm;
        sum.tensorCommHidden += w.tensorCommHidden;
        sum.expertComm += w.expertComm;
        sum.gemm += w.gemm;
        sum.attention += w.attention;
        sum.streaming += w.streaming;
    }
    return sum;
}

OpCosts CostModel::opCosts() const
{
    const ParallelSpec& p = m_spec.parallel;
    const bool split = splitsBackward(p.schedule);
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
    // One micro-batch's activations (or their gradient) to the next stage; with SP each rank sends
    // its 1/t of the sequence (Megatron's scatter-gather optimisation).
    const ParallelSpec& p = m_spec.parallel;
    if (p.pp == 1)
        return 0.0;
    const double bytes = m_perf.device.activationBytes * double(m_spec.model.seqLen) * p.microBatchSize *
                         double(m_spec.model.hidden) / (p.sequenceParallel ? p.tp : 1);
    return sendTime(bytes, m_perf.link(m_links.pipeline.insideDomain));
}

DataParallelCosts CostModel::dataParallelCosts(int stage) const
{
    // Per step. ZeRO-0 all-reduces the gradients; ZeRO 1-2 reduce-scatter them into the owners'
    // shards (once per step, after the last micro-batch, as the agent and Megatron's distributed
    // optimizer do) and all-gather the updated bf16 weights; ZeRO-3 also gathers each layer's
    // weights for every forward and backward (Rajbhandari et al. 2020, Sec. 7). Dense weights
    // reduce over dp, experts over the expert-data group.
    const ParallelSpec& p = m_spec.parallel;
    const double gb = gradBytes(m_spec.precision.grads);
    const double dense = denseParametersOnStage(stage), expert = expertParametersOnStage(stage);
    DataParallelCosts costs;
    auto add = [&](double params, int n, const GroupLink& group) {
        if (params <= 0)
            return;
        const LinkPerformance link = m_perf.collective(group);
        if (p.zero == 0) {
            costs.reduce += allReduceTime(gb * params, n, link);
            return;
        }
        costs.reduce += reduceScatterTime(gb * params, n, link);
        costs.gather += allGatherTime(kBf16 * params, n, link);
        if (p.zero >= 3)
            costs.layerGathers += 2.0 * p.microbatches * allGatherTime(kBf16 * params, n, link);
    };
    add(dense, p.dp, m_links.data);
    add(expert, p.dp / p.ep, m_links.expertData);
    // The agent's buckets of this stage's tensors, by its rule (at least one: the figure divides).
    ModelSlice slice = ModelSlice::ofStage(m_spec.model, p.scheduleShape(), stage);
    slice.tensorShards = p.tp;
    slice.expertShards = p.ep;
    costs.buckets = std::max(1, gradientBucketCount(m_spec.model, slice, gb, p.gradBucketBytes()));
    return costs;
}

namespace {

// Buckets of a collective run one after another; all but the first can hide under `window` of
// compute that produces (or consumes) them.
double exposedBehind(double seconds, double window, double buckets)
{
    return std::max(seconds / buckets, seconds - window * (1.0 - 1.0 / buckets));
}

}  // namespace

double CostModel::exposedReduction(const DataParallelCosts& dp, double window) const
{
    // Buckets reduce one after another on the stage's communication queue, the first as soon as
    // the last micro-batch's backward has finished its gradients, the last after the backward
    // ends: the backward from its first bucket on hides the rest (DDP's and Megatron's
    // --overlap-grad-reduce, as the agent's DataParallel runs it).
    if (!m_spec.parallel.overlapGradReduce || m_spec.parallel.dp == 1)
        return dp.reduce;
    return exposedBehind(dp.reduce, window, dp.buckets);
}

double CostModel::exposedGather(const DataParallelCosts& dp, double window) const
{
    // The updated weights' all-gather waits for the optimizer; with overlap_param_gather it runs
    // bucket by bucket under the next step's first forward (Megatron's --overlap-param-gather).
    double gather = dp.gather;
    if (m_spec.parallel.overlapParamGather && dp.gather > 0)
        gather = exposedBehind(dp.gather, window, dp.buckets);
    return gather + dp.layerGathers;
}

double CostModel::dataParallelTime(const DataParallelCosts& dp, const StageWork& first) const
{
    // Without a simulated timeline: stage 0 finishes last in every schedule, its last backward is
    // the window the reduction hides under and its first forward the gather's.
    return exposedReduction(dp, first.backward + first.weightGrad) + exposedGather(dp, first.forward);
}

double CostModel::optimizerTime(int stage) const
{
    // AdamW is memory bound: per parameter it reads the gradient, fp32 master and both moments
    // and writes the three back plus the bf16 weight, ~30 bytes.
    const ParallelSpec& p = m_spec.parallel;
    const double shardDense = p.zero >= 1 ? p.dp : 1;
    const double shardExpert = p.zero >= 1 ? p.dp / p.ep : 1;
    return streamTime(m_perf.device, 30.0 * (denseParametersOnStage(stage) / shardDense +
                                             expertParametersOnStage(stage) / shardExpert));
}

double CostModel::optimizerTime() const
{
    // The first and last stages hold the embedding and the output layer, the most parameters;
    // pricing only them keeps the search's cost independent of pp.
    return std::max(optimizerTime(0), optimizerTime(lastModelStage()));
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
    const double mlp =
        (m_params.denseLayers * double(m.ffnHidden) + m_params.moeLayers * double(m.moe.ffnHidden) * m.moe.topK) / h *
        g;
    const double logits = double(m.vocab) / (2.0 * h);
    return 12.0 * B * s * h * h * (attention + mlp + logits);
}

double CostModel::tokensPerStep() const { return double(m_spec.parallel.globalBatch()) * double(m_spec.model.seqLen); }

}  // namespace meshbench::plan
