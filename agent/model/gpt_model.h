#pragma once
// A GPT-style decoder with optional Mixture-of-Experts layers, forward and backward written out
// by hand over the kernels::Backend interface. Pre-norm blocks: x += Attn(Norm(x)); x += MLP(Norm(x)),
// rotary position embeddings (RoPE, Su et al. 2021, half-split as in Llama) on q and k,
// causal attention with grouped query heads, a final norm and the output layer (tied to the
// embedding unless the spec unties it). Activations live per micro-batch in an Activations
// object, so a pipeline schedule can keep several micro-batches in flight; each of their buffers is
// an entry of the planner's activation table (plan/agent_activations.h), which sizes it and says
// which recompute modes keep it, so the planner counts what the model allocates.

#include "agent/layout/parameters.h"
#include "agent/model/gradient_listener.h"
#include "agent/model/parameter_gatherer.h"
#include "agent/parallel/expert_dispatcher.h"
#include "agent/parallel/tensor_parallel.h"
#include "agent/runtime/communicator.h"
#include "agent/runtime/device_buffer.h"

#include "kernels/backend.h"
#include "plan/agent_activations.h"
#include "plan/job_spec.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace meshbench::agent {

// One micro-batch: `batch` rows of seq_len + 1 tokens each (inputs, and targets shifted by one).
struct MicroBatch {
    const std::int32_t* tokens = nullptr;
    int batch = 1;
};

// Tokens per expert of one MoE layer in one micro-batch.
struct ExpertLoad {
    int layer = 0;
    std::vector<int> routed;  // assignments before capacity dropping
    std::vector<int> kept;    // after
};

// A weight-gradient GEMM put off by a split backward: dW += dy^T x for rows [elementOffset /
// in, + out) of a tensor. dy and x are copies, kept until the W op runs.
struct DeferredWeightGrad {
    int view = -1;
    std::size_t elementOffset = 0;
    int out = 0;
    int in = 0;
    int tokens = 0;
    DeviceBuffer dy;
    DeviceBuffer x;
};

struct ForwardResult {
    double lossSum = 0;  // cross-entropy summed over the micro-batch's tokens
    double auxLoss = 0;  // load-balancing loss summed over MoE layers
    std::vector<ExpertLoad> expertLoads;
};

class GptModel {
public:
    static constexpr float kNormEps = 1e-5f;
    static constexpr float kRopeBase = 10000.0f;

    GptModel(const plan::ModelSpec& model, plan::Recompute recompute, kernels::Backend& backend,
             const ModelSlice* slice = nullptr);
    // ZeRO-3: parameters and gradients come from the gatherer, and the model's own flat buffers
    // are released.
    void setParameterGatherer(ParameterGatherer* gatherer);
    ~GptModel();

    const plan::ModelSpec& spec() const { return m_model; }
    const ParameterLayout& layout() const { return m_layout; }
    kernels::DevPtr parameters() const { return m_params.ptr(); }
    kernels::DevPtr gradients() const { return m_grads.ptr(); }
    void zeroGradients();
    // Expert parallelism: the group over which this slice's experts are sharded (its EP group).
    void setExpertGroup(Communicator* group);
    // Tensor parallelism (Megatron): the group that splits every linear layer and the vocabulary;
    // with sequence parallelism the residual stream, norms and the hand-over between pipeline
    // stages hold T / tp tokens each, gathered before and reduce-scattered after each TP region
    // (Korthikanti et al. 2022).
    void setTensorGroup(Communicator* group, bool sequenceParallel);
    // Elements of the residual stream of one micro-batch on this rank (what pipeline stages pass).
    std::size_t streamElements(int batch) const;

    class Activations;
    struct ActivationsDeleter {
        void operator()(Activations* activations) const;
    };
    using ActivationsPtr = std::unique_ptr<Activations, ActivationsDeleter>;

    // Runs the forward pass of one chunk of this model's slice for one micro-batch and keeps what
    // the backward needs. The chunk that starts the model embeds the batch's tokens; any other
    // reads `input` [T, h]. The chunk that ends the model takes the loss (the gradient too:
    // d(loss)/d(logits) = lossScale x (softmax - onehot)); any other writes `output` [T, h].
    // The load-balancing loss's gradient is scaled by auxScale.
    ActivationsPtr forward(int chunk, const MicroBatch& batch, kernels::ConstDevPtr input, kernels::DevPtr output,
                           float lossScale, float auxScale, ForwardResult& result);
    // The whole model in one call (a slice of one chunk holding everything).
    ActivationsPtr forward(const MicroBatch& batch, float lossScale, float auxScale, ForwardResult& result)
    {
        return forward(0, batch, {}, {}, lossScale, auxScale, result);
    }
    // Accumulates the chunk's gradients for this micro-batch into gradients(), given the gradient
    // of its output (ignored for the chunk that ends the model), and writes the gradient of its
    // input (not for the chunk that starts it). The activations are spent.
    // With `deferred`, the backward computes input gradients only (zero-bubble's B; Qi et al.
    // 2024) and queues the linear layers' weight-gradient GEMMs there for applyWeightGradients (W).
    // `finished`, for the step's last backward of the chunk, is told each layer's tensors as their
    // gradients become final (not with `deferred`: then the W op finishes them).
    void backward(Activations& activations, kernels::ConstDevPtr outputGrad, kernels::DevPtr inputGrad,
                  std::vector<DeferredWeightGrad>* deferred = nullptr, GradientListener* finished = nullptr);
    void backward(Activations& activations, GradientListener* finished = nullptr)
    {
        backward(activations, {}, {}, nullptr, finished);
    }
    // The tensors of a chunk of this slice: its layers', and the embedding or the head's at the ends.
    std::vector<int> chunkViews(int chunk) const;
    void applyWeightGradients(std::vector<DeferredWeightGrad>& deferred);

private:
    class ActivationBuffers;
    struct LayerActivations;
    // A norm's buffers in the activation table: its output and statistics, and SP's gather of it.
    struct NormBuffers {
        plan::AgentBuffer out, mean, rstd, gathered;
    };
    static constexpr NormBuffers kAttentionNorm{plan::AgentBuffer::AttnNorm, plan::AgentBuffer::AttnMean,
                                                plan::AgentBuffer::AttnRstd, plan::AgentBuffer::AttnGathered};
    static constexpr NormBuffers kMlpNorm{plan::AgentBuffer::MlpNorm, plan::AgentBuffer::MlpMean,
                                          plan::AgentBuffer::MlpRstd, plan::AgentBuffer::MlpGathered};

