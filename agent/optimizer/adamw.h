#pragma once
// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019) over one rank's
// part of the model's flat parameter buffer: all of it without ZeRO, the rank's shard with it
// (Megatron's distributed optimizer and ZeRO-1: each data-parallel rank keeps the moments of, and
// updates, its own contiguous shard). Weight decay applies per tensor, to those the layout marks.
// Clipping as torch.nn.utils.clip_grad_norm_ scales the gradients inside the update.

#include "agent/layout/parameters.h"
#include "agent/runtime/device_buffer.h"

#include "kernels/backend.h"

#include <cstddef>

namespace meshbench::agent {

struct AdamWSettings {
    float learningRate = 0;
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weightDecay = 0;  // for the tensors the layout marks as decayed
};

// torch.nn.utils.clip_grad_norm_'s factor for a global gradient norm: min(1, clip / (norm + 1e-6));
// a clip of 0 turns clipping off.
float clipScale(double gradNorm, double clip);

class ShardedAdamW {
public:
    // Moments for elements [begin, begin + size) of `layout`'s flat buffer, zeroed.
    ShardedAdamW(kernels::Backend& backend, const ParameterLayout& layout, std::size_t begin, std::size_t size);

    // One update (`step` counts from 1, for the bias corrections). `params` and `grads` point at the
    // shard's first element; the gradients are scaled by `gradScale` (clipping) as they are read.
    void step(kernels::DevPtr params, kernels::DevPtr grads, const AdamWSettings& settings, int step, float gradScale);
    void reset();

    std::size_t begin() const { return m_begin; }
    std::size_t size() const { return m_m.size(); }
    DeviceBuffer& firstMoment() { return m_m; }
    DeviceBuffer& secondMoment() { return m_v; }
    const DeviceBuffer& firstMoment() const { return m_m; }
    const DeviceBuffer& secondMoment() const { return m_v; }

private:
    kernels::Backend& m_backend;
    const ParameterLayout& m_layout;
    std::size_t m_begin;
    DeviceBuffer m_m;
    DeviceBuffer m_v;
};

}  // namespace meshbench::agent
