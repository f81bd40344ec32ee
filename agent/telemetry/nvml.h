#pragma once
// Each GPU's memory and utilisation through NVML, the NVIDIA driver's management library. It is
// loaded at run time (dlopen), never linked, so one agent binary runs on machines with and without
// the driver: without it, or with a driver that refuses, Nvml is unavailable and says why.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace meshbench::kernels {
class SharedLibrary;
}

namespace meshbench::agent {

// One device's figures; -1 where NVML could not tell.
struct GpuSample {
    int index = -1;  // NVML's device index
    std::int64_t memoryTotalBytes = -1;
    std::int64_t memoryUsedBytes = -1;
    float utilization = -1;  // 0..1: the share of the last sample period a kernel ran
    bool operator==(const GpuSample&) const = default;
};

class Nvml {
public:
    // Loads the library and initialises NVML. Never throws: any failure leaves it unavailable.
    explicit Nvml(const std::string& library = "libnvidia-ml.so.1");
    ~Nvml();  // shuts NVML down and unloads the library
    Nvml(const Nvml&) = delete;
    Nvml& operator=(const Nvml&) = delete;

    bool available() const { return m_api != nullptr; }
    // Why it is unavailable (the library named); empty when available.
    const std::string& unavailableReason() const { return m_unavailableReason; }

    // One sample per device; empty when unavailable. A device whose query fails keeps -1 in the
    // figures it could not get. Thread-safe (NVML is).
    std::vector<GpuSample> sample() const;

    // The process's NVML, loaded on first use and kept until exit (initialising NVML is slow).
    static const Nvml& process();

private:
    struct Api;  // the entry points, resolved from the library

    std::unique_ptr<kernels::SharedLibrary> m_library;
    std::unique_ptr<Api> m_api;  // set once NVML is initialised
    std::string m_unavailableReason;
};

}  // namespace meshbench::agent
