// GEMMs through cuBLASLt: the library loaded at run time (dlopen), and for each GEMM shape its
// descriptors and algorithm, made once and reused.

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/shared_library.h"

#include <string>
#include <utility>
#include <vector>

namespace meshbench::kernels::cuda {
namespace {

void check(cublasStatus_t status, const char* what)
{
    if (status != CUBLAS_STATUS_SUCCESS)
        throw KernelError(std::string("cuda backend: ") + what + ": cuBLASLt status " + std::to_string(int(status)));
}

// The cuBLASLt entry points used, resolved from libcublasLt.so.13 once per process, so that the
// binaries start (and the CPU backend runs) where CUDA's libraries are not installed. cublasLt.h
// gives their types; nothing is linked.
struct CublasLt {
    bool loaded = false;
    std::string problem;  // why not, with the fix
    decltype(&cublasLtCreate) create = nullptr;
    decltype(&cublasLtDestroy) destroy = nullptr;
    decltype(&cublasLtMatmul) matmul = nullptr;
    decltype(&cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic = nullptr;
    decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
    decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
    decltype(&cublasLtMatmulDescSetAttribute) descSetAttribute = nullptr;
    decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
    decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
    decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute = nullptr;
    decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
    decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;

    static const CublasLt& process()
    {
        static const CublasLt library = load();
        return library;
    }

private:
    static CublasLt load()
    {
        constexpr const char* kName = "libcublasLt.so.13";
        CublasLt l;
        // The loader's path first; then where the CUDA toolkit installs it, for a machine whose
        // toolkit is not on that path.
        SharedLibrary library(std::vector<std::string>{kName, std::string("/usr/local/cuda/lib64/") + kName});
        if (!library.loaded()) {
            l.problem = std::string(kName) + " not found (" + library.loadError() +
                        "); install CUDA 13's cuBLASLt (the toolkit, or pip's nvidia-cublas) and put its lib folder "
                        "on LD_LIBRARY_PATH";
            return l;
        }
        library.resolve("cublasLtCreate", l.create);
        library.resolve("cublasLtDestroy", l.destroy);
        library.resolve("cublasLtMatmul", l.matmul);
        library.resolve("cublasLtMatmulAlgoGetHeuristic", l.algoGetHeuristic);
        library.resolve("cublasLtMatmulDescCreate", l.descCreate);
        library.resolve("cublasLtMatmulDescDestroy", l.descDestroy);
        library.resolve("cublasLtMatmulDescSetAttribute", l.descSetAttribute);
        library.resolve("cublasLtMatmulPreferenceCreate", l.preferenceCreate);
        library.resolve("cublasLtMatmulPreferenceDestroy", l.preferenceDestroy);
        library.resolve("cublasLtMatmulPreferenceSetAttribute", l.preferenceSetAttribute);
        library.resolve("cublasLtMatrixLayoutCreate", l.layoutCreate);
        library.resolve("cublasLtMatrixLayoutDestroy", l.layoutDestroy);
        if (!library.missing().empty()) {
            l.problem = std::string(kName) + " lacks " + library.missing() + "; install CUDA 13's cuBLASLt";
            return l;
        }
        library.keepLoaded();  // for the process: every backend calls into it until exit
        l.loaded = true;
        return l;
    }
};

const CublasLt& lt() { return CublasLt::process(); }

cudaDataType_t cudaTypeOf(DType dtype) { return dtype == DType::F32 ? CUDA_R_32F : CUDA_R_16BF; }

}  // namespace

bool cublasLtLoaded() { return lt().loaded; }

const std::string& cublasLtProblem() { return lt().problem; }

CublasLtGemm::CublasLtGemm()
{
    check(lt().create(&m_lt), "cublasLtCreate");
    check(cudaMalloc(&m_workspace, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
}

CublasLtGemm::~CublasLtGemm()
{
    for (const auto& [key, plan] : m_gemmPlans) {
        lt().layoutDestroy(plan.out);
        lt().layoutDestroy(plan.second);
        lt().layoutDestroy(plan.first);
        lt().descDestroy(plan.op);
    }
    cudaFree(m_workspace);
    lt().destroy(m_lt);
}

void CublasLtGemm::gemm(cudaStream_t stream, bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A,
                        int lda, ConstDevPtr B, int ldb, float beta, DevPtr C, int ldc)
{
    const GemmPlan& plan = gemmPlan({transA, transB, M, N, K, lda, ldb, ldc, A.dtype, B.dtype, C.dtype,
                                     alignmentOf(A.data), alignmentOf(B.data), alignmentOf(C.data)});
    check(plan.found
              ? lt().matmul(m_lt, plan.op, &alpha, B.data, plan.first, A.data, plan.second, &beta, C.data, plan.out,
                            C.data, plan.out, &plan.heuristic.algo, m_workspace, kWorkspaceBytes, stream)
              : CUBLAS_STATUS_NOT_SUPPORTED,
          "cublasLtMatmul");
}

const CublasLtGemm::GemmPlan& CublasLtGemm::gemmPlan(const GemmKey& key)
{
    if (const auto it = m_gemmPlans.find(key); it != m_gemmPlans.end())
        return it->second;
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt multiplies
    // B's and A's column-major views, with N and M swapped; fp32 accumulation for every dtype.
    GemmPlan plan;
    check(lt().descCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t opB = key.transB ? CUBLAS_OP_T : CUBLAS_OP_N, opA = key.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    check(lt().descSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)), "TRANSA");
    check(lt().descSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)), "TRANSB");
    const auto u = [](int v) { return uint64_t(v); };
    // The column-major shapes as stored: B is [N, K] (rows x cols) when transposed, else [K, N].
    check(lt().layoutCreate(&plan.first, cudaTypeOf(key.b), key.transB ? u(key.K) : u(key.N),
                            key.transB ? u(key.N) : u(key.K), key.ldb),
          "layout B");
    check(lt().layoutCreate(&plan.second, cudaTypeOf(key.a), key.transA ? u(key.M) : u(key.K),
                            key.transA ? u(key.K) : u(key.M), key.lda),
          "layout A");
    check(lt().layoutCreate(&plan.out, cudaTypeOf(key.c), u(key.N), u(key.M), key.ldc), "layout C");
    cublasLtMatmulPreference_t preference = nullptr;
    check(lt().preferenceCreate(&preference), "preference");
    const std::size_t workspace = kWorkspaceBytes;
    check(lt().preferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                      sizeof(workspace)),
          "workspace");
    // cuBLASLt's "A" and "B" are our B and A (the swap above); C and D are the same buffer.
    for (const auto& [attribute, alignment] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignB},
                                               std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignA},
                                               std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignC},
                                               std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignC}})
        check(lt().preferenceSetAttribute(preference, attribute, &alignment, sizeof(alignment)), "alignment");
    int found = 0;
    const cublasStatus_t status = lt().algoGetHeuristic(m_lt, plan.op, plan.first, plan.second, plan.out, plan.out,
                                                        preference, 1, &plan.heuristic, &found);
    lt().preferenceDestroy(preference);
    plan.found = status == CUBLAS_STATUS_SUCCESS && found > 0;
    return m_gemmPlans.emplace(key, plan).first->second;
}

}  // namespace meshbench::kernels::cuda
