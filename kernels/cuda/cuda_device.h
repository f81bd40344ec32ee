#pragma once
// The CUDA backend's entry points, in plain C++ (no CUDA headers), for kernels/backend_choice.

#include "kernels/backend.h"
#include "kernels/backend_choice.h"

#include <memory>

namespace meshbench::kernels::cuda {

// Device 0 as the runtime sees it: usable when present, of compute capability 9.0 or newer.
DeviceStatus probeDevice();
std::unique_ptr<Backend> makeBackend();

}  // namespace meshbench::kernels::cuda
