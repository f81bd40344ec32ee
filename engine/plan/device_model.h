#pragma once
// How fast one device runs the model's kernels and how fast its links move bytes: the rates the
// cost model's rooflines use. They come from a per-kind table (datasheets and published
// measurements, each cited in device_model.cpp) and are replaced by a calibration's fitted values
// where the spec carries one (cluster.calibration, from `meshbench-engine calibrate`).

#include "job_spec.h"

namespace meshbench::plan {

struct DevicePerformance {
    double matmulPeak = 0;        // FLOP/s, dense (bf16 on GPUs, fp32 on the cpu device)
    double matmulEfficiency = 0;  // share of peak a large GEMM (8192^3) reaches
    // Wave quantization (NVIDIA's "Matrix Multiplication Background" guide): a GEMM runs in
    // output tiles, one per compute unit at a time, so ceil(tiles / units) waves of which the
    // last may be partly empty. Zero tile sizes switch it off (the cpu device).
    double computeUnits = 1;  // SMs
    double tileRows = 0, tileCols = 0;
    // Each output tile's fixed cost (filling the K loop's pipeline, the epilogue's store), as the
    // K depth that would take as long: a GEMM of depth K runs at K / (K + depth) of the rate.
    double tileDepthOverhead = 0;
    double attentionEfficiency = 0;    // causal flash-attention forward, FLOPs counted causal
    double attentionBackwardRate = 0;  // the backward's FLOP rate relative to the forward's
    double memoryBandwidth = 0;        // bytes/s that streaming kernels reach on their own
    // Share of their own rates (attentionEfficiency, memoryBandwidth) that attention and the
    // streaming kernels keep inside a training step, between the GEMMs (see device_model.cpp).
    double inStepShare = 1;
    double kernelOverhead = 0;   // seconds each kernel or CPU op costs beyond its work
    double rateShare = 1;        // share of the device a rank gets (cpu: of a core, see devicePerformance)
    double activationBytes = 2;  // element size of activations: bf16, or fp32 for the cpu device
};

// One tier of links: the bus bandwidth a collective reaches per device (nccl-tests' busbw) and
// the latency of one step of a ring.
struct LinkPerformance {
    double busBandwidth = 0;
    double latency = 0;
};

// A group's placement: inside one NVLink domain, or across the network with membersPerDomain of
// its ranks in each domain.
struct GroupLink {
    bool insideDomain = true;
    int membersPerDomain = 1;
};

struct Performance {
    DevicePerformance device;
    LinkPerformance intra;  // inside an NVLink domain (or a node's shared memory)
    LinkPerformance inter;  // across the network, one NIC
    // A point-to-point transfer uses one link of its tier.
    const LinkPerformance& link(bool insideDomain) const { return insideDomain ? intra : inter; }
    // A collective across domains runs one ring per member of a domain, each leaving through its
    // own NIC (NCCL's rings over multi-rail nodes), until NVLink inside the domain is the limit.
    LinkPerformance collective(const GroupLink& group) const;
};

// The rates for a cluster, with its calibration applied. `ranksPerNode` is how many ranks of the
// job share one node, and `busyShare` the share of the step they compute (one minus the pipeline
// bubble): the cpu device's cores go to the ranks computing.
Performance devicePerformance(const ClusterSpec& cluster, int ranksPerNode, double busyShare = 1.0);

// The rates a calibration may give a cluster's device and links (`meshbench-engine calibrate`
// refuses a fit outside them): at most what the hardware can do at all, at least a share of what
// its table says, finite.
struct RateRange {
    double lowest = 0;
    double highest = 0;
};
struct CalibrationBounds {
    // Each is at most its peak: matmul and attention at the device's peak FLOP/s (efficiency 1),
    // memory at its datasheet bandwidth, a bus at its tier's line rate; and at least the table's
    // figure divided by kSlowestCalibration (an op's overhead at most that many times the table's).
    RateRange matmulEfficiency, attentionEfficiency, memoryBandwidth, kernelOverhead, intraBandwidth, interBandwidth;
};
// A fit this many times slower than the device table describes something other than the device
// running the job: damaged spans, or times in the wrong unit (microseconds read as nanoseconds are
// 1000x). A run on a loaded machine or with small, launch-bound kernels stays well inside it.
inline constexpr double kSlowestCalibration = 100;
CalibrationBounds calibrationBounds(const ClusterSpec& cluster);
// What is wrong with `calibration` for `cluster`'s device and links: each rate it sets that is
// not finite or lies outside calibrationBounds, with the profile's key as the path and a message
// saying the bound, where it comes from and what to check. Empty when it may be used.
std::vector<SpecError> calibrationBoundsErrors(const ClusterSpec& cluster, const CalibrationSpec& calibration);

// Seconds for C[m x n] = A[m x k] B[k x n] at the device's rates: the larger of the arithmetic
// (with its shape's efficiency) and the bytes of A, B and C, plus the kernel's overhead.
double gemmTime(const DevicePerformance& d, double m, double n, double k);
// Share of matmulPeak a GEMM of that shape reaches.
double gemmEfficiency(const DevicePerformance& d, double m, double n, double k);
// A memory-bound kernel moving `bytes`.
double streamTime(const DevicePerformance& d, double bytes);

// Collectives over n ranks of one link tier, `bytes` the full buffer (nccl-tests' convention:
// busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for the others), ring latency per step.
double allReduceTime(double bytes, int n, const LinkPerformance& link);
double allGatherTime(double bytes, int n, const LinkPerformance& link);
double reduceScatterTime(double bytes, int n, const LinkPerformance& link);
double allToAllTime(double bytes, int n, const LinkPerformance& link);
double sendTime(double bytes, const LinkPerformance& link);

}  // namespace meshbench::plan
