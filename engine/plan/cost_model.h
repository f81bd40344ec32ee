#pragma once
// The cost model: parameters, memory per GPU, FLOPs per step and the time of every pipeline op.
// Formulas cite their sources next to them; all arithmetic is in double so that absurd sizes
// cannot overflow.

#include "device_model.h"
#include "job_spec.h"
#include "mesh.h"
#include "simulator.h"

namespace meshbench::plan {

// Where each kind of group runs its collectives: inside an NVLink domain, or across the network
// with some members per domain.
struct LinkClasses {
    GroupLink tensor;
    GroupLink pipeline;
    GroupLink data;
    GroupLink expert;
    GroupLink expertData;
};
LinkClasses linkClasses(const Mesh& mesh, const ClusterSpec& cluster);

struct ParameterCounts {
    double attentionPerLayer = 0;  // QKV and output projections
    double normsPerLayer = 0;      // the two norms of a layer
    double denseMlp = 0;           // MLP of a dense layer
    double expertMlp = 0;          // all experts of an MoE layer
    double denseLayer = 0;
    double moeLayer = 0;
    int denseLayers = 0;
    int moeLayers = 0;
    double finalNorm = 0;
    double embedding = 0;  // V x h, one copy
    double block = 0;      // every layer plus the final norm
    double total = 0;      // block plus embedding (twice when untied)
};
ParameterCounts countParameters(const ModelSpec& model);

// ZeRO model states (Rajbhandari et al. 2020, Fig. 1): bf16 weights (2 bytes), gradients
// (4 bytes fp32 as Megatron, or 2 bytes bf16 as the paper) and K = 12 bytes of fp32 master
// weights and Adam moments; stage 1 shards the optimizer, 2 also the gradients, 3 also the
// weights over `shardGroup` ranks.
struct ModelStateBytes {
    double weights = 0;
    double grads = 0;
    double optimizer = 0;
    double total() const { return weights + grads + optimizer; }
};
ModelStateBytes modelStateBytes(double params, int shardGroup, int zero, GradDtype grads);

struct MemoryBreakdown {
    double weights = 0;
    double grads = 0;
    double optimizer = 0;
    double activations = 0;
    double total() const { return weights + grads + optimizer + activations; }
};

// The time one micro-batch spends in each op of one physical stage (summed over its chunks),
// seconds, with the same time split by cause.
struct StageWork {
    double forward = 0;
    double backward = 0;  // input gradient (plus recomputation)
    double weightGrad = 0;
    double compute = 0;  // forward + backward + weightGrad minus the communication below
    // The compute by the kind of kernel that runs it (gemm + attention + streaming = compute): what a
    // profiler's kernels measure apart, so that calibration can fit each rate to its own kernels.
    double gemm = 0;
    double attention = 0;
    double streaming = 0;         // element-wise kernels: norms, residuals, rotary, activation, permutes, loss
    double tensorComm = 0;        // exposed TP collectives
    double tensorCommHidden = 0;  // TP collectives overlapped with GEMMs (tp_comm_overlap)
    double expertComm = 0;
    double total() const { return forward + backward + weightGrad; }
};

// A stage's data-parallel communication per step, before any overlap.
struct DataParallelCosts {
    double reduce = 0;        // gradients: all-reduce (ZeRO-0) or reduce-scatter
    double gather = 0;        // updated weights' all-gather (ZeRO 1-3)
    double layerGathers = 0;  // ZeRO-3's per-layer gathers, every forward and backward
    double buckets = 1;       // the reduction's buckets (grad_bucket_mb)
};

// Ranks of the job that share one node.
int ranksPerNode(const JobSpec& spec);

// Pipeline makespan without simulation, for the search: exact for the four schedules when all
// stages cost the same and transfers are free; otherwise the slowest stage sets the pace.
double estimatedMakespan(const ScheduleShape& shape, const std::vector<StageWork>& stages, double transfer);

// The spec is read at call time, except the per-stage parameter maxima taken at construction.
class CostModel {
public:
    // busyShare: the share of the step the ranks compute, for devices whose ranks share cores
    // (devicePerformance); 1 prices them as if always busy.
    CostModel(const JobSpec& spec, const LinkClasses& links, double busyShare = 1.0);

    const ParameterCounts& parameters() const { return m_params; }
    // Parameters held by one GPU of a stage: the dense part (split by tp) and its experts (by tp x ep).
    double denseParametersOnStage(int stage) const;
    double expertParametersOnStage(int stage) const;
    // The stage holding the model's last virtual stage (the output layer and the loss): p - 1,
    // or 0 for the V schedules.
    int lastModelStage() const;
    MemoryBreakdown stageMemory(int stage) const;
    double activationBytes(int stage) const;

    StageWork stageWork(int stage) const;
    OpCosts opCosts() const;      // per virtual stage, for the simulator
    double transferTime() const;  // one activation or gradient across a stage boundary
    DataParallelCosts dataParallelCosts(int stage) const;
    // What of the reduction (or gather) is left exposed when `window` seconds of backward (or
    // forward) compute can hide it.
    double exposedReduction(const DataParallelCosts& dp, double window) const;
    double exposedGather(const DataParallelCosts& dp, double window) const;
    // Exposed DP communication per step without a simulation, from stage 0's collectives
    // (dataParallelCosts(0)) and work (stageWork(0)).
    double dataParallelTime(const DataParallelCosts& dp, const StageWork& first) const;
    double optimizerTime(int stage) const;  // AdamW over the stage's optimizer shard
    double optimizerTime() const;           // the slowest stage's
    const Performance& performance() const { return m_perf; }
    double flopsPerStep() const;  // Megatron-LM's num_floating_point_operations
    double tokensPerStep() const;

private:
    struct LayerCosts {
        double forward = 0, backward = 0, weightGrad = 0, tensorComm = 0, tensorCommHidden = 0, expertComm = 0;
        double gemm = 0, attention = 0, streaming = 0;
    };
    LayerCosts layerCosts(bool moe) const;
    StageWork virtualStageWork(int virtualStage) const;
    // Layers [first, first + count) of the virtual stage, split into dense and MoE.
    void virtualStageLayers(int virtualStage, int& first, int& count) const;
    double inFlightMicrobatches(int stage) const;

    const JobSpec& m_spec;
    LinkClasses m_links;
    ParameterCounts m_params;
    Performance m_perf;
    LayerCosts m_dense;
    LayerCosts m_moe;
};

}  // namespace meshbench::plan
