// MoE kernels of the CUDA backend: the permute that moves token rows into expert blocks and the
// combine that weighs them back, with their backwards (Megatron-LM's moe_utils permute / unpermute).
// The router itself (softmax, top-k, capacity, load-balancing loss) works on the interface's host
// arrays, with the CPU backend's code.

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/moe.h"

namespace meshbench::kernels::cuda {
namespace {

// MoE: the permuted buffer is [E x capacity, h]; tokenOfRow, rowOf and weightOf are the routing's
// maps (device copies).
__global__ void permuteKernel(const int* tokenOfRow, const void* x, DType xType, int h, void* permuted, DType pType,
                              std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t row = i / std::size_t(h), c = i % std::size_t(h);
        const int t = tokenOfRow[row];
        store(permuted, pType, i, t < 0 ? 0.0f : load(x, xType, std::size_t(t) * std::size_t(h) + c));
    }
}

__global__ void combineKernel(const int* rowOf, const float* weightOf, int topK, const void* expertOut, DType eType,
                              int h, void* out, DType oType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t t = i / std::size_t(h), c = i % std::size_t(h);
        float sum = 0;
        for (int j = 0; j < topK; ++j) {
            const std::size_t slot = t * std::size_t(topK) + std::size_t(j);
            if (rowOf[slot] >= 0)
                sum += weightOf[slot] * load(expertOut, eType, std::size_t(rowOf[slot]) * std::size_t(h) + c);
        }
        store(out, oType, i, sum);
    }
}

// dExpertOut[row] = weight dOut[token]: the row's slot is found among its token's topK.
__global__ void combineBackwardRowsKernel(const int* tokenOfRow, const int* rowOf, const float* weightOf, int topK,
                                          const void* dOut, DType dType, int h, void* dExpertOut, DType eType,
                                          std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t row = i / std::size_t(h), c = i % std::size_t(h);
        const int t = tokenOfRow[row];
        float w = 0;
        for (int j = 0; t >= 0 && j < topK; ++j)
            if (rowOf[std::size_t(t) * std::size_t(topK) + std::size_t(j)] == int(row))
                w = weightOf[std::size_t(t) * std::size_t(topK) + std::size_t(j)];
        store(dExpertOut, eType, i, t < 0 ? 0.0f : w * load(dOut, dType, std::size_t(t) * std::size_t(h) + c));
    }
}

// One block per slot: dWeight = dOut[token] . expertOut[row] in double (0 for a dropped slot).
__global__ void combineBackwardWeightsKernel(const int* rowOf, int topK, const void* dOut, DType dType,
                                             const void* expertOut, DType eType, int h, float* dWeight)
{
    const std::size_t slot = blockIdx.x, t = slot / std::size_t(topK);
    const int row = rowOf[slot];
    double dot = 0;
    for (int c = int(threadIdx.x); row >= 0 && c < h; c += int(blockDim.x))
        dot += double(load(dOut, dType, t * std::size_t(h) + std::size_t(c))) *
               double(load(expertOut, eType, std::size_t(row) * std::size_t(h) + std::size_t(c)));
    const double total = blockSum(dot);
    if (threadIdx.x == 0)
        dWeight[slot] = row < 0 ? 0.0f : float(total);
}

__global__ void permuteBackwardKernel(const int* rowOf, int topK, const void* dPermuted, DType pType, int h, void* dx,
                                      DType dxType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t t = i / std::size_t(h), c = i % std::size_t(h);
        float sum = load(dx, dxType, i);
        for (int j = 0; j < topK; ++j) {
            const int row = rowOf[t * std::size_t(topK) + std::size_t(j)];
            if (row >= 0)
                sum += load(dPermuted, pType, std::size_t(row) * std::size_t(h) + c);
        }
        store(dx, dxType, i, sum);
    }
}

}  // namespace

