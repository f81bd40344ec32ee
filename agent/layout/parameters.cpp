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

ParameterLayout::ParameterLayout(const plan::ModelSpec& model) : ParameterLayout(model, ModelSlice::whole(model)) {}

ParameterLayout::ParameterLayout(const plan::ModelSpec& m, const ModelSlice& slice) : m_slice(slice)
{
    // Tensors are visited in the whole model's order; a slice keeps its own.
    using Role = plan::ParameterRole;
    m_layers.resize(std::size_t(m.layers));
    int globalIndex = 0;
    plan::forEachAgentParameter(m, [&](const plan::AgentParameter& t) {
        const int index = globalIndex++;
        if (!slice.holds(t, m.tiedEmbeddings))
            return;
        const int view = add(t, index);
        LayerViews* l = t.layer >= 0 ? &m_layers[std::size_t(t.layer)] : nullptr;
        switch (t.role) {
        case Role::Embedding:
            m_embedding = view;
            break;
        case Role::AttnNormWeight:
            l->attnNormWeight = view;
            break;
        case Role::AttnNormBias:
            l->attnNormBias = view;
            break;
        case Role::Qkv:
            l->qkv = view;
            break;
        case Role::Proj:
            l->proj = view;
            break;
        case Role::MlpNormWeight:
            l->mlpNormWeight = view;
            break;
        case Role::MlpNormBias:
            l->mlpNormBias = view;
            break;
        case Role::Fc1:
            l->fc1 = view;
            break;
        case Role::Fc2:
            l->fc2 = view;
            break;
        case Role::Router:
            l->router = view;
            break;
        case Role::ExpertFc1:
            l->expertFc1 = view;
            break;
        case Role::ExpertFc2:
            l->expertFc2 = view;
            break;
        case Role::FinalNormWeight:
            m_finalNormWeight = view;
            break;
        case Role::FinalNormBias:
            m_finalNormBias = view;
            break;
        case Role::Head:
            m_head = view;
            break;
        }
    });
    if (m.tiedEmbeddings && slice.head)
        m_head = m_embedding;
    placeViews();
}

int ParameterLayout::add(const plan::AgentParameter& tensor, int globalIndex)
{
    TensorView v;
    v.wholeShape = tensor.shape.toVector();
    v.shape = m_slice.shardShape(tensor).toVector();
    if (tensor.experts && m_slice.expertShards > 1) {
        v.shardIndex = m_slice.expertShard;
        v.shardCount = m_slice.expertShards;
    }
    if (m_slice.tensorShards > 1 && tensor.split != TensorView::Split::None) {
        v.split = tensor.split;
        v.tensorIndex = m_slice.tensorShard;
        v.tensorCount = m_slice.tensorShards;
    }
    v.name = plan::parameterName(tensor);
    v.size = 1;
    for (std::int64_t dim : v.shape)
        v.size *= std::size_t(dim);
    v.init = tensor.init;
    v.decay = v.shape.size() >= 2;
    v.globalIndex = globalIndex;
    v.experts = tensor.experts;
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
