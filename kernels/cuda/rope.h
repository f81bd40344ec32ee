#pragma once
// The CUDA backend's rotary position embedding launcher (kernels/cuda/rope.cu).

#include "kernels/backend.h"
#include "kernels/caching_allocator.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

// Rotates x [tokens, heads, headDim] in place (back, with inverse); token t is at position t mod seq.
// Returns once the stream has used the angle table.
void launchRope(cudaStream_t stream, CachingAllocator& allocator, DevPtr x, int tokens, int seq, int heads, int headDim,
                float base, bool inverse);

}  // namespace meshbench::kernels::cuda
