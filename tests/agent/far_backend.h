#pragma once
// A backend whose memory the host cannot reach, standing in for a GPU's on a CPU-only machine:
// the CPU backend's kernels over buffers handed out with a high address bit set (non-canonical on
// x86-64 and AArch64, so a dereference faults). Each operation takes the bit off the buffers it is
// given, and refuses a buffer without it: host memory passed where device memory belongs, which
// on a GPU would be a crash or an invalid-argument error. Only the byte copies move data to and
// from the host. The agent run on it (with host-staged communicators) proves that nothing reads or
// writes device memory behind the backend's back.

#include "kernels/cpu/cpu_backend.h"

#include <atomic>
#include <cstdint>
#include <string>

namespace meshbench::agent::testing {

class FarBackend final : public kernels::Backend {
public:
    static constexpr std::uintptr_t kFar = std::uintptr_t(1) << 62;
    using DevPtr = kernels::DevPtr;
    using ConstDevPtr = kernels::ConstDevPtr;
    using DType = kernels::DType;

    std::string_view name() const override { return "far"; }
    std::size_t copiedElements() const { return m_copied; }

    DevPtr allocate(std::size_t elements, DType dtype) override
    {
        const DevPtr p = m_cpu.allocate(elements, dtype);
        // NOLINTNEXTLINE(performance-no-int-to-ptr): making a fake far address from an integer is the point
        return {p.data ? reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(p.data) | kFar) : nullptr, dtype};
    }
    void release(DevPtr p) override { m_cpu.release(n(p)); }
    void upload(DevPtr dst, const float* src, std::size_t e) override { m_cpu.upload(n(dst), src, e); }
    void download(float* dst, ConstDevPtr src, std::size_t e) override { m_cpu.download(dst, n(src), e); }
    void fill(DevPtr dst, float value, std::size_t e) override { m_cpu.fill(n(dst), value, e); }
    void copy(DevPtr dst, ConstDevPtr src, std::size_t e) override { m_cpu.copy(n(dst), n(src), e); }
    bool hostAddressable() const override { return false; }
    void copyToHost(void* dst, ConstDevPtr src, std::size_t e) override
    {
        m_cpu.copyToHost(dst, n(src), e);
        m_copied += e;
    }
    void copyFromHost(DevPtr dst, const void* src, std::size_t e) override
    {
        m_cpu.copyFromHost(n(dst), src, e);
        m_copied += e;
    }
    void synchronize() override {}
    kernels::TimeMark markTime() override { return m_cpu.markTime(); }
    double secondsBetween(kernels::TimeMark from, kernels::TimeMark to) override
    {
        return m_cpu.secondsBetween(from, to);
    }
    void forgetTimeMarks() override { m_cpu.forgetTimeMarks(); }
    kernels::DeviceMemory deviceMemory() override { return {}; }

