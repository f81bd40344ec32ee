// The CUDA backend: device memory through a caching allocator, the elementwise kernels over
// kernels/elementwise_math.h (the same functions the CPU backend runs), both norms, the embedding,
// RoPE, the cross-entropy, the MoE permute and combine (the router itself works on the interface's
// host arrays, with the CPU backend's code), causal attention (on the tensor cores for bf16 with
// head dims 64 and 128, kernels/cuda/flash_attention; otherwise an online-softmax kernel that keeps
// no score row either), AdamW on fp32 master weights, sums of squares, GEMMs through cuBLASLt, and time
// marks as CUDA events on the one compute stream.

#include "kernels/caching_allocator.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/elementwise_math.h"
#include "kernels/shared_library.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace meshbench::kernels::cuda {
namespace {

void check(cudaError_t status, const char* what)
{
    if (status != cudaSuccess)
        throw KernelError(std::string("cuda backend: ") + what + ": " + cudaGetErrorString(status));
}

void check(cublasStatus_t status, const char* what)
{
    if (status != CUBLAS_STATUS_SUCCESS)
        throw KernelError(std::string("cuda backend: ") + what + ": cuBLASLt status " + std::to_string(int(status)));
}

// The cuBLASLt entry points used, resolved from libcublasLt.so.13 once per process, so that the
// binaries start (and the CPU backend runs) where CUDA's libraries are not installed. cublasLt.h
// gives their types; nothing is linked.
struct CublasLt {
    bool loaded = false;
    std::string problem;  // why not, with the fix
    decltype(&cublasLtCreate) create = nullptr;
    decltype(&cublasLtDestroy) destroy = nullptr;
    decltype(&cublasLtMatmul) matmul = nullptr;
    decltype(&cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic = nullptr;
    decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
    decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
    decltype(&cublasLtMatmulDescSetAttribute) descSetAttribute = nullptr;
    decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
    decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
    decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute = nullptr;
    decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
    decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;

    static const CublasLt& process()
    {
        static const CublasLt library = load();
        return library;
    }

private:
    static CublasLt load()
    {
        constexpr const char* kName = "libcublasLt.so.13";
        CublasLt l;
        // The loader's path first; then where the CUDA toolkit installs it, for a machine whose
        // toolkit is not on that path.
        SharedLibrary library(std::vector<std::string>{kName, std::string("/usr/local/cuda/lib64/") + kName});
        if (!library.loaded()) {
            l.problem = std::string(kName) + " not found (" + library.loadError() +
                        "); install CUDA 13's cuBLASLt (the toolkit, or pip's nvidia-cublas) and put its lib folder "
                        "on LD_LIBRARY_PATH";
            return l;
        }
        library.resolve("cublasLtCreate", l.create);
        library.resolve("cublasLtDestroy", l.destroy);
        library.resolve("cublasLtMatmul", l.matmul);
        library.resolve("cublasLtMatmulAlgoGetHeuristic", l.algoGetHeuristic);
        library.resolve("cublasLtMatmulDescCreate", l.descCreate);
        library.resolve("cublasLtMatmulDescDestroy", l.descDestroy);
        library.resolve("cublasLtMatmulDescSetAttribute", l.descSetAttribute);
        library.resolve("cublasLtMatmulPreferenceCreate", l.preferenceCreate);
        library.resolve("cublasLtMatmulPreferenceDestroy", l.preferenceDestroy);
        library.resolve("cublasLtMatmulPreferenceSetAttribute", l.preferenceSetAttribute);
        library.resolve("cublasLtMatrixLayoutCreate", l.layoutCreate);
        library.resolve("cublasLtMatrixLayoutDestroy", l.layoutDestroy);
        if (!library.missing().empty()) {
            l.problem = std::string(kName) + " lacks " + library.missing() + "; install CUDA 13's cuBLASLt";
            return l;
        }
        library.keepLoaded();  // for the process: every backend calls into it until exit
        l.loaded = true;
        return l;
    }
};

const CublasLt& lt() { return CublasLt::process(); }

constexpr int kThreads = 256;

unsigned blocksFor(std::size_t n)
{
    const std::size_t blocks = (n + kThreads - 1) / kThreads;
    return unsigned(blocks < 65535u * 32u ? blocks : 65535u * 32u);
}

// Grid-stride loops: any n with the capped grid above.
#define MESHBENCH_FOR_EACH(i, n)                                                                                       \
    for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n);                                  \
         i += std::size_t(gridDim.x) * blockDim.x)

__device__ float load(const void* p, DType dtype, std::size_t i)
{
    return dtype == DType::F32 ? static_cast<const float*>(p)[i]
                               : __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__device__ void store(void* p, DType dtype, std::size_t i, float value)
{
    if (dtype == DType::F32)
        static_cast<float*>(p)[i] = value;
    else
        static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(value);
}

__global__ void convertKernel(const void* src, DType from, void* dst, DType to, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(dst, to, i, load(src, from, i));
}

__global__ void fillKernel(void* dst, DType dtype, float value, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(dst, dtype, i, value);
}

__global__ void addKernel(const void* x, DType xType, void* y, DType yType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(y, yType, i, load(y, yType, i) + load(x, xType, i));
}

__global__ void scaleKernel(void* x, DType dtype, float alpha, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(x, dtype, i, alpha * load(x, dtype, i));
}

__global__ void geluKernel(const void* x, DType xType, void* out, DType outType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(out, outType, i, math::gelu(load(x, xType, i)));
}

__global__ void geluBackwardKernel(const void* dOut, DType dType, const void* x, DType xType, void* dx, DType dxType,
                                   std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(dx, dxType, i, math::geluBackward(load(dOut, dType, i), load(x, xType, i)));
}

// x [T, 2f]: gate columns [0, f), up columns [f, 2f); out [T, f].
__global__ void swigluKernel(const void* x, DType xType, std::size_t f, void* out, DType outType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t t = i / f, j = i % f;
        store(out, outType, i, math::swiglu(load(x, xType, t * 2 * f + j), load(x, xType, t * 2 * f + f + j)));
    }
}

