#include "device_model.h"

#include "units.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <thread>

namespace meshbench::plan {
namespace {

struct KernelRow {
    std::string_view kind;
    double matmulEfficiency;
    double computeUnits;
    double attentionEfficiency;
    double memoryEfficiency;  // achieved share of the datasheet's HBM bandwidth
};

// What each GPU kind's kernels reach, and where the figure comes from:
// - matmulEfficiency: the share of peak a large GEMM sustains inside a training step. A bf16
//   8192^3 GEMM bursts at 769-798 TFLOP/s of 989 (0.80) on the H200 this project is lent
//   (REFERENCES.md, "GPU figures"), an upper bound: a step holds the GPU at its power limit, with
//   lower clocks. 0.74 is fitted to measurements of whole steps, with kInStepShare below: the
//   pair that minimises the mean error over all nine of Megatron-LM's H100 weak-scaling runs at
//   once (bench_megatron_mfu); the H200, A100 and Blackwell rows take the same share.
// - computeUnits: SMs per GPU (H100/H200 SXM 132, A100 108, B200/GB200 148, NVIDIA's whitepapers).
// - attentionEfficiency: cuDNN's causal flash attention forward at head dim 128 ran 529 TFLOP/s
//   on an H100 (FlashAttention README's FA3 comparison), 0.535 of 989; FlashAttention-2 on an
//   A100 reaches about 0.6 of 312 (FlashAttention-2 paper, Fig. 4). Transformer Engine runs
//   cuDNN's attention on Hopper (its backend choice gives FusedAttention preference on sm90).
// - memoryEfficiency: a device-to-device copy moved 4.3 TB/s of the H200's 4.8 (REFERENCES.md).
constexpr double kSustainedGemm = 0.74;
constexpr KernelRow kKernelRows[] = {
    {"a100-80gb", kSustainedGemm, 108, 0.60, 0.90}, {"h100-sxm", kSustainedGemm, 132, 0.535, 0.90},
    {"h200-sxm", kSustainedGemm, 132, 0.535, 0.90}, {"b200", kSustainedGemm, 148, 0.535, 0.90},
    {"gb200", kSustainedGemm, 148, 0.535, 0.90},
};

// A hand-described GPU gets the H100's shares.
constexpr KernelRow kUnknownGpu = {"", kSustainedGemm, 132, 0.535, 0.90};

// Inside a step, attention and the streaming kernels between the GEMMs (norms, residual and
// dropout adds, activations, casts, layout copies, the cross-entropy) keep only this share of
// the rates they reach on their own above: the second constant fitted to Megatron-LM's table as
// a whole. It is what the small-hidden runs need (1.7B and 7.1B, where those kernels are a third
// and a fifth of the work, planned 25% and 19% fast at their own rates); a step's many
// short kernels, each a few microseconds of ramp and launch gap, and Megatron's default
// attention and hidden dropout are the likely causes, which a device check can separate
// (bench_gpu --megatron-shapes times the GEMMs alone).
constexpr double kInStepShare = 0.5;

// cuBLAS's Hopper and Ampere GEMM kernels compute 128 x 256 output tiles per SM at the sizes a
// transformer uses (the tile shapes cuBLASLt's heuristics return for them); their K loop runs in
// blocks of 64 and each tile's prologue and epilogue cost about four of them.
constexpr double kGpuTileRows = 128, kGpuTileCols = 256, kGpuTileDepth = 256;
// Back-to-back kernels on one stream leave about 2 us between them (kernel launch latency as
// Nsight Systems shows it); a stream of small kernels cannot go faster.
constexpr double kGpuKernelOverhead = 2e-6;
// FlashAttention's backward runs at about 0.8 of its forward's FLOP rate (FlashAttention-2
// paper, Figs. 5 and 6; FlashAttention-3 paper, Fig. 6), counting its 2.5x the forward's FLOPs.
constexpr double kAttentionBackwardRate = 0.8;

// The cpu device: one core running the agent's fp32 CPU backend (OpenBLAS sgemm, single thread).
// Measured on the 2-core CI machine with bench_cpu_rates (tests/benchmarks): OpenBLAS reaches
// about this share of the 96 GFLOP/s AVX2 peak on large sgemm, the agent's streaming kernels
// move about this many bytes/s, and each backend call costs about this much beyond its work.
constexpr double kCpuMatmulEfficiency = 0.60;
constexpr double kCpuMemoryBandwidth = 8e9;
constexpr double kCpuKernelOverhead = 1.5e-6;
constexpr double kCpuAttentionEfficiency = 0.15;
// Ranks beyond the cores also cost the ones computing: context switches and the caches they
// share. Each rank per core beyond one slows every rank by this share; measured with dp4 x tp2 x
// ep2 of the demo model (8 ranks, no pipeline, so all busy) on the 2-core CI machine, whose steps
// took 1.47x what 2 ranks' rates shared four ways predict.
constexpr double kCpuContentionPerRank = 0.16;

// NCCL's bus bandwidth as a share of the line rate: 370 of 450 GB/s on NVLink 4 (8 x H100,
// nccl-tests issue #212); InfiniBand NDR carries about 0.9 of its 400 Gb/s as payload.
constexpr double kNvlinkEfficiency = 370.0 / 450.0;
constexpr double kNetworkEfficiency = 0.9;

const KernelRow& kernelRow(std::string_view kind)
{
    for (const KernelRow& row : kKernelRows)
        if (row.kind == kind)
            return row;
    return kUnknownGpu;
}

double orDefault(double calibrated, double otherwise) { return calibrated > 0 ? calibrated : otherwise; }

// ceil(x / unit) * unit
double roundUp(double x, double unit) { return std::ceil(x / unit) * unit; }

}  // namespace

Performance devicePerformance(const ClusterSpec& cluster, int ranksPerNode, double busyShare)
{
    const CalibrationSpec& cal = cluster.calibration;
    Performance perf;
    DevicePerformance& d = perf.device;
    d.matmulPeak = cluster.device.peakFlops;
    const bool cpu = cluster.device.kind == "cpu";
    if (cpu) {
        d.matmulEfficiency = kCpuMatmulEfficiency;
        d.attentionEfficiency = kCpuAttentionEfficiency;
        d.attentionBackwardRate = kAttentionBackwardRate;
        d.memoryBandwidth = kCpuMemoryBandwidth;
        d.kernelOverhead = kCpuKernelOverhead;
        d.activationBytes = 4;
        // Ranks beyond the node's cores share them while they compute (a rank waiting in MPI
        // yields its core): each gets cores / (ranks x their busy share) of one, less what the
        // crowding costs.
        const double cores = std::max(1u, std::thread::hardware_concurrency());
        const double ranks = std::max(1, ranksPerNode);
        const double competing = ranks * std::clamp(busyShare, 1.0 / ranks, 1.0);
        const double crowding = 1.0 + kCpuContentionPerRank * std::max(0.0, ranks / cores - 1.0);
        d.rateShare = std::min(1.0, cores / competing) / crowding;
    } else {
        const KernelRow& row = kernelRow(cluster.device.kind);
        d.matmulEfficiency = row.matmulEfficiency;
        d.computeUnits = row.computeUnits;
        d.tileRows = kGpuTileRows;
        d.tileCols = kGpuTileCols;
        d.tileDepthOverhead = kGpuTileDepth;
        d.attentionEfficiency = row.attentionEfficiency;
        d.attentionBackwardRate = kAttentionBackwardRate;
        d.memoryBandwidth = cluster.device.memoryBandwidth * row.memoryEfficiency;
        d.inStepShare = kInStepShare;
        d.kernelOverhead = kGpuKernelOverhead;
    }
    if (cluster.computeEfficiency > 0)
        d.matmulEfficiency = cluster.computeEfficiency;
    d.matmulEfficiency = orDefault(cal.matmulEfficiency, d.matmulEfficiency);
    d.attentionEfficiency = orDefault(cal.attentionEfficiency, d.attentionEfficiency);
    d.memoryBandwidth = orDefault(cal.memoryBandwidth, d.memoryBandwidth);
    if (cal.kernelOverhead >= 0)
        d.kernelOverhead = cal.kernelOverhead;

    perf.intra = {cluster.intraBandwidth * (cpu ? 1.0 : kNvlinkEfficiency), cluster.intraLatency};
    perf.inter = {cluster.interBandwidth * (cpu ? 1.0 : kNetworkEfficiency), cluster.interLatency};
    perf.intra.busBandwidth = orDefault(cal.intraBandwidth, perf.intra.busBandwidth);
    perf.inter.busBandwidth = orDefault(cal.interBandwidth, perf.inter.busBandwidth);
    if (cal.intraLatency >= 0)
        perf.intra.latency = cal.intraLatency;
    if (cal.interLatency >= 0)
        perf.inter.latency = cal.interLatency;
    return perf;
}

CalibrationBounds calibrationBounds(const ClusterSpec& cluster)
{
    ClusterSpec datasheet = cluster;
    datasheet.calibration = {};
    const Performance table = devicePerformance(datasheet, 1);
    const auto slowest = [](double rate) { return rate / kSlowestCalibration; };
    CalibrationBounds bounds;
    bounds.matmulEfficiency = {slowest(table.device.matmulEfficiency), 1.0};
    bounds.attentionEfficiency = {slowest(table.device.attentionEfficiency), 1.0};
    bounds.memoryBandwidth = {slowest(table.device.memoryBandwidth), cluster.device.memoryBandwidth};
    bounds.kernelOverhead = {0.0, table.device.kernelOverhead * kSlowestCalibration};
    bounds.intraBandwidth = {slowest(table.intra.busBandwidth), cluster.intraBandwidth};
    bounds.interBandwidth = {slowest(table.inter.busBandwidth), cluster.interBandwidth};
    return bounds;
}

std::vector<SpecError> calibrationBoundsErrors(const ClusterSpec& cluster, const CalibrationSpec& calibration)
{
    const CalibrationBounds bounds = calibrationBounds(cluster);
    const std::string device = "the " + cluster.device.kind + " device";
    std::vector<SpecError> errors;
    // `value` shown in the profile's unit (`scale` of the spec's); zero is unset.
    const auto check = [&](const char* key, double value, const RateRange& range, double scale, const char* unit,
                           const std::string& peak) {
        if (value == 0)
            return;
        const auto shown = [&](double v) { return formatNumber("%.4g", v / scale) + unit; };
        if (!std::isfinite(value) || value < 0)
            errors.push_back({key, "is " + formatNumber("%g", value / scale) + ", not a finite positive rate"});
        else if (range.highest > 0 && value > range.highest)
            errors.push_back({key, shown(value) + " is above " + shown(range.highest) + ", " + peak});
        else if (value < range.lowest)
            errors.push_back({key, shown(value) + " is below " + shown(range.lowest) + ", 1/" +
                                       formatNumber("%.0f", kSlowestCalibration) + " of " + device + "'s table"});
    };
    // The overhead is bounded the other way: a slower device pays more per op. Negative is unset.
    const auto checkOverhead = [&](double value) {
        if (std::isfinite(value) && value < 0)
            return;
        if (!std::isfinite(value))
            errors.push_back({"kernel_overhead_us", "is not a finite number"});
        else if (value > bounds.kernelOverhead.highest)
            errors.push_back({"kernel_overhead_us", formatNumber("%.4g us", value * 1e6) + " is above " +
                                                        formatNumber("%.4g us", bounds.kernelOverhead.highest * 1e6) +
                                                        ", " + formatNumber("%.0f", kSlowestCalibration) + " times " +
                                                        device + "'s table"});
    };
    check("matmul_efficiency", calibration.matmulEfficiency, bounds.matmulEfficiency, 1.0, "",
          device + "'s peak FLOP/s");
    check("attention_efficiency", calibration.attentionEfficiency, bounds.attentionEfficiency, 1.0, "",
          device + "'s peak FLOP/s");
    check("memory_bandwidth_GBps", calibration.memoryBandwidth, bounds.memoryBandwidth, 1e9, " GB/s",
          device + "'s datasheet memory bandwidth");
    checkOverhead(calibration.kernelOverhead);
    check("intra_node_bus_bandwidth_GBps", calibration.intraBandwidth, bounds.intraBandwidth, 1e9, " GB/s",
          "the line rate of the cluster's intra-node links");
    check("inter_node_bus_bandwidth_GBps", calibration.interBandwidth, bounds.interBandwidth, 1e9, " GB/s",
          "the line rate of the cluster's inter-node links");
    return errors;
}

LinkPerformance Performance::collective(const GroupLink& group) const
{
    if (group.insideDomain)
        return intra;
    return {std::min(intra.busBandwidth, std::max(1, group.membersPerDomain) * inter.busBandwidth), inter.latency};
}

double gemmEfficiency(const DevicePerformance& d, double m, double n, double k)
{
    double efficiency = d.matmulEfficiency;
    if (d.tileRows > 0 && d.tileCols > 0 && d.computeUnits > 0) {
        // Whole tiles in partly empty waves, with the better of the two tile orientations as a
        // heuristic picking kernels would. Padding inside a tile is not counted: a GEMM too
        // thin to fill its tiles is bound by its bytes, which the roofline takes care of.
        auto quantized = [&](double rows, double cols) {
            const double tiles = std::ceil(m / rows) * std::ceil(n / cols);
            return tiles / roundUp(tiles, d.computeUnits);
        };
        efficiency *= std::max(quantized(d.tileRows, d.tileCols), quantized(d.tileCols, d.tileRows));
    }
    if (d.tileDepthOverhead > 0) {
        // Relative to the 8192-deep GEMM the efficiency is quoted for.
        const double reference = 8192.0 / (8192.0 + d.tileDepthOverhead);
        efficiency *= (k / (k + d.tileDepthOverhead)) / reference;
    }
    return efficiency;
}

double gemmTime(const DevicePerformance& d, double m, double n, double k)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return 0.0;
    const double rate = d.matmulPeak * d.rateShare * gemmEfficiency(d, m, n, k);
    const double arithmetic = 2.0 * m * n * k / rate;
    const double bytes = d.activationBytes * (m * k + k * n + m * n);
    return std::max(arithmetic, bytes / (d.memoryBandwidth * d.rateShare)) + d.kernelOverhead / d.rateShare;
}

double streamTime(const DevicePerformance& d, double bytes)
{
    return bytes <= 0 ? 0.0 : (bytes / (d.memoryBandwidth * d.inStepShare) + d.kernelOverhead) / d.rateShare;
}

double allReduceTime(double bytes, int n, const LinkPerformance& link)
{
    return n <= 1 ? 0.0 : 2.0 * (n - 1) * link.latency + 2.0 * (n - 1) / n * bytes / link.busBandwidth;
}

double allGatherTime(double bytes, int n, const LinkPerformance& link)
{
    return n <= 1 ? 0.0 : (n - 1) * link.latency + double(n - 1) / n * bytes / link.busBandwidth;
}

double reduceScatterTime(double bytes, int n, const LinkPerformance& link) { return allGatherTime(bytes, n, link); }

// Each rank keeps 1/n of its buffer and sends the rest, one part to each peer.
double allToAllTime(double bytes, int n, const LinkPerformance& link) { return allGatherTime(bytes, n, link); }

double sendTime(double bytes, const LinkPerformance& link) { return link.latency + bytes / link.busBandwidth; }

}  // namespace meshbench::plan
