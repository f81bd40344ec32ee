// The CPU backend's use of OpenBLAS: its GEMM, and the core type it runs on (openblas_core.h).

#include "kernels/cpu/openblas_core.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_common.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace meshbench::kernels {

void CpuBackend::gemm(bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A, int lda, ConstDevPtr B,
                      int ldb, float beta, DevPtr C, int ldc)
{
    const float* a = asF32(A);
    const float* b = asF32(B);
    float* c = asF32(C);
    requireDim("gemm", "M", M, 0);
    requireDim("gemm", "N", N, 0);
    requireDim("gemm", "K", K, 0);
    // Row-major leading dimensions are at least the stored row length (OpenBLAS would only print
    // a complaint and return).
    requireDim("gemm", "lda", lda, std::max(1, transA ? M : K));
    requireDim("gemm", "ldb", ldb, std::max(1, transB ? K : N));
    requireDim("gemm", "ldc", ldc, std::max(1, N));
    if (M == 0 || N == 0)
        return;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                a, lda, b, ldb, beta, c, ldc);
}

std::string betterOpenblasCore()
{
    if (std::getenv("OPENBLAS_CORETYPE"))
        return "";  // the user's choice stands
    const char* core = openblas_get_corename();
    if (!core || std::strcmp(core, "Prescott") != 0)
        return "";
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return "";
}

void reexecWithBetterOpenblasCore(char** argv)
{
    const std::string core = betterOpenblasCore();
    if (core.empty())
        return;
    // Exec the binary by its real path, so the process keeps its name (ps, pgrep, mpirun's reports).
    char self[4096];
    const ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
    if (length <= 0)
        return;
    self[length] = '\0';
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): first thing main does
    execv(self, argv);
    // execv only returns on failure: carry on with the slower kernels.
}

}  // namespace meshbench::kernels
