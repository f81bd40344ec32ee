// Elementwise kernels of the CPU backend: add, scale, and GELU and SwiGLU forward and backward, over
// kernels/elementwise_math.h (the same functions the CUDA backend runs).

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/elementwise_math.h"

namespace meshbench::kernels {

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

}  // namespace meshbench::kernels
