// The token embedding of the CPU backend: a row copy forward, a scatter-add in token order backward.

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_common.h"

#include <cstring>

namespace meshbench::kernels {

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

}  // namespace meshbench::kernels
