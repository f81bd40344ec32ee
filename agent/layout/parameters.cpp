#include "agent/layout/parameters.h"

#include <algorithm>
#include <cmath>

namespace meshbench::agent {
namespace {

constexpr std::size_t kAlignElements = 16;  // 64 bytes of fp32

std::uint64_t splitmix64(std::uint64_t& state)
{
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform in (0, 1], from the top 53 bits.
double uniform(std::uint64_t& state) { return (double(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53; }

}  // namespace

ModelSlice ModelSlice::whole(const plan::ModelSpec& model) { return {{{0, model.layers}}, true, true}; }

ModelSlice ModelSlice::ofStage(const plan::ModelSpec& model, const plan::ScheduleShape& shape, int stage)
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

ParameterLayout::ParameterLayout(const plan::ModelSpec& model) : ParameterLayout(model, ModelSlice::whole(model)) {}

ParameterLayout::ParameterLayout(const plan::ModelSpec& m, const ModelSlice& slice) : m_slice(slice)
{
    const std::int64_t h = m.hidden;
    const std::int64_t d = m.hidden / m.heads;
    const bool layerNorm = m.norm == plan::Norm::LayerNorm;
    const std::int64_t gated = m.activation == plan::Activation::SwiGlu ? 2 : 1;
    auto holds = [&slice](int layer) {
        for (const ModelSlice::Chunk& c : slice.chunks)
            if (layer >= c.firstLayer && layer < c.firstLayer + c.layers)
                return true;
        return false;
    };

    // Tensors are visited in the whole model's order; a slice keeps its own. With tied embeddings
    // the last stage keeps a copy of the embedding for its output layer (as Megatron does).
    // Vocabulary-parallel embedding and output layer: each TP rank holds a block of V / tp rows.
    m_embedding = add("embed.weight", {m.vocab, h}, InitKind::Normal,
                      slice.embedding || (slice.head && m.tiedEmbeddings), false, TensorView::Split::Rows);
    m_layers.resize(std::size_t(m.layers));
    for (int i = 0; i < m.layers; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        const bool local = holds(i);
        LayerViews& l = m_layers[std::size_t(i)];
        l.attnNormWeight = add(p + "attn_norm.weight", {h}, InitKind::Ones, local);
        if (layerNorm)
            l.attnNormBias = add(p + "attn_norm.bias", {h}, InitKind::Zeros, local);
        using Split = TensorView::Split;
        const Split gatedRows = gated == 2 ? Split::GatedRows : Split::Rows;
        l.qkv = add(p + "attn.qkv.weight", {(m.heads + 2 * std::int64_t(m.kvHeads)) * d, h}, InitKind::Normal, local,
                    false, Split::QkvRows);
        l.proj = add(p + "attn.proj.weight", {h, m.heads * d}, InitKind::ScaledNormal, local, false, Split::Columns);
        l.mlpNormWeight = add(p + "mlp_norm.weight", {h}, InitKind::Ones, local);
        if (layerNorm)
            l.mlpNormBias = add(p + "mlp_norm.bias", {h}, InitKind::Zeros, local);
        if (m.isMoeLayer(i)) {
            const std::int64_t e = m.moe.experts, f = m.moe.ffnHidden;
            l.router = add(p + "moe.router.weight", {e, h}, InitKind::Normal, local);
            l.expertFc1 =
                add(p + "moe.experts.fc1.weight", {e, gated * f, h}, InitKind::Normal, local, true, gatedRows);
            l.expertFc2 =
                add(p + "moe.experts.fc2.weight", {e, h, f}, InitKind::ScaledNormal, local, true, Split::Columns);
        } else {
            l.fc1 = add(p + "mlp.fc1.weight", {gated * m.ffnHidden, h}, InitKind::Normal, local, false, gatedRows);
            l.fc2 = add(p + "mlp.fc2.weight", {h, m.ffnHidden}, InitKind::ScaledNormal, local, false, Split::Columns);
        }
        if (!local)
            l = LayerViews();
    }
    m_finalNormWeight = add("final_norm.weight", {h}, InitKind::Ones, slice.head);
    if (layerNorm)
        m_finalNormBias = add("final_norm.bias", {h}, InitKind::Zeros, slice.head);
    m_head = m.tiedEmbeddings
                 ? (slice.head ? m_embedding : -1)
                 : add("lm_head.weight", {m.vocab, h}, InitKind::Normal, slice.head, false, TensorView::Split::Rows);
    placeViews();
}

int ParameterLayout::add(std::string name, std::vector<std::int64_t> shape, InitKind init, bool local, bool experts,
                         TensorView::Split split)
{
    const int globalIndex = m_globalCount++;
    if (!local)
        return -1;
    TensorView v;
    v.wholeShape = shape;
    if (experts && m_slice.expertShards > 1) {
        shape[0] /= m_slice.expertShards;
        v.shardIndex = m_slice.expertShard;
        v.shardCount = m_slice.expertShards;
    }
    if (m_slice.tensorShards > 1 && split != TensorView::Split::None) {
        // Every split divides its dimension by tp: rows (all row groups alike) or columns.
        const std::size_t dim = split == TensorView::Split::Columns ? shape.size() - 1 : shape.size() - 2;
        shape[dim] /= m_slice.tensorShards;
        v.split = split;
        v.tensorIndex = m_slice.tensorShard;
        v.tensorCount = m_slice.tensorShards;
    }
    v.name = std::move(name);
    v.size = 1;
    for (std::int64_t dim : shape)
        v.size *= std::size_t(dim);
    v.shape = std::move(shape);
    v.init = init;
    v.decay = v.shape.size() >= 2;
    v.globalIndex = globalIndex;
    v.experts = experts;
    m_views.push_back(std::move(v));
    return int(m_views.size()) - 1;
}

void ParameterLayout::placeViews()
{
    // Dense tensors first, then the experts': each kind in one range of the flat buffer.
    auto aligned = [](std::size_t n) { return (n + kAlignElements - 1) / kAlignElements * kAlignElements; };
    for (bool experts : {false, true}) {
        if (experts)
            m_expertBegin = m_total;
        for (TensorView& v : m_views)
            if (v.experts == experts) {
                v.offset = m_total;
                m_total += aligned(v.size);
            }
    }
}

void copyTensorShard(const TensorView& v, float* whole, float* shard, bool toShard, int heads, int kvHeads)
{
    // The tensor is a stack of [R, C] matrices (one per local expert, or one); the TP-whole form
    // has R x tp rows or C x tp columns.
    const std::size_t rows = std::size_t(v.shape[v.shape.size() - 2]);
    const std::size_t cols = std::size_t(v.shape.back());
    const std::size_t matrices = v.size / (rows * cols);
    const std::size_t t = std::size_t(v.tensorCount), r = std::size_t(v.tensorIndex);
    auto move = [toShard](float* wholeRow, float* shardRow, std::size_t n) {
        if (toShard)
            std::copy_n(wholeRow, n, shardRow);
        else
            std::copy_n(shardRow, n, wholeRow);
    };
    // Row groups (first whole row, rows in the shard) for the row splits.
    std::vector<std::pair<std::size_t, std::size_t>> groups;
    switch (v.split) {
    case TensorView::Split::None:
    case TensorView::Split::Columns:
        break;
    case TensorView::Split::Rows:
        groups = {{r * rows, rows}};
        break;
    case TensorView::Split::GatedRows:
        groups = {{r * rows / 2, rows / 2}, {t * rows / 2 + r * rows / 2, rows / 2}};
        break;
    case TensorView::Split::QkvRows: {
        const std::size_t d = rows / std::size_t((heads + 2 * kvHeads) / int(t));
        const std::size_t q = std::size_t(heads) * d / t, kv = std::size_t(kvHeads) * d / t;
        groups = {{r * q, q}, {t * q + r * kv, kv}, {t * q + t * kv + r * kv, kv}};
        break;
    }
    }
    for (std::size_t m = 0; m < matrices; ++m) {
        float* wholeMatrix = whole + m * rows * cols * t;
        float* shardMatrix = shard + m * rows * cols;
        if (v.split == TensorView::Split::Columns) {
            for (std::size_t i = 0; i < rows; ++i)
                move(wholeMatrix + i * cols * t + r * cols, shardMatrix + i * cols, cols);
        } else if (v.split == TensorView::Split::None) {
            move(wholeMatrix, shardMatrix, rows * cols);
        } else {
            std::size_t next = 0;
            for (const auto& [first, count] : groups) {
                move(wholeMatrix + first * cols, shardMatrix + next * cols, count * cols);
                next += count;
            }
        }
    }
}

std::size_t ParameterLayout::parameterCount() const
{
    std::size_t n = 0;
    for (const TensorView& v : m_views)
        n += v.size;
    return n;
}

void initializeParameters(const ParameterLayout& layout, const plan::ModelSpec& model, std::uint64_t seed,
                          float* params)
{
    const double stddev = 0.02;
    const double scaled = stddev / std::sqrt(2.0 * model.layers);
    for (const TensorView& v : layout.views()) {
        // A shard draws the whole tensor's values and keeps its part, so every layout starts
        // from the same model.
        const bool sharded = v.shardCount > 1 || v.tensorCount > 1;
        std::size_t count = 1;
        for (std::int64_t dim : v.wholeShape)
            count *= std::size_t(dim);
        std::vector<float> whole(sharded ? count : 0);
        float* out = sharded ? whole.data() : params + v.offset;
        std::uint64_t state = seed + std::uint64_t(v.globalIndex);
        switch (v.init) {
        case InitKind::Ones:
            std::fill(out, out + count, 1.0f);
            break;
        case InitKind::Zeros:
            std::fill(out, out + count, 0.0f);
            break;
        case InitKind::Normal:
        case InitKind::ScaledNormal: {
            const double sigma = v.init == InitKind::Normal ? stddev : scaled;
            for (std::size_t i = 0; i < count; i += 2) {
                // Box-Muller: two independent normals from two uniforms.
                const double r = std::sqrt(-2.0 * std::log(uniform(state)));
                const double theta = 2.0 * M_PI * uniform(state);
                out[i] = float(sigma * r * std::cos(theta));
                if (i + 1 < count)
                    out[i + 1] = float(sigma * r * std::sin(theta));
            }
            break;
        }
        }
        if (sharded)
            extractShard(v, whole.data(), params + v.offset, model);
    }
}

void extractShard(const TensorView& v, float* whole, float* shard, const plan::ModelSpec& model)
{
    // The EP block (along dimension 0), then the TP part of it.
    float* block = whole + v.size * std::size_t(v.tensorCount) * std::size_t(v.shardIndex);
    copyTensorShard(v, block, shard, true, model.heads, model.kvHeads);
}

void insertShard(const TensorView& v, const float* shard, float* whole, const plan::ModelSpec& model)
{
    float* block = whole + v.size * std::size_t(v.tensorCount) * std::size_t(v.shardIndex);
    copyTensorShard(v, block, const_cast<float*>(shard), false, model.heads, model.kvHeads);
}

}  // namespace meshbench::agent
