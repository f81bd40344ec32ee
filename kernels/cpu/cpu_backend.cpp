#include "kernels/cpu/cpu_backend.h"
#include "kernels/elementwise_math.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

// Dense fp32 kernels of the CPU backend. Attention is in cpu_attention.cpp, MoE routing in
// cpu_moe.cpp. Loops are written so that the compiler can vectorise them (no calls through
// pointers, reductions split over independent lanes); GEMMs go to OpenBLAS.

namespace meshbench::kernels {

namespace {

constexpr std::size_t kAlignment = 64;

void requireDim(const char* kernel, const char* name, int value, int minimum)
{
    if (value < minimum)
        throw KernelError(std::string(kernel) + ": " + name + " must be at least " + std::to_string(minimum) +
                          ", got " + std::to_string(value));
}

std::size_t elements(int rows, int cols) { return std::size_t(rows) * std::size_t(cols); }

// Sum of term(0) + ... + term(n-1) over eight independent partial sums. A single float accumulator
// is a serial chain the compiler may not reorder without -ffast-math; eight lanes vectorise, and
// they also round better than one running sum (each lane adds n/8 terms).
template <typename Term>
inline float laneSum(std::size_t n, Term term)
{
    constexpr std::size_t kLanes = 8;
    float acc[kLanes] = {};
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (std::size_t j = 0; j < kLanes; ++j)
            acc[j] += term(i + j);
    float tail = 0.0f;
    for (; i < n; ++i)
        tail += term(i);
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

inline float rowMax(const float* x, std::size_t n)
{
    constexpr std::size_t kLanes = 8;
    float acc[kLanes];
    std::fill_n(acc, kLanes, -std::numeric_limits<float>::infinity());
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (std::size_t j = 0; j < kLanes; ++j)
            acc[j] = acc[j] < x[i + j] ? x[i + j] : acc[j];
    float best = *std::max_element(acc, acc + kLanes);
    for (; i < n; ++i)
        best = best < x[i] ? x[i] : best;
    return best;
}

}  // namespace

float* asF32(DevPtr p)
{
    if (p.dtype != DType::F32)
        throw KernelError("cpu backend: " + std::string(dtypeName(p.dtype)) +
                          " tensors are not supported, the CPU kernels are fp32 only");
    return static_cast<float*>(p.data);
}

const float* asF32(ConstDevPtr p)
{
    if (p.dtype != DType::F32)
        throw KernelError("cpu backend: " + std::string(dtypeName(p.dtype)) +
                          " tensors are not supported, the CPU kernels are fp32 only");
    return static_cast<const float*>(p.data);
}

CpuBackend::CpuBackend(int threads) { openblas_set_num_threads(std::max(1, threads)); }

// ---------------------------------------------------------------------------------------------
// Memory

DevPtr CpuBackend::allocate(std::size_t count, DType dtype)
{
    if (dtype != DType::F32)
        throw KernelError("cpu backend: cannot allocate " + std::string(dtypeName(dtype)) +
                          " tensors, the CPU kernels are fp32 only");
    const std::size_t size = dtypeSize(dtype);
    if (count > (std::numeric_limits<std::size_t>::max() - kAlignment) / size)
        throw KernelError("cpu backend: allocation of " + std::to_string(count) + " elements overflows");
    // aligned_alloc wants a multiple of the alignment; never ask for zero bytes.
    const std::size_t bytes = std::max<std::size_t>(1, (count * size + kAlignment - 1) / kAlignment) * kAlignment;
    void* data = std::aligned_alloc(kAlignment, bytes);
    if (data == nullptr)
        throw std::bad_alloc();
    std::memset(data, 0, bytes);
    return {data, dtype};
}

void CpuBackend::release(DevPtr p) { std::free(p.data); }

void CpuBackend::upload(DevPtr dst, const float* src, std::size_t count)
{
    float* d = asF32(dst);
    if (count > 0)
        std::memcpy(d, src, count * sizeof(float));
}

void CpuBackend::download(float* dst, ConstDevPtr src, std::size_t count)
{
    const float* s = asF32(src);
    if (count > 0)
        std::memcpy(dst, s, count * sizeof(float));
}

void CpuBackend::copyToHost(void* dst, ConstDevPtr src, std::size_t count)
{
    if (count > 0)
        std::memcpy(dst, src.data, count * dtypeSize(src.dtype));
}

void CpuBackend::copyFromHost(DevPtr dst, const void* src, std::size_t count)
{
    if (count > 0)
        std::memcpy(dst.data, src, count * dtypeSize(dst.dtype));
}

TimeMark CpuBackend::markTime()
{
    // The CPU's kernels have run when they return: the host clock is the device's.
    m_marks.push_back(std::chrono::steady_clock::now());
    return TimeMark(m_marks.size() - 1);
}

double CpuBackend::secondsBetween(TimeMark from, TimeMark to)
{
    return std::chrono::duration<double>(m_marks.at(to) - m_marks.at(from)).count();
}

void CpuBackend::fill(DevPtr dst, float value, std::size_t count) { std::fill_n(asF32(dst), count, value); }

void CpuBackend::copy(DevPtr dst, ConstDevPtr src, std::size_t count)
{
    float* d = asF32(dst);
    const float* s = asF32(src);
    if (count > 0)
        std::memmove(d, s, count * sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// GEMM and elementwise

void CpuBackend::gemm(bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A, int lda, ConstDevPtr B,
                      int ldb, float beta, DevPtr C, int ldc)
{
    const float* a = asF32(A);
    const float* b = asF32(B);
    float* c = asF32(C);
    requireDim("gemm", "M", M, 0);
    requireDim("gemm", "N", N, 0);
    requireDim("gemm", "K", K, 0);
    // Row-major leading dimensions are at least the stored row length (OpenBLAS would only print
    // a complaint and return).
    requireDim("gemm", "lda", lda, std::max(1, transA ? M : K));
    requireDim("gemm", "ldb", ldb, std::max(1, transB ? K : N));
    requireDim("gemm", "ldc", ldc, std::max(1, N));
    if (M == 0 || N == 0)
        return;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                a, lda, b, ldb, beta, c, ldc);
}

void CpuBackend::add(ConstDevPtr xPtr, DevPtr yPtr, std::size_t n)
{
    const float* x = asF32(xPtr);
    float* y = asF32(yPtr);
    for (std::size_t i = 0; i < n; ++i)
        y[i] += x[i];
}

void CpuBackend::scale(DevPtr xPtr, float alpha, std::size_t n)
{
    float* x = asF32(xPtr);
    for (std::size_t i = 0; i < n; ++i)
        x[i] *= alpha;
}

// ---------------------------------------------------------------------------------------------
// Embedding

void CpuBackend::embeddingForward(const int* ids, int T, ConstDevPtr tablePtr, int h, DevPtr outPtr)
{
    const float* table = asF32(tablePtr);
    float* out = asF32(outPtr);
    requireDim("embeddingForward", "T", T, 0);
    requireDim("embeddingForward", "h", h, 0);
    for (int t = 0; t < T; ++t)
        requireDim("embeddingForward", "token id", ids[t], 0);
    for (int t = 0; t < T; ++t)
        std::memcpy(out + elements(t, h), table + elements(ids[t], h), std::size_t(h) * sizeof(float));
}

void CpuBackend::embeddingBackward(const int* ids, int T, ConstDevPtr dOutPtr, int h, DevPtr dTablePtr)
{
    const float* dOut = asF32(dOutPtr);
    float* dTable = asF32(dTablePtr);
    requireDim("embeddingBackward", "T", T, 0);
    requireDim("embeddingBackward", "h", h, 0);
    for (int t = 0; t < T; ++t)
        requireDim("embeddingBackward", "token id", ids[t], 0);
    // Sequential over tokens, so repeated ids add up in order (no races, deterministic).
    for (int t = 0; t < T; ++t) {
        const float* src = dOut + elements(t, h);
        float* dst = dTable + elements(ids[t], h);
        for (int j = 0; j < h; ++j)
            dst[j] += src[j];
    }
}

// ---------------------------------------------------------------------------------------------
// Normalisation

void CpuBackend::layerNormForward(ConstDevPtr xPtr, ConstDevPtr gammaPtr, ConstDevPtr betaPtr, int T, int h, float eps,
                                  DevPtr outPtr, DevPtr meanPtr, DevPtr rstdPtr)
{
    const float* x = asF32(xPtr);
    const float* gamma = asF32(gammaPtr);
    const float* beta = asF32(betaPtr);
    float* out = asF32(outPtr);
    float* mean = asF32(meanPtr);
    float* rstd = asF32(rstdPtr);
    requireDim("layerNormForward", "T", T, 0);
    requireDim("layerNormForward", "h", h, 1);
    const std::size_t n = std::size_t(h);
    const float invH = 1.0f / float(h);
    for (int t = 0; t < T; ++t) {
        const float* row = x + elements(t, h);
        float* o = out + elements(t, h);
        // Two passes for the statistics (mean, then the centred sum of squares): the row is in L1
        // by then, and E[x^2] - mean^2 would cancel badly for rows with a large offset.
        const float mu = laneSum(n, [row](std::size_t j) { return row[j]; }) * invH;
        const float var = laneSum(n,
                                  [row, mu](std::size_t j) {
                                      const float c = row[j] - mu;
                                      return c * c;
                                  }) *
                          invH;
        const float rs = 1.0f / std::sqrt(var + eps);
        for (std::size_t j = 0; j < n; ++j)
            o[j] = (row[j] - mu) * rs * gamma[j] + beta[j];
        mean[t] = mu;
        rstd[t] = rs;
    }
}

void CpuBackend::layerNormBackward(ConstDevPtr dOutPtr, ConstDevPtr xPtr, ConstDevPtr gammaPtr, ConstDevPtr meanPtr,
                                   ConstDevPtr rstdPtr, int T, int h, DevPtr dxPtr, DevPtr dGammaPtr, DevPtr dBetaPtr)
{
    const float* dOut = asF32(dOutPtr);
    const float* x = asF32(xPtr);
    const float* gamma = asF32(gammaPtr);
    const float* mean = asF32(meanPtr);
    const float* rstd = asF32(rstdPtr);
    float* dx = asF32(dxPtr);
    float* dGamma = asF32(dGammaPtr);
    float* dBeta = asF32(dBetaPtr);
    requireDim("layerNormBackward", "T", T, 0);
    requireDim("layerNormBackward", "h", h, 1);
    const std::size_t n = std::size_t(h);
    const float invH = 1.0f / float(h);
    // With xhat = (x - mean) rstd and g = dOut * gamma (Ba et al. 2016, differentiated through the
    // mean and the variance):
    //   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dGamma += dOut xhat,  dBeta += dOut.
    for (int t = 0; t < T; ++t) {
        const float* dy = dOut + elements(t, h);
        const float* row = x + elements(t, h);
        float* d = dx + elements(t, h);
        const float mu = mean[t];
        const float rs = rstd[t];
        for (std::size_t j = 0; j < n; ++j) {
            dGamma[j] += dy[j] * ((row[j] - mu) * rs);
            dBeta[j] += dy[j];
        }
        const float meanG = laneSum(n, [dy, gamma](std::size_t j) { return dy[j] * gamma[j]; }) * invH;
        const float meanGX =
            laneSum(n, [dy, gamma, row, mu, rs](std::size_t j) { return dy[j] * gamma[j] * ((row[j] - mu) * rs); }) *
            invH;
        for (std::size_t j = 0; j < n; ++j) {
            const float xhat = (row[j] - mu) * rs;
            d[j] = rs * (dy[j] * gamma[j] - meanG - xhat * meanGX);
        }
    }
}

void CpuBackend::rmsNormForward(ConstDevPtr xPtr, ConstDevPtr gammaPtr, int T, int h, float eps, DevPtr outPtr,
                                DevPtr rstdPtr)
{
    const float* x = asF32(xPtr);
    const float* gamma = asF32(gammaPtr);
    float* out = asF32(outPtr);
    float* rstd = asF32(rstdPtr);
    requireDim("rmsNormForward", "T", T, 0);
    requireDim("rmsNormForward", "h", h, 1);
    const std::size_t n = std::size_t(h);
    const float invH = 1.0f / float(h);
    // Zhang & Sennrich 2019: out = x rstd gamma, rstd = 1 / sqrt(mean(x^2) + eps).
    for (int t = 0; t < T; ++t) {
        const float* row = x + elements(t, h);
        float* o = out + elements(t, h);
        const float ms = laneSum(n, [row](std::size_t j) { return row[j] * row[j]; }) * invH;
        const float rs = 1.0f / std::sqrt(ms + eps);
        for (std::size_t j = 0; j < n; ++j)
            o[j] = row[j] * rs * gamma[j];
        rstd[t] = rs;
    }
}

void CpuBackend::rmsNormBackward(ConstDevPtr dOutPtr, ConstDevPtr xPtr, ConstDevPtr gammaPtr, ConstDevPtr rstdPtr,
                                 int T, int h, DevPtr dxPtr, DevPtr dGammaPtr)
{
    const float* dOut = asF32(dOutPtr);
    const float* x = asF32(xPtr);
    const float* gamma = asF32(gammaPtr);
    const float* rstd = asF32(rstdPtr);
    float* dx = asF32(dxPtr);
    float* dGamma = asF32(dGammaPtr);
    requireDim("rmsNormBackward", "T", T, 0);
    requireDim("rmsNormBackward", "h", h, 1);
    const std::size_t n = std::size_t(h);
    const float invH = 1.0f / float(h);
    // With xhat = x rstd and g = dOut * gamma: dx = rstd (g - xhat mean(g xhat)), dGamma += dOut xhat.
    for (int t = 0; t < T; ++t) {
        const float* dy = dOut + elements(t, h);
        const float* row = x + elements(t, h);
        float* d = dx + elements(t, h);
        const float rs = rstd[t];
        for (std::size_t j = 0; j < n; ++j)
            dGamma[j] += dy[j] * (row[j] * rs);
        const float meanGX =
            laneSum(n, [dy, gamma, row, rs](std::size_t j) { return dy[j] * gamma[j] * (row[j] * rs); }) * invH;
        for (std::size_t j = 0; j < n; ++j)
            d[j] = rs * (dy[j] * gamma[j] - (row[j] * rs) * meanGX);
    }
}

// ---------------------------------------------------------------------------------------------
// Activations

void CpuBackend::geluForward(ConstDevPtr xPtr, DevPtr outPtr, std::size_t n)
{
    const float* x = asF32(xPtr);
    float* out = asF32(outPtr);
    for (std::size_t i = 0; i < n; ++i)
        out[i] = math::gelu(x[i]);
}

void CpuBackend::geluBackward(ConstDevPtr dOutPtr, ConstDevPtr xPtr, DevPtr dxPtr, std::size_t n)
{
    const float* dOut = asF32(dOutPtr);
    const float* x = asF32(xPtr);
    float* dx = asF32(dxPtr);
    for (std::size_t i = 0; i < n; ++i)
        dx[i] = math::geluBackward(dOut[i], x[i]);
}

void CpuBackend::swigluForward(ConstDevPtr xPtr, int T, int f, DevPtr outPtr)
{
    const float* x = asF32(xPtr);
    float* out = asF32(outPtr);
    requireDim("swigluForward", "T", T, 0);
    requireDim("swigluForward", "f", f, 0);
    for (int t = 0; t < T; ++t) {
        const float* gate = x + elements(t, 2 * f);
        const float* up = gate + f;
        float* o = out + elements(t, f);
        for (int j = 0; j < f; ++j)
            o[j] = math::swiglu(gate[j], up[j]);
    }
}

void CpuBackend::swigluBackward(ConstDevPtr dOutPtr, ConstDevPtr xPtr, int T, int f, DevPtr dxPtr)
{
    const float* dOut = asF32(dOutPtr);
    const float* x = asF32(xPtr);
    float* dx = asF32(dxPtr);
    requireDim("swigluBackward", "T", T, 0);
    requireDim("swigluBackward", "f", f, 0);
    for (int t = 0; t < T; ++t) {
        const float* gate = x + elements(t, 2 * f);
        const float* up = gate + f;
        const float* dy = dOut + elements(t, f);
        float* dGate = dx + elements(t, 2 * f);
        float* dUp = dGate + f;
        for (int j = 0; j < f; ++j) {
            const math::SwigluGradient g = math::swigluBackward(dy[j], gate[j], up[j]);
            dGate[j] = g.gate;
            dUp[j] = g.up;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Loss

double CpuBackend::crossEntropy(ConstDevPtr logitsPtr, const int* targets, int T, int V, float gradScale,
                                DevPtr dLogitsPtr)
{
    const float* logits = asF32(logitsPtr);
    float* dLogits = asF32(dLogitsPtr);
    requireDim("crossEntropy", "T", T, 0);
    requireDim("crossEntropy", "V", V, 1);
    // Check every target before writing anything: dLogits may alias logits.
    for (int t = 0; t < T; ++t)
        if (targets[t] < 0 || targets[t] >= V)
            throw KernelError("crossEntropy: target " + std::to_string(targets[t]) + " of token " + std::to_string(t) +
                              " is outside the vocabulary [0, " + std::to_string(V) + ")");
    const std::size_t n = std::size_t(V);
    double loss = 0.0;
    for (int t = 0; t < T; ++t) {
        const float* row = logits + elements(t, V);
        float* d = dLogits + elements(t, V);
        // loss = logsumexp(row) - row[target], with the row maximum subtracted before exp.
        // Each element is read before it is written, so d == row is safe.
        const float mx = rowMax(row, n);
        const float targetLogit = row[targets[t]];
        double sum = 0.0;
        for (std::size_t j = 0; j < n; ++j) {
            const float e = std::exp(row[j] - mx);
            d[j] = e;
            sum += double(e);
        }
        loss += double(mx) + std::log(sum) - double(targetLogit);
        // dLogits = gradScale (softmax - onehot).
        const float factor = float(double(gradScale) / sum);
        for (std::size_t j = 0; j < n; ++j)
            d[j] *= factor;
        d[targets[t]] -= gradScale;
    }
    return loss;
}

// ---------------------------------------------------------------------------------------------
// Optimiser

double CpuBackend::sumSquares(ConstDevPtr xPtr, std::size_t n)
{
    const float* x = asF32(xPtr);
    // Four double lanes: products of floats are exact in double, the sum rounds in double.
    constexpr std::size_t kLanes = 4;
    double acc[kLanes] = {};
    std::size_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (std::size_t j = 0; j < kLanes; ++j) {
            const double v = x[i + j];
            acc[j] += v * v;
        }
    double total = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    for (; i < n; ++i)
        total += double(x[i]) * double(x[i]);
    return total;
}

void CpuBackend::adamw(DevPtr paramPtr, ConstDevPtr gradPtr, DevPtr mPtr, DevPtr vPtr, std::size_t n, float lr,
                       float beta1, float beta2, float eps, float weightDecay, int step, float gradScale)
{
    float* p = asF32(paramPtr);
    const float* grad = asF32(gradPtr);
    float* m = asF32(mPtr);
    float* v = asF32(vPtr);
    requireDim("adamw", "step", step, 1);
    // Bias corrections 1 - beta^t in double (beta^t underflows gracefully), then fp32.
    const float bc1 = float(1.0 - std::pow(double(beta1), step));
    const float bc2 = float(1.0 - std::pow(double(beta2), step));
    if (!(bc1 > 0.0f) || !(bc2 > 0.0f))
        throw KernelError("adamw: beta1 and beta2 must lie in [0, 1), got " + std::to_string(beta1) + " and " +
                          std::to_string(beta2));
    const math::AdamWStep constants{lr, beta1, beta2, eps, weightDecay, gradScale, bc1, bc2};
    for (std::size_t i = 0; i < n; ++i)
        math::adamwUpdate(p[i], grad[i], m[i], v[i], constants);
}

}  // namespace meshbench::kernels
