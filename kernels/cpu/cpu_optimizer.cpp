// Optimiser kernels of the CPU backend: AdamW, and sums of squares (for the global gradient norm).

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/elementwise_math.h"

#include <cmath>
#include <string>

namespace meshbench::kernels {

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
