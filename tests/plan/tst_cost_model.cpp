// The cost model against published figures and against Megatron-LM's formulas, each worked
// independently here (the reference functions below transliterate the published formulas).

#include "plan/cost_model.h"
#include "plan/planner.h"
#include "plan/presets.h"

#include <QtTest>

#include <cmath>
#include <thread>

using namespace meshbench::plan;
using nlohmann::json;

namespace {

json gpt3Json()
{
    return {{"model",
             {{"layers", 96},
              {"hidden", 12288},
              {"heads", 96},
              {"ffn_hidden", 49152},
              {"vocab", 51200},
              {"seq_len", 2048},
              {"norm", "layernorm"},
              {"activation", "gelu"},
              {"tied_embeddings", false}}},
            {"parallel",
             {{"dp", 8},
              {"pp", 16},
              {"tp", 8},
              {"zero", 1},
              {"sequence_parallel", true},
              {"recompute", "selective"},
              {"schedule", "1f1b"},
              {"microbatches", 64},
              {"micro_batch_size", 1}}},
            {"cluster", {{"preset", "dgx-h100x128"}}}};
}

JobSpec specFrom(const json& document)
{
    LoadResult loaded = loadJobSpec(document);
    if (!loaded.valid()) {
        for (const SpecError& e : loaded.errors)
            qWarning("%s: %s", e.path.c_str(), e.message.c_str());
        qFatal("test spec does not load");
    }
    return *loaded.spec;
}

// Megatron-LM compute_activation_memory (sequence parallel + selective recompute), first stage.
double megatronActivationSp(double s, double b, double h, double f, double V, double L, double t, double p, double m,
                            double v /* 0: not interleaved */)
{
    double a = s * b * h * (18 + 4 * f / h) * L;
    a += 8 * s * b * p;
    a += s * b * h * p;
    if (v > 0)
        a *= 1 + (p - 1) / (p * v);
    if (v == 0 && p > 1)
        a *= std::min(1.0, m / p);
    if (p == 1)
        a += s * b * h * 4 * (1 + V / h);
    return a / t;
}

// Megatron-LM compute_activation_memory_without_sp, first stage.
double megatronActivationNoSp(double s, double b, double h, double V, double L, double t, double p, double m, double v)
{
    double a = s * b * h * (10 + 24 / t) * L;
    a += 8 * s * b * p;
    a += s * b * h * p;
    if (v > 0)
        a *= 1 + (p - 1) / (p * v);
    if (v == 0 && p > 1)
        a *= std::min(1.0, m / p);
    if (p == 1)
        a += (s * b * V / t + s * b * h) * 2;
    return a * 1.05;
}

bool closeTo(double actual, double expected, double relative = 1e-12)
{
    return std::abs(actual - expected) <= relative * std::abs(expected);
}

#define QCOMPARE_REL(actual, expected, relative)                                                                       \
    QVERIFY2(closeTo((actual), (expected), (relative)),                                                                \
             qPrintable(QStringLiteral("%1 != %2").arg((actual), 0, 'g', 17).arg((expected), 0, 'g', 17)))

}  // namespace

class TestCostModel : public QObject {
    Q_OBJECT
private slots:
    void gpt3ParameterCount();
    void publishedParameterCounts_data();
    void publishedParameterCounts();
    void megatronMostLoadedShard();
    void zeroPaperExample_data();
    void zeroPaperExample();
    void megatronBytesPerParameter();
    void expertShardingOverEp();
    void activationsMatchMegatron_data();
    void activationsMatchMegatron();
    void activationsOtherSchedulesAndRecompute();
    void vSchedulesHoldBothEndsOnStageZero();
    void flopsMatchNarayanan();
    void singleDeviceStepIsComputeOnly();
    void gemmRooflineByHand();
    void tensorParallelCommunicationBusBandwidth();
    void dataParallelRingsUseEveryNic();
    void cpuRanksShareCoresWhileBusy();
    void estimateMatchesSimulationForEqualStages_data();
    void estimateMatchesSimulationForEqualStages();
};

