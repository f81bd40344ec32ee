#pragma once
// Training: the job's global batch per step (dp x micro_batch_size x microbatches sequences),
// mean cross-entropy plus the MoE load-balancing loss, global gradient-norm clipping and AdamW.
// On one device every micro-batch runs here; with process groups, data-parallel rank r runs the
// r-th contiguous share of the global batch and gradients are summed over the data group (the
// experts' over the expert-data group), which computes the same step as one device. The
// dimensions live in the layers below: tensor and expert parallelism inside the model
// (agent/parallel), the pipeline executor, the data-parallel buckets, ZeRO's shards and the
// gradients' finalisation above it (agent/distributed); the step here is their outline.
// Checkpoints hold the parameters, both Adam moments (gathered) and the step, so a resumed run
// continues bit for bit.

#include "agent/data/token_source.h"
#include "agent/distributed/data_parallel.h"
#include "agent/distributed/zero_shards.h"
#include "agent/model/gpt_model.h"
#include "agent/optimizer/adamw.h"
#include "agent/runtime/communicator.h"
#include "agent/telemetry/measurements.h"

#include "kernels/backend.h"
#include "plan/job_spec.h"

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace meshbench::agent {

class PipelineExecutor;

struct StepMetrics {
    int step = 0;         // 1-based: the optimizer step just taken
    double loss = 0;      // mean cross-entropy over the step's tokens
    double auxLoss = 0;   // load-balancing loss, summed over MoE layers, mean over micro-batches
    double gradNorm = 0;  // global L2 norm before clipping
    double learningRate = 0;
    double seconds = 0;
    std::int64_t beginNs = 0;  // on the telemetry clock (Measurements::nowNs)
    std::int64_t endNs = 0;
    double tokensPerSecond = 0;
    double bubbleRatio = 0;                    // measured over every rank: plan::measuredBubble
    std::vector<ExpertLoad> expertLoads;       // per MoE layer of this stage, summed over the step's micro-batches
    std::vector<ExpertLoad> modelExpertLoads;  // the same for every MoE layer of the model (all stages)
};

class Trainer {
public:
    // groups: null on one device; otherwise this rank's process groups (MPI, or in-process for tests).
    Trainer(const plan::JobSpec& spec, kernels::Backend& backend, const ProcessGroups* groups = nullptr);
    ~Trainer();

    // Fresh parameters from the seed, zero optimizer state, step 0.
    void initialize();
    // Parameters, optimizer state and step from a checkpoint written by save(); throws
    // CheckpointError when it does not belong to this job's model.
    void load(const std::string& path);
    // Collective with process groups (the optimizer shards are gathered); world rank 0 writes.
    void save(const std::string& path) const;

    StepMetrics step();
    int completedSteps() const { return m_step; }
    std::int64_t tokensPerStep() const;
    // The tokens of global sample `index`: seq_len + 1 of them.
    void sampleTokens(std::int64_t index, std::int32_t* out) const;
    const TokenSource& data() const { return *m_data; }
    GptModel& model() { return m_model; }
    // What the steps so far measured (spans, memory), handed over; the trainer starts a new record.
    Measurements takeMeasurements() { return m_measurements.take(); }

private:
    // The micro-batches of one step on this rank and how their losses are scaled.
    struct StepBatch {
        int microbatchSize = 1;
        int localMicrobatches = 1;
        float lossScale = 1;                            // 1 / the step's tokens
        float auxScale = 1;                             // 1 / the step's micro-batches
        std::vector<std::vector<std::int32_t>> tokens;  // per local micro-batch
    };
    StepBatch stepBatch() const;
    // Forward and backward of every micro-batch (through the pipeline with stages), the
    // data-parallel buckets reducing as the gradients become final.
    ForwardResult runMicrobatches(const StepBatch& batch, int step);
    // plan::measuredBubble over every rank's spans of the step (a collective over the world).
    double measuredBubble(int step) const;
    // The tied embedding's copies summed, the reduction finished, the SP norms summed.
    void finalizeGradients();
    // Loss, aux loss and expert loads summed over the stages and replicas.
    void sumResults(const StepBatch& batch, const ForwardResult& result, StepMetrics& metrics) const;
    double gradientNorm() const;
    void optimizerStep(StepMetrics& metrics);

    double learningRate(int step) const;
    int dataParallelSize() const { return m_groups ? m_groups->data->size() : 1; }
    int pipelineSize() const { return m_groups ? m_groups->pipeline->size() : 1; }
    int expertParallelSize() const { return m_groups ? m_groups->expert->size() : 1; }
    // Whether this rank's embedding is the last stage's copy of a tied embedding.
    bool holdsTiedCopy() const;
    // Every MoE layer's loads, from each stage's own (collective over the pipeline group).
    std::vector<ExpertLoad> modelExpertLoads(const std::vector<ExpertLoad>& stageLoads) const;
    // The ZeRO stage in effect: the spec's when data parallel, otherwise 0 (nothing to shard).
    int zeroStage() const { return dataParallelSize() > 1 ? m_spec.parallel.zero : 0; }
    // This rank's gradients of what it owns: the shard buffer with ZeRO, the model's without.
    kernels::DevPtr shardGradients() const;
    // A whole flat buffer on the host, from the optimizer's moments or ZeRO-3's parameters,
    // gathered from the shards.
    std::vector<float> gatherMoments(bool second) const;
    void uploadParameters(std::vector<float> params);  // whole flat buffer; ZeRO-3 keeps its shard
    std::vector<float> downloadParameters() const;

    plan::JobSpec m_spec;
    kernels::Backend& m_backend;
    const ProcessGroups* m_groups;
    ModelSlice m_slice;
    GptModel m_model;
    std::unique_ptr<TokenSource> m_data;
    ZeroShards m_shards;
    std::vector<ShardedAdamW> m_optimizers;         // one per range of ZeRO's shards, over the owned piece
    DeviceBuffer m_gradShard;                       // ZeRO: this rank's summed share of the gradients
    DeviceBuffer m_paramShard;                      // ZeRO-3: this rank's share of the parameters
    std::unique_ptr<ShardedParameters> m_gatherer;  // ZeRO-3
    std::unique_ptr<GradientBuckets> m_buckets;     // data parallelism below ZeRO-3
    std::unique_ptr<PipelineExecutor> m_pipeline;   // with pipeline stages
    Measurements m_measurements;
    int m_step = 0;
};

}  // namespace meshbench::agent