__global__ void swigluBackwardKernel(const void* dOut, DType dType, const void* x, DType xType, std::size_t f, void* dx,
                                     DType dxType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t t = i / f, j = i % f;
        const math::SwigluGradient g = math::swigluBackward(load(dOut, dType, i), load(x, xType, t * 2 * f + j),
                                                            load(x, xType, t * 2 * f + f + j));
        store(dx, dxType, t * 2 * f + j, g.gate);
        store(dx, dxType, t * 2 * f + f + j, g.up);
    }
}

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

// Causal attention with grouped query heads, one warp per query row (b, head, i): an online softmax
// over keys 0..i (Milakov & Gimelshein 2018; FlashAttention's forward without its tiles), each lane
// holding headDim / 32 dimensions of q and of the output, so no score row is ever stored. Saves
// lse = max + log(sum) per row [B, H, S]. The simple form: correct for any shape, far from the
// tensor cores' speed.
constexpr int kWarp = 32;
constexpr int kMaxDimsPerLane = 8;  // head dimensions up to 256

__device__ float warpSum(float value)
{
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

// The dot product of this lane's dimensions (`mine`, lane + 32 d) with the row at `base`, summed over
// the warp: every lane gets it.
__device__ float warpDot(const float (&mine)[kMaxDimsPerLane], const void* row, DType dtype, std::size_t base,
                         int headDim)
{
    const int lane = int(threadIdx.x % kWarp);
    float partial = 0;
    for (int d = 0; d < kMaxDimsPerLane; ++d) {
        const int dim = lane + d * kWarp;
        if (dim < headDim)
            partial += mine[d] * load(row, dtype, base + std::size_t(dim));
    }
    return warpSum(partial);
}

struct AttentionIndex {
    AttentionShape shape;
    __device__ std::size_t q(int b, int i, int head) const
    {
        return ((std::size_t(b) * std::size_t(shape.seq) + std::size_t(i)) * std::size_t(shape.heads) +
                std::size_t(head)) *
               std::size_t(shape.headDim);
    }
    __device__ std::size_t kv(int b, int j, int kvHead) const
    {
        return ((std::size_t(b) * std::size_t(shape.seq) + std::size_t(j)) * std::size_t(shape.kvHeads) +
                std::size_t(kvHead)) *
               std::size_t(shape.headDim);
    }
    __device__ std::size_t lse(int b, int head, int i) const
    {
        return (std::size_t(b) * std::size_t(shape.heads) + std::size_t(head)) * std::size_t(shape.seq) +
               std::size_t(i);
    }
};

// The query row of this thread's warp, and the thread's lane in it.
struct WarpRow {
    int lane, b, i, head, kvHead;
};

__device__ bool warpRow(const AttentionShape& s, WarpRow& row)
{
    const std::size_t index = std::size_t(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    if (index >= std::size_t(s.batch) * std::size_t(s.heads) * std::size_t(s.seq))
        return false;
    row.lane = int(threadIdx.x % kWarp);
    row.i = int(index % std::size_t(s.seq));
    row.head = int(index / std::size_t(s.seq) % std::size_t(s.heads));
    row.b = int(index / (std::size_t(s.seq) * std::size_t(s.heads)));
    row.kvHead = row.head / (s.heads / s.kvHeads);
    return true;
}

__global__ void attentionForwardKernel(AttentionIndex index, const void* q, const void* k, const void* v, DType dtype,
                                       void* out, DType outType, float* lse)
{
    const AttentionShape& s = index.shape;
    WarpRow row{};
    if (!warpRow(s, row))
        return;
    const int lane = row.lane, i = row.i, head = row.head, b = row.b, kvHead = row.kvHead;
    const float scale = 1.0f / sqrtf(float(s.headDim));
    float qd[kMaxDimsPerLane], acc[kMaxDimsPerLane];
    const int dims = (s.headDim + kWarp - 1) / kWarp;
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        qd[d] = dim < s.headDim ? load(q, dtype, index.q(b, i, head) + std::size_t(dim)) : 0.0f;
        acc[d] = 0;
    }
    float best = -INFINITY, sum = 0;
    for (int j = 0; j <= i; ++j) {
        const float score = warpDot(qd, k, dtype, index.kv(b, j, kvHead), s.headDim) * scale;
        const float next = fmaxf(best, score), correction = expf(best - next), p = expf(score - next);
        sum = sum * correction + p;
        for (int d = 0; d < dims; ++d) {
            const int dim = lane + d * kWarp;
            acc[d] = acc[d] * correction +
                     (dim < s.headDim ? p * load(v, dtype, index.kv(b, j, kvHead) + std::size_t(dim)) : 0.0f);
        }
        best = next;
    }
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        if (dim < s.headDim)
            store(out, outType, index.q(b, i, head) + std::size_t(dim), acc[d] / sum);
    }
    if (lane == 0)
        lse[index.lse(b, head, i)] = best + logf(sum);
}

