#include "presets.h"

#include <algorithm>
#include <thread>
#include <unistd.h>

namespace meshbench::plan {
namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
constexpr double GB = 1e9;
constexpr double TFLOPS = 1e12;

struct DeviceRow {
    std::string_view kind;
    double peakFlops;
    double memoryBytes;
    double memoryBandwidth;
};

// Dense (non-sparse) bf16 peaks and HBM sizes from NVIDIA's datasheets:
// A100 SXM 80GB: 312 TFLOP/s, 80 GB HBM2e at 2,039 GB/s.
// H100 SXM: 989 TFLOP/s (1,979 with sparsity), 80 GB HBM3 at 3.35 TB/s.
// H200 SXM: 989 TFLOP/s, 141 GB HBM3e at 4.8 TB/s.
// B200 (HGX B200): 2.25 PFLOP/s dense bf16, 180 GB HBM3e at 7.7 TB/s.
// GB200 (per Blackwell GPU in an NVL72 rack): 2.5 PFLOP/s dense bf16, 186 GB HBM3e at 8 TB/s.
constexpr DeviceRow kDevices[] = {
    {"a100-80gb", 312 * TFLOPS, 80 * GB, 2039 * GB}, {"h100-sxm", 989 * TFLOPS, 80 * GB, 3350 * GB},
    {"h200-sxm", 989 * TFLOPS, 141 * GB, 4800 * GB}, {"b200", 2250 * TFLOPS, 180 * GB, 7700 * GB},
    {"gb200", 2500 * TFLOPS, 186 * GB, 8000 * GB},
};

// The cpu device is one core of this machine running fp32 GEMMs through OpenBLAS: two AVX2
// FMA units x 8 fp32 lanes x 2 FLOP at about 3 GHz is ~96 GFLOP/s; memory is this machine's RAM
// divided by its cores.
DeviceSpec cpuDevice()
{
    const double pages = double(sysconf(_SC_PHYS_PAGES));
    const double pageSize = double(sysconf(_SC_PAGE_SIZE));
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double ram = pages > 0 && pageSize > 0 ? pages * pageSize : 8 * GiB;
    return {"cpu", 96e9, ram / cores, 20 * GB};
}

DeviceSpec toDevice(const DeviceRow& row)
{
    return {std::string(row.kind), row.peakFlops, row.memoryBytes, row.memoryBandwidth};
}

// NVLink per GPU and direction: A100 300 GB/s (NVLink 3, 600 GB/s bidirectional), H100/H200
// 450 GB/s (NVLink 4, 900 GB/s), B200/GB200 900 GB/s (NVLink 5, 1.8 TB/s). Network per GPU:
// DGX A100 one 200 Gb/s HDR port per GPU (25 GB/s), DGX H100/H200/B200 one 400 Gb/s
// ConnectX-7 per GPU (50 GB/s). Latencies are typical NCCL small-message figures.
ClusterSpec dgx(std::string_view preset, std::string_view device, int nodes, double nvlink, double network)
{
    ClusterSpec c;
    c.preset = std::string(preset);
    c.nodes = nodes;
    c.devicesPerNode = 8;
    c.nvlinkDomain = 8;
    c.device = *devicePreset(device);
    c.intraBandwidth = nvlink;
    c.interBandwidth = network;
    c.intraLatency = 3e-6;
    c.interLatency = 10e-6;
    return c;
}

}  // namespace

std::optional<DeviceSpec> devicePreset(std::string_view kind)
{
    if (kind == "cpu")
        return cpuDevice();
    for (const DeviceRow& row : kDevices)
        if (row.kind == kind)
            return toDevice(row);
    return std::nullopt;
}

std::vector<std::string_view> devicePresetNames()
{
    std::vector<std::string_view> names;
    for (const DeviceRow& row : kDevices)
        names.push_back(row.kind);
    names.push_back("cpu");
    return names;
}

std::optional<ClusterSpec> clusterPreset(std::string_view name)
{
    if (name == "dgx-a100")
        return dgx(name, "a100-80gb", 1, 300 * GB, 25 * GB);
    if (name == "dgx-h100")
        return dgx(name, "h100-sxm", 1, 450 * GB, 50 * GB);
    if (name == "dgx-h100x4")
        return dgx(name, "h100-sxm", 4, 450 * GB, 50 * GB);
    if (name == "dgx-h100x128")
        return dgx(name, "h100-sxm", 128, 450 * GB, 50 * GB);
    if (name == "dgx-h100x2048")
        return dgx(name, "h100-sxm", 2048, 450 * GB, 50 * GB);
    if (name == "dgx-h200")
        return dgx(name, "h200-sxm", 1, 450 * GB, 50 * GB);
    if (name == "dgx-b200")
        return dgx(name, "b200", 1, 900 * GB, 50 * GB);
    if (name == "gb200-nvl72") {
        // 18 compute trays of 4 GPUs, all 72 in one NVLink 5 domain; 800 Gb/s ConnectX-8 per GPU.
        ClusterSpec c = dgx(name, "gb200", 18, 900 * GB, 100 * GB);
        c.devicesPerNode = 4;
        c.nvlinkDomain = 72;
        return c;
    }
    if (name == "local-cpu") {
        // One device per core of this machine; ranks talk through shared memory.
        ClusterSpec c;
        c.preset = "local-cpu";
        c.nodes = 1;
        c.devicesPerNode = int(std::max(1u, std::thread::hardware_concurrency()));
        c.nvlinkDomain = c.devicesPerNode;
        c.device = cpuDevice();
        c.intraBandwidth = 5 * GB;
        c.interBandwidth = 5 * GB;
        c.intraLatency = 1e-6;
        c.interLatency = 1e-6;
        return c;
    }
    return std::nullopt;
}

std::vector<std::string_view> clusterPresetNames()
{
    return {"dgx-a100", "dgx-h100", "dgx-h100x4",  "dgx-h100x128", "dgx-h100x2048",
            "dgx-h200", "dgx-b200", "gb200-nvl72", "local-cpu"};
}

}  // namespace meshbench::plan
