#pragma once
// The CUDA backend's MoE launchers (kernels/cuda/moe.cu): the permute of token rows into expert
// blocks and the combine back, and their backwards. The routing's maps are host memory, copied to
// the device for the call; each returns once the stream has used them.

#include "kernels/backend.h"
#include "kernels/caching_allocator.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

void launchPermute(cudaStream_t stream, CachingAllocator& allocator, const RouterShape& shape, const Routing& routing,
                   ConstDevPtr x, int h, DevPtr permuted);
void launchCombine(cudaStream_t stream, CachingAllocator& allocator, const RouterShape& shape, const Routing& routing,
                   ConstDevPtr expertOut, int h, DevPtr out);
// dWeight is host memory [tokens, topK], written before this returns.
void launchCombineBackward(cudaStream_t stream, CachingAllocator& allocator, const RouterShape& shape,
                           const Routing& routing, ConstDevPtr dOut, ConstDevPtr expertOut, int h, DevPtr dExpertOut,
                           float* dWeight);
void launchPermuteBackward(cudaStream_t stream, CachingAllocator& allocator, const RouterShape& shape,
                           const Routing& routing, ConstDevPtr dPermuted, int h, DevPtr dx);

}  // namespace meshbench::kernels::cuda
