#pragma once
// The CUDA backend's causal attention launchers (kernels/cuda/attention.cu), with grouped query
// heads: q [B, S, H, D], k and v [B, S, Hkv, D], lse [B, H, S] in f32.

#include "kernels/backend.h"
#include "kernels/caching_allocator.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

// On the tensor cores (kernels/cuda/flash_attention) where they take the shape, else the simple
// kernel.
void launchAttentionForward(cudaStream_t stream, const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k,
                            ConstDevPtr v, DevPtr out, DevPtr lse);
// Takes [B, H, S] floats of scratch from the allocator for the call.
void launchAttentionBackward(cudaStream_t stream, CachingAllocator& allocator, const AttentionShape& shape,
                             ConstDevPtr dOut, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, ConstDevPtr out,
                             ConstDevPtr lse, DevPtr dq, DevPtr dk, DevPtr dv);

}  // namespace meshbench::kernels::cuda
