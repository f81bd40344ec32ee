// Normalisation kernels of the CPU backend: LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich
// 2019), forward and backward, row by row.

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_common.h"

#include <cmath>

namespace meshbench::kernels {
namespace {

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

}  // namespace

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

}  // namespace meshbench::kernels
