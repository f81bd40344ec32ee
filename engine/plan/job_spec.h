#pragma once
// The job spec: one JSON document describing the model, the parallel layout, the precision,
// the cluster, and (passed through for the training stack) train and backend settings.

#include "schedule.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::plan {

enum class Norm { LayerNorm, RmsNorm };
enum class Activation { Gelu, SwiGlu };
enum class Recompute { None, Selective, Full };
enum class GradDtype { Fp32, Bf16 };
// Whose activations the planner counts: bf16 is what Megatron-LM keeps (Korthikanti et al. 2022),
// fp32 what meshbench-agent keeps (its model is fp32 on every backend; agent_activations.h).
enum class ActivationDtype { Bf16, Fp32 };
// Rank order, innermost dimension first. EP is always carved out of DP at its innermost end.
enum class RankOrder { TpDpPp, TpPpDp };

std::string_view normName(Norm n);
std::string_view activationName(Activation a);
std::string_view recomputeName(Recompute r);
std::string_view gradDtypeName(GradDtype g);
std::string_view activationDtypeName(ActivationDtype a);
std::string_view rankOrderName(RankOrder o);

struct MoeSpec {
    int experts = 0;  // 0: a dense model
    int topK = 1;
    std::int64_t ffnHidden = 0;  // per expert
    int everyNLayers = 1;        // layer i is an MoE layer when i % everyNLayers == 0 (Megatron's moe_layer_freq)
    double capacityFactor = 1.0;
    double auxLossCoef = 0.01;
    bool enabled() const { return experts > 0; }
};

struct ModelSpec {
    int layers = 0;
    std::int64_t hidden = 0;
    int heads = 0;
    int kvHeads = 0;  // GQA query groups; equal to heads for plain multi-head attention
    std::int64_t ffnHidden = 0;
    std::int64_t vocab = 0;
    std::int64_t seqLen = 0;
    Norm norm = Norm::LayerNorm;
    Activation activation = Activation::Gelu;
    bool tiedEmbeddings = true;
    MoeSpec moe;

    bool isMoeLayer(int layer) const { return moe.enabled() && layer % moe.everyNLayers == 0; }
    // MoE layers among [first, first + count).
    int moeLayersIn(int first, int count) const;
};

constexpr double bytesOfMiB(double mib) { return mib * 1024.0 * 1024.0; }

struct ParallelSpec {
    int dp = 1;
    int pp = 1;
    int tp = 1;
    int ep = 1;
    int zero = 0;  // ZeRO stage 0-3; 1 is Megatron's distributed optimizer
    bool sequenceParallel = false;
    Recompute recompute = Recompute::Selective;
    ScheduleKind schedule = ScheduleKind::OneFOneB;
    int virtualStages = 1;
    int microbatches = 1;  // per data-parallel replica and step (m)
    int microBatchSize = 1;
    RankOrder order = RankOrder::TpDpPp;
    // The data-parallel reduction in buckets of this many MiB (PyTorch DDP's bucket_cap_mb),
    // each started during the backward as soon as its gradients are final (Megatron's
    // --overlap-grad-reduce) unless overlap is off.
    double gradBucketMb = 25.0;
    double gradBucketBytes() const { return bytesOfMiB(gradBucketMb); }
    bool overlapGradReduce = true;
    // Planned only (the agent refuses them): ZeRO's weight all-gather hidden under the next
    // step's forward (Megatron's --overlap-param-gather), and TP's all-gathers and
    // reduce-scatters pipelined with the GEMMs they feed (Megatron's --tp-comm-overlap).
    bool overlapParamGather = false;
    bool tpCommOverlap = false;

    std::int64_t worldSize() const { return std::int64_t(dp) * pp * tp; }
    std::int64_t globalBatch() const { return std::int64_t(dp) * microBatchSize * microbatches; }
    ScheduleShape scheduleShape() const { return {schedule, pp, microbatches, virtualStages, 0}; }
};

struct PrecisionSpec {
    GradDtype grads = GradDtype::Fp32;  // Megatron keeps fp32 main grads; the ZeRO paper uses fp16/bf16
    // precision.activations. A document without it gets fp32 when the cluster's device kind is
    // "cpu" and bf16 otherwise (loadJobSpec decides once the cluster is read); a spec built in code
    // gets bf16.
    ActivationDtype activations = ActivationDtype::Bf16;
};

struct DeviceSpec {
    std::string kind;      // preset name, e.g. "h100-sxm"
    double peakFlops = 0;  // dense bf16 (fp32 for the cpu device), FLOP/s
    double memoryBytes = 0;
    double memoryBandwidth = 0;  // bytes/s
};

// Rates fitted to a session's measured spans by `meshbench-engine calibrate`; each replaces the
// device table's figure when set (zero, or negative for the latencies and overhead, means unset).
struct CalibrationSpec {
    std::string source;           // what it was fitted to, e.g. the session's file name
    double matmulEfficiency = 0;  // share of the device's peak its large GEMMs reach
    double attentionEfficiency = 0;
    double memoryBandwidth = 0;  // bytes/s
    double kernelOverhead = -1;  // seconds per kernel or op
    double intraBandwidth = 0;   // bus bytes/s per device
    double interBandwidth = 0;
    double intraLatency = -1;  // seconds
    double interLatency = -1;
    bool empty() const { return source.empty(); }
};

struct ClusterSpec {
    std::string preset;  // empty when described by hand
    int nodes = 1;
    int devicesPerNode = 1;
    int nvlinkDomain = 1;  // devices that share the fast fabric (a node, or an NVL72 rack)
    DeviceSpec device;
    double intraBandwidth = 0;     // bytes/s per device, one direction, inside an NVLink domain
    double interBandwidth = 0;     // bytes/s per device, one direction, across the network
    double intraLatency = 0;       // seconds
    double interLatency = 0;       // seconds
    double computeEfficiency = 0;  // share of peak a large GEMM reaches; 0: the device table's
    CalibrationSpec calibration;

