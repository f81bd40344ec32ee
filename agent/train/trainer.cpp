#include "trainer.h"

#include "agent/checkpoint/safetensors.h"

#include <chrono>
#include <cmath>

namespace meshbench::agent {
namespace {

constexpr const char* kFormat = "meshbench-checkpoint-1";
const std::string kMomentPrefix = "optimizer.exp_avg.";
const std::string kSecondMomentPrefix = "optimizer.exp_avg_sq.";

}  // namespace

namespace {

constexpr std::size_t kShardAlign = 16;   // elements: shards start 64-byte aligned

std::size_t shardSizeFor(std::size_t total, int ranks)
{
    const std::size_t share = (total + std::size_t(ranks) - 1) / std::size_t(ranks);
    return (share + kShardAlign - 1) / kShardAlign * kShardAlign;
}

}  // namespace

Trainer::Trainer(const plan::JobSpec& spec, kernels::Backend& backend, const ProcessGroups* groups)
    : m_spec(spec), m_backend(backend), m_groups(groups),
      m_model(spec.model, spec.parallel.recompute, backend,
              zeroStage() > 0 ? shardSizeFor(ParameterLayout(spec.model).totalSize(), dataParallelSize()) *
                                    std::size_t(dataParallelSize())
                              : 0),
      m_data(makeTokenSource(spec.train.data, int(spec.model.vocab), int(spec.model.seqLen), spec.train.seed)),
      m_shardSize(zeroStage() > 0 ? m_model.bufferElements() / std::size_t(dataParallelSize())
                                  : m_model.layout().totalSize()),
      m_shardBegin(zeroStage() > 0 ? m_shardSize * std::size_t(m_groups->data->rank()) : 0),
      m_adamM(backend, m_shardSize), m_adamV(backend, m_shardSize)
{
    if (zeroStage() > 0)
        m_gradShard = DeviceBuffer(backend, m_shardSize);
    if (zeroStage() >= 2)
        m_scatterOut = DeviceBuffer(backend, m_shardSize);
}

void Trainer::initialize()
{
    std::vector<float> host(m_model.layout().totalSize(), 0.0f);
    initializeParameters(m_model.layout(), m_spec.model, m_spec.train.seed, host.data());
    m_backend.upload(m_model.parameters(), host.data(), host.size());
    m_backend.fill(m_adamM.ptr(), 0.0f, m_adamM.size());
    m_backend.fill(m_adamV.ptr(), 0.0f, m_adamV.size());
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
    const auto start = std::chrono::steady_clock::now();
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
    metrics.step = m_step + 1;
    m_model.zeroGradients();
    if (zeroStage() > 0)
        m_backend.fill(m_gradShard.ptr(), 0.0f, m_shardSize);
    std::vector<std::int32_t> tokens(std::size_t(microBatchSize) * seqPlusOne);
    double lossSum = 0;
    double auxSum = 0;
    // Data-parallel rank r runs micro-batches [r M / dp, (r + 1) M / dp) of the step's M.
    const int dp = m_groups ? m_groups->data->size() : 1;
    const int firstMicrobatch = m_groups ? m_groups->data->rank() * (microbatches / dp) : 0;
    for (int mb = firstMicrobatch; mb < firstMicrobatch + microbatches / dp; ++mb) {
        // Sample k of step i is global sample i x globalBatch + k.
        for (int row = 0; row < microBatchSize; ++row)
            sampleTokens(std::int64_t(m_step) * globalBatch + std::int64_t(mb) * microBatchSize + row,
                         tokens.data() + std::size_t(row) * seqPlusOne);
        ForwardResult result;
        if (zeroStage() >= 2)
            m_model.zeroGradients();   // the full buffer only carries this micro-batch
        auto activations = m_model.forward({tokens.data(), microBatchSize}, lossScale, auxScale, result);
        m_model.backward(*activations);
        if (zeroStage() >= 2) {
            m_groups->data->reduceScatterSum(static_cast<const float*>(m_model.gradients().data),
                                             static_cast<float*>(m_scatterOut.ptr().data), m_shardSize);
            m_backend.add(m_scatterOut.ptr(), m_gradShard.ptr(), m_shardSize);
        }
        lossSum += result.lossSum;
        auxSum += result.auxLoss;
        for (const ExpertLoad& load : result.expertLoads) {
            auto it = std::find_if(metrics.expertLoads.begin(), metrics.expertLoads.end(),
                                   [&](const ExpertLoad& l) { return l.layer == load.layer; });
            if (it == metrics.expertLoads.end()) {
                metrics.expertLoads.push_back(load);
                continue;
            }
            for (std::size_t e = 0; e < load.routed.size(); ++e) {
                it->routed[e] += load.routed[e];
                it->kept[e] += load.kept[e];
            }
        }
    }
    if (dp > 1) {
        // The step's gradient is the sum over all micro-batches, wherever they ran. The CPU
        // backend's memory is host memory, which MPI reads directly.
        if (zeroStage() == 0)
            m_groups->data->allReduceSum(static_cast<float*>(m_model.gradients().data), m_shardSize);
        else if (zeroStage() == 1)
            m_groups->data->reduceScatterSum(static_cast<const float*>(m_model.gradients().data),
                                             static_cast<float*>(m_gradShard.ptr().data), m_shardSize);
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

    // This rank's gradients for its shard of the flat buffers (all of them without ZeRO).
    const kernels::DevPtr grads = zeroStage() > 0 ? m_gradShard.ptr() : m_model.gradients();

    // Global norm clipping as torch.nn.utils.clip_grad_norm_: scale by min(1, clip / (norm + 1e-6)).
    double sumSquares = m_backend.sumSquares(grads, m_shardSize);
    if (zeroStage() > 0)
        m_groups->data->allReduceSum(&sumSquares, 1);
    metrics.gradNorm = std::sqrt(sumSquares);
    const double clip = m_spec.train.gradClip;
    const float gradScale = clip > 0 ? float(std::min(1.0, clip / (metrics.gradNorm + 1e-6))) : 1.0f;

    ++m_step;
    metrics.learningRate = learningRate(m_step);
    const plan::TrainSpec& t = m_spec.train;
    const std::size_t shardEnd = m_shardBegin + m_shardSize;
    auto at = [](kernels::DevPtr base, std::size_t offset) {
        return kernels::DevPtr{static_cast<float*>(base.data) + offset, base.dtype};
    };
    for (const TensorView& v : m_model.layout().views()) {
        // The part of this tensor inside this rank's shard.
        const std::size_t begin = std::max(v.offset, m_shardBegin);
        const std::size_t end = std::min(v.offset + v.size, shardEnd);
        if (begin >= end)
            continue;
        const std::size_t local = begin - m_shardBegin;
        m_backend.adamw(at(m_model.parameters(), begin), at(grads, local), at(m_adamM.ptr(), local),
                        at(m_adamV.ptr(), local), end - begin, float(metrics.learningRate), float(t.beta1),
                        float(t.beta2), float(t.eps), v.decay ? float(t.weightDecay) : 0.0f, m_step, gradScale);
    }
    if (zeroStage() > 0) {
        float* params = static_cast<float*>(m_model.parameters().data);
        m_groups->data->allGather(params + m_shardBegin, params, m_shardSize);
    }
    metrics.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics.tokensPerSecond = double(tokensPerStep()) / metrics.seconds;
    return metrics;
}

void Trainer::save(const std::string& path) const
{
    const ParameterLayout& layout = m_model.layout();
    const std::size_t total = layout.totalSize();
    std::vector<float> m = gatherMoment(m_adamM), v = gatherMoment(m_adamV);
    if (m_groups && m_groups->worldRank != 0)
        return;   // rank 0 writes the job's checkpoint
    std::vector<float> params(total);
    m_backend.download(params.data(), m_model.parameters(), total);
    std::vector<TensorRecord> tensors;
    for (const auto& [prefix, buffer] : {std::pair{std::string(), &params}, std::pair{kMomentPrefix, &m},
                                         std::pair{kSecondMomentPrefix, &v}})
        for (const TensorView& view : layout.views())
            tensors.push_back({prefix + view.name, view.shape, buffer->data() + view.offset});
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
    for (const TensorView& view : layout.views()) {
        file.readF32(view.name, view.shape, params.data() + view.offset);
        file.readF32(kMomentPrefix + view.name, view.shape, m.data() + view.offset);
        file.readF32(kSecondMomentPrefix + view.name, view.shape, v.data() + view.offset);
    }
    m_backend.upload(m_model.parameters(), params.data(), total);
    // This rank's share of the moments (beyond the last tensor a shard holds zero padding).
    m.resize(std::max(total, m_shardBegin + m_shardSize), 0.0f);
    v.resize(m.size(), 0.0f);
    m_backend.upload(m_adamM.ptr(), m.data() + m_shardBegin, m_shardSize);
    m_backend.upload(m_adamV.ptr(), v.data() + m_shardBegin, m_shardSize);
    m_step = step;
}

std::vector<float> Trainer::gatherMoment(const DeviceBuffer& moment) const
{
    std::vector<float> shard(m_shardSize);
    m_backend.download(shard.data(), moment.ptr(), m_shardSize);
    if (zeroStage() == 0)
        return shard;
    std::vector<float> full(m_shardSize * std::size_t(dataParallelSize()));
    m_groups->data->allGather(shard.data(), full.data(), m_shardSize);
    full.resize(m_model.layout().totalSize());
    return full;
}

}  // namespace meshbench::agent
