#include "kernels/backend_choice.h"

#include "kernels/cpu/cpu_backend.h"
#if MESHBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace meshbench::kernels {
namespace {

// kernels/cuda runs every operation of the model, but has not yet been checked on a GPU (the
// device check, tests/kernels/tst_cuda_kernels there): until it has, a usable device is reported
// but not taken (see engine/plan/capability).
constexpr bool kCudaBackendChecked = false;

}  // namespace

bool buildHasCuda() { return MESHBENCH_HAVE_CUDA != 0; }

DeviceStatus cudaDeviceStatus()
{
#if MESHBENCH_HAVE_CUDA
    return cuda::probeDevice();
#else
    return {false, "this build has no CUDA backend (no CUDA toolkit was found when it was configured)"};
#endif
}

BackendChoice chooseBackend(BackendRequest request, int cpuThreads)
{
    if (request == BackendRequest::Cpu)
        return {std::make_unique<CpuBackend>(cpuThreads), "cpu (asked for)"};
    const DeviceStatus device = cudaDeviceStatus();
    if (!device.usable) {
        if (request == BackendRequest::Cuda)
            throw KernelError("backend \"cuda\": " + device.description +
                              "; run on a machine with a GPU, or set backend to \"cpu\" or \"auto\"");
        return {std::make_unique<CpuBackend>(cpuThreads), "cpu (auto: " + device.description + ")"};
    }
    if (!kCudaBackendChecked) {
        const std::string why = "the CUDA backend is not yet checked on a GPU, " + device.description + " unused";
        if (request == BackendRequest::Cuda)
            throw KernelError("backend \"cuda\": " + why + "; set backend to \"cpu\" or \"auto\"");
        return {std::make_unique<CpuBackend>(cpuThreads), "cpu (auto: " + why + ")"};
    }
#if MESHBENCH_HAVE_CUDA
    return {cuda::makeBackend(), std::string("cuda (") + (request == BackendRequest::Auto ? "auto: " : "") +
                                     device.description + ")"};
#else
    throw KernelError("backend \"cuda\": " + device.description);
#endif
}

}  // namespace meshbench::kernels