// The backward (FlashAttention's Alg. 2 without tiles), in two passes with no atomics, so that it is
// deterministic: P is recomputed from q, k and lse; with Di = dO_i . O_i, dS_ij = P_ij (dO_i . v_j -
// Di). One warp per query row writes dq_i = scale sum_j dS_ij k_j and Di; then one warp per key row
// (of a kv head) writes dk_j = scale sum dS_ij q_i and dv_j = sum P_ij dO_i over the rows i >= j of
// every query head that reads it.
__global__ void attentionBackwardQueryKernel(AttentionIndex index, const void* dOut, const void* q, const void* k,
                                             const void* v, const void* out, DType dtype, const float* lse, void* dq,
                                             DType dqType, float* rowDots)
{
    const AttentionShape& s = index.shape;
    WarpRow row{};
    if (!warpRow(s, row))
        return;
    const int lane = row.lane, i = row.i, head = row.head, b = row.b, kvHead = row.kvHead;
    const float scale = 1.0f / sqrtf(float(s.headDim));
    const int dims = (s.headDim + kWarp - 1) / kWarp;
    float qd[kMaxDimsPerLane], dod[kMaxDimsPerLane], dqd[kMaxDimsPerLane];
    float di = 0;
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        const bool inside = dim < s.headDim;
        const std::size_t at = index.q(b, i, head) + std::size_t(dim);
        qd[d] = inside ? load(q, dtype, at) : 0.0f;
        dod[d] = inside ? load(dOut, dtype, at) : 0.0f;
        di += inside ? dod[d] * load(out, dtype, at) : 0.0f;
        dqd[d] = 0;
    }
    di = warpSum(di);
    const float rowLse = lse[index.lse(b, head, i)];
    for (int j = 0; j <= i; ++j) {
        const std::size_t base = index.kv(b, j, kvHead);
        const float ds = expf(warpDot(qd, k, dtype, base, s.headDim) * scale - rowLse) *
                         (warpDot(dod, v, dtype, base, s.headDim) - di);
        for (int d = 0; d < dims; ++d) {
            const int dim = lane + d * kWarp;
            if (dim < s.headDim)
                dqd[d] += ds * scale * load(k, dtype, base + std::size_t(dim));
        }
    }
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        if (dim < s.headDim)
            store(dq, dqType, index.q(b, i, head) + std::size_t(dim), dqd[d]);
    }
    if (lane == 0)
        rowDots[index.lse(b, head, i)] = di;
}

__global__ void attentionBackwardKeyKernel(AttentionIndex index, const void* dOut, const void* q, const void* k,
                                           const void* v, DType dtype, const float* lse, const float* rowDots, void* dk,
                                           void* dv, DType gradType)
{
    const AttentionShape& s = index.shape;
    const std::size_t warp = std::size_t(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    if (warp >= std::size_t(s.batch) * std::size_t(s.kvHeads) * std::size_t(s.seq))
        return;
    const int lane = int(threadIdx.x % kWarp), j = int(warp % std::size_t(s.seq));
    const int kvHead = int(warp / std::size_t(s.seq) % std::size_t(s.kvHeads));
    const int b = int(warp / (std::size_t(s.seq) * std::size_t(s.kvHeads)));
    const float scale = 1.0f / sqrtf(float(s.headDim));
    const int dims = (s.headDim + kWarp - 1) / kWarp, group = s.heads / s.kvHeads;
    const std::size_t base = index.kv(b, j, kvHead);
    float kd[kMaxDimsPerLane], vd[kMaxDimsPerLane], dkd[kMaxDimsPerLane], dvd[kMaxDimsPerLane];
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        const bool inside = dim < s.headDim;
        kd[d] = inside ? load(k, dtype, base + std::size_t(dim)) : 0.0f;
        vd[d] = inside ? load(v, dtype, base + std::size_t(dim)) : 0.0f;
        dkd[d] = dvd[d] = 0;
    }
    for (int head = kvHead * group; head < (kvHead + 1) * group; ++head)
        for (int i = j; i < s.seq; ++i) {
            const std::size_t at = index.q(b, i, head);
            const float p = expf(warpDot(kd, q, dtype, at, s.headDim) * scale - lse[index.lse(b, head, i)]);
            const float ds = p * (warpDot(vd, dOut, dtype, at, s.headDim) - rowDots[index.lse(b, head, i)]);
            for (int d = 0; d < dims; ++d) {
                const int dim = lane + d * kWarp;
                if (dim < s.headDim) {
                    dkd[d] += ds * scale * load(q, dtype, at + std::size_t(dim));
                    dvd[d] += p * load(dOut, dtype, at + std::size_t(dim));
                }
            }
        }
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        if (dim < s.headDim) {
            store(dk, gradType, base + std::size_t(dim), dkd[d]);
            store(dv, gradType, base + std::size_t(dim), dvd[d]);
        }
    }
}

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

// Half-split rotary pairs (i, i + d/2) by the angle table of position t mod seq (cosines and signed
// sines [positions, d/2], computed on the host in double as the CPU backend does).
__global__ void ropeKernel(void* x, DType dtype, int seq, int heads, int headDim, const float* cosines,
                           const float* sines, std::size_t n)
{
    const int half = headDim / 2;
    MESHBENCH_FOR_EACH(k, n)
    {
        const std::size_t i = k % std::size_t(half), rowIndex = k / std::size_t(half);
        const std::size_t t = rowIndex / std::size_t(heads);
        const std::size_t at = rowIndex * std::size_t(headDim) + i,
                          table = (t % std::size_t(seq)) * std::size_t(half) + i;
        const float a = load(x, dtype, at), b = load(x, dtype, at + std::size_t(half));
        store(x, dtype, at, a * cosines[table] - b * sines[table]);
        store(x, dtype, at + std::size_t(half), b * cosines[table] + a * sines[table]);
    }
}

