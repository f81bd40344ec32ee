// agent/distributed/pipeline_executor: two pipeline stages as threads on an in-process pipeline group,
// a 2-layer model (stage s holds layer s; MoE at layer 0), schedules gpipe, 1f1b and zb-h1 over 4
// micro-batches, against one whole GptModel running the same micro-batches serially (forward then
// backward, micro-batch 0 first). Both start from initializeParameters with the same seed, which
// draws each tensor by its global index, so each slice holds the whole model's tensors.
//
// Tolerance: each stage runs the same kernels on the same inputs as the whole model's layers, and
// accumulates its gradients micro-batch by micro-batch in the same order 0..3 (every schedule here
// runs a stage's backwards - and zb-h1's W ops - in micro-batch order), so untied models are compared
// bit for bit, the loss sum (double, added in the same order) too. With tied embeddings the whole
// model adds the head's and the embedding's contributions to one buffer alternately per micro-batch,
// while the stages sum each kind apart and add the two at the end (what sumTiedEmbeddingCopies
// does): a different fp32 order. Each element sums 2 x 4 micro-batches' contributions (each itself
// a short sum) of magnitude at most the tensor's largest gradient M, so reordering moves it by some
// 2^-24 x 8 M ~ 5e-7 M; it is compared within 1e-5 M (relative to the element it can be far larger:
// an element near 0 is a cancelling sum - seen: -2.182648e-4 vs -2.182573e-4).

#include "agent/distributed/finalize_gradients.h"
#include "agent/distributed/pipeline_executor.h"
#include "agent/runtime/in_process_communicator.h"

#include "kernels/cpu/cpu_backend.h"

#include <QtTest>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;

namespace {

constexpr int kMicrobatches = 4;
constexpr int kBatch = 2;
constexpr std::uint64_t kSeed = 11;

plan::ModelSpec tinyModel(bool tied, int layers)
{
    plan::ModelSpec m;
    m.layers = layers;
    m.hidden = 8;
    m.heads = 2;
    m.kvHeads = 2;
    m.ffnHidden = 16;
    m.vocab = 16;
    m.seqLen = 4;
    m.tiedEmbeddings = tied;
    m.moe.experts = 4;
    m.moe.topK = 2;
    m.moe.ffnHidden = 8;
    m.moe.capacityFactor = 4.0;  // nothing dropped
    m.moe.everyNLayers = 2;
    return m;
}

std::vector<std::vector<std::int32_t>> tokensOf(const plan::ModelSpec& model)
{
    std::mt19937 engine(5);
    std::uniform_int_distribution<int> pick(0, int(model.vocab) - 1);
    std::vector<std::vector<std::int32_t>> batches(kMicrobatches);
    for (auto& b : batches) {
        b.resize(std::size_t(kBatch) * std::size_t(model.seqLen + 1));
        for (std::int32_t& t : b)
            t = pick(engine);
    }
    return batches;
}

void initialize(GptModel& model, kernels::Backend& backend)
{
    std::vector<float> host(model.layout().totalSize(), 0.0f);
    initializeParameters(model.layout(), model.spec(), kSeed, host.data());
    backend.upload(model.parameters(), host.data(), host.size());
    model.zeroGradients();
}

std::map<std::string, std::vector<float>> gradientsByName(GptModel& model, kernels::Backend& backend)
{
    std::vector<float> all(model.layout().totalSize());
    backend.download(all.data(), model.gradients(), all.size());
    std::map<std::string, std::vector<float>> byName;
    for (const TensorView& v : model.layout().views())
        byName[v.name].assign(all.begin() + std::ptrdiff_t(v.offset), all.begin() + std::ptrdiff_t(v.offset + v.size));
    return byName;
}

class Recorder final : public GradientListener {
public:
    void gradientsReady(const std::vector<int>& views) override
    {
        for (int v : views)
            ++heard[v];
    }
    std::map<int, int> heard;
};

}  // namespace

class TestPipelineExecutor : public QObject {
    Q_OBJECT

private slots:
    void stagesEqualTheWholeModel_data()
    {
        QTest::addColumn<int>("kind");
        QTest::addColumn<bool>("tied");
        for (plan::ScheduleKind kind :
             {plan::ScheduleKind::GPipe, plan::ScheduleKind::OneFOneB, plan::ScheduleKind::ZeroBubbleH1,
              plan::ScheduleKind::ZeroBubbleV, plan::ScheduleKind::DualPipeV})
            for (bool tied : {false, true})
                QTest::addRow("%s %s", std::string(plan::scheduleName(kind)).c_str(), tied ? "tied" : "untied")
                    << int(kind) << tied;
    }

