#pragma once
// What meshbench-agent itself keeps as activations: the bytes its MemoryLedger counts in the
// Activations category. The buffers are described once, in the table below: GptModel allocates each
// of them from it (agent/model/gpt_model.cpp: its LayerActivations and the head's), and the counts
// here add the same entries up, so a buffer changes in one place. Besides them, the agent counts the
// copies a split backward keeps for its deferred weight gradients (the deferred GEMMs below). The
// agent's model is fp32 on every backend, so every element is 4 bytes. precision.activations = "fp32"
// makes the cost model count activations this way (CostModel::activationBytes); "bf16" keeps
// Megatron-LM's formulas.
//
// What the agent allocates in its Workspace category is not counted here, and the ledger does not
// count it as activations either: the gradients of activations in a backward, the core attention
// that selective recompute rebuilds in the backward, full recompute's scratch output, the router's
// logits, the MoE dispatcher's permuted and packed rows, the TP partial sums and the pipeline's
// send/receive buffers.

#include "job_spec.h"

#include <cstdint>
#include <vector>

namespace meshbench::plan {

// The sizes the agent's activation buffers are made of, for one micro-batch on one rank: the
// agent's own integer shapes (GptModel's head dim, heads / tp, ...).
struct AgentActivationShape {
    std::int64_t tokens = 0;        // T = b s: every TP region sees all of them
    std::int64_t streamTokens = 0;  // rows of the residual stream on this rank: T / tp with sequence parallelism
    std::int64_t hidden = 0;
    std::int64_t heads = 0;    // this rank's query heads
    std::int64_t kvHeads = 0;  // this rank's key/value heads
    std::int64_t headDim = 0;
    std::int64_t ffn = 0;        // this rank's dense MLP width
    std::int64_t gated = 1;      // fc1's outputs per MLP unit: 2 for SwiGLU (gate and up), 1 for GELU
    std::int64_t experts = 0;    // 0: a dense model
    std::int64_t topK = 0;       // experts per token
    std::int64_t expertFfn = 0;  // this rank's expert MLP width
    std::int64_t capacity = 0;   // rows per expert: kernels::routerCapacity
    std::int64_t vocab = 0;      // this rank's block of the vocabulary
    bool sequenceParallel = false;