cudaDataType_t cudaTypeOf(DType dtype) { return dtype == DType::F32 ? CUDA_R_32F : CUDA_R_16BF; }

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int device)
        : m_allocator(
              [](std::size_t bytes) -> void* {
                  void* p = nullptr;
                  if (cudaMalloc(&p, bytes) == cudaSuccess)
                      return p;
                  cudaGetLastError();  // out of memory is answered by the allocator, not left pending
                  return nullptr;
              },
              [](void* p) { cudaFree(p); })
    {
        if (!lt().loaded)
            throw KernelError("cuda backend: " + lt().problem);
        check(cudaSetDevice(device), "cudaSetDevice");
        check(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
        check(lt().create(&m_lt), "cublasLtCreate");
        check(cudaMalloc(&m_workspace, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
        check(cudaMalloc(&m_scalar, sizeof(double)), "cudaMalloc");
    }
    ~CudaBackend() override
    {
        cudaStreamSynchronize(m_stream);
        for (cudaEvent_t event : m_marks)
            cudaEventDestroy(event);
        for (const auto& [key, plan] : m_gemmPlans) {
            lt().layoutDestroy(plan.out);
            lt().layoutDestroy(plan.second);
            lt().layoutDestroy(plan.first);
            lt().descDestroy(plan.op);
        }
        m_allocator.emptyCache();
        cudaFree(m_scalar);
        cudaFree(m_workspace);
        lt().destroy(m_lt);
        cudaStreamDestroy(m_stream);
    }

    cudaStream_t stream() const { return m_stream; }

    std::string_view name() const override { return "cuda"; }

    DevPtr allocate(std::size_t elements, DType dtype) override
    {
        const std::size_t bytes = elements * dtypeSize(dtype);
        void* p = m_allocator.allocate(bytes);
        if (p)
            check(cudaMemsetAsync(p, 0, bytes, m_stream), "cudaMemset");
        return {p, dtype};
    }
    // The block goes back to the cache at once: the work queued on it runs first, in stream order,
    // before any later user of the block.
    void release(DevPtr p) override { m_allocator.release(p.data); }
    // Nothing to move for n == 0: a launch of zero blocks fails, and its error, left pending, would
    // be reported by the next unrelated check under that operation's name.
    void upload(DevPtr dst, const float* src, std::size_t n) override
    {
        if (n == 0)
            return;
        if (dst.dtype == DType::F32) {
            check(cudaMemcpyAsync(dst.data, src, n * sizeof(float), cudaMemcpyHostToDevice, m_stream), "upload");
            check(cudaStreamSynchronize(m_stream), "upload");
            return;
        }
        // Written over at once: no zero-fill.
        const DevPtr staging{m_allocator.allocate(n * sizeof(float)), DType::F32};
        check(cudaMemcpyAsync(staging.data, src, n * sizeof(float), cudaMemcpyHostToDevice, m_stream), "upload");
        convertKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(staging.data, DType::F32, dst.data, dst.dtype, n);
        launched("upload");
        check(cudaStreamSynchronize(m_stream), "upload");
        release(staging);
    }
    void download(float* dst, ConstDevPtr src, std::size_t n) override
    {
        if (n == 0)
            return;
        if (src.dtype == DType::F32) {
            check(cudaMemcpyAsync(dst, src.data, n * sizeof(float), cudaMemcpyDeviceToHost, m_stream), "download");
            check(cudaStreamSynchronize(m_stream), "download");
            return;
        }
        const DevPtr staging{m_allocator.allocate(n * sizeof(float)), DType::F32};
        convertKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(src.data, src.dtype, staging.data, DType::F32, n);
        launched("download");
        check(cudaMemcpyAsync(dst, staging.data, n * sizeof(float), cudaMemcpyDeviceToHost, m_stream), "download");
        check(cudaStreamSynchronize(m_stream), "download");
        release(staging);
    }
    bool hostAddressable() const override { return false; }
    void copyToHost(void* dst, ConstDevPtr src, std::size_t n) override
    {
        if (n == 0)
            return;
        check(cudaMemcpyAsync(dst, src.data, n * dtypeSize(src.dtype), cudaMemcpyDeviceToHost, m_stream), "copyToHost");
        check(cudaStreamSynchronize(m_stream), "copyToHost");
    }
    void copyFromHost(DevPtr dst, const void* src, std::size_t n) override
    {
        if (n == 0)
            return;
        check(cudaMemcpyAsync(dst.data, src, n * dtypeSize(dst.dtype), cudaMemcpyHostToDevice, m_stream),
              "copyFromHost");
        check(cudaStreamSynchronize(m_stream), "copyFromHost");
    }
    void synchronize() override { check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize"); }
    TimeMark markTime() override
    {
        if (m_markCount == m_marks.size()) {
            cudaEvent_t event = nullptr;
            check(cudaEventCreate(&event), "cudaEventCreate");
            m_marks.push_back(event);
        }
        check(cudaEventRecord(m_marks[m_markCount], m_stream), "cudaEventRecord");
        return TimeMark(m_markCount++);
    }
    double secondsBetween(TimeMark from, TimeMark to) override
    {
        if (from >= m_markCount || to >= m_markCount)
            throw KernelError("cuda backend: a time mark that was forgotten");
        check(cudaEventSynchronize(m_marks[to]), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, m_marks[from], m_marks[to]), "cudaEventElapsedTime");
        return double(ms) * 1e-3;
    }
    void forgetTimeMarks() override { m_markCount = 0; }
    DeviceMemory deviceMemory() override
    {
        const CachingAllocator::Stats stats = m_allocator.stats();
        std::size_t free = 0, total = 0;
        check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        return {stats.inUseBytes, stats.reservedBytes, stats.peakReservedBytes, std::int64_t(total - free),
                std::int64_t(total)};
    }
    void fill(DevPtr dst, float value, std::size_t n) override
    {
        if (n > 0)
            fillKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(dst.data, dst.dtype, value, n);
        launched("fill");
    }
    void copy(DevPtr dst, ConstDevPtr src, std::size_t n) override
    {
        if (n == 0)
            return;
        if (dst.dtype == src.dtype)
            check(cudaMemcpyAsync(dst.data, src.data, n * dtypeSize(dst.dtype), cudaMemcpyDeviceToDevice, m_stream),
                  "copy");
        else
            convertKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(src.data, src.dtype, dst.data, dst.dtype, n);
        launched("copy");
    }

    void gemm(bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A, int lda, ConstDevPtr B,
              int ldb, float beta, DevPtr C, int ldc) override
    {
        const GemmPlan& plan = gemmPlan({transA, transB, M, N, K, lda, ldb, ldc, A.dtype, B.dtype, C.dtype,
                                         alignmentOf(A.data), alignmentOf(B.data), alignmentOf(C.data)});
        check(plan.found
                  ? lt().matmul(m_lt, plan.op, &alpha, B.data, plan.first, A.data, plan.second, &beta, C.data, plan.out,
                                C.data, plan.out, &plan.heuristic.algo, m_workspace, kWorkspaceBytes, m_stream)
                  : CUBLAS_STATUS_NOT_SUPPORTED,
              "cublasLtMatmul");
    }

    void add(ConstDevPtr x, DevPtr y, std::size_t n) override
    {
        if (n > 0)
            addKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(x.data, x.dtype, y.data, y.dtype, n);
        launched("add");
    }
    void scale(DevPtr x, float alpha, std::size_t n) override
    {
        if (n > 0)
            scaleKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(x.data, x.dtype, alpha, n);
        launched("scale");
    }

    void embeddingForward(const int* ids, int T, ConstDevPtr table, int h, DevPtr out) override
    {
        const std::size_t n = std::size_t(T) * std::size_t(h);
        if (n == 0)
            return;
        DeviceScratch<int> deviceIds(*this, ids, std::size_t(T));
        embeddingForwardKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(deviceIds.data, table.data, table.dtype, h,
                                                                        out.data, out.dtype, n);
        launched("embeddingForward");
    }
    void embeddingBackward(const int* ids, int T, ConstDevPtr dOut, int h, DevPtr dTable) override
    {
        const std::size_t n = std::size_t(T) * std::size_t(h);
        if (n == 0)
            return;
        requireF32(dTable, "embeddingBackward's table gradient");
        DeviceScratch<int> deviceIds(*this, ids, std::size_t(T));
        embeddingBackwardKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(deviceIds.data, dOut.data, dOut.dtype, h,
                                                                         static_cast<float*>(dTable.data), n);
        launched("embeddingBackward");
    }
    void layerNormForward(ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr beta, int T, int h, float eps, DevPtr out,
                          DevPtr mean, DevPtr rstd) override
    {
        requireF32(mean, "layerNormForward's mean");
        requireF32(rstd, "layerNormForward's rstd");
        if (T > 0)
            layerNormForwardKernel<<<unsigned(T), kThreads, 0, m_stream>>>(
                x.data, x.dtype, gamma.data, gamma.dtype, beta.data, beta.dtype, h, eps, out.data, out.dtype,
                static_cast<float*>(mean.data), static_cast<float*>(rstd.data));
        launched("layerNormForward");
    }
    void layerNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr mean, ConstDevPtr rstd,
                           int T, int h, DevPtr dx, DevPtr dGamma, DevPtr dBeta) override
    {
        requireF32(dGamma, "layerNormBackward's gamma gradient");
        requireF32(dBeta, "layerNormBackward's beta gradient");
        if (T > 0)
            layerNormBackwardKernel<<<unsigned(T), kThreads, 0, m_stream>>>(
                dOut.data, dOut.dtype, x.data, x.dtype, gamma.data, gamma.dtype, static_cast<const float*>(mean.data),
                static_cast<const float*>(rstd.data), h, dx.data, dx.dtype, static_cast<float*>(dGamma.data),
                static_cast<float*>(dBeta.data));
        launched("layerNormBackward");
    }
    void rmsNormForward(ConstDevPtr x, ConstDevPtr gamma, int T, int h, float eps, DevPtr out, DevPtr rstd) override
    {
        requireF32(rstd, "rmsNormForward's rstd");
        if (T > 0)
            rmsNormForwardKernel<<<unsigned(T), kThreads, 0, m_stream>>>(
                x.data, x.dtype, gamma.data, gamma.dtype, h, eps, out.data, out.dtype, static_cast<float*>(rstd.data));
        launched("rmsNormForward");
    }
    void rmsNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr rstd, int T, int h, DevPtr dx,
                         DevPtr dGamma) override
    {
        requireF32(dGamma, "rmsNormBackward's gamma gradient");
        if (T > 0)
            rmsNormBackwardKernel<<<unsigned(T), kThreads, 0, m_stream>>>(
                dOut.data, dOut.dtype, x.data, x.dtype, gamma.data, gamma.dtype, static_cast<const float*>(rstd.data),
                h, dx.data, dx.dtype, static_cast<float*>(dGamma.data));
        launched("rmsNormBackward");
    }

    void geluForward(ConstDevPtr x, DevPtr out, std::size_t n) override
    {
        if (n > 0)
            geluKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(x.data, x.dtype, out.data, out.dtype, n);
        launched("geluForward");
    }
    void geluBackward(ConstDevPtr dOut, ConstDevPtr x, DevPtr dx, std::size_t n) override
    {
        if (n > 0)
            geluBackwardKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(dOut.data, dOut.dtype, x.data, x.dtype, dx.data,
                                                                        dx.dtype, n);
        launched("geluBackward");
    }
    void swigluForward(ConstDevPtr x, int T, int f, DevPtr out) override
    {
        const std::size_t n = std::size_t(T) * std::size_t(f);
        if (n > 0)
            swigluKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(x.data, x.dtype, std::size_t(f), out.data, out.dtype,
                                                                  n);
        launched("swigluForward");
    }
    void swigluBackward(ConstDevPtr dOut, ConstDevPtr x, int T, int f, DevPtr dx) override
    {
        const std::size_t n = std::size_t(T) * std::size_t(f);
        if (n > 0)
            swigluBackwardKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(dOut.data, dOut.dtype, x.data, x.dtype,
                                                                          std::size_t(f), dx.data, dx.dtype, n);
        launched("swigluBackward");
    }

    void rope(DevPtr x, int tokens, int seq, int heads, int headDim, float base, bool inverse) override
    {
        if (headDim % 2 != 0)
            throw KernelError("cuda backend: rope needs an even head dimension, got " + std::to_string(headDim));
        const int half = headDim / 2, positions = std::min(seq, tokens);
        if (positions <= 0 || heads <= 0 || half == 0)
            return;
        // The CPU backend's table, bit for bit: the angles in double, then fp32 cosines and sines.
        std::vector<float> cosines(std::size_t(positions) * std::size_t(half)), sines(cosines.size());
        for (int p = 0; p < positions; ++p)
            for (int i = 0; i < half; ++i) {
                const double angle = p * std::pow(double(base), -2.0 * i / headDim);
                cosines[std::size_t(p) * std::size_t(half) + std::size_t(i)] = float(std::cos(angle));
                sines[std::size_t(p) * std::size_t(half) + std::size_t(i)] =
                    float(inverse ? -std::sin(angle) : std::sin(angle));
            }
        DeviceScratch<float> deviceCos(*this, cosines.data(), cosines.size()),
            deviceSin(*this, sines.data(), sines.size());
        const std::size_t n = std::size_t(tokens) * std::size_t(heads) * std::size_t(half);
        ropeKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(x.data, x.dtype, seq, heads, headDim, deviceCos.data,
                                                            deviceSin.data, n);
        launched("rope");
    }
    void attentionForward(const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, DevPtr out,
                          DevPtr lse) override
    {
        checkAttention(shape, q, k, v, "attentionForward");
        requireF32(lse, "attentionForward's lse");
        if (std::size_t(shape.batch) * std::size_t(shape.heads) * std::size_t(shape.seq) == 0)
            return;
        // The tensor cores where the kernel is built for the shape and its 16-byte loads line up.
        const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
        if (flashAttentionSupports(shape, q.dtype) && out.dtype == DType::BF16 && aligned(q.data) && aligned(k.data) &&
            aligned(v.data) && aligned(out.data)) {
            flashAttentionForward(shape, q.data, k.data, v.data, out.data, static_cast<float*>(lse.data), m_stream);
            launched("attentionForward (tensor cores)");
            return;
        }
        const std::size_t rows = std::size_t(shape.batch) * std::size_t(shape.heads) * std::size_t(shape.seq);
        const unsigned warpsPerBlock = kThreads / kWarp;
        attentionForwardKernel<<<unsigned((rows + warpsPerBlock - 1) / warpsPerBlock), kThreads, 0, m_stream>>>(
            AttentionIndex{shape}, q.data, k.data, v.data, q.dtype, out.data, out.dtype, static_cast<float*>(lse.data));
        launched("attentionForward");
    }
    void attentionBackward(const AttentionShape& shape, ConstDevPtr dOut, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v,
                           ConstDevPtr out, ConstDevPtr lse, DevPtr dq, DevPtr dk, DevPtr dv) override
    {
        checkAttention(shape, q, k, v, "attentionBackward");
        if (dOut.dtype != q.dtype || out.dtype != q.dtype)
            throw KernelError("cuda backend: attentionBackward: dOut and out must have q's dtype");
        requireF32(lse, "attentionBackward's lse");
        if (std::size_t(shape.batch) * std::size_t(shape.heads) * std::size_t(shape.seq) == 0)
            return;
        if (dk.dtype != dv.dtype)
            throw KernelError("cuda backend: attentionBackward: dk and dv must share a dtype");
        const std::size_t rows = std::size_t(shape.batch) * std::size_t(shape.heads) * std::size_t(shape.seq);
        const std::size_t keyRows = rows / std::size_t(shape.heads) * std::size_t(shape.kvHeads);
        const DevPtr rowDots = allocate(rows, DType::F32);
        const unsigned warpsPerBlock = kThreads / kWarp;
        attentionBackwardQueryKernel<<<unsigned((rows + warpsPerBlock - 1) / warpsPerBlock), kThreads, 0, m_stream>>>(
            AttentionIndex{shape}, dOut.data, q.data, k.data, v.data, out.data, q.dtype,
            static_cast<const float*>(lse.data), dq.data, dq.dtype, static_cast<float*>(rowDots.data));
        launched("attentionBackward (queries)");
        attentionBackwardKeyKernel<<<unsigned((keyRows + warpsPerBlock - 1) / warpsPerBlock), kThreads, 0, m_stream>>>(
            AttentionIndex{shape}, dOut.data, q.data, k.data, v.data, q.dtype, static_cast<const float*>(lse.data),
            static_cast<const float*>(rowDots.data), dk.data, dv.data, dk.dtype);
        launched("attentionBackward (keys)");
        release(rowDots);
    }
    double crossEntropy(ConstDevPtr logits, const int* targets, int T, int V, float gradScale, DevPtr dLogits) override
    {
        // Every target checked before anything is written: dLogits may alias logits.
        for (int t = 0; t < T; ++t)
            if (targets[t] < 0 || targets[t] >= V)
                throw KernelError("cuda backend: crossEntropy: target " + std::to_string(targets[t]) + " of token " +
                                  std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
        if (T <= 0)
            return 0;
        DeviceScratch<int> deviceTargets(*this, targets, std::size_t(T));
        check(cudaMemsetAsync(m_scalar, 0, sizeof(double), m_stream), "cudaMemset");
        crossEntropyKernel<<<unsigned(T), kThreads, 0, m_stream>>>(logits.data, logits.dtype, deviceTargets.data, V,
                                                                   gradScale, dLogits.data, dLogits.dtype, m_scalar);
        launched("crossEntropy");
        double loss = 0;
        check(cudaMemcpyAsync(&loss, m_scalar, sizeof(double), cudaMemcpyDeviceToHost, m_stream), "crossEntropy");
        check(cudaStreamSynchronize(m_stream), "crossEntropy");
        return loss;
    }
    // The router's softmax, top-k, capacity and load-balancing loss work on host arrays (the
    // interface's routing metadata): the CPU backend's code, shared.
    void route(const RouterShape& shape, const float* logits, const Routing& routing) override
    {
        m_host.route(shape, logits, routing);
    }
    double auxLoss(const RouterShape& shape, const Routing& routing, float coef, float* dLogits) override
    {
        return m_host.auxLoss(shape, routing, coef, dLogits);
    }
    void routerBackward(const RouterShape& shape, const Routing& routing, const float* dWeight, float* dLogits) override
    {
        m_host.routerBackward(shape, routing, dWeight, dLogits);
    }
    void permute(const RouterShape& shape, const Routing& routing, ConstDevPtr x, int h, DevPtr permuted) override
    {
        const std::size_t rows = std::size_t(shape.experts) * std::size_t(shape.capacity), n = rows * std::size_t(h);
        if (n == 0)
            return;
        DeviceScratch<int> tokenOfRow(*this, routing.tokenOfRow, rows);
        permuteKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(tokenOfRow.data, x.data, x.dtype, h, permuted.data,
                                                               permuted.dtype, n);
        launched("permute");
    }
    void combine(const RouterShape& shape, const Routing& routing, ConstDevPtr expertOut, int h, DevPtr out) override
    {
        const std::size_t slots = std::size_t(shape.tokens) * std::size_t(shape.topK);
        const std::size_t n = std::size_t(shape.tokens) * std::size_t(h);
        if (n == 0)
            return;
        DeviceScratch<int> rowOf(*this, routing.rowOf, slots);
        DeviceScratch<float> weightOf(*this, routing.weightOf, slots);
        combineKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(rowOf.data, weightOf.data, shape.topK, expertOut.data,
                                                               expertOut.dtype, h, out.data, out.dtype, n);
        launched("combine");
    }
    void combineBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dOut, ConstDevPtr expertOut,
                         int h, DevPtr dExpertOut, float* dWeight) override
    {
        const std::size_t slots = std::size_t(shape.tokens) * std::size_t(shape.topK);
        const std::size_t rows = std::size_t(shape.experts) * std::size_t(shape.capacity), n = rows * std::size_t(h);
        if (slots == 0)
            return;
        DeviceScratch<int> rowOf(*this, routing.rowOf, slots), tokenOfRow(*this, routing.tokenOfRow, rows);
        DeviceScratch<float> weightOf(*this, routing.weightOf, slots), deviceWeight(*this, dWeight, slots);
        if (n > 0)
            combineBackwardRowsKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(
                tokenOfRow.data, rowOf.data, weightOf.data, shape.topK, dOut.data, dOut.dtype, h, dExpertOut.data,
                dExpertOut.dtype, n);
        combineBackwardWeightsKernel<<<unsigned(slots), kThreads, 0, m_stream>>>(
            rowOf.data, shape.topK, dOut.data, dOut.dtype, expertOut.data, expertOut.dtype, h, deviceWeight.data);
        launched("combineBackward");
        check(cudaMemcpyAsync(dWeight, deviceWeight.data, slots * sizeof(float), cudaMemcpyDeviceToHost, m_stream),
              "combineBackward");
        check(cudaStreamSynchronize(m_stream), "combineBackward");
    }
    void permuteBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dPermuted, int h,
                         DevPtr dx) override
    {
        const std::size_t slots = std::size_t(shape.tokens) * std::size_t(shape.topK);
        const std::size_t n = std::size_t(shape.tokens) * std::size_t(h);
        if (n == 0)
            return;
        DeviceScratch<int> rowOf(*this, routing.rowOf, slots);
        permuteBackwardKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(rowOf.data, shape.topK, dPermuted.data,
                                                                       dPermuted.dtype, h, dx.data, dx.dtype, n);
        launched("permuteBackward");
    }

    double sumSquares(ConstDevPtr x, std::size_t n) override
    {
        check(cudaMemsetAsync(m_scalar, 0, sizeof(double), m_stream), "cudaMemset");
        if (n > 0)
            sumSquaresKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(x.data, x.dtype, n, m_scalar);
        launched("sumSquares");
        double total = 0;
        check(cudaMemcpyAsync(&total, m_scalar, sizeof(double), cudaMemcpyDeviceToHost, m_stream), "sumSquares");
        check(cudaStreamSynchronize(m_stream), "sumSquares");
        return total;
    }

    void adamw(DevPtr param, ConstDevPtr grad, DevPtr m, DevPtr v, std::size_t n, float lr, float beta1, float beta2,
               float eps, float weightDecay, int step, float gradScale) override
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
            adamwKernel<<<blocksFor(n), kThreads, 0, m_stream>>>(static_cast<float*>(param.data), grad.data, grad.dtype,
                                                                 static_cast<float*>(m.data),
                                                                 static_cast<float*>(v.data), n, constants);
        launched("adamw");
    }

