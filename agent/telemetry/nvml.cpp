#include "nvml.h"

#include "kernels/shared_library.h"

#include <string>

namespace meshbench::agent {

namespace {

// The part of NVML's documented C ABI used here, declared from its documentation: calls return a
// status (an int enum, 0 for success), devices are opaque handles, figures come in plain structs.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlMemory {
    unsigned long long total, free, used;  // bytes
};
struct NvmlUtilization {
    unsigned int gpu, memory;  // percent
};

}  // namespace

struct Nvml::Api {
    NvmlReturn (*init)();
    NvmlReturn (*shutdown)();
    NvmlReturn (*deviceCount)(unsigned int*);
    NvmlReturn (*deviceHandle)(unsigned int, NvmlDevice*);
    NvmlReturn (*memoryInfo)(NvmlDevice, NvmlMemory*);
    NvmlReturn (*utilizationRates)(NvmlDevice, NvmlUtilization*);
    const char* (*errorString)(NvmlReturn);

    std::string errorText(NvmlReturn status) const
    {
        const char* text = errorString(status);
        return text ? text : "NVML error " + std::to_string(status);
    }
};

Nvml::Nvml(const std::string& library) : m_library(std::make_unique<kernels::SharedLibrary>(library))
{
    if (!m_library->loaded()) {
        m_unavailableReason = "NVML not loaded: " + m_library->loadError();
        return;
    }
    auto api = std::make_unique<Api>();
    m_library->resolve("nvmlInit_v2", api->init);
    m_library->resolve("nvmlShutdown", api->shutdown);
    m_library->resolve("nvmlDeviceGetCount_v2", api->deviceCount);
    m_library->resolve("nvmlDeviceGetHandleByIndex_v2", api->deviceHandle);
    m_library->resolve("nvmlDeviceGetMemoryInfo", api->memoryInfo);
    m_library->resolve("nvmlDeviceGetUtilizationRates", api->utilizationRates);
    m_library->resolve("nvmlErrorString", api->errorString);
    if (!m_library->missing().empty()) {
        m_unavailableReason = "NVML not usable: " + library + " has no " + m_library->missing();
        return;
    }
    if (const NvmlReturn status = api->init(); status != kNvmlSuccess) {
        m_unavailableReason = "nvmlInit_v2 failed (" + library + "): " + api->errorText(status);
        return;
    }
    m_api = std::move(api);
}

Nvml::~Nvml()
{
    if (m_api)
        m_api->shutdown();  // before the library goes
}

std::vector<GpuSample> Nvml::sample() const
{
    std::vector<GpuSample> samples;
    unsigned int count = 0;
    if (!m_api || m_api->deviceCount(&count) != kNvmlSuccess)
        return samples;
    samples.reserve(count);
    for (unsigned int index = 0; index < count; ++index) {
        GpuSample& gpu = samples.emplace_back();
        gpu.index = int(index);
        NvmlDevice device = nullptr;
        if (m_api->deviceHandle(index, &device) != kNvmlSuccess)
            continue;
        if (NvmlMemory memory{}; m_api->memoryInfo(device, &memory) == kNvmlSuccess) {
            gpu.memoryTotalBytes = std::int64_t(memory.total);
            gpu.memoryUsedBytes = std::int64_t(memory.used);
        }
        if (NvmlUtilization utilization{}; m_api->utilizationRates(device, &utilization) == kNvmlSuccess)
            gpu.utilization = float(utilization.gpu) / 100.0f;
    }
    return samples;
}

const Nvml& Nvml::process()
{
    static const Nvml nvml;
    return nvml;
}

}  // namespace meshbench::agent
