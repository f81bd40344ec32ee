#include "trainer.h"

#include "agent/checkpoint/safetensors.h"
#include "agent/distributed/finalize_gradients.h"
#include "agent/distributed/pipeline_executor.h"
#include "plan/measured_bubble.h"

#include <array>
#include <chrono>
#include <cmath>
#include <iterator>
#include <span>

namespace meshbench::agent {
namespace {

constexpr const char* kFormat = "meshbench-checkpoint-1";
const std::string kMomentPrefix = "optimizer.exp_avg.";
const std::string kSecondMomentPrefix = "optimizer.exp_avg_sq.";

// The slice of the model this rank holds: all of it unless the layout has pipeline stages.
ModelSlice sliceOf(const plan::JobSpec& spec, const ProcessGroups* groups)
{
    const plan::ParallelSpec& p = spec.parallel;
    ModelSlice slice = groups && p.pp > 1 ? ModelSlice::ofStage(spec.model, p.scheduleShape(), groups->coord.pp)
                                          : ModelSlice::whole(spec.model);
    if (groups && p.ep > 1) {
        slice.expertShard = groups->coord.ep;
        slice.expertShards = p.ep;
    }
    if (groups && p.tp > 1) {
        slice.tensorShard = groups->coord.tp;
        slice.tensorShards = p.tp;
    }
    return slice;
}

// Tokens per expert summed over micro-batches, one entry per MoE layer.
std::vector<ExpertLoad> mergeByLayer(const std::vector<ExpertLoad>& loads)
{
    std::vector<ExpertLoad> merged;
    for (const ExpertLoad& load : loads) {
        auto it =
            std::find_if(merged.begin(), merged.end(), [&](const ExpertLoad& l) { return l.layer == load.layer; });
        if (it == merged.end()) {
            merged.push_back(load);
            continue;
        }
        for (std::size_t e = 0; e < load.routed.size(); ++e) {
            it->routed[e] += load.routed[e];
            it->kept[e] += load.kept[e];
        }
    }
    return merged;
}

// Host data through a communicator, whose buffers are device memory (a GPU's, or NCCL's): each
// transfer goes through a device buffer. Checkpoints only, where the copies cost nothing that counts.
std::vector<float> allGatherHost(kernels::Backend& backend, Communicator& group, const float* part, std::size_t n)
{
    DeviceBuffer mine(backend, n), all(backend, n * std::size_t(group.size()));
    backend.upload(mine.ptr(), part, n);
    group.allGather(mine.ptr(), all.ptr(), n);
    std::vector<float> host(all.size());
    backend.download(host.data(), all.ptr(), host.size());
    return host;
}

void recvHost(kernels::Backend& backend, Communicator& group, std::vector<float>& buffer, int peer, int tag)
{
    DeviceBuffer staging(backend, buffer.size());
    group.recv(staging.ptr(), buffer.size(), peer, tag);
    backend.download(buffer.data(), staging.ptr(), buffer.size());
}

}  // namespace

Trainer::Trainer(const plan::JobSpec& spec, kernels::Backend& backend, const ProcessGroups* groups)
    : m_spec(spec), m_backend(backend), m_groups(groups), m_slice(sliceOf(spec, groups)),
      m_model(spec.model, spec.parallel.recompute, backend, &m_slice),
      m_data(makeTokenSource(spec.train.data, int(spec.model.vocab), int(spec.model.seqLen), spec.train.seed)),
      m_shards(m_model.layout(), zeroStage(), groups ? groups->data.get() : nullptr,
               groups ? groups->expertData.get() : nullptr),
      m_measurements(groups ? groups->worldRank : 0, &backend)
{
    for (const ShardRegion& region : m_shards.regions())
        m_optimizers.emplace_back(backend, m_model.layout(), region.ownedBegin(), region.ownedSize());
    if (zeroStage() > 0)
        m_gradShard = DeviceBuffer(backend, m_shards.shardElements(), MemoryCategory::Grads);
    if (expertParallelSize() > 1)
        m_model.setExpertGroup(groups->expert.get());
    if (groups && groups->tensor->size() > 1)
        m_model.setTensorGroup(groups->tensor.get(), spec.parallel.sequenceParallel);
    if (zeroStage() >= 3) {
        m_paramShard = DeviceBuffer(backend, m_shards.shardElements(), MemoryCategory::Params);
        m_gatherer =
            std::make_unique<ShardedParameters>(backend, m_model.layout(), m_shards, m_paramShard.ptr(),
                                                m_gradShard.ptr(), std::size_t(spec.parallel.gradBucketBytes()),
                                                spec.parallel.overlapGradReduce, &m_measurements, groups->coord.pp);
        m_model.setParameterGatherer(m_gatherer.get());
    } else if (dataParallelSize() > 1) {
        m_buckets = std::make_unique<GradientBuckets>(
            backend, m_model.layout(), m_shards, m_model.gradients(), m_gradShard.ptr(),
            BucketSettings{spec.parallel.gradBucketBytes(), spec.parallel.overlapGradReduce}, &m_measurements,
            groups->coord.pp);
        if (pipelineSize() > 1 && spec.model.tiedEmbeddings && (m_slice.embedding || m_slice.head))
            m_buckets->holdUntilReleased(m_model.layout().embedding());
    }
    if (pipelineSize() > 1)
        m_pipeline = std::make_unique<PipelineExecutor>(
            m_model, backend, *groups->pipeline, plan::buildSchedule(spec.parallel.scheduleShape()), groups->coord.pp,
            groups->mesh.groupOf(plan::GroupKind::Pipeline, groups->worldRank));
}

Trainer::~Trainer() = default;

void Trainer::initialize()
{
    std::vector<float> host(m_model.layout().totalSize(), 0.0f);
    initializeParameters(m_model.layout(), m_spec.model, m_spec.train.seed, host.data());
    uploadParameters(std::move(host));
    for (ShardedAdamW& optimizer : m_optimizers)
        optimizer.reset();
    m_step = 0;
}

std::int64_t Trainer::tokensPerStep() const { return m_spec.parallel.globalBatch() * m_spec.model.seqLen; }

void Trainer::sampleTokens(std::int64_t index, std::int32_t* out) const
{
    m_data->sample(index, int(m_spec.model.seqLen) + 1, out);
}

double Trainer::learningRate(int step) const
{
    const plan::TrainSpec& t = m_spec.train;
    // Step t (1-based): linear warm-up lr x t / warmup_steps, then a cosine down to min_lr at
    // decay_steps.
    if (step < t.warmupSteps)
        return t.lr * step / t.warmupSteps;
    if (t.decaySteps <= t.warmupSteps)
        return t.lr;
    if (step >= t.decaySteps)
        return t.minLr;
    const double progress = double(step - t.warmupSteps) / double(t.decaySteps - t.warmupSteps);
    return t.minLr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (t.lr - t.minLr);
}

StepMetrics Trainer::step()
{
    StepMetrics metrics;
    m_measurements.beginTimeline();
    metrics.beginNs = Measurements::nowNs();
    metrics.step = m_step + 1;
    MemoryLedger::instance().resetPeaks();
    const StepBatch batch = stepBatch();

    const ForwardResult result = runMicrobatches(batch, metrics.step);

    finalizeGradients();
    sumResults(batch, result, metrics);
    metrics.gradNorm = gradientNorm();
    optimizerStep(metrics);
    m_measurements.resolveTimeline();
    metrics.bubbleRatio = measuredBubble(metrics.step);

    m_measurements.addMemorySample({metrics.step, Measurements::nowNs(), MemoryLedger::instance().usage()});
    metrics.endNs = Measurements::nowNs();
    metrics.seconds = double(metrics.endNs - metrics.beginNs) * 1e-9;
    metrics.tokensPerSecond = double(tokensPerStep()) / metrics.seconds;
    return metrics;
}

Trainer::StepBatch Trainer::stepBatch() const
{
    const plan::ParallelSpec& p = m_spec.parallel;
    const std::int64_t globalBatch = p.globalBatch();
    // The step's micro-batches over every data-parallel replica (dp x parallel.microbatches).
    const int stepMicrobatches = int(globalBatch / p.microBatchSize);
    StepBatch batch;
    batch.microbatchSize = p.microBatchSize;
    batch.localMicrobatches = stepMicrobatches / dataParallelSize();
    // Loss = mean cross-entropy over every token of the step + mean load-balancing loss over
    // micro-batches; each micro-batch's gradients are scaled so that their sum is that loss's.
    batch.lossScale = float(1.0 / (double(globalBatch) * double(m_spec.model.seqLen)));
    batch.auxScale = float(1.0 / stepMicrobatches);
    // Data-parallel rank r runs micro-batches [r M / dp, (r + 1) M / dp) of the step's M; every
    // pipeline stage of a replica sees the same micro-batches. Sample k of step i is global
    // sample i x globalBatch + k.
    const int seqPlusOne = int(m_spec.model.seqLen) + 1;
    const int firstMicrobatch = m_groups ? m_groups->data->rank() * batch.localMicrobatches : 0;
    for (int local = 0; local < batch.localMicrobatches; ++local) {
        std::vector<std::int32_t> tokens(std::size_t(p.microBatchSize) * std::size_t(seqPlusOne));
        for (int row = 0; row < p.microBatchSize; ++row)
            sampleTokens(std::int64_t(m_step) * globalBatch + std::int64_t(firstMicrobatch + local) * p.microBatchSize +
                             row,
                         tokens.data() + std::size_t(row) * std::size_t(seqPlusOne));
        batch.tokens.push_back(std::move(tokens));
    }
    return batch;
}

ForwardResult Trainer::runMicrobatches(const StepBatch& batch, int step)
{
    m_model.zeroGradients();
    if (zeroStage() > 0)
        m_backend.fill(m_gradShard.ptr(), 0.0f, m_gradShard.size());
    ForwardResult result;
    const auto tokensOf = [&batch](int local) { return batch.tokens[std::size_t(local)].data(); };
    if (m_gatherer)
        m_gatherer->begin(step);
    if (m_pipeline) {
        if (m_buckets)
            m_buckets->begin(step);
        m_pipeline->runStep(tokensOf, batch.microbatchSize, batch.lossScale, batch.auxScale, result, step,
                            m_measurements, m_buckets.get());
        return result;
    }
    // ZeRO-2 reduce-scatters every micro-batch's gradients, so only a shard of them accumulates;
    // otherwise the step's last backward finishes the gradients.
    const bool everyMicrobatch = zeroStage() == 2;
    for (int mb = 0; mb < batch.localMicrobatches; ++mb) {
        const bool reduces = m_buckets && (everyMicrobatch || mb == batch.localMicrobatches - 1);
        if (everyMicrobatch && mb > 0)
            m_model.zeroGradients();
        if (reduces)
            m_buckets->begin(step);
        const Span forward{step, 0, 0, mb, wire::SpanKind::Forward, -1, 0, 0, 0};
        const Span backward{step, 0, 0, mb, wire::SpanKind::Backward, -1, 0, 0, 0};
        const kernels::TimeMark forwardBegin = m_measurements.mark();
        GptModel::ActivationsPtr activations;
        {
            const Measurements::Range range(forward);
            activations =
                m_model.forward({tokensOf(mb), batch.microbatchSize}, batch.lossScale, batch.auxScale, result);
        }
        const kernels::TimeMark backwardBegin = m_measurements.mark();
        {
            const Measurements::Range range(backward);
            m_model.backward(*activations, reduces ? m_buckets.get() : nullptr);
        }
        m_measurements.addSpan(forward, forwardBegin, backwardBegin);
        m_measurements.addSpan(backward, backwardBegin, m_measurements.mark());
        if (everyMicrobatch)
            m_buckets->finish();
    }
    return result;
}

double Trainer::measuredBubble(int step) const
{
    // This rank's pipeline phase from its spans of the step (the newest ones), then every rank's,
    // so that the step line shows what the engine's aggregator computes from the same spans.
    const std::vector<Span>& spans = m_measurements.spans();
    auto first = spans.end();
    while (first != spans.begin() && std::prev(first)->step == step)
        --first;
    const int stage = m_groups ? m_groups->coord.pp : 0;
    const plan::RankPipelinePhase own = plan::rankPipelinePhase(stage, std::span<const Span>(first, spans.end()));
    std::vector<plan::RankPipelinePhase> phases{own};
    if (m_groups && m_groups->world->size() > 1) {
        // An all-gather of (stage, begin, end, busy) as int64: nanoseconds since the epoch do not
        // fit a double exactly.
        const std::size_t world = std::size_t(m_groups->world->size());
        constexpr std::size_t kFields = 4;
        std::vector<std::int64_t> mine(kFields * world), every(kFields * world);
        for (std::size_t r = 0; r < world; ++r) {
            mine[kFields * r] = own.stage;
            mine[kFields * r + 1] = own.beginNs;
            mine[kFields * r + 2] = own.endNs;
            mine[kFields * r + 3] = own.busyNs;
        }
        m_groups->world->exchangeCounts(mine.data(), every.data(), kFields);
        phases.assign(world, {});
        for (std::size_t r = 0; r < world; ++r)
            phases[r] = {int(every[kFields * r]), every[kFields * r + 1], every[kFields * r + 2],
                         every[kFields * r + 3]};
    }
    return plan::measuredBubble(phases, pipelineSize()).overall.value_or(0.0);
}

void Trainer::finalizeGradients()
{
    if (pipelineSize() > 1 && m_spec.model.tiedEmbeddings && (m_slice.embedding || m_slice.head)) {
        // The embedding's two uses are on different stages unless a V schedule put both on stage 0.
        if (m_slice.embedding != m_slice.head) {
            const TensorView& embedding = m_model.layout().at(m_model.layout().embedding());
            const plan::ScheduleShape shape = m_spec.parallel.scheduleShape();
            const int peer = shape.stageOf(m_slice.embedding ? shape.stages * shape.virtualStages - 1 : 0);
            sumTiedEmbeddingCopies(m_backend, *m_groups->pipeline, peer,
                                   kernels::offset(m_model.gradients(), embedding.offset), embedding.size);
        }
        if (m_buckets)
            m_buckets->release(m_model.layout().embedding());
    }
    if (m_buckets && zeroStage() != 2)
        m_buckets->finish();
    if (m_gatherer)
        m_gatherer->finish();
    if (m_spec.parallel.sequenceParallel && m_groups && m_groups->tensor->size() > 1)
        sumSequenceParallelNormGradients(*m_groups->tensor, m_model.layout(), m_shards, shardGradients());
}

void Trainer::sumResults(const StepBatch& batch, const ForwardResult& result, StepMetrics& metrics) const
{
    // The loss lives on the last stage, load-balancing losses on every stage with MoE layers.
    double sums[2] = {result.lossSum, result.auxLoss};
    if (pipelineSize() > 1)
        m_groups->pipeline->allReduceSum(sums, 2);
    metrics.expertLoads = mergeByLayer(result.expertLoads);
    if (dataParallelSize() > 1) {
        m_groups->data->allReduceSum(sums, 2);
        for (ExpertLoad& load : metrics.expertLoads) {
            std::vector<double> counts(load.routed.begin(), load.routed.end());
            counts.insert(counts.end(), load.kept.begin(), load.kept.end());
            m_groups->data->allReduceSum(counts.data(), counts.size());
            for (std::size_t e = 0; e < load.routed.size(); ++e) {
                load.routed[e] = int(counts[e]);
                load.kept[e] = int(counts[load.routed.size() + e]);
            }
        }
    }
    metrics.loss = sums[0] * batch.lossScale;
    metrics.auxLoss = sums[1] * batch.auxScale;
    metrics.modelExpertLoads = pipelineSize() > 1 ? modelExpertLoads(metrics.expertLoads) : metrics.expertLoads;
}

std::vector<ExpertLoad> Trainer::modelExpertLoads(const std::vector<ExpertLoad>& stageLoads) const
{
    // Every stage's layers into one table of the model's MoE layers (routed, then kept, per
    // expert), summed over the pipeline group: each stage fills only its own rows.
    const plan::ModelSpec& model = m_spec.model;
    const std::size_t experts = std::size_t(model.moe.experts);
    std::vector<int> moeLayers;
    for (int layer = 0; layer < model.layers; ++layer)
        if (model.isMoeLayer(layer))
            moeLayers.push_back(layer);
    std::vector<double> table(moeLayers.size() * 2 * experts, 0.0);
    const auto rowOf = [&](int layer) {
        return std::size_t(std::lower_bound(moeLayers.begin(), moeLayers.end(), layer) - moeLayers.begin());
    };
    for (const ExpertLoad& load : stageLoads)
        for (std::size_t e = 0; e < experts; ++e) {
            table[(rowOf(load.layer) * 2) * experts + e] = load.routed[e];
            table[(rowOf(load.layer) * 2 + 1) * experts + e] = load.kept[e];
        }
    m_groups->pipeline->allReduceSum(table.data(), table.size());
    std::vector<ExpertLoad> all;
    for (std::size_t row = 0; row < moeLayers.size(); ++row) {
        ExpertLoad load{moeLayers[row], std::vector<int>(experts), std::vector<int>(experts)};
        for (std::size_t e = 0; e < experts; ++e) {
            load.routed[e] = int(table[(row * 2) * experts + e]);
            load.kept[e] = int(table[(row * 2 + 1) * experts + e]);
        }
        all.push_back(std::move(load));
    }
    return all;
}

double Trainer::gradientNorm() const
{
    // Squares by how the tensors are split: ZeRO shards add up over their groups, TP parts over
    // the tensor group, expert blocks over the EP group; replicated tensors count once.
    GradientNormGroups groups;
    if (zeroStage() > 0) {
        groups.zeroShards = m_groups->data.get();
        if (expertParallelSize() > 1 && m_groups->expertData->size() > 1)
            groups.expertZeroShards = m_groups->expertData.get();
    }
    if (m_groups && m_groups->tensor->size() > 1)
        groups.tensor = m_groups->tensor.get();
    if (expertParallelSize() > 1)
        groups.expert = m_groups->expert.get();
    if (pipelineSize() > 1)
        groups.pipeline = m_groups->pipeline.get();
    const int skip = holdsTiedCopy() ? m_model.layout().embedding() : -1;
    return globalGradientNorm(shardGradientSquares(m_backend, m_model.layout(), m_shards, shardGradients(), skip),
                              groups);
}

void Trainer::optimizerStep(StepMetrics& metrics)
{
    const int stage = m_groups ? m_groups->coord.pp : 0;
    const Span span{metrics.step, std::int16_t(stage), 0, -1, wire::SpanKind::Optimizer, -1, 0, 0, 0};
    const Measurements::Range range(span);
    const kernels::TimeMark begin = m_measurements.mark();
    ++m_step;
    metrics.learningRate = learningRate(m_step);
    const plan::TrainSpec& t = m_spec.train;
    const AdamWSettings settings{float(metrics.learningRate), float(t.beta1), float(t.beta2), float(t.eps),
                                 float(t.weightDecay)};
    // Global norm clipping as torch.nn.utils.clip_grad_norm_: scale by min(1, clip / (norm + 1e-6)).
    const float gradScale = clipScale(metrics.gradNorm, t.gradClip);
    for (std::size_t r = 0; r < m_shards.regions().size(); ++r) {
        const ShardRegion& region = m_shards.regions()[r];
        const kernels::DevPtr params = zeroStage() >= 3 ? kernels::offset(m_paramShard.ptr(), region.shardOffset)
                                                        : kernels::offset(m_model.parameters(), region.ownedBegin());
        const kernels::DevPtr grads =
            kernels::offset(shardGradients(), zeroStage() > 0 ? region.shardOffset : region.ownedBegin());
        m_optimizers[r].step(params, grads, settings, m_step, gradScale);
    }
    if (zeroStage() == 1 || zeroStage() == 2)
        m_shards.allGatherParameters(m_model.parameters());
    m_measurements.addSpan(span, begin, m_measurements.mark());
}

kernels::DevPtr Trainer::shardGradients() const { return zeroStage() > 0 ? m_gradShard.ptr() : m_model.gradients(); }

void Trainer::save(const std::string& path) const
{
    // Every rank's parameters and (gathered) moments, as flat buffers in its slice's layout.
    struct Part {
        ParameterLayout layout;
        std::vector<float> params, m, v;
    };
    std::vector<float> params = downloadParameters(), m = gatherMoments(false), v = gatherMoments(true);
    // In the layout of this pipeline slice with whole tensors: TP parts are gathered over the
    // tensor group and put in place, then expert blocks gathered over the EP group.
    ModelSlice whole = m_slice;
    whole.expertShard = whole.tensorShard = 0;
    whole.expertShards = whole.tensorShards = 1;
    ParameterLayout wholeLayout(m_spec.model, whole);
    Part mine{wholeLayout, std::vector<float>(wholeLayout.totalSize()), std::vector<float>(wholeLayout.totalSize()),
              std::vector<float>(wholeLayout.totalSize())};
    for (std::size_t i = 0; i < m_model.layout().views().size(); ++i) {
        const TensorView& local = m_model.layout().views()[i];
        const TensorView& target = wholeLayout.views()[i];
        for (auto [from, to] : {std::pair{&params, &mine.params}, std::pair{&m, &mine.m}, std::pair{&v, &mine.v}}) {
            const float* part = from->data() + local.offset;
            std::vector<float> tpWhole;
            if (local.tensorCount > 1) {
                const std::vector<float> parts = allGatherHost(m_backend, *m_groups->tensor, part, local.size);
                tpWhole.resize(parts.size());
                TensorView piece = local;
                piece.shardIndex = 0;  // place within this EP block only
                for (int r = 0; r < local.tensorCount; ++r) {
                    piece.tensorIndex = r;
                    insertShard(piece, parts.data() + local.size * std::size_t(r), tpWhole.data(), m_spec.model);
                }
                part = tpWhole.data();
            }
            const std::size_t blockSize = local.size * std::size_t(local.tensorCount);
            if (local.shardCount > 1) {
                const std::vector<float> blocks = allGatherHost(m_backend, *m_groups->expert, part, blockSize);
                std::copy(blocks.begin(), blocks.end(), to->data() + target.offset);
            } else
                std::copy_n(part, blockSize, to->data() + target.offset);
        }
    }

    // Data-parallel replica 0's pipeline of TP rank 0 holds the whole model; its stage 0 (world
    // rank 0) writes.
    if (m_groups && (m_groups->coord.dp != 0 || m_groups->coord.tp != 0))
        return;
    const int stages = pipelineSize();
    const int stage = m_groups ? m_groups->coord.pp : 0;
    if (stage != 0) {
        std::vector<DeviceBuffer> sent;
        for (const std::vector<float>* buffer : {&mine.params, &mine.m, &mine.v}) {
            sent.emplace_back(m_backend, buffer->size());
            m_backend.upload(sent.back().ptr(), buffer->data(), buffer->size());
            m_groups->pipeline->send(sent.back().ptr(), buffer->size(), 0, 1);
        }
        m_groups->pipeline->waitSends();
        return;
    }
    std::vector<Part> parts;
    parts.push_back(std::move(mine));
    for (int s = 1; s < stages; ++s) {
        const plan::ParallelSpec& p = m_spec.parallel;
        ParameterLayout layout(m_spec.model, ModelSlice::ofStage(m_spec.model, p.scheduleShape(), s));  // whole experts
        const std::size_t size = layout.totalSize();
        Part part{std::move(layout), std::vector<float>(size), std::vector<float>(size), std::vector<float>(size)};
        for (std::vector<float>* buffer : {&part.params, &part.m, &part.v})
            recvHost(m_backend, *m_groups->pipeline, *buffer, s, 1);
        parts.push_back(std::move(part));
    }

    // Tensors in the whole model's order; a tied embedding's second copy is the same tensor.
    std::vector<std::pair<const Part*, const TensorView*>> order;
    for (const Part& part : parts)
        for (const TensorView& view : part.layout.views())
            order.emplace_back(&part, &view);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.second->globalIndex < b.second->globalIndex; });
    order.erase(
        std::unique(order.begin(), order.end(),
                    [](const auto& a, const auto& b) { return a.second->globalIndex == b.second->globalIndex; }),
        order.end());
    std::vector<TensorRecord> tensors;
    for (const std::string& prefix : {std::string(), kMomentPrefix, kSecondMomentPrefix})
        for (const auto& [part, view] : order) {
            const std::vector<float>& buffer = prefix.empty()            ? part->params
                                               : prefix == kMomentPrefix ? part->m
                                                                         : part->v;
            tensors.push_back({prefix + view->name, view->shape, buffer.data() + view->offset});
        }
    const std::map<std::string, std::string> metadata = {
        {"format", kFormat}, {"step", std::to_string(m_step)}, {"job", plan::toJson(m_spec).dump()}};
    writeSafetensors(path, tensors, metadata);
}