    void gemm(bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A, int lda, ConstDevPtr B,
              int ldb, float beta, DevPtr C, int ldc) override
    {
        m_cpu.gemm(transA, transB, M, N, K, alpha, n(A), lda, n(B), ldb, beta, n(C), ldc);
    }
    void add(ConstDevPtr x, DevPtr y, std::size_t e) override { m_cpu.add(n(x), n(y), e); }
    void scale(DevPtr x, float alpha, std::size_t e) override { m_cpu.scale(n(x), alpha, e); }
    void embeddingForward(const int* ids, int T, ConstDevPtr table, int h, DevPtr out) override
    {
        m_cpu.embeddingForward(ids, T, n(table), h, n(out));
    }
    void embeddingBackward(const int* ids, int T, ConstDevPtr dOut, int h, DevPtr dTable) override
    {
        m_cpu.embeddingBackward(ids, T, n(dOut), h, n(dTable));
    }
    void layerNormForward(ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr beta, int T, int h, float eps, DevPtr out,
                          DevPtr mean, DevPtr rstd) override
    {
        m_cpu.layerNormForward(n(x), n(gamma), n(beta), T, h, eps, n(out), n(mean), n(rstd));
    }
    void layerNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr mean, ConstDevPtr rstd,
                           int T, int h, DevPtr dx, DevPtr dGamma, DevPtr dBeta) override
    {
        m_cpu.layerNormBackward(n(dOut), n(x), n(gamma), n(mean), n(rstd), T, h, n(dx), n(dGamma), n(dBeta));
    }
    void rmsNormForward(ConstDevPtr x, ConstDevPtr gamma, int T, int h, float eps, DevPtr out, DevPtr rstd) override
    {
        m_cpu.rmsNormForward(n(x), n(gamma), T, h, eps, n(out), n(rstd));
    }
    void rmsNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr rstd, int T, int h, DevPtr dx,
                         DevPtr dGamma) override
    {
        m_cpu.rmsNormBackward(n(dOut), n(x), n(gamma), n(rstd), T, h, n(dx), n(dGamma));
    }
    void geluForward(ConstDevPtr x, DevPtr out, std::size_t e) override { m_cpu.geluForward(n(x), n(out), e); }
    void geluBackward(ConstDevPtr dOut, ConstDevPtr x, DevPtr dx, std::size_t e) override
    {
        m_cpu.geluBackward(n(dOut), n(x), n(dx), e);
    }
    void swigluForward(ConstDevPtr x, int T, int f, DevPtr out) override { m_cpu.swigluForward(n(x), T, f, n(out)); }
    void swigluBackward(ConstDevPtr dOut, ConstDevPtr x, int T, int f, DevPtr dx) override
    {
        m_cpu.swigluBackward(n(dOut), n(x), T, f, n(dx));
    }
    void rope(DevPtr x, int tokens, int seq, int heads, int headDim, float base, bool inverse) override
    {
        m_cpu.rope(n(x), tokens, seq, heads, headDim, base, inverse);
    }
    void attentionForward(const kernels::AttentionShape& shape, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, DevPtr out,
                          DevPtr lse) override
    {
        m_cpu.attentionForward(shape, n(q), n(k), n(v), n(out), n(lse));
    }
    void attentionBackward(const kernels::AttentionShape& shape, ConstDevPtr dOut, ConstDevPtr q, ConstDevPtr k,
                           ConstDevPtr v, ConstDevPtr out, ConstDevPtr lse, DevPtr dq, DevPtr dk, DevPtr dv) override
    {
        m_cpu.attentionBackward(shape, n(dOut), n(q), n(k), n(v), n(out), n(lse), n(dq), n(dk), n(dv));
    }
    double crossEntropy(ConstDevPtr logits, const int* targets, int T, int V, float gradScale, DevPtr dLogits) override
    {
        return m_cpu.crossEntropy(n(logits), targets, T, V, gradScale, n(dLogits));
    }
    // The router's arrays are host memory by the interface's contract.
    void route(const kernels::RouterShape& shape, const float* logits, const kernels::Routing& routing) override
    {
        m_cpu.route(shape, logits, routing);
    }
    double auxLoss(const kernels::RouterShape& shape, const kernels::Routing& routing, float coef,
                   float* dLogits) override
    {
        return m_cpu.auxLoss(shape, routing, coef, dLogits);
    }
    void permute(const kernels::RouterShape& shape, const kernels::Routing& routing, ConstDevPtr x, int h,
                 DevPtr permuted) override
    {
        m_cpu.permute(shape, routing, n(x), h, n(permuted));
    }
    void combine(const kernels::RouterShape& shape, const kernels::Routing& routing, ConstDevPtr expertOut, int h,
                 DevPtr out) override
    {
        m_cpu.combine(shape, routing, n(expertOut), h, n(out));
    }
    void combineBackward(const kernels::RouterShape& shape, const kernels::Routing& routing, ConstDevPtr dOut,
                         ConstDevPtr expertOut, int h, DevPtr dExpertOut, float* dWeight) override
    {
        m_cpu.combineBackward(shape, routing, n(dOut), n(expertOut), h, n(dExpertOut), dWeight);
    }
    void permuteBackward(const kernels::RouterShape& shape, const kernels::Routing& routing, ConstDevPtr dPermuted,
                         int h, DevPtr dx) override
    {
        m_cpu.permuteBackward(shape, routing, n(dPermuted), h, n(dx));
    }
    void routerBackward(const kernels::RouterShape& shape, const kernels::Routing& routing, const float* dWeight,
                        float* dLogits) override
    {
        m_cpu.routerBackward(shape, routing, dWeight, dLogits);
    }
    double sumSquares(ConstDevPtr x, std::size_t e) override { return m_cpu.sumSquares(n(x), e); }
    void adamw(DevPtr param, ConstDevPtr grad, DevPtr m, DevPtr v, std::size_t e, float lr, float beta1, float beta2,
               float eps, float weightDecay, int step, float gradScale) override
    {
        m_cpu.adamw(n(param), n(grad), n(m), n(v), e, lr, beta1, beta2, eps, weightDecay, step, gradScale);
    }

private:
    // The host address of a device buffer; null stays null (an absent optional output).
    static void* nearOf(const void* p)
    {
        const auto address = reinterpret_cast<std::uintptr_t>(p);
        if (p && !(address & kFar))
            throw kernels::KernelError("far backend: host memory passed as device memory");
        // NOLINTNEXTLINE(performance-no-int-to-ptr): taking the fake far bit off the integer is the point
        return reinterpret_cast<void*>(address & ~kFar);
    }
    static DevPtr n(DevPtr p) { return {nearOf(p.data), p.dtype}; }
    static ConstDevPtr n(ConstDevPtr p) { return {nearOf(p.data), p.dtype}; }

    kernels::CpuBackend m_cpu;
    std::atomic<std::size_t> m_copied{0};
};

}  // namespace meshbench::agent::testing
