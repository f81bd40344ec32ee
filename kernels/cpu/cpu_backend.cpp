// The CPU backend's class: host memory, time marks on the host clock, and fp32 access to pointers.
// Its kernels live a file per layer beside it, as the CUDA backend's do: cpu_elementwise,
// cpu_embedding, cpu_norms, cpu_rope, cpu_attention, cpu_cross_entropy, cpu_moe, cpu_optimizer, and
// the GEMM with OpenBLAS in openblas_core. Their loops are written so that the compiler can vectorise
// them (no calls through pointers, reductions split over independent lanes).

#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>

namespace meshbench::kernels {

namespace {

constexpr std::size_t kAlignment = 64;

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

DevPtr CpuBackend::allocate(std::size_t elements, DType dtype)
{
    if (dtype != DType::F32)
        throw KernelError("cpu backend: cannot allocate " + std::string(dtypeName(dtype)) +
                          " tensors, the CPU kernels are fp32 only");
    const std::size_t size = dtypeSize(dtype);
    if (elements > (std::numeric_limits<std::size_t>::max() - kAlignment) / size)
        throw KernelError("cpu backend: allocation of " + std::to_string(elements) + " elements overflows");
    // aligned_alloc wants a multiple of the alignment; never ask for zero bytes.
    const std::size_t bytes = std::max<std::size_t>(1, (elements * size + kAlignment - 1) / kAlignment) * kAlignment;
    void* data = std::aligned_alloc(kAlignment, bytes);
    if (data == nullptr)
        throw std::bad_alloc();
    std::memset(data, 0, bytes);
    return {data, dtype};
}

void CpuBackend::release(DevPtr p) { std::free(p.data); }

void CpuBackend::upload(DevPtr dst, const float* src, std::size_t elements)
{
    float* d = asF32(dst);
    if (elements > 0)
        std::memcpy(d, src, elements * sizeof(float));
}

void CpuBackend::download(float* dst, ConstDevPtr src, std::size_t elements)
{
    const float* s = asF32(src);
    if (elements > 0)
        std::memcpy(dst, s, elements * sizeof(float));
}

void CpuBackend::copyToHost(void* dst, ConstDevPtr src, std::size_t elements)
{
    if (elements > 0)
        std::memcpy(dst, src.data, elements * dtypeSize(src.dtype));
}

void CpuBackend::copyFromHost(DevPtr dst, const void* src, std::size_t elements)
{
    if (elements > 0)
        std::memcpy(dst.data, src, elements * dtypeSize(dst.dtype));
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

void CpuBackend::fill(DevPtr dst, float value, std::size_t elements) { std::fill_n(asF32(dst), elements, value); }

void CpuBackend::copy(DevPtr dst, ConstDevPtr src, std::size_t elements)
{
    float* d = asF32(dst);
    const float* s = asF32(src);
    if (elements > 0)
        std::memmove(d, s, elements * sizeof(float));
}

}  // namespace meshbench::kernels