private:
    static constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's, as Hopper's heuristics like

    // Host values copied to the device for one call, freed once the stream has used them.
    template <typename T>
    struct DeviceScratch {
        CudaBackend& backend;
        T* data = nullptr;
        DeviceScratch(CudaBackend& b, const T* host, std::size_t n) : backend(b)
        {
            data = static_cast<T*>(backend.m_allocator.allocate(n * sizeof(T)));
            if (n > 0)
                check(cudaMemcpyAsync(data, host, n * sizeof(T), cudaMemcpyHostToDevice, backend.m_stream),
                      "scratch upload");
        }
        // The copy from the caller's (pageable) memory has finished before the caller may reuse it;
        // the block goes back to the cache in stream order.
        ~DeviceScratch()
        {
            cudaStreamSynchronize(backend.m_stream);
            backend.m_allocator.release(data);
        }
        DeviceScratch(const DeviceScratch&) = delete;
        DeviceScratch& operator=(const DeviceScratch&) = delete;
    };

    // A GEMM's shape, and cuBLASLt's descriptors and algorithm for it, made once per shape: a
    // training step repeats a handful of shapes thousands of times.
    // cuBLASLt's heuristic assumes 256-byte aligned operands unless told otherwise; views into the
    // parameter buffer and TP/EP slices are less aligned, so the plan is made for what is passed.
    static std::uint32_t alignmentOf(const void* p)
    {
        const auto address = reinterpret_cast<std::uintptr_t>(p);
        const std::uintptr_t lowest = address & (~address + 1);
        return std::uint32_t(address == 0 || lowest > 256 ? 256 : lowest);
    }
    struct GemmKey {
        bool transA, transB;
        int M, N, K, lda, ldb, ldc;
        DType a, b, c;
        std::uint32_t alignA, alignB, alignC;
        bool operator<(const GemmKey& o) const
        {
            return std::tie(transA, transB, M, N, K, lda, ldb, ldc, a, b, c, alignA, alignB, alignC) <
                   std::tie(o.transA, o.transB, o.M, o.N, o.K, o.lda, o.ldb, o.ldc, o.a, o.b, o.c, o.alignA, o.alignB,
                            o.alignC);
        }
    };
    struct GemmPlan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
        cublasLtMatmulHeuristicResult_t heuristic{};
        bool found = false;
    };

    const GemmPlan& gemmPlan(const GemmKey& key)
    {
        if (const auto it = m_gemmPlans.find(key); it != m_gemmPlans.end())
            return it->second;
        // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt multiplies
        // B's and A's column-major views, with N and M swapped; fp32 accumulation for every dtype.
        GemmPlan plan;
        check(lt().descCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
        const cublasOperation_t opB = key.transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                opA = key.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
        check(lt().descSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)), "TRANSA");
        check(lt().descSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)), "TRANSB");
        const auto u = [](int v) { return uint64_t(v); };
        // The column-major shapes as stored: B is [N, K] (rows x cols) when transposed, else [K, N].
        check(lt().layoutCreate(&plan.first, cudaTypeOf(key.b), key.transB ? u(key.K) : u(key.N),
                                key.transB ? u(key.N) : u(key.K), key.ldb),
              "layout B");
        check(lt().layoutCreate(&plan.second, cudaTypeOf(key.a), key.transA ? u(key.M) : u(key.K),
                                key.transA ? u(key.K) : u(key.M), key.lda),
              "layout A");
        check(lt().layoutCreate(&plan.out, cudaTypeOf(key.c), u(key.N), u(key.M), key.ldc), "layout C");
        cublasLtMatmulPreference_t preference = nullptr;
        check(lt().preferenceCreate(&preference), "preference");
        const std::size_t workspace = kWorkspaceBytes;
        check(lt().preferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                          sizeof(workspace)),
              "workspace");
        // cuBLASLt's "A" and "B" are our B and A (the swap above); C and D are the same buffer.
        for (const auto& [attribute, alignment] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignB},
                                                   std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignA},
                                                   std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignC},
                                                   std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignC}})
            check(lt().preferenceSetAttribute(preference, attribute, &alignment, sizeof(alignment)), "alignment");
        int found = 0;
        const cublasStatus_t status = lt().algoGetHeuristic(m_lt, plan.op, plan.first, plan.second, plan.out, plan.out,
                                                            preference, 1, &plan.heuristic, &found);
        lt().preferenceDestroy(preference);
        plan.found = status == CUBLAS_STATUS_SUCCESS && found > 0;
        return m_gemmPlans.emplace(key, plan).first->second;
    }

    static void checkAttention(const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v,
                               const char* what)
    {
        if (shape.headDim > kWarp * kMaxDimsPerLane || shape.kvHeads <= 0 || shape.heads % shape.kvHeads != 0)
            throw KernelError(std::string("cuda backend: ") + what + ": head dimension " +
                              std::to_string(shape.headDim) + " (at most " + std::to_string(kWarp * kMaxDimsPerLane) +
                              ") or heads " + std::to_string(shape.heads) + " over kv heads " +
                              std::to_string(shape.kvHeads) + " not supported");
        if (k.dtype != q.dtype || v.dtype != q.dtype)
            throw KernelError(std::string("cuda backend: ") + what + ": q, k and v must share a dtype");
    }

    static void requireF32(ConstDevPtr p, const char* what)
    {
        if (p.dtype != DType::F32)
            throw KernelError(std::string("cuda backend: ") + what + " must be f32 (atomics accumulate in fp32), got " +
                              std::string(dtypeName(p.dtype)));
    }

    void launched(const char* what) { check(cudaGetLastError(), what); }

    CpuBackend m_host;  // the host-side routing
    CachingAllocator m_allocator;
    std::map<GemmKey, GemmPlan> m_gemmPlans;
    std::vector<cudaEvent_t> m_marks;  // time marks, reused after forgetTimeMarks
    std::size_t m_markCount = 0;
    cudaStream_t m_stream = nullptr;
    cublasLtHandle_t m_lt = nullptr;
    void* m_workspace = nullptr;
    double* m_scalar = nullptr;
};

}  // namespace

