// Normalisation kernels of the CUDA backend: RMSNorm (Zhang & Sennrich 2019) and LayerNorm (Ba et al.
// 2016), forward and backward, one block per row.

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/norms.h"

namespace meshbench::kernels::cuda {
namespace {

// One block per row: out = x rstd gamma, rstd = 1 / sqrt(mean(x^2) + eps) (Zhang & Sennrich 2019).
__global__ void rmsNormForwardKernel(const void* x, DType xType, const void* gamma, DType gType, int h, float eps,
                                     void* out, DType outType, float* rstd)
{
    const std::size_t row = std::size_t(blockIdx.x) * std::size_t(h);
    float squares = 0;
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x)) {
        const float v = load(x, xType, row + std::size_t(j));
        squares += v * v;
    }
    const float rs = 1.0f / sqrtf(blockSum(squares) / float(h) + eps);
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x))
        store(out, outType, row + std::size_t(j),
              load(x, xType, row + std::size_t(j)) * rs * load(gamma, gType, std::size_t(j)));
    if (threadIdx.x == 0)
        rstd[blockIdx.x] = rs;
}

// With xhat = x rstd and g = dOut gamma: dx = rstd (g - xhat mean(g xhat)); dGamma += dOut xhat.
__global__ void rmsNormBackwardKernel(const void* dOut, DType dType, const void* x, DType xType, const void* gamma,
                                      DType gType, const float* rstd, int h, void* dx, DType dxType, float* dGamma)
{
    const std::size_t row = std::size_t(blockIdx.x) * std::size_t(h);
    const float rs = rstd[blockIdx.x];
    float dot = 0;
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x)) {
        const std::size_t i = row + std::size_t(j);
        const float xhat = load(x, xType, i) * rs, dy = load(dOut, dType, i);
        dot += dy * load(gamma, gType, std::size_t(j)) * xhat;
        atomicAdd(dGamma + j, dy * xhat);
    }
    const float meanGX = blockSum(dot) / float(h);
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x)) {
        const std::size_t i = row + std::size_t(j);
        const float xhat = load(x, xType, i) * rs;
        store(dx, dxType, i, rs * (load(dOut, dType, i) * load(gamma, gType, std::size_t(j)) - xhat * meanGX));
    }
}

// One block per row; two passes for the statistics (mean, then the centred sum of squares), as the
// CPU backend: E[x^2] - mean^2 would cancel badly for rows with a large offset.
__global__ void layerNormForwardKernel(const void* x, DType xType, const void* gamma, DType gType, const void* beta,
                                       DType bType, int h, float eps, void* out, DType outType, float* mean,
                                       float* rstd)
{
    const std::size_t row = std::size_t(blockIdx.x) * std::size_t(h);
    float sum = 0;
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x))
        sum += load(x, xType, row + std::size_t(j));
    const float mu = blockSum(sum) / float(h);
    float squares = 0;
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x)) {
        const float c = load(x, xType, row + std::size_t(j)) - mu;
        squares += c * c;
    }
    const float rs = 1.0f / sqrtf(blockSum(squares) / float(h) + eps);
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x)) {
        const std::size_t i = row + std::size_t(j);
        store(out, outType, i,
              (load(x, xType, i) - mu) * rs * load(gamma, gType, std::size_t(j)) + load(beta, bType, std::size_t(j)));
    }
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
}

// Ba et al. 2016 through the mean and the variance: with xhat = (x - mean) rstd and g = dOut gamma,
// dx = rstd (g - mean(g) - xhat mean(g xhat)); dGamma += dOut xhat; dBeta += dOut.
__global__ void layerNormBackwardKernel(const void* dOut, DType dType, const void* x, DType xType, const void* gamma,
                                        DType gType, const float* mean, const float* rstd, int h, void* dx,
                                        DType dxType, float* dGamma, float* dBeta)
{
    const std::size_t row = std::size_t(blockIdx.x) * std::size_t(h);
    const float mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
    float g = 0, gx = 0;
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x)) {
        const std::size_t i = row + std::size_t(j);
        const float xhat = (load(x, xType, i) - mu) * rs, dy = load(dOut, dType, i);
        const float scaled = dy * load(gamma, gType, std::size_t(j));
        g += scaled;
        gx += scaled * xhat;
        atomicAdd(dGamma + j, dy * xhat);
        atomicAdd(dBeta + j, dy);
    }
    const float meanG = blockSum(g) / float(h), meanGX = blockSum(gx) / float(h);
    for (int j = int(threadIdx.x); j < h; j += int(blockDim.x)) {
        const std::size_t i = row + std::size_t(j);
        const float xhat = (load(x, xType, i) - mu) * rs;
        store(dx, dxType, i, rs * (load(dOut, dType, i) * load(gamma, gType, std::size_t(j)) - meanG - xhat * meanGX));
    }
}

}  // namespace

void launchLayerNormForward(cudaStream_t stream, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr beta, int T, int h,
                            float eps, DevPtr out, DevPtr mean, DevPtr rstd)
{
    requireF32(mean, "layerNormForward's mean");
    requireF32(rstd, "layerNormForward's rstd");
    if (T > 0)
        layerNormForwardKernel<<<unsigned(T), kThreads, 0, stream>>>(
            x.data, x.dtype, gamma.data, gamma.dtype, beta.data, beta.dtype, h, eps, out.data, out.dtype,
            static_cast<float*>(mean.data), static_cast<float*>(rstd.data));
    launched("layerNormForward");
}

void launchLayerNormBackward(cudaStream_t stream, ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr mean,
                             ConstDevPtr rstd, int T, int h, DevPtr dx, DevPtr dGamma, DevPtr dBeta)
{
    requireF32(dGamma, "layerNormBackward's gamma gradient");
    requireF32(dBeta, "layerNormBackward's beta gradient");
    if (T > 0)
        layerNormBackwardKernel<<<unsigned(T), kThreads, 0, stream>>>(
            dOut.data, dOut.dtype, x.data, x.dtype, gamma.data, gamma.dtype, static_cast<const float*>(mean.data),
            static_cast<const float*>(rstd.data), h, dx.data, dx.dtype, static_cast<float*>(dGamma.data),
            static_cast<float*>(dBeta.data));
    launched("layerNormBackward");
}

void launchRmsNormForward(cudaStream_t stream, ConstDevPtr x, ConstDevPtr gamma, int T, int h, float eps, DevPtr out,
                          DevPtr rstd)
{
    requireF32(rstd, "rmsNormForward's rstd");
    if (T > 0)
        rmsNormForwardKernel<<<unsigned(T), kThreads, 0, stream>>>(x.data, x.dtype, gamma.data, gamma.dtype, h, eps,
                                                                   out.data, out.dtype, static_cast<float*>(rstd.data));
    launched("rmsNormForward");
}

void launchRmsNormBackward(cudaStream_t stream, ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr rstd,
                           int T, int h, DevPtr dx, DevPtr dGamma)
{
    requireF32(dGamma, "rmsNormBackward's gamma gradient");
    if (T > 0)
        rmsNormBackwardKernel<<<unsigned(T), kThreads, 0, stream>>>(
            dOut.data, dOut.dtype, x.data, x.dtype, gamma.data, gamma.dtype, static_cast<const float*>(rstd.data), h,
            dx.data, dx.dtype, static_cast<float*>(dGamma.data));
    launched("rmsNormBackward");
}

}  // namespace meshbench::kernels::cuda
