#pragma once
// GEMMs of the CUDA backend through cuBLASLt (kernels/cuda/cublaslt.cu), which is loaded at run time.

#include "kernels/backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

namespace meshbench::kernels::cuda {

// Whether libcublasLt loaded in this process; if not, why, with the fix.
bool cublasLtLoaded();
const std::string& cublasLtProblem();

// A cuBLASLt handle and its workspace on the current device, and a GEMM plan for each shape it is
// asked for. Needs cuBLASLt loaded.
class CublasLtGemm {
public:
    CublasLtGemm();
    ~CublasLtGemm();
    CublasLtGemm(const CublasLtGemm&) = delete;
    CublasLtGemm& operator=(const CublasLtGemm&) = delete;

    // Row-major C = alpha op(A) op(B) + beta C, queued on the stream.
    void gemm(cudaStream_t stream, bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A, int lda,
              ConstDevPtr B, int ldb, float beta, DevPtr C, int ldc);

private:
    static constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's, as Hopper's heuristics like

    // A GEMM's shape, and cuBLASLt's descriptors and algorithm for it, made once per shape: a
    // training step repeats a handful of shapes thousands of times.
    // cuBLASLt's heuristic assumes 256-byte aligned operands unless told otherwise; views into the
    // parameter buffer and TP/EP slices are less aligned, so the plan is made for what is passed.
    static std::uint32_t alignmentOf(const void* p)
    {
        const auto address = reinterpret_cast<std::uintptr_t>(p);
        const std::uintptr_t lowest = address & (~address + 1);
        return std::uint32_t(address == 0 || lowest > 256 ? 256 : lowest);
    }
    struct GemmKey {
        bool transA, transB;
        int M, N, K, lda, ldb, ldc;
        DType a, b, c;
        std::uint32_t alignA, alignB, alignC;
        bool operator<(const GemmKey& o) const
        {
            return std::tie(transA, transB, M, N, K, lda, ldb, ldc, a, b, c, alignA, alignB, alignC) <
                   std::tie(o.transA, o.transB, o.M, o.N, o.K, o.lda, o.ldb, o.ldc, o.a, o.b, o.c, o.alignA, o.alignB,
                            o.alignC);
        }
    };
    struct GemmPlan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
        cublasLtMatmulHeuristicResult_t heuristic{};
        bool found = false;
    };

    const GemmPlan& gemmPlan(const GemmKey& key);

    std::map<GemmKey, GemmPlan> m_gemmPlans;
    cublasLtHandle_t m_lt = nullptr;
    void* m_workspace = nullptr;
};

}  // namespace meshbench::kernels::cuda
