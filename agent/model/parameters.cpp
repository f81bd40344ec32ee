#include "parameters.h"

#include <algorithm>
#include <cmath>

namespace meshbench::agent {
namespace {

constexpr std::size_t kAlignElements = 16;   // 64 bytes of fp32

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

ModelSlice ModelSlice::ofStage(const plan::ModelSpec& model, int pp, int virtualStages, int stage)
{
    ModelSlice slice;
    const int perChunk = model.layers / (pp * virtualStages);
    for (int c = 0; c < virtualStages; ++c)
        slice.chunks.push_back({(c * pp + stage) * perChunk, perChunk});
    slice.embedding = stage == 0;
    slice.head = stage == pp - 1;
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
    m_embedding = add("embed.weight", {m.vocab, h}, InitKind::Normal, slice.embedding || (slice.head && m.tiedEmbeddings));
    m_layers.resize(std::size_t(m.layers));
    for (int i = 0; i < m.layers; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        const bool local = holds(i);
        LayerViews& l = m_layers[std::size_t(i)];
        l.attnNormWeight = add(p + "attn_norm.weight", {h}, InitKind::Ones, local);
        if (layerNorm)
            l.attnNormBias = add(p + "attn_norm.bias", {h}, InitKind::Zeros, local);
        l.qkv = add(p + "attn.qkv.weight", {(m.heads + 2 * std::int64_t(m.kvHeads)) * d, h}, InitKind::Normal, local);
        l.proj = add(p + "attn.proj.weight", {h, m.heads * d}, InitKind::ScaledNormal, local);
        l.mlpNormWeight = add(p + "mlp_norm.weight", {h}, InitKind::Ones, local);
        if (layerNorm)
            l.mlpNormBias = add(p + "mlp_norm.bias", {h}, InitKind::Zeros, local);
        if (m.isMoeLayer(i)) {
            const std::int64_t e = m.moe.experts, f = m.moe.ffnHidden;
            l.router = add(p + "moe.router.weight", {e, h}, InitKind::Normal, local);
            l.expertFc1 = add(p + "moe.experts.fc1.weight", {e, gated * f, h}, InitKind::Normal, local, true);
            l.expertFc2 = add(p + "moe.experts.fc2.weight", {e, h, f}, InitKind::ScaledNormal, local, true);
        } else {
            l.fc1 = add(p + "mlp.fc1.weight", {gated * m.ffnHidden, h}, InitKind::Normal, local);
            l.fc2 = add(p + "mlp.fc2.weight", {h, m.ffnHidden}, InitKind::ScaledNormal, local);
        }
        if (!local)
            l = LayerViews();
    }
    m_finalNormWeight = add("final_norm.weight", {h}, InitKind::Ones, slice.head);
    if (layerNorm)
        m_finalNormBias = add("final_norm.bias", {h}, InitKind::Zeros, slice.head);
    m_head = m.tiedEmbeddings ? (slice.head ? m_embedding : -1)
                              : add("lm_head.weight", {m.vocab, h}, InitKind::Normal, slice.head);
}

int ParameterLayout::add(std::string name, std::vector<std::int64_t> shape, InitKind init, bool local, bool experts)
{
    const int globalIndex = m_globalCount++;
    if (!local)
        return -1;
    TensorView v;
    if (experts && m_slice.expertShards > 1) {
        shape[0] /= m_slice.expertShards;
        v.shardIndex = m_slice.expertShard;
        v.shardCount = m_slice.expertShards;
    }
    v.name = std::move(name);
    v.size = 1;
    for (std::int64_t dim : shape)
        v.size *= std::size_t(dim);
    v.shape = std::move(shape);
    v.offset = m_total;
    v.init = init;
    v.decay = v.shape.size() >= 2;
    v.globalIndex = globalIndex;
    m_total += (v.size + kAlignElements - 1) / kAlignElements * kAlignElements;
    m_views.push_back(std::move(v));
    return int(m_views.size()) - 1;
}

std::vector<std::int64_t> TensorView::globalShape() const
{
    std::vector<std::int64_t> whole = shape;
    whole[0] *= shardCount;
    return whole;
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
        // A shard draws the whole tensor's values and keeps its block, so every layout starts
        // from the same model.
        std::vector<float> whole(v.shardCount > 1 ? v.size * std::size_t(v.shardCount) : 0);
        float* out = v.shardCount > 1 ? whole.data() : params + v.offset;
        const std::size_t count = v.size * std::size_t(v.shardCount);
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
        if (v.shardCount > 1)
            std::copy(whole.begin() + std::ptrdiff_t(v.size * std::size_t(v.shardIndex)),
                      whole.begin() + std::ptrdiff_t(v.size * std::size_t(v.shardIndex + 1)), params + v.offset);
    }
}

}  // namespace meshbench::agent
