// A stand-in for the driver's libnvidia-ml.so.1 with fixed figures, for tst_nvml: two devices of
// 80 GiB; device 0 has 12 GiB used and 37% utilisation, device 1 has 3 GiB used and its
// utilisation query fails. With FAKE_NVML_INIT_FAILS=1 in the environment, nvmlInit_v2 fails.

#include <cstdlib>
#include <cstring>
#include <iterator>

namespace {

constexpr int kSuccess = 0;
constexpr int kDriverNotLoaded = 9;
constexpr int kUnknownError = 999;
constexpr unsigned long long kGiB = 1ull << 30;

struct Device {
    unsigned long long totalBytes, usedBytes;
    int utilizationStatus;
    unsigned int utilizationPercent;
};
constexpr Device kDevices[] = {{80 * kGiB, 12 * kGiB, kSuccess, 37}, {80 * kGiB, 3 * kGiB, kUnknownError, 0}};
constexpr unsigned int kDeviceCount = std::size(kDevices);

int initialised = 0;  // nvmlInit_v2 calls not yet matched by nvmlShutdown

struct Memory {
    unsigned long long total, free, used;
};
struct Utilization {
    unsigned int gpu, memory;
};

}  // namespace

extern "C" {

int nvmlInit_v2()
{
    const char* fails = std::getenv("FAKE_NVML_INIT_FAILS");
    if (fails && std::strcmp(fails, "1") == 0)
        return kDriverNotLoaded;
    ++initialised;
    return kSuccess;
}

int nvmlShutdown()
{
    --initialised;
    return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned int* count)
{
    *count = kDeviceCount;
    return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, const Device** device)
{
    if (index >= kDeviceCount)
        return kUnknownError;
    *device = &kDevices[index];
    return kSuccess;
}

int nvmlDeviceGetMemoryInfo(const Device* device, Memory* memory)
{
    *memory = {device->totalBytes, device->totalBytes - device->usedBytes, device->usedBytes};
    return kSuccess;
}

int nvmlDeviceGetUtilizationRates(const Device* device, Utilization* utilization)
{
    if (device->utilizationStatus != kSuccess)
        return device->utilizationStatus;
    *utilization = {device->utilizationPercent, 0};
    return kSuccess;
}

const char* nvmlErrorString(int status)
{
    return status == kDriverNotLoaded ? "fake: driver not loaded" : "fake: unknown error";
}

// Not NVML: lets the test see that every successful nvmlInit_v2 was shut down.
int fakeNvmlInitialised() { return initialised; }

}  // extern "C"
