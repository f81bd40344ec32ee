// The token embedding of the CUDA backend: a row gather forward, an atomic scatter-add backward.

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/embedding.h"

namespace meshbench::kernels::cuda {
namespace {

__global__ void embeddingForwardKernel(const int* ids, const void* table, DType tType, int h, void* out, DType outType,
                                       std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t t = i / std::size_t(h), j = i % std::size_t(h);
        store(out, outType, i, load(table, tType, std::size_t(ids[t]) * std::size_t(h) + j));
    }
}

// Repeated ids add up in whatever order the atomics land (the CPU adds in token order).
__global__ void embeddingBackwardKernel(const int* ids, const void* dOut, DType dType, int h, float* dTable,
                                        std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t t = i / std::size_t(h), j = i % std::size_t(h);
        atomicAdd(dTable + std::size_t(ids[t]) * std::size_t(h) + j, load(dOut, dType, i));
    }
}

}  // namespace

void launchEmbeddingForward(cudaStream_t stream, CachingAllocator& allocator, const int* ids, int T, ConstDevPtr table,
                            int h, DevPtr out)
{
    const std::size_t n = std::size_t(T) * std::size_t(h);
    if (n == 0)
        return;
    DeviceScratch<int> deviceIds(allocator, stream, ids, std::size_t(T));
    embeddingForwardKernel<<<blocksFor(n), kThreads, 0, stream>>>(deviceIds.data, table.data, table.dtype, h, out.data,
                                                                  out.dtype, n);
    launched("embeddingForward");
}

void launchEmbeddingBackward(cudaStream_t stream, CachingAllocator& allocator, const int* ids, int T, ConstDevPtr dOut,
                             int h, DevPtr dTable)
{
    const std::size_t n = std::size_t(T) * std::size_t(h);
    if (n == 0)
        return;
    requireF32(dTable, "embeddingBackward's table gradient");
    DeviceScratch<int> deviceIds(allocator, stream, ids, std::size_t(T));
    embeddingBackwardKernel<<<blocksFor(n), kThreads, 0, stream>>>(deviceIds.data, dOut.data, dOut.dtype, h,
                                                                   static_cast<float*>(dTable.data), n);
    launched("embeddingBackward");
}

}  // namespace meshbench::kernels::cuda
