#pragma once
// Which backend a run gets: the job spec's `backend` (auto | cpu | cuda) against what this build
// and this machine have. auto takes the CUDA backend when a device is usable and the CPU
// otherwise; cuda without a usable device is an error. The reason is said either way, for the
// agent's first lines and the session.

#include "kernels/backend.h"

#include <memory>
#include <string>

namespace meshbench::kernels {

enum class BackendRequest { Auto, Cpu, Cuda };

struct DeviceStatus {
    bool usable = false;
    std::string description;  // the device ("NVIDIA H200, sm_90, 139 GiB"), or why there is none
    int count = 0;            // devices on this machine
};

// Whether this build has the CUDA backend, and a device it can run on.
bool buildHasCuda();
DeviceStatus cudaDeviceStatus();

struct BackendChoice {
    std::unique_ptr<Backend> backend;
    std::string reason;  // "cpu (auto: no CUDA device: ...)", "cuda (device 1 of 8: NVIDIA H200, ...)"
    // With the CUDA backend, the device's UUID: ranks that report the same one share a GPU (which
    // NCCL refuses), whatever CUDA_VISIBLE_DEVICES showed each of them. Empty on the CPU.
    std::string deviceIdentity;
};

// Rank `localRank` of this machine's ranks takes visible device localRank mod the device count.
// Throws KernelError when `cuda` is asked for and cannot be had, naming why and what to set.
BackendChoice chooseBackend(BackendRequest request, int cpuThreads, int localRank = 0);

}  // namespace meshbench::kernels
