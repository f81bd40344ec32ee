#include "agent_parameters.h"

namespace meshbench::plan {

std::vector<AgentParameter> agentParameters(const ModelSpec& m)
{
    using R = ParameterRole;
    using I = ParameterInit;
    using S = TensorSplit;
    const std::int64_t h = m.hidden;
    const std::int64_t d = m.hidden / m.heads;
    const bool layerNorm = m.norm == Norm::LayerNorm;
    const std::int64_t gated = m.activation == Activation::SwiGlu ? 2 : 1;
    const S gatedRows = gated == 2 ? S::GatedRows : S::Rows;

    // Vocabulary-parallel embedding and output layer: each TP rank holds a block of V / tp rows.
    std::vector<AgentParameter> tensors{{R::Embedding, -1, {m.vocab, h}, I::Normal, false, S::Rows}};
    for (int i = 0; i < m.layers; ++i) {
        tensors.push_back({R::AttnNormWeight, i, {h}, I::Ones});
        if (layerNorm)
            tensors.push_back({R::AttnNormBias, i, {h}, I::Zeros});
        tensors.push_back({R::Qkv, i, {(m.heads + 2 * std::int64_t(m.kvHeads)) * d, h}, I::Normal, false, S::QkvRows});
        tensors.push_back({R::Proj, i, {h, m.heads * d}, I::ScaledNormal, false, S::Columns});
        tensors.push_back({R::MlpNormWeight, i, {h}, I::Ones});
        if (layerNorm)
            tensors.push_back({R::MlpNormBias, i, {h}, I::Zeros});
        if (m.isMoeLayer(i)) {
            const std::int64_t e = m.moe.experts, f = m.moe.ffnHidden;
            tensors.push_back({R::Router, i, {e, h}, I::Normal});
            tensors.push_back({R::ExpertFc1, i, {e, gated * f, h}, I::Normal, true, gatedRows});
            tensors.push_back({R::ExpertFc2, i, {e, h, f}, I::ScaledNormal, true, S::Columns});
        } else {
            tensors.push_back({R::Fc1, i, {gated * m.ffnHidden, h}, I::Normal, false, gatedRows});
            tensors.push_back({R::Fc2, i, {h, m.ffnHidden}, I::ScaledNormal, false, S::Columns});
        }
    }
    tensors.push_back({R::FinalNormWeight, -1, {h}, I::Ones});
    if (layerNorm)
        tensors.push_back({R::FinalNormBias, -1, {h}, I::Zeros});
    if (!m.tiedEmbeddings)
        tensors.push_back({R::Head, -1, {m.vocab, h}, I::Normal, false, S::Rows});
    return tensors;
}

std::string parameterName(const AgentParameter& tensor)
{
    const char* names[] = {"embed.weight",      "attn_norm.weight",  "attn_norm.bias",         "attn.qkv.weight",
                           "attn.proj.weight",  "mlp_norm.weight",   "mlp_norm.bias",          "mlp.fc1.weight",
                           "mlp.fc2.weight",    "moe.router.weight", "moe.experts.fc1.weight", "moe.experts.fc2.weight",
                           "final_norm.weight", "final_norm.bias",   "lm_head.weight"};
    const std::string name = names[int(tensor.role)];
    return tensor.layer < 0 ? name : "layers." + std::to_string(tensor.layer) + "." + name;
}

ModelSlice ModelSlice::whole(const ModelSpec& model) { return {{{0, model.layers}}, true, true}; }

ModelSlice ModelSlice::ofStage(const ModelSpec& model, const ScheduleShape& shape, int stage)
{
    ModelSlice slice;
    const int virtualStages = shape.stages * shape.virtualStages;
    const int perChunk = model.layers / virtualStages;
    for (int c = 0; c < shape.virtualStages; ++c)
        slice.chunks.push_back({shape.virtualStageOf(stage, c) * perChunk, perChunk});
    slice.embedding = shape.stageOf(0) == stage;
    slice.head = shape.stageOf(virtualStages - 1) == stage;
    return slice;
}

bool ModelSlice::holdsLayer(int layer) const
{
    for (const Chunk& c : chunks)
        if (layer >= c.firstLayer && layer < c.firstLayer + c.layers)
            return true;
    return false;
}

bool ModelSlice::holds(const AgentParameter& tensor, bool tiedEmbeddings) const
{
    switch (tensor.role) {
    case ParameterRole::Embedding:
        return embedding || (head && tiedEmbeddings);
    case ParameterRole::FinalNormWeight:
    case ParameterRole::FinalNormBias:
    case ParameterRole::Head:
        return head;
    default:
        return holdsLayer(tensor.layer);
    }
}

std::vector<std::int64_t> ModelSlice::shardShape(const AgentParameter& tensor) const
{
    std::vector<std::int64_t> shape = tensor.shape;
    if (tensor.experts)
        shape[0] /= expertShards;
    // Every split divides its dimension by tp: rows (all row groups alike) or columns.
    if (tensor.split != TensorSplit::None)
        shape[tensor.split == TensorSplit::Columns ? shape.size() - 1 : shape.size() - 2] /= tensorShards;
    return shape;
}

}  // namespace meshbench::plan