void TestCostModel::gpt3ParameterCount()
{
    // REFERENCES: GPT-3 175B = 175.2 B parameters by Megatron's formula. By hand, per layer:
    // attention 2h^2 (1 + 1) = 603,979,776; MLP 2 h f = 1,207,959,552; norms 2h x 2 = 49,152;
    // 96 layers = 173,950,894,080; final norm 24,576; untied embeddings 2 x 51200 x 12288 =
    // 1,258,291,200; total 175,209,209,856.
    const ParameterCounts p = countParameters(specFrom(gpt3Json()).model);
    QCOMPARE(p.total, 175209209856.0);
    QCOMPARE(p.denseLayer, 1811988480.0);
    QCOMPARE(p.embedding, 629145600.0);
}

void TestCostModel::publishedParameterCounts_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<double>("expected");
    // Llama-3-70B: 70,553,706,496 parameters as Meta's released checkpoint counts them (GQA 8 kv
    // heads, SwiGLU 28672, untied 128256 vocabulary); worked by hand: layer 855,654,400 x 80 +
    // final norm 8,192 + 2 x 1,050,673,152.
    QTest::newRow("llama3-70b") << "llama3-70b.json" << 70553706496.0;
    // Mixtral-8x7B: Mistral publishes 46.7 B; by hand: attention 41,943,040 + norms 8,192 + 8
    // experts x 3 x 4096 x 14336 = 1,409,286,144 per layer, x 32, + 4,096 + 2 x 131,072,000 =
    // 46,701,744,128 (the router's 32 x 4096 x 8 weights are left out, as Megatron does).
    QTest::newRow("mixtral-8x7b") << "mixtral-8x7b.json" << 46701744128.0;
}

void TestCostModel::publishedParameterCounts()
{
    QFETCH(QString, file);
    QFETCH(double, expected);
    const QString path = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/") + file;
    QFile f(path);
    QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(path));
    const LoadResult loaded = parseJobSpec(f.readAll().toStdString());
    QVERIFY(loaded.valid());
    QCOMPARE(countParameters(loaded.spec->model).total, expected);
}

void TestCostModel::megatronMostLoadedShard()
{
    // Megatron: (block / pp + V h) / tp on the first stage; with untied embeddings and pp = 1,
    // V h / tp more.
    JobSpec spec = specFrom(gpt3Json());
    const ParameterCounts p = countParameters(spec.model);
    const CostModel model(spec, {});
    QCOMPARE_REL(model.denseParametersOnStage(0), (p.block / 16 + p.embedding) / 8, 1e-15);
    QCOMPARE_REL(model.denseParametersOnStage(7), p.block / 16 / 8, 1e-15);
    QCOMPARE(model.expertParametersOnStage(0), 0.0);

    json onePipe = gpt3Json();
    onePipe["parallel"]["pp"] = 1;
    onePipe["parallel"]["dp"] = 128;
    spec = specFrom(onePipe);
    const CostModel flat(spec, {});
    QCOMPARE_REL(flat.denseParametersOnStage(0), (p.block + 2 * p.embedding) / 8, 1e-15);
}

void TestCostModel::zeroPaperExample_data()
{
    QTest::addColumn<int>("zero");
    QTest::addColumn<double>("expectedGB");
    // Rajbhandari et al. 2020, Fig. 1: Psi = 7.5 B, N_d = 64, K = 12, fp16 weights and gradients:
    // (2 + 2 + 12) Psi = 120 GB; 4 Psi + 12 Psi/64 = 31.4 GB; 2 Psi + 14 Psi/64 = 16.6 GB;
    // 16 Psi / 64 = 1.9 GB.
    QTest::newRow("baseline") << 0 << 120.0;
    QTest::newRow("zero-1") << 1 << 31.40625;
    QTest::newRow("zero-2") << 2 << 16.640625;
    QTest::newRow("zero-3") << 3 << 1.875;
}

void TestCostModel::zeroPaperExample()
{
    QFETCH(int, zero);
    QFETCH(double, expectedGB);
    const ModelStateBytes bytes = modelStateBytes(7.5e9, 64, zero, GradDtype::Bf16);
    QCOMPARE_REL(bytes.total() / 1e9, expectedGB, 1e-12);
    // The rounded figures as the paper prints them.
    const double printed[] = {120.0, 31.4, 16.6, 1.9};
    QCOMPARE(std::round(bytes.total() / 1e8) / 10, printed[zero]);
}

