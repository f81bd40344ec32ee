#include "agent_parameters.h"

namespace meshbench::plan {

namespace {

TensorShape shapeOf(std::int64_t a) { return {{a, 0, 0}, 1}; }
TensorShape shapeOf(std::int64_t a, std::int64_t b) { return {{a, b, 0}, 2}; }
TensorShape shapeOf(std::int64_t a, std::int64_t b, std::int64_t c) { return {{a, b, c}, 3}; }

}  // namespace

std::int64_t TensorShape::elements() const
{
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i)
        n *= dims[std::size_t(i)];
    return n;
}

void forEachAgentParameter(const ModelSpec& m, const std::function<void(const AgentParameter&)>& visit)
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
    visit({R::Embedding, -1, shapeOf(m.vocab, h), I::Normal, false, S::Rows});
    for (int i = 0; i < m.layers; ++i) {
        visit({R::AttnNormWeight, i, shapeOf(h), I::Ones});
        if (layerNorm)
            visit({R::AttnNormBias, i, shapeOf(h), I::Zeros});
        visit({R::Qkv, i, shapeOf((m.heads + 2 * std::int64_t(m.kvHeads)) * d, h), I::Normal, false, S::QkvRows});
        visit({R::Proj, i, shapeOf(h, m.heads * d), I::ScaledNormal, false, S::Columns});
        visit({R::MlpNormWeight, i, shapeOf(h), I::Ones});
        if (layerNorm)
            visit({R::MlpNormBias, i, shapeOf(h), I::Zeros});
        if (m.isMoeLayer(i)) {
            const std::int64_t e = m.moe.experts, f = m.moe.ffnHidden;
            visit({R::Router, i, shapeOf(e, h), I::Normal});
            visit({R::ExpertFc1, i, shapeOf(e, gated * f, h), I::Normal, true, gatedRows});
            visit({R::ExpertFc2, i, shapeOf(e, h, f), I::ScaledNormal, true, S::Columns});
        } else {
            visit({R::Fc1, i, shapeOf(gated * m.ffnHidden, h), I::Normal, false, gatedRows});
            visit({R::Fc2, i, shapeOf(h, m.ffnHidden), I::ScaledNormal, false, S::Columns});
        }
    }
    visit({R::FinalNormWeight, -1, shapeOf(h), I::Ones});
    if (layerNorm)
        visit({R::FinalNormBias, -1, shapeOf(h), I::Zeros});
    if (!m.tiedEmbeddings)
        visit({R::Head, -1, shapeOf(m.vocab, h), I::Normal, false, S::Rows});
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

TensorShape ModelSlice::shardShape(const AgentParameter& tensor) const
{
    TensorShape shape = tensor.shape;
    if (tensor.experts)
        shape.dims[0] /= expertShards;
    // Every split divides its dimension by tp: rows (all row groups alike) or columns.
    if (tensor.split != TensorSplit::None)
        shape.dims[std::size_t(tensor.split == TensorSplit::Columns ? shape.rank - 1 : shape.rank - 2)] /= tensorShards;
    return shape;
}

}  // namespace meshbench::plan