    void forwardLayer(int layer, LayerActivations& a, int batch, float auxScale, kernels::DevPtr xOut,
                      ForwardResult* result, bool gather = true);
    // The tensors of one layer, and of the model's ends, for the gatherer.
    std::vector<int> layerViews(int layer) const;
    std::vector<int> headViews() const;
    // Gathers (or releases) tensors when a gatherer is set; nothing otherwise.
    void acquire(const std::vector<int>& views, bool withGradients);
    void release(const std::vector<int>& views, bool withGradients);
    void backwardLayer(int layer, LayerActivations& a, int batch, float auxScale, kernels::DevPtr dx);
    void forwardMoe(int layer, LayerActivations& a, const plan::AgentActivationShape& buffers, float auxScale,
                    kernels::DevPtr y, ForwardResult* result);
    void backwardMoe(int layer, LayerActivations& a, int tokens, kernels::ConstDevPtr dy, kernels::DevPtr dc);
    void normForward(int weight, int bias, kernels::ConstDevPtr x, int tokens, kernels::DevPtr out,
                     kernels::DevPtr mean, kernels::DevPtr rstd);
    // The norm of this rank's stream rows (kept with their statistics), and with sequence
    // parallelism all of them gathered over the tensor group.
    void normThenGather(int weight, int bias, kernels::ConstDevPtr x, const plan::AgentActivationShape& shape,
                        LayerActivations& a, const NormBuffers& buffers);
    // dx = Norm'(dOut) added into dxAccumulate.
    void normBackward(int weight, int bias, kernels::ConstDevPtr dOut, kernels::ConstDevPtr x,
                      kernels::ConstDevPtr mean, kernels::ConstDevPtr rstd, int tokens, kernels::DevPtr dxAccumulate);
    void activationForward(kernels::ConstDevPtr u, int rows, int ffn, kernels::DevPtr out);
    void activationBackward(kernels::ConstDevPtr dOut, kernels::ConstDevPtr u, int rows, int ffn, kernels::DevPtr du);

    // y[T, out] = x[T, in] W^T, W = rows [row0, row0 + out) of view `view` (an [*, in] matrix).
    void linear(kernels::ConstDevPtr x, int tokens, int view, std::size_t elementOffset, int out, int in,
                kernels::DevPtr y, float beta = 0.0f);
    // dst += x W^T for a row-parallel layer (TensorParallel::rowParallelLinear with the view's weight).
    void linearInto(kernels::ConstDevPtr x, int tokens, int view, int out, int in, kernels::DevPtr dst);
    // dx[T, in] (+)= dy W; dW += dy^T x.
    void linearBackward(kernels::ConstDevPtr dy, kernels::ConstDevPtr x, int tokens, int view,
                        std::size_t elementOffset, int out, int in, kernels::DevPtr dx, float dxBeta);
    kernels::DevPtr param(int view, std::size_t elementOffset = 0) const;
    // The activation table's sizes for a micro-batch of `batch` rows on this rank.
    plan::AgentActivationShape activationShape(int batch) const;
    // A buffer of the table kept from a forward pass to its backward, counted as activations; none
    // where the table gives it no elements (the sequence-parallel gathers without SP).
    DeviceBuffer activation(plan::AgentBuffer buffer, const plan::AgentActivationShape& shape);
    kernels::DevPtr grad(int view, std::size_t elementOffset = 0) const;

    plan::ModelSpec m_model;
    plan::Recompute m_recompute;
    kernels::Backend& m_backend;
    ParameterLayout m_layout;
    DeviceBuffer m_params;
    DeviceBuffer m_grads;
    int m_headDim;
    int m_gated;                                            // 2 for SwiGLU (gate and up), 1 otherwise
    std::vector<DeferredWeightGrad>* m_deferred = nullptr;  // set during a split backward
    ParameterGatherer* m_gatherer = nullptr;
    TensorParallel m_tensor;     // heads, kv heads, both MLP widths and the vocabulary are split over it
    ExpertDispatcher m_experts;  // the MoE layers' experts are split over its EP group
};

}  // namespace meshbench::agent
