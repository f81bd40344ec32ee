#pragma once
// The model's parameters as one flat buffer with an index of named views. Gradients and the
// optimizer's moments use the same layout, so ZeRO can shard all of them by offset ranges. The
// dense tensors come first and the MoE experts' after them, so that each kind is one range: the
// experts' are reduced and sharded over the expert-data-parallel group, the rest over the data group.
// The tensors themselves (names, shapes, splits, initial values) are plan/agent_parameters.h's table,
// which the planner reads too.

#include "plan/agent_parameters.h"

#include <cstdint>
#include <string>
#include <vector>

namespace meshbench::agent {

using plan::ModelSlice;
using InitKind = plan::ParameterInit;

struct TensorView {
    std::string name;
    std::vector<std::int64_t> shape;
    std::size_t offset = 0;  // in elements, into the flat buffer (64-byte aligned)
    std::size_t size = 0;    // elements
    InitKind init = InitKind::Normal;
    bool decay = false;    // weight decay applies (matrices, as nanoGPT: every tensor of 2+ dims)
    int globalIndex = 0;   // position in the whole model's list (checkpoint order, init seed)
    bool experts = false;  // a MoE layer's stacked expert weights (in the experts' range)
    // Expert tensors under EP hold block shardIndex of shardCount along dimension 0 of the whole
    // tensor.
    int shardIndex = 0;
    int shardCount = 1;
    // Under TP, how the last two dimensions are split (None with tp 1).
    using Split = plan::TensorSplit;
    Split split = Split::None;
    int tensorIndex = 0;
    int tensorCount = 1;
    std::vector<std::int64_t> wholeShape;  // the tensor's shape in the whole model
    const std::vector<std::int64_t>& globalShape() const { return wholeShape; }
};

// Copies between a tensor's TP-whole form (EP block already taken) and this view's TP shard;
// toShard picks the direction. heads and kvHeads place the q, k and v rows of QkvRows.
void copyTensorShard(const TensorView& view, float* whole, float* shard, bool toShard, int heads, int kvHeads);
// This view's part (EP block, then TP part) of the whole tensor, and back.
void extractShard(const TensorView& view, float* whole, float* shard, const plan::ModelSpec& model);
void insertShard(const TensorView& view, const float* shard, float* whole, const plan::ModelSpec& model);

// Indices into views() for one layer; -1 where the layer has no such tensor.
struct LayerViews {
    int attnNormWeight = -1, attnNormBias = -1, qkv = -1, proj = -1;
    int mlpNormWeight = -1, mlpNormBias = -1;
    int fc1 = -1, fc2 = -1;                           // dense MLP
    int router = -1, expertFc1 = -1, expertFc2 = -1;  // MoE
};

class ParameterLayout {
public:
    // The whole model, or the tensors of one slice (the names stay the whole model's).
    explicit ParameterLayout(const plan::ModelSpec& model);
    ParameterLayout(const plan::ModelSpec& model, const ModelSlice& slice);

    const std::vector<TensorView>& views() const { return m_views; }
    const TensorView& at(int index) const { return m_views[std::size_t(index)]; }
    const LayerViews& layer(int i) const { return m_layers[std::size_t(i)]; }  // global layer index
    const ModelSlice& slice() const { return m_slice; }
    int embedding() const { return m_embedding; }
    int finalNormWeight() const { return m_finalNormWeight; }
    int finalNormBias() const { return m_finalNormBias; }
    int head() const { return m_head; }  // the embedding when tied
    std::size_t totalSize() const { return m_total; }
    // The experts' range is [expertBegin(), totalSize()); the dense tensors' ends there.
    std::size_t expertBegin() const { return m_expertBegin; }
    std::size_t parameterCount() const;  // without alignment padding

private:
    int add(const plan::AgentParameter& tensor, int globalIndex);
    void placeViews();

    ModelSlice m_slice;
    std::vector<TensorView> m_views;
    std::vector<LayerViews> m_layers;
    int m_embedding = -1, m_finalNormWeight = -1, m_finalNormBias = -1, m_head = -1;
    std::size_t m_total = 0;
    std::size_t m_expertBegin = 0;
};

// Deterministic initialisation from the seed, into host memory of totalSize() floats:
// Normal ~ N(0, 0.02); ScaledNormal (attention and MLP output projections) ~ N(0, 0.02 /
// sqrt(2 L)) as GPT-2; norm weights 1, biases 0. Draws come from splitmix64 (Steele et al.
// 2014) through Box-Muller, tensor by tensor in view order, seeded with seed + view index.
void initializeParameters(const ParameterLayout& layout, const plan::ModelSpec& model, std::uint64_t seed,
                          float* params);

}  // namespace meshbench::agent