DeviceStatus probeDevice()
{
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0)
        return {false, "no CUDA device: no NVIDIA driver is installed"};
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess)
        return {false, std::string("no CUDA device: ") + cudaGetErrorString(status)};
    if (count == 0)
        return {false, "no CUDA device: the driver sees none"};
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, 0) != cudaSuccess)
        return {false, "no CUDA device: cannot read device 0's properties"};
    const std::string description = std::string(properties.name) + ", sm_" + std::to_string(properties.major) +
                                    std::to_string(properties.minor) + ", " +
                                    std::to_string(properties.totalGlobalMem >> 30) + " GiB";
    // The kernels are built for sm_90 (with compute_90 PTX for newer chips).
    if (properties.major < 9)
        return {false, description + ": this build's kernels need compute capability 9.0 (Hopper) or newer", count};
    if (!lt().loaded)
        return {false, description + ": " + lt().problem, count};
    return {true, description, count};
}

std::unique_ptr<Backend> makeBackend(int device) { return std::make_unique<CudaBackend>(device); }

std::string deviceIdentity(int device)
{
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device) != cudaSuccess)
        return "device " + std::to_string(device);
    std::string hex;
    for (char byte : properties.uuid.bytes) {
        const char digits[] = "0123456789abcdef";
        hex += digits[(static_cast<unsigned char>(byte) >> 4) & 15];
        hex += digits[static_cast<unsigned char>(byte) & 15];
    }
    return hex;
}

void* computeStream(Backend& backend) { return static_cast<CudaBackend&>(backend).stream(); }

}  // namespace meshbench::kernels::cuda
