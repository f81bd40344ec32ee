#pragma once
// The per-element math that every backend shares, written once: GELU, SwiGLU and the AdamW update,
// forward and backward. The functions are __host__ __device__ under nvcc, so kernels/cuda calls the
// very code that the CPU backend calls (and that the CPU tests exercise). Float overloads of the C
// math library throughout (erfcf, expf, sqrtf): the same functions on the host, CUDA's on the device.

#include <cmath>

#if defined(__CUDACC__)
#define MESHBENCH_HOST_DEVICE __host__ __device__
#else
#define MESHBENCH_HOST_DEVICE
#endif

namespace meshbench::kernels::math {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// Phi(x), the standard normal CDF, as erfc(-x / sqrt 2) / 2: unlike (1 + erf(x / sqrt 2)) / 2 it
// keeps full relative precision in the left tail, where 1 + erf cancels.
MESHBENCH_HOST_DEVICE inline float normalCdf(float x) { return 0.5f * erfcf(-x * kInvSqrt2); }

MESHBENCH_HOST_DEVICE inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// gelu(x) = x Phi(x) (Hendrycks & Gimpel 2016, exact form).
MESHBENCH_HOST_DEVICE inline float gelu(float x) { return x * normalCdf(x); }

// dy gelu'(x), gelu'(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
MESHBENCH_HOST_DEVICE inline float geluBackward(float dy, float x)
{
    return dy * (normalCdf(x) + x * kInvSqrt2Pi * expf(-0.5f * x * x));
}

// Shazeer 2020: silu(gate) * up, silu(a) = a sigmoid(a).
MESHBENCH_HOST_DEVICE inline float swiglu(float gate, float up) { return gate * sigmoid(gate) * up; }

struct SwigluGradient {
    float gate;
    float up;
};

// d out / d gate = up s (1 + a (1 - s)) with s = sigmoid(a); d out / d up = a s.
MESHBENCH_HOST_DEVICE inline SwigluGradient swigluBackward(float dy, float gate, float up)
{
    const float s = sigmoid(gate);
    return {dy * up * s * (1.0f + gate * (1.0f - s)), dy * gate * s};
}

// One AdamW step's constants (Loshchilov & Hutter 2019, decoupled weight decay); the bias
// corrections 1 - beta^t are computed once per step by the caller.
struct AdamWStep {
    float lr, beta1, beta2, eps, weightDecay, gradScale;
    float biasCorrection1, biasCorrection2;
};

// m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd p),
// with g the gradient scaled by gradScale (clipping).
MESHBENCH_HOST_DEVICE inline void adamwUpdate(float& p, float grad, float& m, float& v, const AdamWStep& s)
{
    const float g = grad * s.gradScale;
    const float mi = s.beta1 * m + (1.0f - s.beta1) * g;
    const float vi = s.beta2 * v + (1.0f - s.beta2) * g * g;
    m = mi;
    v = vi;
    const float update = (mi / s.biasCorrection1) / (sqrtf(vi / s.biasCorrection2) + s.eps);
    p -= s.lr * (update + s.weightDecay * p);
}

}  // namespace meshbench::kernels::math
