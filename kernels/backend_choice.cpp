#include "kernels/backend_choice.h"

#include "kernels/cpu/cpu_backend.h"
#if MESHBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace meshbench::kernels {
namespace {

// kernels/cuda does not yet run every operation of the model (see engine/plan/capability): until it
// does, a usable device is reported but not taken.
constexpr bool kCudaBackendComplete = false;

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
    if (!kCudaBackendComplete) {
        const std::string why = "the CUDA backend is not complete in this build, " + device.description + " unused";
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