void TestCostModel::megatronBytesPerParameter()
{
    // Megatron: 18 bytes per parameter (bf16 weight, fp32 grad, fp32 master, Adam m and v), or
    // 6 + 12/d with the distributed optimizer.
    QCOMPARE(modelStateBytes(1.0, 8, 0, GradDtype::Fp32).total(), 18.0);
    QCOMPARE(modelStateBytes(1.0, 8, 1, GradDtype::Fp32).total(), 6.0 + 12.0 / 8);
    // ZeRO-2/3 with fp32 gradients: 2 + 16/d and 18/d.
    QCOMPARE(modelStateBytes(1.0, 8, 2, GradDtype::Fp32).total(), 2.0 + 16.0 / 8);
    QCOMPARE(modelStateBytes(1.0, 8, 3, GradDtype::Fp32).total(), 18.0 / 8);
}

void TestCostModel::expertShardingOverEp()
{
    // Mixtral-like: 8 experts over ep = 8, tp = 2, pp = 2, dp = 8. Stage 0 holds 16 MoE layers:
    // experts 16 x 1,409,286,144 / (2 x 8) = 1,409,286,144; dense part (block - experts) / 2 +
    // embedding, over tp: ((46,439,600,128 - 45,097,156,608) / 2 + 131,072,000) / 2.
    JobSpec spec = specFrom({{"model",
                              {{"layers", 32},
                               {"hidden", 4096},
                               {"heads", 32},
                               {"kv_heads", 8},
                               {"ffn_hidden", 14336},
                               {"vocab", 32000},
                               {"seq_len", 4096},
                               {"norm", "rmsnorm"},
                               {"activation", "swiglu"},
                               {"tied_embeddings", false},
                               {"moe", {{"experts", 8}, {"top_k", 2}, {"capacity_factor", 1.25}}}}},
                             {"parallel", {{"dp", 8}, {"pp", 2}, {"tp", 2}, {"ep", 8}, {"zero", 1}}},
                             {"cluster", {{"preset", "dgx-h100x4"}}}});
    const CostModel model(spec, {});
    QCOMPARE(model.expertParametersOnStage(0), 1409286144.0);
    const double block = 46439596032.0 + 4096.0;
    const double experts = 32 * 1409286144.0;
    QCOMPARE_REL(model.denseParametersOnStage(0), ((block - experts) / 2 + 131072000.0) / 2, 1e-15);
    // ZeRO-1: dense optimizer state sharded over dp = 8, expert state over dp / ep = 1.
    const MemoryBreakdown m = model.stageMemory(0);
    QCOMPARE_REL(m.optimizer, 12.0 * model.denseParametersOnStage(0) / 8 + 12.0 * 1409286144.0, 1e-12);
    QCOMPARE_REL(m.grads, 4.0 * (model.denseParametersOnStage(0) + 1409286144.0), 1e-12);
}

