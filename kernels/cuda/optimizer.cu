// Optimiser kernels of the CUDA backend: AdamW on fp32 master weights, and sums of squares (for the
// global gradient norm).

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/optimizer.h"
#include "kernels/elementwise_math.h"

#include <cmath>
#include <string>

namespace meshbench::kernels::cuda {
namespace {

// Megatron and llm.c keep fp32 master weights and moments: the parameters here are fp32, the
// gradients fp32 or bf16.
__global__ void adamwKernel(float* p, const void* grad, DType gradType, float* m, float* v, std::size_t n,
                            math::AdamWStep step)
{
    MESHBENCH_FOR_EACH(i, n) math::adamwUpdate(p[i], load(grad, gradType, i), m[i], v[i], step);
}

// Per-block partial sums in double, added into one double (atomicAdd on doubles: sm_60 on).
__global__ void sumSquaresKernel(const void* x, DType dtype, std::size_t n, double* total)
{
    __shared__ double partial[kThreads];
    double sum = 0;
    MESHBENCH_FOR_EACH(i, n)
    {
        const double value = load(x, dtype, i);
        sum += value * value;
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride)
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(total, partial[0]);
}

}  // namespace

double launchSumSquares(cudaStream_t stream, double* total, ConstDevPtr x, std::size_t n)
{
    check(cudaMemsetAsync(total, 0, sizeof(double), stream), "cudaMemset");
    if (n > 0)
        sumSquaresKernel<<<blocksFor(n), kThreads, 0, stream>>>(x.data, x.dtype, n, total);
    launched("sumSquares");
    double sum = 0;
    check(cudaMemcpyAsync(&sum, total, sizeof(double), cudaMemcpyDeviceToHost, stream), "sumSquares");
    check(cudaStreamSynchronize(stream), "sumSquares");
    return sum;
}

void launchAdamW(cudaStream_t stream, DevPtr param, ConstDevPtr grad, DevPtr m, DevPtr v, std::size_t n, float lr,
                 float beta1, float beta2, float eps, float weightDecay, int step, float gradScale)
{
    if (param.dtype != DType::F32 || m.dtype != DType::F32 || v.dtype != DType::F32)
        throw KernelError("cuda backend: adamw keeps fp32 master weights and moments, got " +
                          std::string(dtypeName(param.dtype)) + " parameters");
    if (step < 1)
        throw KernelError("cuda backend: adamw: step must be at least 1, got " + std::to_string(step));
    const float bc1 = float(1.0 - std::pow(double(beta1), step));
    const float bc2 = float(1.0 - std::pow(double(beta2), step));
    if (!(bc1 > 0.0f) || !(bc2 > 0.0f))
        throw KernelError("cuda backend: adamw: beta1 and beta2 must lie in [0, 1)");
    const math::AdamWStep constants{lr, beta1, beta2, eps, weightDecay, gradScale, bc1, bc2};
    if (n > 0)
        adamwKernel<<<blocksFor(n), kThreads, 0, stream>>>(static_cast<float*>(param.data), grad.data, grad.dtype,
                                                           static_cast<float*>(m.data), static_cast<float*>(v.data), n,
                                                           constants);
    launched("adamw");
}

}  // namespace meshbench::kernels::cuda
