// Rotary position embeddings of the CUDA backend (Su et al. 2021, RoFormer), in the half-split form
// Llama uses, as kernels/cpu/cpu_rope.cpp: the angle table on the host, the rotation on the device.

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/rope.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace meshbench::kernels::cuda {
namespace {

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

}  // namespace

void launchRope(cudaStream_t stream, CachingAllocator& allocator, DevPtr x, int tokens, int seq, int heads, int headDim,
                float base, bool inverse)
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
    DeviceScratch<float> deviceCos(allocator, stream, cosines.data(), cosines.size()),
        deviceSin(allocator, stream, sines.data(), sines.size());
    const std::size_t n = std::size_t(tokens) * std::size_t(heads) * std::size_t(half);
    ropeKernel<<<blocksFor(n), kThreads, 0, stream>>>(x.data, x.dtype, seq, heads, headDim, deviceCos.data,
                                                      deviceSin.data, n);
    launched("rope");
}

}  // namespace meshbench::kernels::cuda