    std::int64_t devices() const { return std::int64_t(nodes) * devicesPerNode; }
};

// Optimiser and data settings of the training stack. The learning rate warms up linearly over
// warmupSteps, then follows a cosine from lr down to minLr at step decaySteps (as nanoGPT and
// Megatron's cosine schedule) and stays there; decaySteps = 0 keeps it constant. AdamW as
// Loshchilov & Hutter 2019.
// Where the trainer's tokens come from (train.data):
//   absent or null                                     markov, order 1, branching min(4, vocab)
//   {"source": "markov", "order": k, "branching": b}   order in [1, seq_len], branching in [2, vocab]
//   {"source": "file", "path": P, "dtype": "uint16" | "uint32"}   a flat token file (nanoGPT's)
// Checked here with the rest of the spec, so a bad setting is refused before anything launches; the
// agent checks only what it alone can see, the token file itself.
enum class DataSource { Markov, File };
std::string_view dataSourceName(DataSource s);
enum class TokenDtype { Uint16, Uint32 };
std::string_view tokenDtypeName(TokenDtype d);

struct DataSpec {
    DataSource source = DataSource::Markov;
    int order = 1;                 // markov
    std::optional<int> branching;  // markov; unset: min(4, vocab)
    std::string path;              // file: relative paths are relative to the job spec's folder
    TokenDtype dtype = TokenDtype::Uint16;
    int branchingFor(std::int64_t vocab) const { return branching.value_or(int(std::min<std::int64_t>(4, vocab))); }
};

struct TrainSpec {
    int steps = 100;
    double lr = 3e-3;
    int warmupSteps = 0;
    int decaySteps = 0;
    double minLr = 0;
    double weightDecay = 0.1;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double gradClip = 1.0;  // global gradient-norm clip; 0 turns it off
    std::uint64_t seed = 1234;
    DataSpec data;
};

enum class BackendKind { Auto, Cpu, Cuda };
std::string_view backendName(BackendKind b);

// Another program run in meshbench-agent's place (launch): started under mpirun or srun as the agent
// is, one process per rank, it reports to the engine itself (MESHBENCH_COLLECTOR and the other
// variables the engine exports; docs/job-spec.md). The model and parallel sections still describe
// the run, and the plan stands beside what the program measures. Relative paths (cwd, a program
// named with a '/') are relative to the job spec's folder, as train.data.path is.
struct LaunchSpec {
    std::vector<std::string> command;        // the program and its arguments; empty: meshbench-agent
    std::string cwd;                         // the ranks' working directory; empty: the job spec's folder
    std::map<std::string, std::string> env;  // set for every rank
    bool enabled() const { return !command.empty(); }
};

struct JobSpec {
    std::string name;
    ModelSpec model;
    ParallelSpec parallel;
    PrecisionSpec precision;
    ClusterSpec cluster;
    TrainSpec train;
    BackendKind backend = BackendKind::Auto;
    LaunchSpec launch;
};

// One thing wrong with a spec: the JSON path ("parallel.pp") and a message that names the rule,
// the values and a fix.
struct SpecError {
    std::string path;
    std::string message;
};

struct LoadResult {
    std::optional<JobSpec> spec;    // set when the document is structurally sound (types, ranges, keys)
    std::vector<SpecError> errors;  // structural errors, then layout errors
    // For a valid spec: what this build's meshbench-agent refuses to run of it as laid out
    // (agentCanRun, capability.h). The planner still prices such a spec; run, the Designer and the
    // agent refuse it.
    std::vector<SpecError> refusals;
    bool valid() const { return spec.has_value() && errors.empty(); }
    bool runnable() const { return valid() && refusals.empty(); }
};

// Parses and checks a job spec. Structural problems (syntax, types, ranges, unknown keys,
// unknown presets) leave spec empty; layout problems (divisibility, world size) keep the spec
// so that a designer can still draw it; a valid spec also gets the agent's refusals.
LoadResult parseJobSpec(std::string_view text);
LoadResult loadJobSpec(const nlohmann::json& document);

// Every divisor of n >= 1, ascending.
std::vector<std::int64_t> divisorsOf(std::int64_t n);
// The largest number every TP-split dimension divides by (heads, query groups, both MLP widths,
// the vocabulary): tp is valid exactly when it divides this.
std::int64_t tensorParallelBound(const ModelSpec& model);

// The layout rules alone: world size, divisibility of layers, heads, ffn, vocab and experts,
// EP inside DP, and the schedule's own rules.
std::vector<SpecError> validateLayout(const JobSpec& spec);

// The job as one device runs it (meshbench-engine run --one-device): the same global batch
// through one pipeline, on a one-device cluster, so its one replica runs dp x m micro-batches.
JobSpec singleDeviceSpec(JobSpec spec);
// The layout a run of `ranks` processes executed: the spec's own, or singleDeviceSpec when one
// process ran a larger layout (a session's rank count tells which).
JobSpec specAsRun(JobSpec spec, std::size_t ranks);

// Serialises a spec back to JSON with every field explicit.
nlohmann::json toJson(const JobSpec& spec);

// A calibration profile: the file `meshbench-engine calibrate --out` writes and `--profile`
// reads, the same object as a spec's cluster.calibration.
nlohmann::json toJson(const CalibrationSpec& calibration);
std::optional<CalibrationSpec> readCalibrationProfile(const nlohmann::json& profile, std::vector<SpecError>& errors);

}  // namespace meshbench::plan
