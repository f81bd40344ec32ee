#include "trainer.h"

#include "agent/checkpoint/safetensors.h"
#include "pipeline_executor.h"

#include <array>
#include <chrono>
#include <cmath>

namespace meshbench::agent {
namespace {

constexpr const char* kFormat = "meshbench-checkpoint-1";
const std::string kMomentPrefix = "optimizer.exp_avg.";
const std::string kSecondMomentPrefix = "optimizer.exp_avg_sq.";

constexpr std::size_t kShardAlign = 16;   // elements: shards start 64-byte aligned

std::size_t shardSizeFor(std::size_t total, int ranks)
{
    const std::size_t share = (total + std::size_t(ranks) - 1) / std::size_t(ranks);
    return (share + kShardAlign - 1) / kShardAlign * kShardAlign;
}

// The slice of the model this rank holds: all of it unless the layout has pipeline stages.
ModelSlice sliceOf(const plan::JobSpec& spec, const ProcessGroups* groups)
{
    const plan::ParallelSpec& p = spec.parallel;
    ModelSlice slice = groups && p.pp > 1 ? ModelSlice::ofStage(spec.model, p.pp, p.virtualStages, groups->coord.pp)
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
        auto it = std::find_if(merged.begin(), merged.end(), [&](const ExpertLoad& l) { return l.layer == load.layer; });
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

// ZeRO-3's parameter gathering over the data group: the flat buffers are cut into equal shards,
// rank r owning [r S, (r + 1) S). A tensor is gathered by broadcasting each owner's piece of it;
// its gradient is summed over the group and each rank keeps the piece it owns.
class ShardedParameters final : public ParameterGatherer {
public:
    ShardedParameters(kernels::Backend& backend, Communicator& data, Communicator* sequenceGroup,
                      const ParameterLayout& layout, std::size_t shardSize, DeviceBuffer& params, DeviceBuffer& grads)
        : m_backend(backend), m_data(data), m_sequenceGroup(sequenceGroup), m_layout(layout), m_shardSize(shardSize),
          m_params(params), m_grads(grads), m_gathered(layout.views().size()), m_gradients(layout.views().size())
    {
    }

    void acquire(const std::vector<int>& views, bool withGradients) override
    {
        for (int view : views) {
            const TensorView& v = m_layout.at(view);
            DeviceBuffer& buffer = m_gathered[std::size_t(view)];
            buffer = DeviceBuffer(m_backend, v.size, MemoryCategory::Params);
            forEachOwner(v, [&](int owner, std::size_t begin, std::size_t end) {
                float* piece = static_cast<float*>(buffer.ptr().data) + (begin - v.offset);
                if (owner == m_data.rank())
                    m_backend.copy({piece, kernels::DType::F32}, at(m_params, begin), end - begin);
                m_data.broadcast(kernels::f32(piece), end - begin, owner);
            });
            if (withGradients)
                m_gradients[std::size_t(view)] = DeviceBuffer(m_backend, v.size, MemoryCategory::Grads);
        }
    }

    void release(const std::vector<int>& views, bool withGradients) override
    {
        for (int view : views) {
            const TensorView& v = m_layout.at(view);
            if (withGradients) {
                DeviceBuffer& g = m_gradients[std::size_t(view)];
                float* data = static_cast<float*>(g.ptr().data);
                // Norm weights under sequence parallelism saw this TP rank's tokens only.
                if (m_sequenceGroup && v.shape.size() == 1)
                    m_sequenceGroup->allReduceSum(g.ptr(), v.size);
                m_data.allReduceSum(g.ptr(), v.size);
                forEachOwner(v, [&](int owner, std::size_t begin, std::size_t end) {
                    if (owner == m_data.rank())
                        m_backend.add({data + (begin - v.offset), kernels::DType::F32}, at(m_grads, begin),
                                      end - begin);
                });
                g = DeviceBuffer();
            }
            m_gathered[std::size_t(view)] = DeviceBuffer();
        }
    }

    kernels::DevPtr param(int view) override { return m_gathered[std::size_t(view)].ptr(); }
    kernels::DevPtr grad(int view) override { return m_gradients[std::size_t(view)].ptr(); }

private:
    // Calls f(owner, begin, end) for each shard the tensor's flat range meets.
    template <typename F>
    void forEachOwner(const TensorView& v, F f) const
    {
        for (std::size_t begin = v.offset; begin < v.offset + v.size;) {
            const std::size_t owner = begin / m_shardSize;
            const std::size_t end = std::min(v.offset + v.size, (owner + 1) * m_shardSize);
            f(int(owner), begin, end);
            begin = end;
        }
    }
    // An element of the flat buffer inside this rank's shard buffer.
    kernels::DevPtr at(DeviceBuffer& shard, std::size_t flat) const
    {
        return shard.at(flat - m_shardSize * std::size_t(m_data.rank()));
    }

    kernels::Backend& m_backend;
    Communicator& m_data;
    Communicator* m_sequenceGroup;
    const ParameterLayout& m_layout;
    std::size_t m_shardSize;
    DeviceBuffer& m_params;
    DeviceBuffer& m_grads;
    std::vector<DeviceBuffer> m_gathered;
    std::vector<DeviceBuffer> m_gradients;
};

}  // namespace

Trainer::Trainer(const plan::JobSpec& spec, kernels::Backend& backend, const ProcessGroups* groups)
    : m_spec(spec), m_backend(backend), m_groups(groups),
      m_slice(sliceOf(spec, groups)),
      m_model(spec.model, spec.parallel.recompute, backend,
              zeroStage() > 0 ? shardSizeFor(ParameterLayout(spec.model, m_slice).totalSize(), dataParallelSize()) *
                                    std::size_t(dataParallelSize())
                              : 0,
              &m_slice),
      m_data(makeTokenSource(spec.train.data, int(spec.model.vocab), int(spec.model.seqLen), spec.train.seed)),
      m_shardSize(zeroStage() > 0 ? m_model.bufferElements() / std::size_t(dataParallelSize())
                                  : m_model.layout().totalSize()),
      m_shardBegin(zeroStage() > 0 ? m_shardSize * std::size_t(m_groups->data->rank()) : 0),
      m_optimizer(backend, m_model.layout(), m_shardBegin, m_shardSize),
      m_measurements(groups ? groups->worldRank : 0)
{
    if (zeroStage() > 0)
        m_gradShard = DeviceBuffer(backend, m_shardSize, MemoryCategory::Grads);
    if (zeroStage() >= 2)
        m_scatterOut = DeviceBuffer(backend, m_shardSize);
    if (expertParallelSize() > 1)
        m_model.setExpertGroup(groups->expert.get());
    if (groups && groups->tensor->size() > 1)
        m_model.setTensorGroup(groups->tensor.get(), spec.parallel.sequenceParallel);
    if (zeroStage() >= 3) {
        m_paramShard = DeviceBuffer(backend, m_shardSize, MemoryCategory::Params);
        Communicator* sequenceGroup =
            spec.parallel.sequenceParallel && groups->tensor->size() > 1 ? groups->tensor.get() : nullptr;
        m_gatherer = std::make_unique<ShardedParameters>(backend, *groups->data, sequenceGroup, m_model.layout(),
                                                         m_shardSize, m_paramShard, m_gradShard);
        m_model.setParameterGatherer(m_gatherer.get());
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
    m_optimizer.reset();
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
    const plan::ParallelSpec& p = m_spec.parallel;
    const int seqPlusOne = int(m_spec.model.seqLen) + 1;
    const std::int64_t globalBatch = p.globalBatch();
    const int microBatchSize = p.microBatchSize;
    const int microbatches = int(globalBatch / microBatchSize);
    // Loss = mean cross-entropy over every token of the step + mean load-balancing loss over
    // micro-batches; each micro-batch's gradients are scaled so that their sum is that loss's.
    const float lossScale = float(1.0 / (double(globalBatch) * double(m_spec.model.seqLen)));
    const float auxScale = float(1.0 / microbatches);

    StepMetrics metrics;
    metrics.beginNs = Measurements::nowNs();
    metrics.step = m_step + 1;
    m_model.zeroGradients();
    if (zeroStage() > 0)
        m_backend.fill(m_gradShard.ptr(), 0.0f, m_shardSize);
    // Data-parallel rank r runs micro-batches [r M / dp, (r + 1) M / dp) of the step's M; every
    // pipeline stage of a replica sees the same micro-batches.
    const int dp = dataParallelSize();
    const int localMicrobatches = microbatches / dp;
    const int firstMicrobatch = m_groups ? m_groups->data->rank() * localMicrobatches : 0;
    std::vector<std::vector<std::int32_t>> batches(static_cast<std::size_t>(localMicrobatches));
    auto tokensOf = [&](int local) -> const std::int32_t* {
        std::vector<std::int32_t>& tokens = batches[std::size_t(local)];
        if (tokens.empty()) {
            tokens.resize(std::size_t(microBatchSize) * seqPlusOne);
            // Sample k of step i is global sample i x globalBatch + k.
            for (int row = 0; row < microBatchSize; ++row)
                sampleTokens(std::int64_t(m_step) * globalBatch +
                                 std::int64_t(firstMicrobatch + local) * microBatchSize + row,
                             tokens.data() + std::size_t(row) * seqPlusOne);
        }
        return tokens.data();
    };

    ForwardResult result;
    MemoryLedger::instance().resetPeaks();
    const int stage = m_groups ? m_groups->coord.pp : 0;
    const std::int64_t pipelineBegin = Measurements::nowNs();
    if (m_pipeline) {
        m_pipeline->runStep(tokensOf, microBatchSize, lossScale, auxScale, result, metrics.step, m_measurements);
    } else {
        for (int mb = 0; mb < localMicrobatches; ++mb) {
            if (zeroStage() == 2)
                m_model.zeroGradients();   // the full buffer only carries this micro-batch
            const std::int64_t forwardBegin = Measurements::nowNs();
            auto activations = m_model.forward({tokensOf(mb), microBatchSize}, lossScale, auxScale, result);
            const std::int64_t backwardBegin = Measurements::nowNs();
            m_model.backward(*activations);
            if (zeroStage() == 2)
                sumSequenceParallelNormGradients();   // before this micro-batch's gradients are scattered
            m_measurements.addSpan({metrics.step, 0, 0, mb, wire::SpanKind::Forward, -1, forwardBegin, backwardBegin, 0});
            m_measurements.addSpan(
                {metrics.step, 0, 0, mb, wire::SpanKind::Backward, -1, backwardBegin, Measurements::nowNs(), 0});
            if (zeroStage() == 2) {
                m_groups->data->reduceScatterSum(m_model.gradients(), m_scatterOut.ptr(), m_shardSize);
                m_backend.add(m_scatterOut.ptr(), m_gradShard.ptr(), m_shardSize);
            }
        }
    }
    const std::int64_t pipelineEnd = Measurements::nowNs();
    // Measured bubble: the share of the pipeline phase this stage spent outside F, B and W, summed
    // over the stages (the simulator's definition, idle / (p x makespan)).
    double phase[2] = {double(pipelineEnd - pipelineBegin), 0.0};
    for (auto it = m_measurements.spans().rbegin(); it != m_measurements.spans().rend() && it->step == metrics.step; ++it)
        if (wire::isComputeKind(it->kind))
            phase[1] += double(it->endNs - it->beginNs);
    if (pipelineSize() > 1)
        m_groups->pipeline->allReduceSum(phase, 2);
    metrics.bubbleRatio = phase[0] > 0 ? 1.0 - phase[1] / phase[0] : 0.0;
    metrics.expertLoads = mergeByLayer(result.expertLoads);
    if (zeroStage() < 2)
        sumSequenceParallelNormGradients();
    double lossSum = result.lossSum;
    double auxSum = result.auxLoss;
    if (pipelineSize() > 1) {
        shareTiedEmbeddingGradient();
        // The loss lives on the last stage, load-balancing losses on every stage with MoE layers.
        double sums[2] = {lossSum, auxSum};
        m_groups->pipeline->allReduceSum(sums, 2);
        lossSum = sums[0];
        auxSum = sums[1];
    }
    const std::int64_t reduceBegin = Measurements::nowNs();
    if (dp > 1) {
        // The step's gradient is the sum over all micro-batches, wherever they ran. The CPU
        // backend's memory is host memory, which MPI reads directly.
        if (zeroStage() == 0 && expertParallelSize() > 1) {
            // Dense weights are replicated over the data group, each expert over its
            // expert-data-parallel group only (the ranks that hold the same experts).
            float* grads = static_cast<float*>(m_model.gradients().data);
            for (const TensorView& v : m_model.layout().views()) {
                Communicator& group = v.shardCount > 1 ? *m_groups->expertData : *m_groups->data;
                if (group.size() > 1)
                    group.allReduceSum(kernels::f32(grads + v.offset), v.size);
            }
        } else if (zeroStage() == 0) {
            m_groups->data->allReduceSum(m_model.gradients(), m_shardSize);
        }
        else if (zeroStage() == 1)
            m_groups->data->reduceScatterSum(m_model.gradients(), m_gradShard.ptr(), m_shardSize);
        double sums[2] = {lossSum, auxSum};
        m_groups->data->allReduceSum(sums, 2);
        lossSum = sums[0];
        auxSum = sums[1];
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
    metrics.loss = lossSum * lossScale;
    metrics.auxLoss = auxSum * auxScale;

    if (dp > 1)
        m_measurements.addSpan({metrics.step, std::int16_t(stage), 0, -1, wire::SpanKind::DataParallelReduce, -1,
                                reduceBegin, Measurements::nowNs(), m_shardSize * sizeof(float) * std::size_t(dp)});

    // This rank's gradients for its shard of the flat buffers (all of them without ZeRO).
    const kernels::DevPtr grads = zeroStage() > 0 ? m_gradShard.ptr() : m_model.gradients();

    // Global norm clipping as torch.nn.utils.clip_grad_norm_: scale by min(1, clip / (norm + 1e-6)).
    // Squares by how the tensors are split: a ZeRO shard's add up over the data group, TP parts
    // over the tensor group, expert blocks over the EP group; replicated tensors count once.
    GradientNormGroups normGroups;
    if (zeroStage() > 0)
        normGroups.zeroShards = m_groups->data.get();
    if (m_groups && m_groups->tensor->size() > 1)
        normGroups.tensor = m_groups->tensor.get();
    if (expertParallelSize() > 1)
        normGroups.expert = m_groups->expert.get();
    if (pipelineSize() > 1)
        normGroups.pipeline = m_groups->pipeline.get();
    metrics.gradNorm = globalGradientNorm(gradientSumSquares(grads), normGroups);
    const float gradScale = clipScale(metrics.gradNorm, m_spec.train.gradClip);

    const std::int64_t optimizerBegin = Measurements::nowNs();
    ++m_step;
    metrics.learningRate = learningRate(m_step);
    const plan::TrainSpec& t = m_spec.train;
    const kernels::DevPtr shardParams =
        zeroStage() >= 3 ? m_paramShard.ptr()
                         : kernels::DevPtr{static_cast<float*>(m_model.parameters().data) + m_shardBegin,
                                           m_model.parameters().dtype};
    m_optimizer.step(shardParams, grads,
                     {float(metrics.learningRate), float(t.beta1), float(t.beta2), float(t.eps), float(t.weightDecay)},
                     m_step, gradScale);
    if (zeroStage() == 1 || zeroStage() == 2) {
        float* params = static_cast<float*>(m_model.parameters().data);
        m_groups->data->allGather(kernels::f32(params + m_shardBegin), kernels::f32(params), m_shardSize);
    }
    m_measurements.addSpan(
        {metrics.step, std::int16_t(stage), 0, -1, wire::SpanKind::Optimizer, -1, optimizerBegin, Measurements::nowNs(), 0});
    m_measurements.addMemorySample({metrics.step, Measurements::nowNs(), MemoryLedger::instance().usage()});
    metrics.endNs = Measurements::nowNs();
    metrics.seconds = double(metrics.endNs - metrics.beginNs) * 1e-9;
    metrics.tokensPerSecond = double(tokensPerStep()) / metrics.seconds;
    return metrics;
}

void Trainer::save(const std::string& path) const
{
    // Every rank's parameters and (gathered) moments, as flat buffers in its slice's layout.
    struct Part {
        ParameterLayout layout;
        std::vector<float> params, m, v;
    };
    std::vector<float> params = downloadParameters(), m = gatherShards(m_optimizer.firstMoment()),
                       v = gatherShards(m_optimizer.secondMoment());
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
                std::vector<float> parts(local.size * std::size_t(local.tensorCount));
                m_groups->tensor->allGather(kernels::f32(part), kernels::f32(parts.data()), local.size);
                tpWhole.resize(parts.size());
                TensorView piece = local;
                piece.shardIndex = 0;   // place within this EP block only
                for (int r = 0; r < local.tensorCount; ++r) {
                    piece.tensorIndex = r;
                    insertShard(piece, parts.data() + local.size * std::size_t(r), tpWhole.data(), m_spec.model);
                }
                part = tpWhole.data();
            }
            const std::size_t blockSize = local.size * std::size_t(local.tensorCount);
            if (local.shardCount > 1)
                m_groups->expert->allGather(kernels::f32(part), kernels::f32(to->data() + target.offset), blockSize);
            else
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
        for (const std::vector<float>* buffer : {&mine.params, &mine.m, &mine.v})
            m_groups->pipeline->send(kernels::f32(buffer->data()), buffer->size(), 0, 1);
        m_groups->pipeline->waitSends();
        return;
    }
    std::vector<Part> parts;
    parts.push_back(std::move(mine));
    for (int s = 1; s < stages; ++s) {
        const plan::ParallelSpec& p = m_spec.parallel;
        ParameterLayout layout(m_spec.model, ModelSlice::ofStage(m_spec.model, p.pp, p.virtualStages, s));   // whole experts
        const std::size_t size = layout.totalSize();
        Part part{std::move(layout), std::vector<float>(size), std::vector<float>(size), std::vector<float>(size)};
        for (std::vector<float>* buffer : {&part.params, &part.m, &part.v})
            m_groups->pipeline->recv(kernels::f32(buffer->data()), size, s, 1);
        parts.push_back(std::move(part));
    }

    // Tensors in the whole model's order; a tied embedding's second copy is the same tensor.
    std::vector<std::pair<const Part*, const TensorView*>> order;
    for (const Part& part : parts)
        for (const TensorView& view : part.layout.views())
            order.emplace_back(&part, &view);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.second->globalIndex < b.second->globalIndex; });
    order.erase(std::unique(order.begin(), order.end(),
                            [](const auto& a, const auto& b) { return a.second->globalIndex == b.second->globalIndex; }),
                order.end());
    std::vector<TensorRecord> tensors;
    for (const std::string& prefix : {std::string(), kMomentPrefix, kSecondMomentPrefix})
        for (const auto& [part, view] : order) {
            const std::vector<float>& buffer = prefix.empty() ? part->params : prefix == kMomentPrefix ? part->m : part->v;
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
    nlohmann::json stored = job == metadata.end() ? nlohmann::json() : nlohmann::json::parse(job->second, nullptr, false);
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
        for (auto [prefix, buffer] : {std::pair{std::string(), &params}, std::pair{kMomentPrefix, &m},
                                      std::pair{kSecondMomentPrefix, &v}}) {
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
    // This rank's share of the moments (beyond the last tensor a shard holds zero padding).
    m.resize(std::max(total, m_shardBegin + m_shardSize), 0.0f);
    v.resize(m.size(), 0.0f);
    m_backend.upload(m_optimizer.firstMoment().ptr(), m.data() + m_shardBegin, m_shardSize);
    m_backend.upload(m_optimizer.secondMoment().ptr(), v.data() + m_shardBegin, m_shardSize);
    m_step = step;
}

void Trainer::sumSequenceParallelNormGradients()
{
    // Under sequence parallelism each TP rank's norms saw its own tokens: their weights'
    // gradients are sums over the tensor group (Megatron all-reduces them likewise).
    if (!m_spec.parallel.sequenceParallel || !m_groups || m_groups->tensor->size() == 1)
        return;
    float* grads = static_cast<float*>(m_model.gradients().data);
    for (const TensorView& v : m_model.layout().views())
        if (v.shape.size() == 1)
            m_groups->tensor->allReduceSum(kernels::f32(grads + v.offset), v.size);
}

bool Trainer::holdsTiedCopy() const
{
    return pipelineSize() > 1 && m_spec.model.tiedEmbeddings && m_slice.head;
}

void Trainer::shareTiedEmbeddingGradient()
{
    // With tied embeddings the first and the last stage each hold the embedding (input and output
    // layer); both need the sum of their gradients, as Megatron's embedding group all-reduce does.
    if (!m_spec.model.tiedEmbeddings)
        return;
    const int last = pipelineSize() - 1;
    const int stage = m_groups->coord.pp;
    if (stage != 0 && stage != last)
        return;
    const TensorView& embedding = m_model.layout().at(m_model.layout().embedding());
    float* mine = static_cast<float*>(m_model.gradients().data) + embedding.offset;
    std::vector<float> theirs(embedding.size);
    m_groups->pipeline->send(kernels::f32(mine), embedding.size, stage == 0 ? last : 0, 0);
    m_groups->pipeline->recv(kernels::f32(theirs.data()), embedding.size, stage == 0 ? last : 0, 0);
    m_groups->pipeline->waitSends();
    // Both add in the same order (first stage's part + last stage's), so the copies stay identical.
    for (std::size_t i = 0; i < embedding.size; ++i)
        mine[i] = stage == 0 ? mine[i] + theirs[i] : theirs[i] + mine[i];
}

GradientSquares Trainer::gradientSumSquares(kernels::DevPtr grads) const
{
    // Over this rank's shard, tensor by tensor; a tied embedding's second copy is counted once.
    const std::size_t shardEnd = m_shardBegin + m_shardSize;
    GradientSquares sums{};
    for (int i = 0; i < int(m_model.layout().views().size()); ++i) {
        const TensorView& v = m_model.layout().at(i);
        if (holdsTiedCopy() && i == m_model.layout().embedding())
            continue;
        double& sum = sums[(v.tensorCount > 1 ? kTensorSplit : 0) | (v.shardCount > 1 ? kExpertBlock : 0)];
        const std::size_t begin = std::max(v.offset, m_shardBegin);
        const std::size_t end = std::min(v.offset + v.size, shardEnd);
        if (begin < end)
            sum += m_backend.sumSquares({static_cast<float*>(grads.data) + (begin - m_shardBegin), grads.dtype},
                                        end - begin);
    }
    return sums;
}

void Trainer::uploadParameters(std::vector<float> params)
{
    if (zeroStage() < 3) {
        m_backend.upload(m_model.parameters(), params.data(), params.size());
        return;
    }
    params.resize(std::max(params.size(), m_shardBegin + m_shardSize), 0.0f);   // the last shard's padding
    m_backend.upload(m_paramShard.ptr(), params.data() + m_shardBegin, m_shardSize);
}

std::vector<float> Trainer::downloadParameters() const
{
    if (zeroStage() >= 3)
        return gatherShards(m_paramShard);
    std::vector<float> params(m_model.layout().totalSize());
    m_backend.download(params.data(), m_model.parameters(), params.size());
    return params;
}

std::vector<float> Trainer::gatherShards(const DeviceBuffer& shard) const
{
    std::vector<float> mine(m_shardSize);
    m_backend.download(mine.data(), shard.ptr(), m_shardSize);
    if (zeroStage() == 0)
        return mine;
    std::vector<float> full(m_shardSize * std::size_t(dataParallelSize()));
    m_groups->data->allGather(kernels::f32(mine.data()), kernels::f32(full.data()), m_shardSize);
    full.resize(m_model.layout().totalSize());
    return full;
}

}  // namespace meshbench::agent
