// The cross-entropy of the CPU backend: the summed loss over the tokens and its gradient of the
// logits, row by row.

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_common.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace meshbench::kernels {
namespace {

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

}  // namespace meshbench::kernels