    void stagesEqualTheWholeModel()
    {
        QFETCH(int, kind);
        QFETCH(bool, tied);
        // Two stages; the V schedules put two chunks of one layer each on every stage.
        const plan::ScheduleShape shape{plan::ScheduleKind(kind), 2, kMicrobatches, 1, 0};
        const int chunks = shape.vShaped() ? 2 : 1;
        const plan::ModelSpec spec = tinyModel(tied, 2 * chunks);
        const auto batches = tokensOf(spec);
        const float lossScale = float(1.0 / double(kMicrobatches * kBatch * spec.seqLen)), auxScale = 0.25f;

        // The whole model, micro-batch after micro-batch.
        kernels::CpuBackend wholeBackend;
        GptModel whole(spec, plan::Recompute::None, wholeBackend);
        initialize(whole, wholeBackend);
        ForwardResult wholeResult;
        for (int mb = 0; mb < kMicrobatches; ++mb) {
            auto activations =
                whole.forward({batches[std::size_t(mb)].data(), kBatch}, lossScale, auxScale, wholeResult);
            whole.backward(*activations);
        }
        const auto expected = gradientsByName(whole, wholeBackend);

        plan::ScheduleShape chunked = shape;
        chunked.virtualStages = chunks;
        QVERIFY(plan::validateScheduleShape(chunked).empty());
        const plan::Schedule schedule = plan::buildSchedule(chunked);
        const int lossStage = chunked.stageOf(2 * chunks - 1);
        InProcessGroup pipeline(2);
        std::vector<std::unique_ptr<Communicator>> members;
        members.push_back(pipeline.member(0));
        members.push_back(pipeline.member(1));
        std::vector<std::map<std::string, std::vector<float>>> got(2);
        std::vector<ForwardResult> results(2);
        std::vector<std::map<int, int>> heard(2);
        std::vector<std::vector<int>> sliceViews(2);
        std::vector<std::vector<std::string>> names(2);
        std::vector<int> spanCount(2, 0), opCount(2, 0);
        std::vector<std::thread> threads;
        threads.reserve(2);
        for (int stage = 0; stage < 2; ++stage)
            threads.emplace_back([&, stage] {
                kernels::CpuBackend backend;
                const ModelSlice slice = ModelSlice::ofStage(spec, chunked, stage);
                GptModel model(spec, plan::Recompute::None, backend, &slice);
                initialize(model, backend);
                PipelineExecutor executor(model, backend, *members[std::size_t(stage)], schedule, stage, {0, 1});
                Measurements measurements(stage, &backend);
                measurements.beginTimeline();
                Recorder recorder;
                executor.runStep([&](int mb) { return batches[std::size_t(mb)].data(); }, kBatch, lossScale, auxScale,
                                 results[std::size_t(stage)], 1, measurements, &recorder);
                if (tied && lossStage != 0) {
                    const TensorView& e = model.layout().at(model.layout().embedding());
                    sumTiedEmbeddingCopies(backend, *members[std::size_t(stage)], 1 - stage,
                                           kernels::offset(model.gradients(), e.offset), e.size);
                }
                got[std::size_t(stage)] = gradientsByName(model, backend);
                heard[std::size_t(stage)] = recorder.heard;
                for (int c = 0; c < chunks; ++c)
                    for (int v : model.chunkViews(c))
                        sliceViews[std::size_t(stage)].push_back(v);
                for (const TensorView& v : model.layout().views())
                    names[std::size_t(stage)].push_back(v.name);
                measurements.resolveTimeline();
                spanCount[std::size_t(stage)] = int(measurements.spans().size());
                opCount[std::size_t(stage)] = int(schedule.stages[std::size_t(stage)].size());
            });
        for (std::thread& t : threads)
            t.join();

        // The loss lives on the stage with the model's last chunk (stage 0 for the V schedules): the
        // whole model's sum, in the same order.
        QCOMPARE(results[std::size_t(lossStage)].lossSum, wholeResult.lossSum);
        QCOMPARE(results[std::size_t(1 - lossStage)].lossSum, 0.0);
        QCOMPARE(results[0].auxLoss + results[1].auxLoss, wholeResult.auxLoss);
        for (int stage = 0; stage < 2; ++stage) {
            QCOMPARE(spanCount[std::size_t(stage)], opCount[std::size_t(stage)]);
            for (const auto& [name, values] : got[std::size_t(stage)]) {
                const auto it = expected.find(name);
                QVERIFY2(it != expected.end(), name.c_str());
                QCOMPARE(values.size(), it->second.size());
                const bool tiedEmbedding = tied && name == "embed.weight";
                float scale = 0.0f;  // the tensor's largest gradient: the size of the terms summed
                for (float w : it->second)
                    scale = std::max(scale, std::abs(w));
                for (std::size_t i = 0; i < values.size(); ++i) {
                    const float want = it->second[i];
                    const bool ok = tiedEmbedding ? std::abs(values[i] - want) <= 1e-5f * scale : values[i] == want;
                    QVERIFY2(ok, qPrintable(QStringLiteral("stage %1 %2[%3]: %4 vs %5")
                                                .arg(stage)
                                                .arg(QString::fromStdString(name))
                                                .arg(i)
                                                .arg(values[i], 0, 'g', 9)
                                                .arg(want, 0, 'g', 9)));
                }
            }
            // Every view of the slice heard of once (the last micro-batch's backward or W), and no other.
            std::map<int, int> want;
            for (int v : sliceViews[std::size_t(stage)])
                want[v] = 1;
            QCOMPARE(int(want.size()), int(names[std::size_t(stage)].size()));
            QCOMPARE(heard[std::size_t(stage)], want);
        }
        // Together the slices hold every tensor of the whole model (the tied embedding on both the
        // first and the last stage, or once on a V schedule's stage 0).
        std::set<std::string> all(names[0].begin(), names[0].end());
        all.insert(names[1].begin(), names[1].end());
        QCOMPARE(all.size(), expected.size());
    }
};

QTEST_APPLESS_MAIN(TestPipelineExecutor)
#include "tst_pipeline_executor.moc"
