// Rotary position embeddings (Su et al. 2021, RoFormer), in the half-split form Llama uses:
// for position p and pair i < d/2, (x_i, x_{i+d/2}) rotates by p * base^(-2i/d).

#include "cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace meshbench::kernels {

void CpuBackend::rope(DevPtr x, int tokens, int seq, int heads, int headDim, float base, bool inverse)
{
    if (headDim % 2 != 0)
        throw KernelError("rope needs an even head dimension, got " + std::to_string(headDim));
    float* data = asF32(x);
    const int half = headDim / 2;
    // One table of angles for the sequence's positions; tokens t and t + seq share a position.
    const int positions = std::min(seq, tokens);
    std::vector<float> cosines(std::size_t(positions) * half), sines(std::size_t(positions) * half);
    for (int p = 0; p < positions; ++p)
        for (int i = 0; i < half; ++i) {
            const double angle = p * std::pow(double(base), -2.0 * i / headDim);
            cosines[std::size_t(p) * half + i] = float(std::cos(angle));
            sines[std::size_t(p) * half + i] = float(inverse ? -std::sin(angle) : std::sin(angle));
        }
    for (int t = 0; t < tokens; ++t) {
        const float* c = cosines.data() + std::size_t(t % seq) * half;
        const float* s = sines.data() + std::size_t(t % seq) * half;
        for (int hd = 0; hd < heads; ++hd) {
            float* row = data + (std::size_t(t) * heads + hd) * headDim;
            for (int i = 0; i < half; ++i) {
                const float a = row[i], b = row[i + half];
                row[i] = a * c[i] - b * s[i];
                row[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

}  // namespace meshbench::kernels
