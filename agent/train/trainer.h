#pragma once
// Training: the job's global batch per step (dp x micro_batch_size x microbatches sequences),
// mean cross-entropy plus the MoE load-balancing loss, global gradient-norm clipping and AdamW.
// On one device every micro-batch runs here; with process groups, data-parallel rank r runs the
// r-th contiguous share of the global batch and gradients are summed over the data group, which
// computes the same step as one device. ZeRO (Rajbhandari et al. 2020) cuts the flat buffers into
// dp equal shards: stage 1 reduce-scatters the step's gradients and keeps only this rank's share
// of Adam's moments, updates its share of the parameters and all-gathers them; stage 2 also
// reduce-scatters after every micro-batch, so only a shard of gradients accumulates.
// Checkpoints hold the parameters, both Adam moments (gathered) and the step, so a resumed run
// continues bit for bit.

#include "agent/data/token_source.h"
#include "agent/model/gpt_model.h"
#include "agent/optimizer/adamw.h"
#include "agent/parallel/gradient_norm.h"
#include "agent/runtime/communicator.h"
#include "measurements.h"

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
    int step = 0;                  // 1-based: the optimizer step just taken
    double loss = 0;               // mean cross-entropy over the step's tokens
    double auxLoss = 0;            // load-balancing loss, summed over MoE layers, mean over micro-batches
    double gradNorm = 0;           // global L2 norm before clipping
    double learningRate = 0;
    double seconds = 0;
    std::int64_t beginNs = 0;      // on the telemetry clock (Measurements::nowNs)
    std::int64_t endNs = 0;
    double tokensPerSecond = 0;
    double bubbleRatio = 0;        // measured: idle share of the pipeline phase, over all stages
    std::vector<ExpertLoad> expertLoads;   // per MoE layer, summed over the step's micro-batches
};

class Trainer {
public:
    // groups: null on one device; otherwise this rank's process groups (data parallelism only so far).
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
    double learningRate(int step) const;
    int dataParallelSize() const { return m_groups ? m_groups->data->size() : 1; }
    int pipelineSize() const { return m_groups ? m_groups->pipeline->size() : 1; }
    int expertParallelSize() const { return m_groups ? m_groups->expert->size() : 1; }
    // Whether this rank's embedding is the last stage's copy of a tied embedding.
    bool holdsTiedCopy() const;
    void shareTiedEmbeddingGradient();
    void sumSequenceParallelNormGradients();
    // Sums of squares of this rank's gradients (its shard under ZeRO), each parameter counted
    // once, by split: [0] replicated, [1] TP-split, [2] expert blocks, [3] TP-split expert blocks.
    GradientSquares gradientSumSquares(kernels::DevPtr grads) const;
    // The ZeRO stage in effect: the spec's when data parallel, otherwise 0 (nothing to shard).
    int zeroStage() const { return dataParallelSize() > 1 ? m_spec.parallel.zero : 0; }
    // A full-size host copy of a flat buffer (Adam's moments, ZeRO-3's parameters), gathered from
    // the shards when ZeRO shards it.
    std::vector<float> gatherShards(const DeviceBuffer& shard) const;
    void uploadParameters(std::vector<float> params);   // whole flat buffer; ZeRO-3 keeps its shard
    std::vector<float> downloadParameters() const;

    plan::JobSpec m_spec;
    kernels::Backend& m_backend;
    const ProcessGroups* m_groups;
    ModelSlice m_slice;
    GptModel m_model;
    std::unique_ptr<TokenSource> m_data;
    std::size_t m_shardSize;    // elements of the flat buffers this rank updates (all of them without ZeRO)
    std::size_t m_shardBegin;
    ShardedAdamW m_optimizer;   // over [m_shardBegin, m_shardBegin + m_shardSize)
    DeviceBuffer m_gradShard;   // ZeRO: this rank's summed share of the gradients
    DeviceBuffer m_scatterOut;  // ZeRO-2: one micro-batch's reduce-scattered share
    DeviceBuffer m_paramShard;  // ZeRO-3: this rank's share of the parameters
    std::unique_ptr<ParameterGatherer> m_gatherer;
    std::unique_ptr<PipelineExecutor> m_pipeline;   // with pipeline stages
    Measurements m_measurements;
    int m_step = 0;
};

}  // namespace meshbench::agent
