#pragma once
// Where the model's parameters and gradients live when it does not hold them whole: ZeRO-3 keeps
// them sharded over the data group and gathers each tensor just before use (agent/distributed's
// ShardedParameters). The model declares what it needs and asks for tensors by view of its
// ParameterLayout; the layer above implements it.

#include "kernels/backend.h"

#include <vector>

namespace meshbench::agent {

class ParameterGatherer {
public:
    virtual ~ParameterGatherer() = default;
    // Makes the tensors' parameters available, and zeroed gradient buffers when withGradients.
    virtual void acquire(const std::vector<int>& views, bool withGradients) = 0;
    // Frees them; with gradients, first adds the gradients summed over the group into the shards.
    virtual void release(const std::vector<int>& views, bool withGradients) = 0;
    virtual kernels::DevPtr param(int view) = 0;
    virtual kernels::DevPtr grad(int view) = 0;
};

}  // namespace meshbench::agent
