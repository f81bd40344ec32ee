#include "kernels/backend_choice.h"

#include "kernels/cpu/cpu_backend.h"
#if MESHBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace meshbench::kernels {

bool buildHasCuda() { return MESHBENCH_HAVE_CUDA != 0; }

DeviceStatus cudaDeviceStatus()
{
#if MESHBENCH_HAVE_CUDA
    return cuda::probeDevice();
#else
    return {false, "this build has no CUDA backend (no CUDA toolkit was found when it was configured)"};
#endif
}

BackendChoice chooseBackend(BackendRequest request, int cpuThreads, int localRank)
{
    if (request == BackendRequest::Cpu)
        return {std::make_unique<CpuBackend>(cpuThreads), "cpu (asked for)", {}};
    const DeviceStatus device = cudaDeviceStatus();
    if (!device.usable) {
        // A GPU that is there but unusable (too old, or cuBLASLt missing) says its own fix.
        if (request == BackendRequest::Cuda)
            throw KernelError("backend \"cuda\": " + device.description +
                              (device.count == 0 ? "; run on a machine with a GPU, or" : "; or") +
                              " set backend to \"cpu\" or \"auto\"");
        return {std::make_unique<CpuBackend>(cpuThreads), "cpu (auto: " + device.description + ")", {}};
    }
#if MESHBENCH_HAVE_CUDA
    const int index = localRank % device.count;
    return {cuda::makeBackend(index),
            std::string("cuda (") + (request == BackendRequest::Auto ? "auto: " : "") + "device " +
                std::to_string(index) + " of " + std::to_string(device.count) + ": " + device.description + ")",
            cuda::deviceIdentity(index)};
#else
    throw KernelError("backend \"cuda\": " + device.description);
#endif
}

}  // namespace meshbench::kernels