void Trainer::load(const std::string& path)
{
    const SafetensorsFile file = SafetensorsFile::open(path);
    const auto& metadata = file.metadata();
    const auto format = metadata.find("format");
    if (format == metadata.end() || format->second != kFormat)
        throw CheckpointError(path + " is not a Meshbench checkpoint (its __metadata__ has no format \"" + kFormat +
                              "\")");
    // The model must be the same; everything else (layout, optimizer settings, steps) may change.
    const auto job = metadata.find("job");
    nlohmann::json stored =
        job == metadata.end() ? nlohmann::json() : nlohmann::json::parse(job->second, nullptr, false);
    const nlohmann::json expected = plan::toJson(m_spec)["model"];
    if (!stored.is_object() || !stored.contains("model"))
        throw CheckpointError(path + ": the checkpoint's job spec is missing or unreadable");
    std::string differences;
    for (const auto& [key, value] : expected.items())
        if (!stored["model"].contains(key) || stored["model"][key] != value)
            differences += std::string(differences.empty() ? "" : ", ") + "model." + key + " = " +
                           (stored["model"].contains(key) ? stored["model"][key].dump() : "(absent)") +
                           " (the job has " + value.dump() + ")";
    if (!differences.empty())
        throw CheckpointError(path + ": the checkpoint was trained with a different model: " + differences +
                              "; load it with the job it was saved from");
    int step = 0;
    try {
        step = std::stoi(metadata.at("step"));
    } catch (const std::exception&) {
        throw CheckpointError(path + ": the checkpoint's step is missing or not a number");
    }
    if (step < 0)
        throw CheckpointError(path + ": the checkpoint's step is negative");

    const ParameterLayout& layout = m_model.layout();
    const std::size_t total = layout.totalSize();
    std::vector<float> params(total, 0.0f), m(total, 0.0f), v(total, 0.0f);
    std::vector<float> whole;
    for (const TensorView& view : layout.views()) {
        for (auto [prefix, buffer] :
             {std::pair{std::string(), &params}, std::pair{kMomentPrefix, &m}, std::pair{kSecondMomentPrefix, &v}}) {
            if (view.shardCount == 1 && view.tensorCount == 1) {
                file.readF32(prefix + view.name, view.shape, buffer->data() + view.offset);
                continue;
            }
            // A shard (of experts, or of a TP-split layer): this rank's part of the whole tensor.
            whole.resize(view.size * std::size_t(view.shardCount) * std::size_t(view.tensorCount));
            file.readF32(prefix + view.name, view.globalShape(), whole.data());
            extractShard(view, whole.data(), buffer->data() + view.offset, m_spec.model);
        }
    }
    uploadParameters(std::move(params));
    // This rank's share of the moments.
    for (ShardedAdamW& optimizer : m_optimizers) {
        m_backend.upload(optimizer.firstMoment().ptr(), m.data() + optimizer.begin(), optimizer.size());
        m_backend.upload(optimizer.secondMoment().ptr(), v.data() + optimizer.begin(), optimizer.size());
    }
    m_step = step;
}

