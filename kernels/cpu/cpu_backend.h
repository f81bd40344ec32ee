#pragma once
// The CPU backend: fp32 kernels, GEMMs through OpenBLAS (cblas_sgemm). Other dtypes are refused
// with a KernelError.

#include "kernels/backend.h"

#include <chrono>
#include <vector>

namespace meshbench::kernels {

class CpuBackend final : public Backend {
public:
    // threads: OpenBLAS threads for GEMMs (1 when several ranks share a machine's cores).
    explicit CpuBackend(int threads = 1);

    std::string_view name() const override { return "cpu"; }

    DevPtr allocate(std::size_t elements, DType dtype) override;
    void release(DevPtr p) override;
    void upload(DevPtr dst, const float* src, std::size_t elements) override;
    void download(float* dst, ConstDevPtr src, std::size_t elements) override;
    void fill(DevPtr dst, float value, std::size_t elements) override;
    void copy(DevPtr dst, ConstDevPtr src, std::size_t elements) override;
    bool hostAddressable() const override { return true; }
    void copyToHost(void* dst, ConstDevPtr src, std::size_t elements) override;
    void copyFromHost(DevPtr dst, const void* src, std::size_t elements) override;
    void synchronize() override {}
    TimeMark markTime() override;
    double secondsBetween(TimeMark from, TimeMark to) override;
    void forgetTimeMarks() override { m_marks.clear(); }
    DeviceMemory deviceMemory() override { return {}; }

    void gemm(bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A, int lda, ConstDevPtr B,
              int ldb, float beta, DevPtr C, int ldc) override;
    void add(ConstDevPtr x, DevPtr y, std::size_t n) override;
    void scale(DevPtr x, float alpha, std::size_t n) override;

    void embeddingForward(const int* ids, int T, ConstDevPtr table, int h, DevPtr out) override;
    void embeddingBackward(const int* ids, int T, ConstDevPtr dOut, int h, DevPtr dTable) override;

    void layerNormForward(ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr beta, int T, int h, float eps, DevPtr out,
                          DevPtr mean, DevPtr rstd) override;
    void layerNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr mean, ConstDevPtr rstd,
                           int T, int h, DevPtr dx, DevPtr dGamma, DevPtr dBeta) override;
    void rmsNormForward(ConstDevPtr x, ConstDevPtr gamma, int T, int h, float eps, DevPtr out, DevPtr rstd) override;
    void rmsNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr rstd, int T, int h, DevPtr dx,
                         DevPtr dGamma) override;

    void geluForward(ConstDevPtr x, DevPtr out, std::size_t n) override;
    void geluBackward(ConstDevPtr dOut, ConstDevPtr x, DevPtr dx, std::size_t n) override;
    void swigluForward(ConstDevPtr x, int T, int f, DevPtr out) override;
    void swigluBackward(ConstDevPtr dOut, ConstDevPtr x, int T, int f, DevPtr dx) override;

    void rope(DevPtr x, int tokens, int seq, int heads, int headDim, float base, bool inverse) override;

    void attentionForward(const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, DevPtr out,
                          DevPtr lse) override;
    void attentionBackward(const AttentionShape& shape, ConstDevPtr dOut, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v,
                           ConstDevPtr out, ConstDevPtr lse, DevPtr dq, DevPtr dk, DevPtr dv) override;

    double crossEntropy(ConstDevPtr logits, const int* targets, int T, int V, float gradScale, DevPtr dLogits) override;

    void route(const RouterShape& shape, const float* logits, const Routing& routing) override;
    double auxLoss(const RouterShape& shape, const Routing& routing, float coef, float* dLogits) override;
    void permute(const RouterShape& shape, const Routing& routing, ConstDevPtr x, int h, DevPtr permuted) override;
    void combine(const RouterShape& shape, const Routing& routing, ConstDevPtr expertOut, int h, DevPtr out) override;
    void combineBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dOut, ConstDevPtr expertOut,
                         int h, DevPtr dExpertOut, float* dWeight) override;
    void permuteBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dPermuted, int h,
                         DevPtr dx) override;
    void routerBackward(const RouterShape& shape, const Routing& routing, const float* dWeight,
                        float* dLogits) override;

    double sumSquares(ConstDevPtr x, std::size_t n) override;
    void adamw(DevPtr param, ConstDevPtr grad, DevPtr m, DevPtr v, std::size_t n, float lr, float beta1, float beta2,
               float eps, float weightDecay, int step, float gradScale) override;

private:
    std::vector<std::chrono::steady_clock::time_point> m_marks;
};

// fp32 access to a pointer, refusing other dtypes (CPU kernels are fp32 only).
float* asF32(DevPtr p);
const float* asF32(ConstDevPtr p);

}  // namespace meshbench::kernels
