#pragma once
// The CUDA backend's token embedding launchers (kernels/cuda/embedding.cu). The ids are host
// memory, copied to the device for the call; each returns once the stream has used them.

#include "kernels/backend.h"
#include "kernels/caching_allocator.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

// out[t] = table[ids[t]] for T tokens of width h.
void launchEmbeddingForward(cudaStream_t stream, CachingAllocator& allocator, const int* ids, int T, ConstDevPtr table,
                            int h, DevPtr out);
// dTable[ids[t]] += dOut[t]; dTable must be f32.
void launchEmbeddingBackward(cudaStream_t stream, CachingAllocator& allocator, const int* ids, int T, ConstDevPtr dOut,
                             int h, DevPtr dTable);

}  // namespace meshbench::kernels::cuda
