#pragma once
// The CUDA backend's entry points, in plain C++ (no CUDA headers), for kernels/backend_choice.

#include "kernels/backend.h"
#include "kernels/backend_choice.h"

#include <memory>
#include <string>

namespace meshbench::kernels::cuda {

// The devices as the runtime sees them (device 0 described): usable when present, of compute
// capability 9.0 or newer.
DeviceStatus probeDevice();
std::unique_ptr<Backend> makeBackend(int device);
// The device's UUID in hex: the same GPU gives the same text in every process.
std::string deviceIdentity(int device);
// The backend's compute stream (a cudaStream_t), which NCCL's streams are ordered after.
void* computeStream(Backend& backend);

}  // namespace meshbench::kernels::cuda
