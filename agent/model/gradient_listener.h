#pragma once
// What the model tells the layer above it as a backward goes: which tensors' gradients are complete
// (views of its ParameterLayout). The model declares it and calls it; agent/distributed implements
// it (the data-parallel gradient buckets start their reductions), so the model never sees the
// layer that drives it (Megatron-core's DDP hooks the parameters' gradients likewise from above).

#include <vector>

namespace meshbench::agent {

class GradientListener {
public:
    virtual ~GradientListener() = default;
    virtual void gradientsReady(const std::vector<int>& views) = 0;
};

}  // namespace meshbench::agent
