#pragma once
// The CUDA backend's cross-entropy launcher (kernels/cuda/cross_entropy.cu).

#include "kernels/backend.h"
#include "kernels/caching_allocator.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

// The summed loss of T rows of V logits against the host targets, and dLogits = gradScale (softmax -
// onehot), which may alias logits. loss is one device double to sum into; returns once the stream
// has finished.
double launchCrossEntropy(cudaStream_t stream, CachingAllocator& allocator, double* loss, ConstDevPtr logits,
                          const int* targets, int T, int V, float gradScale, DevPtr dLogits);

}  // namespace meshbench::kernels::cuda
