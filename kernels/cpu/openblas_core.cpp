#include "openblas_core.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace meshbench::kernels {

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
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    execv(self, argv);
    // execv only returns on failure: carry on with the slower kernels.
}

}  // namespace meshbench::kernels