bool Trainer::holdsTiedCopy() const
{
    return pipelineSize() > 1 && m_spec.model.tiedEmbeddings && m_slice.head && !m_slice.embedding;
}

void Trainer::uploadParameters(std::vector<float> params)
{
    if (zeroStage() < 3) {
        m_backend.upload(m_model.parameters(), params.data(), params.size());
        return;
    }
    std::vector<float> mine(m_shards.shardElements());
    m_shards.extract(params.data(), mine.data());
    m_backend.upload(m_paramShard.ptr(), mine.data(), mine.size());
}

std::vector<float> Trainer::downloadParameters() const
{
    if (zeroStage() >= 3)
        return m_shards.gather(m_backend, m_paramShard.ptr());
    std::vector<float> params(m_model.layout().totalSize());
    m_backend.download(params.data(), m_model.parameters(), params.size());
    return params;
}

std::vector<float> Trainer::gatherMoments(bool second) const
{
    // The optimizers' moment buffers laid end to end are this rank's shard buffer.
    DeviceBuffer shard(m_backend, m_shards.shardElements(), MemoryCategory::Workspace);
    for (std::size_t r = 0; r < m_optimizers.size(); ++r) {
        const ShardedAdamW& optimizer = m_optimizers[r];
        m_backend.copy(kernels::offset(shard.ptr(), m_shards.regions()[r].shardOffset),
                       (second ? optimizer.secondMoment() : optimizer.firstMoment()).ptr(), optimizer.size());
    }
    return m_shards.gather(m_backend, shard.ptr());
}

}  // namespace meshbench::agent
