// The cross-entropy of the CUDA backend: the summed loss over the tokens and its gradient of the
// logits, one block per token.

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_common.cuh"

#include <string>

namespace meshbench::kernels::cuda {
namespace {

// One block per token: loss = logsumexp(row) - row[target] (the row maximum subtracted before exp),
// summed into *loss; dLogits = gradScale (softmax - onehot). Every read of a row happens before any
// write to it, so dLogits may alias logits.
__global__ void crossEntropyKernel(const void* logits, DType lType, const int* targets, int V, float gradScale,
                                   void* dLogits, DType dType, double* loss)
{
    const std::size_t row = std::size_t(blockIdx.x) * std::size_t(V);
    float best = -INFINITY;
    for (int j = int(threadIdx.x); j < V; j += int(blockDim.x))
        best = fmaxf(best, load(logits, lType, row + std::size_t(j)));
    const float mx = blockReduce(best, [](float a, float b) { return fmaxf(a, b); });
    const int target = targets[blockIdx.x];
    const float targetLogit = load(logits, lType, row + std::size_t(target));
    double sum = 0;
    for (int j = int(threadIdx.x); j < V; j += int(blockDim.x))
        sum += double(expf(load(logits, lType, row + std::size_t(j)) - mx));
    const double total = blockSum(sum);  // its barriers also order the reads above before the writes
    const float factor = float(double(gradScale) / total);
    for (int j = int(threadIdx.x); j < V; j += int(blockDim.x)) {
        const std::size_t i = row + std::size_t(j);
        const float e = expf(load(logits, lType, i) - mx);
        store(dLogits, dType, i, e * factor - (j == target ? gradScale : 0.0f));
    }
    if (threadIdx.x == 0)
        atomicAdd(loss, double(mx) + log(total) - double(targetLogit));
}

}  // namespace

double launchCrossEntropy(cudaStream_t stream, CachingAllocator& allocator, double* loss, ConstDevPtr logits,
                          const int* targets, int T, int V, float gradScale, DevPtr dLogits)
{
    // Every target checked before anything is written: dLogits may alias logits.
    for (int t = 0; t < T; ++t)
        if (targets[t] < 0 || targets[t] >= V)
            throw KernelError("cuda backend: crossEntropy: target " + std::to_string(targets[t]) + " of token " +
                              std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    if (T <= 0)
        return 0;
    DeviceScratch<int> deviceTargets(allocator, stream, targets, std::size_t(T));
    check(cudaMemsetAsync(loss, 0, sizeof(double), stream), "cudaMemset");
    crossEntropyKernel<<<unsigned(T), kThreads, 0, stream>>>(logits.data, logits.dtype, deviceTargets.data, V,
                                                             gradScale, dLogits.data, dLogits.dtype, loss);
    launched("crossEntropy");
    double total = 0;
    check(cudaMemcpyAsync(&total, loss, sizeof(double), cudaMemcpyDeviceToHost, stream), "crossEntropy");
    check(cudaStreamSynchronize(stream), "crossEntropy");
    return total;
}

}  // namespace meshbench::kernels::cuda