void TestCostModel::activationsMatchMegatron_data()
{
    QTest::addColumn<bool>("sequenceParallel");
    QTest::addColumn<int>("tp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("microbatches");
    QTest::addColumn<int>("virtualStages");
    QTest::addColumn<int>("microBatchSize");
    QTest::addColumn<QString>("recompute");
    // Megatron-LM's report_theoretical_memory has the SP formula for SP with selective recompute
    // and the no-SP one for every case without SP, recompute none included (flash attention keeps
    // no scores either way).
    for (const auto& [sp, recompute] :
         {std::pair{true, "selective"}, std::pair{false, "selective"}, std::pair{false, "none"}}) {
        const std::string tag = std::string(sp ? "sp" : "no-sp") + " " + recompute;
        const QString r = QString::fromLatin1(recompute);
        QTest::addRow("%s tp8 pp16 m64", tag.c_str()) << sp << 8 << 16 << 64 << 1 << 1 << r;
        QTest::addRow("%s tp8 pp16 m8 (fewer micro-batches than stages)", tag.c_str())
            << sp << 8 << 16 << 8 << 1 << 1 << r;
        QTest::addRow("%s tp8 pp16 interleaved v3", tag.c_str()) << sp << 8 << 16 << 192 << 3 << 1 << r;
        QTest::addRow("%s tp4 pp4 interleaved v2 b2", tag.c_str()) << sp << 4 << 4 << 16 << 2 << 2 << r;
        QTest::addRow("%s tp8 pp1", tag.c_str()) << sp << 8 << 1 << 4 << 1 << 1 << r;
        QTest::addRow("%s tp2 pp1 b4", tag.c_str()) << sp << 2 << 1 << 4 << 1 << 4 << r;
    }
}

void TestCostModel::activationsMatchMegatron()
{
    QFETCH(bool, sequenceParallel);
    QFETCH(int, tp);
    QFETCH(int, pp);
    QFETCH(int, microbatches);
    QFETCH(int, virtualStages);
    QFETCH(int, microBatchSize);
    QFETCH(QString, recompute);
    json doc = gpt3Json();
    doc["parallel"] = {{"tp", tp},
                       {"pp", pp},
                       {"dp", 1024 / (tp * pp)},
                       {"sequence_parallel", sequenceParallel},
                       {"recompute", recompute.toStdString()},
                       {"microbatches", microbatches},
                       {"micro_batch_size", microBatchSize},
                       {"schedule", virtualStages > 1 ? "interleaved" : "1f1b"},
                       {"virtual_stages", virtualStages}};
    const JobSpec spec = specFrom(doc);
    const CostModel model(spec, {});
    const double v = virtualStages > 1 ? virtualStages : 0;
    const double expected =
        sequenceParallel ? megatronActivationSp(2048, microBatchSize, 12288, 49152, 51200, 96, tp, pp, microbatches, v)
                         : megatronActivationNoSp(2048, microBatchSize, 12288, 51200, 96, tp, pp, microbatches, v);
    QCOMPARE_REL(model.activationBytes(0), expected, 1e-12);
}

void TestCostModel::activationsOtherSchedulesAndRecompute()
{
    // Worked by hand for GPT-3, tp 8, pp 16 (6 layers per stage), s b h = 25,165,824, SP on.
    json doc = gpt3Json();
    const double sbh = 2048.0 * 12288;
    const double perLayer = sbh * 34 / 8;  // (18 + 4 f/h) / t with f = 4h
    const double embedding = (8.0 * 2048 + sbh) / 8;

    // GPipe holds all m = 64 micro-batches of its 6 layers.
    doc["parallel"]["schedule"] = "gpipe";
    QCOMPARE_REL(CostModel(specFrom(doc), {}).activationBytes(0), 64 * (6 * perLayer + embedding), 1e-12);
    // Stage 5 of 1F1B holds p - 5 = 11 micro-batches.
    doc["parallel"]["schedule"] = "1f1b";
    QCOMPARE_REL(CostModel(specFrom(doc), {}).activationBytes(5), 11 * 6 * perLayer, 1e-12);
    // ZB-H1 keeps 1F1B's peak of p micro-batches (Qi et al. 2024), on every stage.
    doc["parallel"]["schedule"] = "zb-h1";
    QCOMPARE_REL(CostModel(specFrom(doc), {}).activationBytes(5), 16 * 6 * perLayer, 1e-12);
    // Flash-style attention keeps no scores: no recompute keeps what selective keeps.
    doc["parallel"]["schedule"] = "1f1b";
    doc["parallel"]["recompute"] = "none";
    QCOMPARE_REL(CostModel(specFrom(doc), {}).activationBytes(5), 11 * 6 * perLayer, 1e-12);
    // Full recompute keeps each layer's bf16 input (split by SP) and one layer's working set.
    doc["parallel"]["recompute"] = "full";
    QCOMPARE_REL(CostModel(specFrom(doc), {}).activationBytes(5), 11 * 6 * 2 * sbh / 8 + perLayer, 1e-12);
}

void TestCostModel::vSchedulesHoldBothEndsOnStageZero()
{
    // GPT-3 on pp 16 with zb-v (2 chunks of 3 layers per stage): stage 0 holds the embedding and
    // the output layer, two V h untied, one when tied (then no copy anywhere: Megatron's
    // (block / pp + V h) / tp); stage 15 holds neither.
    json doc = gpt3Json();
    doc["parallel"]["schedule"] = "zb-v";
    doc["parallel"]["virtual_stages"] = 2;
    const ParameterCounts p = countParameters(specFrom(doc).model);
    const CostModel untied(specFrom(doc), {});
    QCOMPARE(untied.lastModelStage(), 0);
    QCOMPARE_REL(untied.denseParametersOnStage(0), (p.block / 16 + 2 * p.embedding) / 8, 1e-15);
    QCOMPARE_REL(untied.denseParametersOnStage(15), p.block / 16 / 8, 1e-15);
    json tiedDoc = doc;
    tiedDoc["model"]["tied_embeddings"] = true;
    QCOMPARE_REL(CostModel(specFrom(tiedDoc), {}).denseParametersOnStage(0), (p.block / 16 + p.embedding) / 8, 1e-15);

    // Activations (SP + selective, s b h (18 + 4 f/h) / t per layer, as in
    // activationsOtherSchedulesAndRecompute): ZB-V holds 2p chunks of 3 layers, 1F1B's p
    // micro-batches of 6, on every stage (m = 64 >= 2p - 1); stage 0 adds the embedding's input
    // for each of its 16 and the output layer's inputs once.
    const double sbh = 2048.0 * 12288;
    const double perLayer = sbh * 34 / 8;
    const double embedding = (8.0 * 2048 + sbh) / 8, head = sbh * 4.0 * (1.0 + 51200.0 / 12288) / 8;
    QCOMPARE_REL(untied.activationBytes(5), 16 * 6 * perLayer, 1e-12);
    QCOMPARE_REL(untied.activationBytes(0), 16 * (6 * perLayer + embedding) + head, 1e-12);
    // DualPipeV holds 2p + 1 = 33 chunks of 3 layers: 16.5 micro-batches' worth.
    doc["parallel"]["schedule"] = "dualpipev";
    QCOMPARE_REL(CostModel(specFrom(doc), {}).activationBytes(5), 16.5 * 6 * perLayer, 1e-12);
}

void TestCostModel::flopsMatchNarayanan()
{
    // Narayanan et al. 2021, eq. (3), counts activation recomputation (4 passes over the layers):
    // 96 B s l h^2 (1 + s/(6h) + V/(16 l h)). Megatron's num_floating_point_operations leaves the
    // recomputed forward out, i.e. 24 B s l h^2 (1 + s/(6h)) less.
    const JobSpec spec = specFrom(gpt3Json());
    const double B = 8 * 64, s = 2048, l = 96, h = 12288, V = 51200;
    const double paper = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    const double recomputed = 24 * B * s * l * h * h * (1 + s / (6 * h));
    QCOMPARE_REL(CostModel(spec, {}).flopsPerStep(), paper - recomputed, 1e-12);
}

void TestCostModel::singleDeviceStepIsComputeOnly()
{
    // One device, no recompute: no communication and no bubble, the step is the micro-batches'
    // F, B and W plus the optimizer.
    json doc = {{"model", {{"layers", 4}, {"hidden", 256}, {"heads", 4}, {"vocab", 1024}, {"seq_len", 128}}},
                {"parallel", {{"microbatches", 3}, {"micro_batch_size", 2}, {"recompute", "none"}}},
                {"cluster", {{"nodes", 1}, {"devices_per_node", 1}, {"device", "h100-sxm"}}}};
    const JobSpec spec = specFrom(doc);
    const Plan plan = makePlan(spec);
    const StageWork work = CostModel(spec, {}).stageWork(0);
    QCOMPARE_REL(plan.step.compute, 3 * work.total(), 1e-12);
    QCOMPARE(plan.step.tensorComm, 0.0);
    QCOMPARE(plan.step.dataParallelComm, 0.0);
    QCOMPARE(plan.step.pipelineBubble, 0.0);
    QCOMPARE_REL(plan.step.total, plan.step.compute + plan.step.optimizer, 1e-12);
    QCOMPARE_REL(plan.tokensPerSecond, 6 * 128 / plan.step.total, 1e-12);
    QCOMPARE_REL(plan.mfu, plan.flopsPerStep / (plan.step.total * 989e12), 1e-12);
}

void TestCostModel::gemmRooflineByHand()
{
    // An H100 at the table's 0.74: C[4096 x 6144] = A[4096 x 4096] B in 128 x 256 tiles is
    // 32 x 24 = 768 tiles in ceil(768 / 132) = 6 waves of 132 SMs, and a K of 4096 runs at
    // (4096 / 4352) / (8192 / 8448) of the 8192-deep rate; its bytes are far below the roofline.
    ClusterSpec cluster = *clusterPreset("dgx-h100");
    const DevicePerformance d = devicePerformance(cluster, 8).device;
    const double efficiency = 0.74 * (768.0 / 792.0) * (4096.0 / 4352.0) / (8192.0 / 8448.0);
    QCOMPARE_REL(gemmEfficiency(d, 4096, 6144, 4096), efficiency, 1e-12);
    QCOMPARE_REL(gemmTime(d, 4096, 6144, 4096), 2.0 * 4096 * 6144 * 4096 / (989e12 * efficiency) + 2e-6, 1e-12);
    // A skinny GEMM (m = 16) is bound by its weights' bytes at 0.9 x 3.35 TB/s.
    const double bytes = 2.0 * (16.0 * 8192 + 8192.0 * 8192 + 16.0 * 8192);
    QCOMPARE_REL(gemmTime(d, 16, 8192, 8192), bytes / (0.9 * 3350e9) + 2e-6, 1e-12);
    // A streaming kernel between the GEMMs keeps half of the copy's 0.9 x 3.35 TB/s in a step.
    QCOMPARE_REL(streamTime(d, 1e9), 1e9 / (0.5 * 0.9 * 3350e9) + 2e-6, 1e-12);
}

void TestCostModel::tensorParallelCommunicationBusBandwidth()
{
    // tp = 8 on one DGX H100, one micro-batch of s = 2048, h = 12288: every layer all-reduces
    // 2 s b h bytes twice forward and twice backward; a ring all-reduce costs
    // 2 (n-1) alpha + 2 (n-1)/n bytes / busbw with alpha = 3 us and NCCL's 370 GB/s of NVLink's 450.
    json doc = gpt3Json();
    doc["model"]["layers"] = 2;
    doc["parallel"] = {{"tp", 8}, {"microbatches", 1}, {"sequence_parallel", false}};
    doc["cluster"] = {{"preset", "dgx-h100"}};
    const Plan plan = makePlan(specFrom(doc));
    const double bytes = 2.0 * 2048 * 12288;
    const double allReduce = 2 * 7 * 3e-6 + 2.0 * 7 / 8 * bytes / 370e9;
    QCOMPARE_REL(plan.step.tensorComm, 2 * 4 * allReduce, 1e-12);
    QCOMPARE(plan.step.tensorCommHidden, 0.0);

    // With tp_comm_overlap each half of an all-reduce hides under the GEMM it is paired with,
    // except its first of 8 chunks: here every GEMM outlasts its collective.
    doc["parallel"]["tp_comm_overlap"] = true;
    const Plan overlapped = makePlan(specFrom(doc));
    QCOMPARE_REL(overlapped.step.tensorComm, 2 * 4 * allReduce / 8, 1e-12);
    QCOMPARE_REL(overlapped.step.tensorCommHidden, 2 * 4 * allReduce * 7 / 8, 1e-12);
}

void TestCostModel::dataParallelRingsUseEveryNic()
{
    // dp = 16 over two DGX H100 nodes: 8 members per node, one ring per member, each leaving
    // through its own 50 GB/s NIC (0.9 of it as payload): bus bandwidth min(370, 8 x 45) GB/s.
    // With tp = 8 the data groups have one member per node and get one NIC.
    json doc = gpt3Json();
    doc["model"]["layers"] = 8;
    doc["parallel"] = {{"dp", 16}, {"microbatches", 1}, {"zero", 0}, {"overlap_grad_reduce", false}};
    doc["cluster"] = {{"preset", "dgx-h100"}, {"nodes", 2}};
    JobSpec spec = specFrom(doc);
    const Mesh mesh(spec.parallel);
    const CostModel model(spec, linkClasses(mesh, spec.cluster));
    const double grads = 4.0 * model.denseParametersOnStage(0);
    QCOMPARE_REL(model.dataParallelCosts(0).reduce, 2 * 15 * 10e-6 + 2.0 * 15 / 16 * grads / 360e9, 1e-12);

    doc["parallel"] = {{"dp", 2}, {"tp", 8}, {"microbatches", 1}, {"zero", 0}, {"overlap_grad_reduce", false}};
    spec = specFrom(doc);
    const CostModel wide(spec, linkClasses(Mesh(spec.parallel), spec.cluster));
    const double shard = 4.0 * wide.denseParametersOnStage(0);
    QCOMPARE_REL(wide.dataParallelCosts(0).reduce, 2 * 1 * 10e-6 + 2.0 * 1 / 2 * shard / 45e9, 1e-12);
}

void TestCostModel::cpuRanksShareCoresWhileBusy()
{
    // The cpu device: R ranks on C cores computing a share u of the step get C / (R u) of a core
    // (at most one), less 16% per rank per core beyond one.
    ClusterSpec cluster = *clusterPreset("local-cpu");
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    for (int ranks : {1, 2, 4, 8, 16})
        for (double busy : {1.0, 0.75, 0.5}) {
            const double crowding = 1.0 + 0.16 * std::max(0.0, ranks / cores - 1.0);
            const double expected = std::min(1.0, cores / (ranks * std::max(busy, 1.0 / ranks))) / crowding;
            QCOMPARE_REL(devicePerformance(cluster, ranks, busy).device.rateShare, expected, 1e-12);
        }
    // A GPU is never shared.
    QCOMPARE(devicePerformance(*clusterPreset("dgx-h100"), 8, 0.5).device.rateShare, 1.0);

    // The planner prices an oversubscribed pipeline with its simulated busy share.
    json doc = {{"model", {{"layers", 4}, {"hidden", 64}, {"heads", 4}, {"vocab", 256}, {"seq_len", 32}}},
                {"parallel", {{"pp", 2}, {"dp", 4}, {"microbatches", 4}}},
                {"cluster", {{"nodes", 1}, {"devices_per_node", 8}, {"device", "cpu"}}}};
    const JobSpec spec = specFrom(doc);
    const LinkClasses links = linkClasses(Mesh(spec.parallel), spec.cluster);
    const Schedule schedule = buildSchedule(spec.parallel.scheduleShape());
    const double bubble = simulate(schedule, CostModel(spec, links).opCosts()).overallBubbleRatio;
    const CostModel busy(spec, links, 1.0 - bubble);
    QCOMPARE_REL(makePlan(spec).simulation.busy[0], 4 * busy.stageWork(0).total(), 1e-12);
}

void TestCostModel::estimateMatchesSimulationForEqualStages_data()
{
    QTest::addColumn<int>("kind");
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("v");
    QTest::newRow("1f1b 4x8") << int(ScheduleKind::OneFOneB) << 4 << 8 << 1;
    QTest::newRow("1f1b 8x3") << int(ScheduleKind::OneFOneB) << 8 << 3 << 1;
    QTest::newRow("gpipe 4x8") << int(ScheduleKind::GPipe) << 4 << 8 << 1;
    QTest::newRow("interleaved 4x8x2") << int(ScheduleKind::Interleaved) << 4 << 8 << 2;
    QTest::newRow("interleaved 2x4x3") << int(ScheduleKind::Interleaved) << 2 << 4 << 3;
    QTest::newRow("zb-h1 4x8") << int(ScheduleKind::ZeroBubbleH1) << 4 << 8 << 1;
    QTest::newRow("zb-h1 6x12") << int(ScheduleKind::ZeroBubbleH1) << 6 << 12 << 1;
    QTest::newRow("zb-v 4x8") << int(ScheduleKind::ZeroBubbleV) << 4 << 8 << 2;
    QTest::newRow("zb-v 6x20") << int(ScheduleKind::ZeroBubbleV) << 6 << 20 << 2;
    QTest::newRow("dualpipev 4x8") << int(ScheduleKind::DualPipeV) << 4 << 8 << 2;
    QTest::newRow("dualpipev 3x13") << int(ScheduleKind::DualPipeV) << 3 << 13 << 2;
}

void TestCostModel::estimateMatchesSimulationForEqualStages()
{
    // The search's closed form must agree with the simulator when stages are equal and transfers
    // are free. Stage costs per micro-batch: F = 1, B = 1, W = 1 (split in zb-h1 and the V
    // schedules), shared by the stage's v chunks.
    QFETCH(int, kind);
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, v);
    const ScheduleShape shape{ScheduleKind(kind), p, m, v, 0};
    std::vector<StageWork> stages(static_cast<std::size_t>(p));
    for (StageWork& s : stages) {
        s.forward = s.backward = s.weightGrad = 1;
    }
    const bool split = splitsBackward(shape.kind);
    const OpCosts costs = OpCosts::uniform(shape, 1.0 / v, (split ? 1.0 : 2.0) / v, split ? 1.0 / v : 0.0);
    const SimulationResult sim = simulate(buildSchedule(shape), costs);
    QVERIFY(sim.completed);
    QCOMPARE_REL(estimatedMakespan(shape, stages, 0.0), sim.makespan, 1e-12);
}

QTEST_APPLESS_MAIN(TestCostModel)
#include "tst_cost_model.moc"