    std::int64_t expertRows() const { return experts * capacity; }  // an MoE layer's expert buffers: E x capacity
    // The rows an MoE layer's experts get when routing is balanced: min(T k, E x capacity).
    std::int64_t routedRows() const;
};
// tp: the tensor group's size; sequenceParallel is dropped for a group of one (TensorParallel's).
AgentActivationShape agentActivationShape(const ModelSpec& model, int tp, bool sequenceParallel, int microBatchSize);

// The buffers, in the order GptModel allocates them: a layer's (forwardLayer), then the head's, of
// the chunk that ends the model (GptModel::forward after the last layer).
enum class AgentBuffer {
    Input,         // xIn [Tl, h]: the layer's input (the residual stream)
    AttnNorm,      // a: the attention norm's output (this rank's rows)
    AttnMean,      // mean1 [Tl]: its statistics (allocated for RMSNorm too)
    AttnRstd,      // rstd1 [Tl]
    AttnGathered,  // aFull [T, h]: SP's gather of a, the qkv GEMMs' input and dW's x (none without SP)
    Query,         // q [T, H d] after RoPE, for core attention's backward
    Key,           // k [T, Hkv d]
    Value,         // v [T, Hkv d]
    Attention,     // att [T, H d]: the attention output, kept for the output projection's dW
    LogSumExp,     // lse [b, H, s]: the row log-sum-exp, for flash attention's backward
    Residual,      // xMid [Tl, h]: the stream after the attention residual, the MLP norm's input
    MlpNorm,       // c, mean2, rstd2 and SP's cFull, as for attention
    MlpMean,
    MlpRstd,
    MlpGathered,
    Fc1Out,        // dense u [T, gated f]: fc1's output, the activation's input
    ActOut,        // dense g [T, f]: the activation's output, fc2's input
    ExpertIn,      // MoE [E C, h]: the rows dispatched to this rank's experts
    ExpertFc1Out,  // MoE eu [E C, gated f_moe]: the experts' fc1 outputs
    ExpertActOut,  // MoE eg [E C, f_moe]: their activation, fc2's input
    ExpertOut,     // MoE eout [E C, h]: the experts' outputs back at their tokens' rank, for the combine's backward
    FinalInput,    // xFinal [Tl, h]: the last layer's output, the final norm's input
    FinalMean,     // meanF, rstdF [Tl]: the final norm's statistics
    FinalRstd,
    FinalNormRows,  // SP: this rank's rows of the final norm [Tl, h], freed when the forward returns
    FinalNorm,      // normOut [T, h]: the final norm's output (gathered over TP with SP), for the output layer's dW
    Logits,         // dLogits [T, V/tp]: the loss gradient the forward computes, freed once the backward used it
};
constexpr int kAgentBufferCount = int(AgentBuffer::Logits) + 1;

enum class AgentBufferPart { Layer, DenseMlp, MoeMlp, Head };  // every layer's, a dense or MoE layer's, the head's
// Which recompute modes keep a buffer from its forward to its backward; under the others the layer
// frees it when its forward ends and its backward rebuilds it.
enum class AgentBufferKeep {
    Always,               // every mode: the layer's input, the head's buffers
    UnlessFullRecompute,  // full recompute keeps only the input (releaseAllButInput)
    WithoutRecompute,     // core attention, which selective recompute rebuilds in the backward (as workspace)
    ForwardOnly,          // no mode: freed when the chunk's forward returns
};

struct AgentBufferInfo {
    AgentBuffer buffer;
    const char* name;  // GptModel's
    AgentBufferPart part;
    AgentBufferKeep keep;
    std::int64_t (*elements)(const AgentActivationShape&);  // 0: not allocated for this shape
};
// Every buffer, in AgentBuffer's order.
const std::vector<AgentBufferInfo>& agentBuffers();
std::int64_t agentBufferElements(AgentBuffer buffer, const AgentActivationShape& shape);
bool agentBufferKept(AgentBufferKeep keep, Recompute recompute);

// zb-h1's split backward defers the linear layers' weight-gradient GEMMs from B to W
// (GptModel::linearBackward): each keeps copies of its dy [rows, out] and x [rows, in] until then.
struct AgentDeferredGemm {
    const char* name;  // the weight's, as the checkpoint names it
    AgentBufferPart part;
    std::int64_t (*rows)(const AgentActivationShape&);  // an MoE layer's experts: the balanced routed rows
    std::int64_t (*out)(const AgentActivationShape&);
    std::int64_t (*in)(const AgentActivationShape&);
};
const std::vector<AgentDeferredGemm>& agentDeferredGemms();

// One layer for one micro-batch, bytes.
struct AgentLayerActivations {
    double input = 0;    // the layer's input (the residual stream), kept under every recompute mode
    double kept = 0;     // what else it keeps from its forward to its backward under the spec's recompute
    double working = 0;  // everything but the input that its forward (or full recompute's rebuild) holds
    double stash = 0;    // zb-h1: the dy and x copies its deferred weight-gradient GEMMs keep from B to W
};
AgentLayerActivations agentLayerActivations(const JobSpec& spec, bool moe);

// One chunk (virtual stage) for one micro-batch, bytes. A chunk's forward and backward only add to
// what the other micro-batches in flight hold.
struct AgentChunkActivations {
    double kept = 0;          // held from the end of its forward to the start of its backward
    double forwardPeak = 0;   // the most it holds during its forward
    double backwardPeak = 0;  // the most it holds during its backward (at least `kept`)
    double stash = 0;         // held from the end of a split backward (zb-h1's B) to its W; 0 otherwise
};
AgentChunkActivations agentChunkActivations(const JobSpec& spec, int virtualStage);

// Whether the agent splits the backward into B and W for this spec: zb-h1 with a pipeline (one
// stage runs its micro-batches one forward and backward after another, whatever the schedule).
bool agentSplitsBackward(const ParallelSpec& parallel);

// The peak of the Activations category on a rank of `stage` during one training step: the chunks
// of the micro-batches in flight where the schedule's op list holds the most, bytes.
double agentActivationBytes(const JobSpec& spec, int stage);

}  // namespace meshbench::plan