void launchPermute(cudaStream_t stream, CachingAllocator& allocator, const RouterShape& shape, const Routing& routing,
                   ConstDevPtr x, int h, DevPtr permuted)
{
    const std::size_t rows = std::size_t(shape.experts) * std::size_t(shape.capacity), n = rows * std::size_t(h);
    if (n == 0)
        return;
    DeviceScratch<int> tokenOfRow(allocator, stream, routing.tokenOfRow, rows);
    permuteKernel<<<blocksFor(n), kThreads, 0, stream>>>(tokenOfRow.data, x.data, x.dtype, h, permuted.data,
                                                         permuted.dtype, n);
    launched("permute");
}

void launchCombine(cudaStream_t stream, CachingAllocator& allocator, const RouterShape& shape, const Routing& routing,
                   ConstDevPtr expertOut, int h, DevPtr out)
{
    const std::size_t slots = std::size_t(shape.tokens) * std::size_t(shape.topK);
    const std::size_t n = std::size_t(shape.tokens) * std::size_t(h);
    if (n == 0)
        return;
    DeviceScratch<int> rowOf(allocator, stream, routing.rowOf, slots);
    DeviceScratch<float> weightOf(allocator, stream, routing.weightOf, slots);
    combineKernel<<<blocksFor(n), kThreads, 0, stream>>>(rowOf.data, weightOf.data, shape.topK, expertOut.data,
                                                         expertOut.dtype, h, out.data, out.dtype, n);
    launched("combine");
}

void launchCombineBackward(cudaStream_t stream, CachingAllocator& allocator, const RouterShape& shape,
                           const Routing& routing, ConstDevPtr dOut, ConstDevPtr expertOut, int h, DevPtr dExpertOut,
                           float* dWeight)
{
    const std::size_t slots = std::size_t(shape.tokens) * std::size_t(shape.topK);
    const std::size_t rows = std::size_t(shape.experts) * std::size_t(shape.capacity), n = rows * std::size_t(h);
    if (slots == 0)
        return;
    DeviceScratch<int> rowOf(allocator, stream, routing.rowOf, slots),
        tokenOfRow(allocator, stream, routing.tokenOfRow, rows);
    DeviceScratch<float> weightOf(allocator, stream, routing.weightOf, slots),
        deviceWeight(allocator, stream, dWeight, slots);
    if (n > 0)
        combineBackwardRowsKernel<<<blocksFor(n), kThreads, 0, stream>>>(tokenOfRow.data, rowOf.data, weightOf.data,
                                                                         shape.topK, dOut.data, dOut.dtype, h,
                                                                         dExpertOut.data, dExpertOut.dtype, n);
    combineBackwardWeightsKernel<<<unsigned(slots), kThreads, 0, stream>>>(
        rowOf.data, shape.topK, dOut.data, dOut.dtype, expertOut.data, expertOut.dtype, h, deviceWeight.data);
    launched("combineBackward");
    check(cudaMemcpyAsync(dWeight, deviceWeight.data, slots * sizeof(float), cudaMemcpyDeviceToHost, stream),
          "combineBackward");
    check(cudaStreamSynchronize(stream), "combineBackward");
}

void launchPermuteBackward(cudaStream_t stream, CachingAllocator& allocator, const RouterShape& shape,
                           const Routing& routing, ConstDevPtr dPermuted, int h, DevPtr dx)
{
    const std::size_t slots = std::size_t(shape.tokens) * std::size_t(shape.topK);
    const std::size_t n = std::size_t(shape.tokens) * std::size_t(h);
    if (n == 0)
        return;
    DeviceScratch<int> rowOf(allocator, stream, routing.rowOf, slots);
    permuteBackwardKernel<<<blocksFor(n), kThreads, 0, stream>>>(rowOf.data, shape.topK, dPermuted.data,
                                                                 dPermuted.dtype, h, dx.data, dx.dtype, n);
    launched("permuteBackward");
}

}  // namespace meshbench::kernels::cuda
