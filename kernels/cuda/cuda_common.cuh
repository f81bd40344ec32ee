#pragma once
// What the CUDA backend's kernel files share, decided here once: error checks, the launch grid (kThreads
// a block, grid-stride loops), fp32 and bf16 loads and stores, block reductions, and device copies of
// host arrays for one call.

#include "kernels/backend.h"
#include "kernels/caching_allocator.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

namespace meshbench::kernels::cuda {

inline void check(cudaError_t status, const char* what)
{
    if (status != cudaSuccess)
        throw KernelError(std::string("cuda backend: ") + what + ": " + cudaGetErrorString(status));
}

// A launch's error (a bad configuration), reported under the operation's name.
inline void launched(const char* what) { check(cudaGetLastError(), what); }

// A block from the allocator, zeroed in stream order (nullptr for zero bytes).
inline void* allocateZeroed(CachingAllocator& allocator, cudaStream_t stream, std::size_t bytes)
{
    void* p = allocator.allocate(bytes);
    if (p)
        check(cudaMemsetAsync(p, 0, bytes, stream), "cudaMemset");
    return p;
}

inline void requireF32(ConstDevPtr p, const char* what)
{
    if (p.dtype != DType::F32)
        throw KernelError(std::string("cuda backend: ") + what + " must be f32 (atomics accumulate in fp32), got " +
                          std::string(dtypeName(p.dtype)));
}

constexpr int kThreads = 256;

inline unsigned blocksFor(std::size_t n)
{
    const std::size_t blocks = (n + kThreads - 1) / kThreads;
    return unsigned(blocks < 65535u * 32u ? blocks : 65535u * 32u);
}

// Grid-stride loops: any n with the capped grid above.
#define MESHBENCH_FOR_EACH(i, n)                                                                                       \
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n);                                  \
         i += std::size_t(gridDim.x) * blockDim.x)

inline __device__ float load(const void* p, DType dtype, std::size_t i)
{
    return dtype == DType::F32 ? static_cast<const float*>(p)[i]
                               : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

inline __device__ void store(void* p, DType dtype, std::size_t i, float value)
{
    if (dtype == DType::F32)
        static_cast<float*>(p)[i] = value;
    else
        static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(value);
}

// The sum (or maximum) of one value per thread over the block (blockDim.x == kThreads), on every
// thread.
template <typename T, typename Combine>
__device__ T blockReduce(T value, Combine combine)
{
    __shared__ T partial[kThreads];
    partial[threadIdx.x] = value;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride)
            partial[threadIdx.x] = combine(partial[threadIdx.x], partial[threadIdx.x + stride]);
        __syncthreads();
    }
    const T total = partial[0];
    __syncthreads();
    return total;
}

template <typename T>
__device__ T blockSum(T value)
{
    return blockReduce(value, [](T a, T b) { return a + b; });
}

// Host values copied to the device for one call, freed once the stream has used them.
template <typename T>
struct DeviceScratch {
    CachingAllocator& allocator;
    cudaStream_t stream;
    T* data = nullptr;
    DeviceScratch(CachingAllocator& a, cudaStream_t s, const T* host, std::size_t n) : allocator(a), stream(s)
    {
        data = static_cast<T*>(allocator.allocate(n * sizeof(T)));
        if (n > 0)
            check(cudaMemcpyAsync(data, host, n * sizeof(T), cudaMemcpyHostToDevice, stream), "scratch upload");
    }
    // The copy from the caller's (pageable) memory has finished before the caller may reuse it;
    // the block goes back to the cache in stream order.
    ~DeviceScratch()
    {
        cudaStreamSynchronize(stream);
        allocator.release(data);
    }
    DeviceScratch(const DeviceScratch&) = delete;
    DeviceScratch& operator=(const DeviceScratch&) = delete;
};

}  // namespace meshbench::kernels::cuda
