#include "agent/optimizer/adamw.h"

#include <algorithm>

namespace meshbench::agent {

float clipScale(double gradNorm, double clip)
{
    return clip > 0 ? float(std::min(1.0, clip / (gradNorm + 1e-6))) : 1.0f;
}

ShardedAdamW::ShardedAdamW(kernels::Backend& backend, const ParameterLayout& layout, std::size_t begin,
                           std::size_t size)
    : m_backend(backend), m_layout(layout), m_begin(begin), m_m(backend, size, MemoryCategory::Optimizer),
      m_v(backend, size, MemoryCategory::Optimizer)
{
    reset();
}

void ShardedAdamW::reset()
{
    m_backend.fill(m_m.ptr(), 0.0f, m_m.size());
    m_backend.fill(m_v.ptr(), 0.0f, m_v.size());
}

void ShardedAdamW::step(kernels::DevPtr params, kernels::DevPtr grads, const AdamWSettings& s, int step,
                        float gradScale)
{
    const std::size_t end = m_begin + size();
    // Tensor by tensor, for their own weight decay: the part of each inside the shard.
    for (const TensorView& v : m_layout.views()) {
        const std::size_t first = std::max(v.offset, m_begin);
        const std::size_t last = std::min(v.offset + v.size, end);
        if (first >= last)
            continue;
        const std::size_t local = first - m_begin;
        m_backend.adamw(kernels::offset(params, local), kernels::offset(grads, local),
                        kernels::offset(m_m.ptr(), local), kernels::offset(m_v.ptr(), local), last - first,
                        s.learningRate, s.beta1, s.beta2, s.eps, v.decay ? s.weightDecay : 0.0f, step, gradScale);
    }
}

}  // namespace meshbench::agent
