#include "plan/job_spec.h"
#include "plan/planner.h"
#include "plan/report.h"

#include <QtTest>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

using namespace meshbench::plan;
using nlohmann::json;

namespace {

// The valid spec every case starts from: 24 layers of hidden 1024 with 16 heads on 2 nodes x 8
// H100s, laid out dp 4 x pp 2 x tp 2 = 16 ranks. kv_heads, ffn_hidden and everything in
// parallel beyond dp/pp/tp are left to their defaults.
json baseSpec()
{
    return json::parse(R"({
        "name": "base",
        "model": {"layers": 24, "hidden": 1024, "heads": 16, "vocab": 32000, "seq_len": 2048},
        "parallel": {"dp": 4, "pp": 2, "tp": 2},
        "cluster": {"nodes": 2, "devices_per_node": 8, "device": "h100-sxm"}
    })");
}

// The base spec with an RFC 7386 merge patch applied (null removes a key).
json patched(const QByteArray& patch)
{
    json document = baseSpec();
    document.merge_patch(json::parse(patch.toStdString()));
    return document;
}

QString qs(std::string_view text) { return QString::fromUtf8(text.data(), qsizetype(text.size())); }

QString listErrors(const std::vector<SpecError>& errors)
{
    QStringList lines;
    for (const SpecError& e : errors)
        lines << qs(e.path) + QStringLiteral(": ") + qs(e.message);
    return lines.isEmpty() ? QStringLiteral("(no errors)") : lines.join(QLatin1Char('\n'));
}

std::filesystem::path jobsDir()
{
#ifdef MESHBENCH_SOURCE_DIR
    const std::filesystem::path root(MESHBENCH_SOURCE_DIR);
#else
    // tests/plan/tst_job_spec.cpp -> repository root
    const std::filesystem::path root = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
#endif
    return root / "resources" / "jobs";
}

QByteArray readFile(const std::filesystem::path& path)
{
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return QByteArray::fromStdString(text.str());
}

// Columns shared by every rejection table: the patch (or raw text), the JSON path the error
// must carry, fragments its message must contain (the first one picks the error among several
// on the same path), how many errors the document has in all, and whether the spec survives
// (layout errors keep it for the designer, structural errors do not).
void addRejectionColumns()
{
    QTest::addColumn<QByteArray>("input");
    QTest::addColumn<QString>("path");
    QTest::addColumn<QStringList>("fragments");
    QTest::addColumn<int>("errorCount");
    QTest::addColumn<bool>("keepsSpec");
}

void checkRejection(const LoadResult& result)
{
    QFETCH(QString, path);
    QFETCH(QStringList, fragments);
    QFETCH(int, errorCount);
    QFETCH(bool, keepsSpec);

    QVERIFY(!result.valid());
    const auto match = std::find_if(result.errors.begin(), result.errors.end(), [&](const SpecError& e) {
        return qs(e.path) == path && qs(e.message).contains(fragments.first());
    });
    QVERIFY2(match != result.errors.end(), qPrintable(QStringLiteral("no error at '%1' containing '%2'; got:\n%3")
                                                          .arg(path, fragments.first(), listErrors(result.errors))));
    for (const QString& fragment : fragments)
        QVERIFY2(qs(match->message).contains(fragment),
                 qPrintable(QStringLiteral("'%1' lacks '%2'").arg(qs(match->message), fragment)));
    QVERIFY2(int(result.errors.size()) == errorCount, qPrintable(listErrors(result.errors)));
    QCOMPARE(result.spec.has_value(), keepsSpec);
}

void row(const char* name, const char* input, const char* path, const QStringList& fragments, int errorCount = 1,
         bool keepsSpec = false)
{
    QTest::newRow(name) << QByteArray(input) << QString::fromLatin1(path) << fragments << errorCount << keepsSpec;
}

// Layout errors keep the spec.
void layoutRow(const char* name, const char* patch, const char* path, const QStringList& fragments, int errorCount = 1)
{
    row(name, patch, path, fragments, errorCount, true);
}

// Field-by-field equality, with names in the failure message.
void compareSpecs(const JobSpec& a, const JobSpec& b)
{
    QCOMPARE(qs(a.name), qs(b.name));

    const ModelSpec& m = a.model;
    const ModelSpec& n = b.model;
    QCOMPARE(m.layers, n.layers);
    QCOMPARE(m.hidden, n.hidden);
    QCOMPARE(m.heads, n.heads);
    QCOMPARE(m.kvHeads, n.kvHeads);
    QCOMPARE(m.ffnHidden, n.ffnHidden);
    QCOMPARE(m.vocab, n.vocab);
    QCOMPARE(m.seqLen, n.seqLen);
    QCOMPARE(qs(normName(m.norm)), qs(normName(n.norm)));
    QCOMPARE(qs(activationName(m.activation)), qs(activationName(n.activation)));
    QCOMPARE(m.tiedEmbeddings, n.tiedEmbeddings);
    QCOMPARE(m.moe.experts, n.moe.experts);
    QCOMPARE(m.moe.topK, n.moe.topK);
    QCOMPARE(m.moe.ffnHidden, n.moe.ffnHidden);
    QCOMPARE(m.moe.everyNLayers, n.moe.everyNLayers);
    QCOMPARE(m.moe.capacityFactor, n.moe.capacityFactor);
    QCOMPARE(m.moe.auxLossCoef, n.moe.auxLossCoef);

    const ParallelSpec& p = a.parallel;
    const ParallelSpec& q = b.parallel;
    QCOMPARE(p.dp, q.dp);
    QCOMPARE(p.pp, q.pp);
    QCOMPARE(p.tp, q.tp);
    QCOMPARE(p.ep, q.ep);
    QCOMPARE(p.zero, q.zero);
    QCOMPARE(p.sequenceParallel, q.sequenceParallel);
    QCOMPARE(qs(recomputeName(p.recompute)), qs(recomputeName(q.recompute)));
    QCOMPARE(qs(scheduleName(p.schedule)), qs(scheduleName(q.schedule)));
    QCOMPARE(p.virtualStages, q.virtualStages);
    QCOMPARE(p.microbatches, q.microbatches);
    QCOMPARE(p.microBatchSize, q.microBatchSize);
    QCOMPARE(qs(rankOrderName(p.order)), qs(rankOrderName(q.order)));

    QCOMPARE(qs(gradDtypeName(a.precision.grads)), qs(gradDtypeName(b.precision.grads)));
    QCOMPARE(qs(activationDtypeName(a.precision.activations)), qs(activationDtypeName(b.precision.activations)));

    const ClusterSpec& c = a.cluster;
    const ClusterSpec& d = b.cluster;
    QCOMPARE(qs(c.preset), qs(d.preset));
    QCOMPARE(c.nodes, d.nodes);
    QCOMPARE(c.devicesPerNode, d.devicesPerNode);
    QCOMPARE(c.nvlinkDomain, d.nvlinkDomain);
    QCOMPARE(qs(c.device.kind), qs(d.device.kind));
    QCOMPARE(c.device.peakFlops, d.device.peakFlops);
    QCOMPARE(c.device.memoryBytes, d.device.memoryBytes);
    QCOMPARE(c.device.memoryBandwidth, d.device.memoryBandwidth);
    QCOMPARE(c.intraBandwidth, d.intraBandwidth);
    QCOMPARE(c.interBandwidth, d.interBandwidth);
    QCOMPARE(c.intraLatency, d.intraLatency);
    QCOMPARE(c.interLatency, d.interLatency);
    QCOMPARE(c.computeEfficiency, d.computeEfficiency);

    QCOMPARE(a.train.steps, b.train.steps);
    QCOMPARE(a.train.lr, b.train.lr);
    QCOMPARE(a.train.warmupSteps, b.train.warmupSteps);
    QCOMPARE(a.train.weightDecay, b.train.weightDecay);
    QCOMPARE(a.train.beta1, b.train.beta1);
    QCOMPARE(a.train.beta2, b.train.beta2);
    QCOMPARE(a.train.eps, b.train.eps);
    QCOMPARE(a.train.gradClip, b.train.gradClip);
    QCOMPARE(a.train.seed, b.train.seed);
    QCOMPARE(a.train.data.source, b.train.data.source);
    QCOMPARE(a.train.data.order, b.train.data.order);
    QCOMPARE(a.train.data.branching, b.train.data.branching);
    QCOMPARE(a.train.data.path, b.train.data.path);
    QCOMPARE(a.train.data.dtype, b.train.data.dtype);
    QCOMPARE(qs(backendName(a.backend)), qs(backendName(b.backend)));
    QCOMPARE(a.launch.command, b.launch.command);
    QCOMPARE(a.launch.cwd, b.launch.cwd);
    QVERIFY(a.launch.env == b.launch.env);
}

}  // namespace

class TestJobSpec : public QObject {
    Q_OBJECT

private slots:
    void baseSpecLoadsWithDefaults();
    void moeDefaultsAndValues();
    void moeLayerCount();
    void presetFieldsCanBeOverridden();
    void demoFileValues();
    void layoutRules_data();
    void layoutRules();
    void modelAndClusterRules_data();
    void modelAndClusterRules();
    void unknownKeys_data();
    void unknownKeys();
    void badValues_data();
    void badValues();
    void nullIsRefusedForEveryKey();
    void badDocuments_data();
    void badDocuments();
    void trainDataRules_data();
    void trainDataRules();
    void trainDataValues();
    void launchRules_data();
    void launchRules();
    void launchValues();
    void validateLayoutDirectly();
    void oneDeviceSpecRunsEverySchedule_data();
    void oneDeviceSpecRunsEverySchedule();
    void suggestedPipelineSizesAreAccepted();
    void roundTrip_data();
    void roundTrip();
    // Last, because a stack overflow here would end the run.
    void deeplyNestedValue_data();
    void deeplyNestedValue();
};

void TestJobSpec::baseSpecLoadsWithDefaults()
{
    const LoadResult result = loadJobSpec(baseSpec());
    QVERIFY2(result.errors.empty(), qPrintable(listErrors(result.errors)));
    QVERIFY(result.valid());
    const JobSpec& spec = *result.spec;

    QCOMPARE(qs(spec.name), QStringLiteral("base"));
    QCOMPARE(spec.model.layers, 24);
    QCOMPARE(spec.model.hidden, 1024);
    QCOMPARE(spec.model.heads, 16);
    QCOMPARE(spec.model.vocab, 32000);
    QCOMPARE(spec.model.seqLen, 2048);
    // Defaults: kv_heads = heads = 16 (plain MHA), ffn_hidden = 4 x 1024 = 4096.
    QCOMPARE(spec.model.kvHeads, 16);
    QCOMPARE(spec.model.ffnHidden, 4096);
    QCOMPARE(spec.model.norm, Norm::LayerNorm);
    QCOMPARE(spec.model.activation, Activation::Gelu);
    QVERIFY(spec.model.tiedEmbeddings);
    QVERIFY(!spec.model.moe.enabled());

    QCOMPARE(spec.parallel.dp, 4);
    QCOMPARE(spec.parallel.pp, 2);
    QCOMPARE(spec.parallel.tp, 2);
    QCOMPARE(spec.parallel.ep, 1);
    QCOMPARE(spec.parallel.zero, 0);
    QVERIFY(!spec.parallel.sequenceParallel);
    QCOMPARE(spec.parallel.recompute, Recompute::Selective);
    QCOMPARE(spec.parallel.schedule, ScheduleKind::OneFOneB);
    QCOMPARE(spec.parallel.virtualStages, 1);
    QCOMPARE(spec.parallel.microbatches, 1);
    QCOMPARE(spec.parallel.microBatchSize, 1);
    QCOMPARE(spec.parallel.order, RankOrder::TpDpPp);
    QCOMPARE(spec.parallel.worldSize(), 16);  // 4 x 2 x 2
    QCOMPARE(spec.precision.grads, GradDtype::Fp32);
    QCOMPARE(spec.precision.activations, ActivationDtype::Bf16);  // an h100-sxm: priced as Megatron-LM

    // A hand-described cluster: nvlink_domain defaults to the node (8), links to DGX H100 figures.
    QVERIFY(spec.cluster.preset.empty());
    QCOMPARE(spec.cluster.nodes, 2);
    QCOMPARE(spec.cluster.devicesPerNode, 8);
    QCOMPARE(spec.cluster.devices(), 16);
    QCOMPARE(spec.cluster.nvlinkDomain, 8);
    QCOMPARE(qs(spec.cluster.device.kind), QStringLiteral("h100-sxm"));
    QCOMPARE(spec.cluster.device.peakFlops, 989e12);
    QCOMPARE(spec.cluster.intraBandwidth, 450e9);
    QCOMPARE(spec.cluster.interBandwidth, 50e9);
    QCOMPARE(spec.cluster.intraLatency, 3e-6);
    QCOMPARE(spec.cluster.interLatency, 10e-6);
    QCOMPARE(spec.cluster.computeEfficiency, 0.0);  // unset: the device table's share

    // Train defaults: 100 steps, lr 3e-3, AdamW (0.9, 0.95, 1e-8), weight decay 0.1, clip 1.0.
    QCOMPARE(spec.train.steps, 100);
    QCOMPARE(spec.train.lr, 3e-3);
    QCOMPARE(spec.train.beta2, 0.95);
    QCOMPARE(spec.train.gradClip, 1.0);
    QCOMPARE(spec.train.data.source, DataSource::Markov);
    QCOMPARE(spec.train.data.order, 1);
    QCOMPARE(spec.train.data.branchingFor(spec.model.vocab), 4);
    QCOMPARE(spec.backend, BackendKind::Auto);
}

void TestJobSpec::moeDefaultsAndValues()
{
    // Only experts given: moe_ffn_hidden falls back to the model's ffn_hidden (3072 here).
    LoadResult result = loadJobSpec(patched(R"({"model": {"ffn_hidden": 3072, "moe": {"experts": 8}}})"));
    QVERIFY2(result.valid(), qPrintable(listErrors(result.errors)));
    const MoeSpec& defaults = result.spec->model.moe;
    QVERIFY(defaults.enabled());
    QCOMPARE(defaults.experts, 8);
    QCOMPARE(defaults.ffnHidden, 3072);
    QCOMPARE(defaults.topK, 1);
    QCOMPARE(defaults.everyNLayers, 1);
    QCOMPARE(defaults.capacityFactor, 1.0);
    QCOMPARE(defaults.auxLossCoef, 0.01);

    result = loadJobSpec(patched(R"({"model": {"moe": {"experts": 8, "top_k": 2, "moe_ffn_hidden": 1024,
        "every_n_layers": 2, "capacity_factor": 1.25, "aux_loss_coef": 0.02}}})"));
    QVERIFY2(result.valid(), qPrintable(listErrors(result.errors)));
    const MoeSpec& given = result.spec->model.moe;
    QCOMPARE(given.experts, 8);
    QCOMPARE(given.topK, 2);
    QCOMPARE(given.ffnHidden, 1024);
    QCOMPARE(given.everyNLayers, 2);
    QCOMPARE(given.capacityFactor, 1.25);
    QCOMPARE(given.auxLossCoef, 0.02);
    QCOMPARE(result.spec->model.ffnHidden, 4096);  // the dense MLP keeps 4 x hidden
}

void TestJobSpec::moeLayerCount()
{
    ModelSpec model;
    model.layers = 24;
    model.moe.experts = 8;
    model.moe.everyNLayers = 2;
    QVERIFY(model.isMoeLayer(0));
    QVERIFY(!model.isMoeLayer(1));
    QCOMPARE(model.moeLayersIn(0, 24), 12);  // 0, 2, ..., 22
    QCOMPARE(model.moeLayersIn(0, 12), 6);   // 0, 2, 4, 6, 8, 10
    QCOMPARE(model.moeLayersIn(1, 4), 2);    // 2, 4 among 1..4
    QCOMPARE(model.moeLayersIn(3, 1), 0);    // layer 3 alone
    model.moe.experts = 0;
    QCOMPARE(model.moeLayersIn(0, 24), 0);  // dense
}

void TestJobSpec::presetFieldsCanBeOverridden()
{
    // dgx-h100 is 1 node x 8; nodes 2 makes it 16 devices while the preset's links stay.
    const LoadResult result = loadJobSpec(
        patched(R"({"cluster": {"preset": "dgx-h100", "nodes": 2, "devices_per_node": null, "device": null}})"));
    QVERIFY2(result.valid(), qPrintable(listErrors(result.errors)));
    const ClusterSpec& c = result.spec->cluster;
    QCOMPARE(qs(c.preset), QStringLiteral("dgx-h100"));
    QCOMPARE(c.nodes, 2);
    QCOMPARE(c.devicesPerNode, 8);
    QCOMPARE(c.nvlinkDomain, 8);
    QCOMPARE(qs(c.device.kind), QStringLiteral("h100-sxm"));
    QCOMPARE(c.intraBandwidth, 450e9);
    QCOMPARE(c.interBandwidth, 50e9);
}

void TestJobSpec::demoFileValues()
{
    const std::filesystem::path file = jobsDir() / "demo.json";
    QVERIFY2(std::filesystem::is_regular_file(file), file.c_str());
    const LoadResult result = parseJobSpec(readFile(file).toStdString());
    QVERIFY2(result.valid(), qPrintable(listErrors(result.errors)));
    const JobSpec& spec = *result.spec;
    QCOMPARE(spec.model.layers, 4);
    QCOMPARE(spec.model.kvHeads, 2);
    QCOMPARE(spec.model.norm, Norm::RmsNorm);
    QCOMPARE(spec.model.activation, Activation::SwiGlu);
    QCOMPARE(spec.model.moe.experts, 4);
    QCOMPARE(spec.model.moe.topK, 2);
    QCOMPARE(spec.model.moe.ffnHidden, 256);
    QCOMPARE(spec.model.moe.capacityFactor, 1.25);
    QCOMPARE(spec.parallel.worldSize(), 8);  // 2 x 2 x 2 = 1 node x 8
    QCOMPARE(spec.parallel.ep, 2);
    QCOMPARE(spec.parallel.zero, 0);
    QCOMPARE(spec.parallel.recompute, Recompute::None);
    QCOMPARE(spec.parallel.microbatches, 4);
    QCOMPARE(spec.parallel.microBatchSize, 2);
    QCOMPARE(spec.parallel.globalBatch(), 16);  // dp 2 x 2 x 4
    QCOMPARE(qs(spec.cluster.device.kind), QStringLiteral("cpu"));
    QCOMPARE(spec.cluster.nvlinkDomain, 8);      // defaults to devices_per_node
    QCOMPARE(spec.cluster.intraBandwidth, 5e9);  // 5 GB/s
    QCOMPARE(spec.cluster.intraLatency, 1e-6);   // 1 us
    QCOMPARE(spec.cluster.computeEfficiency, 0.0);
    QCOMPARE(spec.train.steps, 300);
    QCOMPARE(spec.backend, BackendKind::Cpu);
}

void TestJobSpec::layoutRules_data()
{
    addRejectionColumns();
    // Base: 24 layers, hidden 1024, 16 heads (kv 16), ffn 4096, vocab 32000, seq 2048; dp 4 pp 2 tp 2; 2 x 8.
    // dp 3: 3 x 2 x 2 = 12 ranks vs 16 devices; 16 / (pp 2 x tp 2) = 4.
    layoutRow("world size", R"({"parallel": {"dp": 3}})", "parallel.dp",
              {"dp=3 x pp=2 x tp=2 = 12 ranks", "the cluster has 16 devices (2 nodes x 8)", "use dp=4"});
    // pp 3: 4 x 3 x 2 = 24; 16 is no multiple of 3 x 2 = 6, so no dp fixes it.
    layoutRow("world size, no dp fits", R"({"parallel": {"pp": 3}})", "parallel.dp",
              {"= 24 ranks", "has 16 devices", "choose dp, pp and tp whose product is 16"});
    // 30 layers over pp 4: divisors of 30 other than 1 and 30 are 2, 3, 5, 6, 10, 15. dp 2 x 4 x 2 = 16.
    layoutRow("layers over pp", R"({"model": {"layers": 30}, "parallel": {"dp": 2, "pp": 4}})", "parallel.pp",
              {"30 layers do not divide into pp=4 x virtual_stages=1 stages; use pp 2, 3, 5, 6, 10 or 15"});
    // 24 layers over 2 x 5 = 10 chunks, and 24 is not a multiple of 5 at all.
    layoutRow("layers over virtual stages",
              R"({"parallel": {"schedule": "interleaved", "virtual_stages": 5, "microbatches": 4}})", "parallel.pp",
              {"24 layers do not divide into pp=2 x virtual_stages=5 stages", "use virtual_stages that divides 24"});
    // 12 heads (hidden 1536 = 12 x 128) over tp 8; kv_heads = 12 fails too. gcd(12, 12, 6144, 32000) = 4.
    layoutRow("heads over tp", R"({"model": {"hidden": 1536, "heads": 12}, "parallel": {"dp": 1, "tp": 8}})",
              "parallel.tp", {"12 attention heads do not split over tp=8", "use tp 1, 2 or 4"}, 2);
    // kv_heads 2 over tp 4 (dp 2 x 2 x 4 = 16); gcd(16, 2, 4096, 32000) = 2.
    layoutRow("kv_heads over tp", R"({"model": {"kv_heads": 2}, "parallel": {"dp": 2, "tp": 4}})", "parallel.tp",
              {"2 kv_heads (query groups) do not split over tp=4", "use tp 1 or 2"});
    // 4100 % 8 = 4; gcd(16, 16, 4100, 32000) = 4.
    layoutRow("ffn_hidden over tp", R"({"model": {"ffn_hidden": 4100}, "parallel": {"dp": 1, "tp": 8}})", "parallel.tp",
              {"ffn_hidden=4100 does not split over tp=8", "use tp 1, 2 or 4"});
    // 1002 % 4 = 2; gcd(16, 16, 4096, 32000, 1002) = 2.
    layoutRow("moe_ffn_hidden over tp",
              R"({"model": {"moe": {"experts": 8, "moe_ffn_hidden": 1002}}, "parallel": {"dp": 2, "tp": 4}})",
              "parallel.tp", {"moe_ffn_hidden=1002 does not split over tp=4", "use tp 1 or 2"});
    // 50257 (GPT-2) over tp 8: ceil(50257 / 8) x 8 = 6283 x 8 = 50264; gcd(..., 50257) = 1.
    layoutRow("vocab over tp", R"({"model": {"vocab": 50257}, "parallel": {"dp": 1, "tp": 8}})", "parallel.tp",
              {"vocab=50257 does not split over tp=8", "pad model.vocab to 50264", "or use tp 1"});
    // 2050 % 4 = 2.
    layoutRow("sequence parallel over tp",
              R"({"model": {"seq_len": 2050}, "parallel": {"dp": 2, "tp": 4, "sequence_parallel": true}})",
              "parallel.sequence_parallel",
              {"seq_len=2050 does not split over tp=4", "multiple of 4", "set sequence_parallel to false"});
    layoutRow("ep on a dense model", R"({"parallel": {"ep": 2}})", "parallel.ep",
              {"ep=2 needs an MoE model", "set parallel.ep to 1 or add model.moe"});
    // ep 3 does not divide dp 4; divisors of 4 that also divide 6 experts: 1, 2.
    layoutRow("ep over dp", R"({"model": {"moe": {"experts": 6}}, "parallel": {"ep": 3}})", "parallel.ep",
              {"ep=3 must divide dp=4", "use ep 1 or 2"});
    // 6 % 4 = 2; divisors of 6 that also divide dp 4: 1, 2.
    layoutRow("experts over ep", R"({"model": {"moe": {"experts": 6}}, "parallel": {"ep": 4}})", "parallel.ep",
              {"6 experts do not shard evenly over ep=4", "use ep 1 or 2"});
    layoutRow("zero 2 with pp", R"({"parallel": {"zero": 2}})", "parallel.zero",
              {"ZeRO-2 cannot be combined with pipeline parallelism (pp=2)", "use zero 0 or 1", "or pp 1"});
    // dp 2 x pp 4 x tp 2 = 16; 24 % 4 = 0.
    layoutRow("zero 3 with pp", R"({"parallel": {"zero": 3, "dp": 2, "pp": 4}})", "parallel.zero",
              {"ZeRO-3 cannot be combined with pipeline parallelism (pp=4)", "use zero 0 or 1"});
    layoutRow("virtual stages without interleaved", R"({"parallel": {"virtual_stages": 2}})", "parallel.virtual_stages",
              {"virtual stages = 2 needs the interleaved schedule", "or 2 with \"zb-v\" or \"dualpipev\"",
               "set virtual stages to 1 or choose \"interleaved\" instead of \"1f1b\""});
    layoutRow("zb-v without its second chunk", R"({"parallel": {"schedule": "zb-v", "microbatches": 4}})",
              "parallel.virtual_stages",
              {"zb-v places two model chunks on every stage", "set virtual stages to 2 (got 1)"});
    // pp 2 x 2 chunks = 4 virtual stages of 24 layers; dualpipev needs 2 x 2 micro-batches.
    layoutRow("dualpipev with too few micro-batches",
              R"({"parallel": {"schedule": "dualpipev", "virtual_stages": 2, "microbatches": 3}})", "parallel.schedule",
              {"dualpipev needs at least 2 x pipeline stages = 4 micro-batches (got 3)", "use 4 or more"});
    // dp 2 x pp 4 x tp 2 = 16; 4 x 2 virtual stages do not divide 36 layers.
    layoutRow("zb-v layers over 2 pp",
              R"({"model": {"layers": 36}, "parallel": {"dp": 2, "pp": 4, "schedule": "zb-v", "virtual_stages": 2,
                  "microbatches": 8}})",
              "parallel.pp", {"36 layers do not divide into pp=4 x virtual_stages=2 stages"});
    // dp 8 x pp 1 x tp 2 = 16.
    layoutRow("interleaved with pp 1",
              R"({"parallel": {"dp": 8, "pp": 1, "schedule": "interleaved", "virtual_stages": 2, "microbatches": 4}})",
              "parallel.schedule", {"at least 2 pipeline stages (got 1)", "use \"1f1b\""});
    layoutRow("interleaved with virtual_stages 1", R"({"parallel": {"schedule": "interleaved", "microbatches": 4}})",
              "parallel.virtual_stages",
              {"at least 2 virtual stages per pipeline stage (got 1)", "set virtual stages to 2 or more"});
    // pp 4: 10 micro-batches lie between 8 and 12. 24 % (4 x 2) = 0.
    layoutRow("interleaved microbatches over pp",
              R"({"parallel": {"dp": 2, "pp": 4, "schedule": "interleaved", "virtual_stages": 2, "microbatches": 10}})",
              "parallel.schedule",
              {"micro-batches (10) to be a multiple of pipeline stages (4)", "use 8 or 12 micro-batches"});
}

void TestJobSpec::layoutRules()
{
    QFETCH(QByteArray, input);
    checkRejection(loadJobSpec(patched(input)));
}

void TestJobSpec::modelAndClusterRules_data()
{
    addRejectionColumns();
    const char* devices = "use a100-80gb, h100-sxm, h200-sxm, b200, gb200 or cpu";
    row("top_k over experts", R"({"model": {"moe": {"experts": 4, "top_k": 6}}})", "model.moe.top_k",
        {"top_k=6 exceeds experts=4", "use top_k 1 to 4"});
    row("every_n_layers over layers", R"({"model": {"moe": {"experts": 4, "every_n_layers": 30}}})",
        "model.moe.every_n_layers", {"30 exceeds the 24 layers", "use 1 to 24"});
    // 1000 % 16 = 8.
    row("hidden over heads", R"({"model": {"hidden": 1000}})", "model.hidden",
        {"hidden=1000 does not split into heads=16", "use a multiple of 16"});
    row("kv_heads over heads", R"({"model": {"kv_heads": 32}})", "model.kv_heads",
        {"kv_heads=32 exceeds heads=16", "use at most 16"});
    // 16 % 6 = 4.
    row("heads over kv_heads", R"({"model": {"kv_heads": 6}})", "model.kv_heads",
        {"heads=16 do not form equal query groups over kv_heads=6", "use a divisor of 16"});
    // 3 neither divides 8 nor is a multiple of it.
    row("nvlink_domain vs devices_per_node", R"({"cluster": {"nvlink_domain": 3}})", "cluster.nvlink_domain",
        {"nvlink_domain=3 must divide devices_per_node=8 or be a multiple of it"});
    // "dgx-h10" is one insertion from "dgx-h100", two from "dgx-a100" and "dgx-h200".
    row("unknown cluster preset",
        R"({"cluster": {"preset": "dgx-h10", "nodes": null, "devices_per_node": null, "device": null}})",
        "cluster.preset",
        {"unknown cluster preset 'dgx-h10'", "did you mean 'dgx-h100'?", "use dgx-a100, dgx-h100,",
         "describe nodes, devices_per_node and device"});
    // "smx" vs "sxm": two substitutions from h100-sxm, three from h200-sxm.
    row("unknown device", R"({"cluster": {"device": "h100-smx"}})", "cluster.device",
        {"unknown device 'h100-smx'", "did you mean 'h100-sxm'?", devices});
    row("custom cluster without device", R"({"cluster": {"device": null}})", "cluster.device",
        {"is required without a preset", devices});
    row("custom cluster without nodes", R"({"cluster": {"nodes": null}})", "cluster.nodes",
        {"is required: give an integer from 1 to 1,048,576"});
    row("no model", R"({"model": null})", "model", {"is required: add a \"model\" object"});
}

void TestJobSpec::modelAndClusterRules()
{
    QFETCH(QByteArray, input);
    checkRejection(loadJobSpec(patched(input)));
}

void TestJobSpec::unknownKeys_data()
{
    addRejectionColumns();
    // Renaming hidden also leaves the required hidden missing: two errors.
    row("model.hiden", R"({"model": {"hidden": null, "hiden": 1024}})", "model.hiden",
        {"unknown key; did you mean 'hidden'?", "valid keys here: layers, hidden, heads, kv_heads"}, 2);
    row("parallel.microbatch", R"({"parallel": {"microbatch": 8}})", "parallel.microbatch",
        {"unknown key; did you mean 'microbatches'?"});
    row("top-level paralel", R"({"parallel": null, "paralel": {"dp": 4, "pp": 2, "tp": 2}})", "paralel",
        {"unknown key; did you mean 'parallel'?"});
    row("precision.grad", R"({"precision": {"grad": "bf16"}})", "precision.grad",
        {"unknown key; did you mean 'grads'?"});
    // "owner" is at least 4 edits from every top-level key: no suggestion, just the list.
    row("no near key", R"({"owner": "alice"})", "owner",
        {"unknown key; valid keys here: name, model, parallel, precision, cluster, train, backend or launch"});
}

void TestJobSpec::unknownKeys()
{
    QFETCH(QByteArray, input);
    checkRejection(loadJobSpec(patched(input)));
}

void TestJobSpec::badValues_data()
{
    addRejectionColumns();
    row("layers as string", R"({"model": {"layers": "24"}})", "model.layers",
        {"expected an integer, got string \"24\""});
    row("pp as 2.5", R"({"parallel": {"pp": 2.5}})", "parallel.pp", {"expected an integer, got number 2.5"});
    row("hidden as bool", R"({"model": {"hidden": true}})", "model.hidden", {"expected an integer, got boolean true"});
    row("norm as object", R"({"model": {"norm": {}}})", "model.norm", {"expected a string, got object"});
    row("model as array", R"({"model": [1]})", "model", {"expected an object, got array"});
    row("sequence_parallel as string", R"({"parallel": {"sequence_parallel": "yes"}})", "parallel.sequence_parallel",
        {"expected true or false, got string \"yes\""});
    row("zero layers", R"({"model": {"layers": 0}})", "model.layers", {"0 is out of range; use 1 to 10,000"});
    row("negative hidden", R"({"model": {"hidden": -5}})", "model.hidden", {"-5 is out of range; use 1 to 1,048,576"});
    row("zero tp", R"({"parallel": {"tp": 0}})", "parallel.tp", {"0 is out of range; use 1 to 1,048,576"});
    row("zero experts", R"({"model": {"moe": {"experts": 0}}})", "model.moe.experts",
        {"0 is out of range; use 1 to 65,536"});
    row("zero 4", R"({"parallel": {"zero": 4}})", "parallel.zero", {"4 is out of range; use 0 to 3"});
    row("capacity factor 0", R"({"model": {"moe": {"experts": 8, "capacity_factor": 0}}})", "model.moe.capacity_factor",
        {"0 is out of range; use a value above 0 up to 1000"});
    row("layers 10^12", R"({"model": {"layers": 1000000000000}})", "model.layers",
        {"1000000000000 is out of range; use 1 to 10,000"});
    row("layers 1e12 float", R"({"model": {"layers": 1e12}})", "model.layers",
        {"1000000000000.0 is out of range; use 1 to 10,000"});
    // 2^40 = 1099511627776.
    row("hidden 2^40", R"({"model": {"hidden": 1099511627776}})", "model.hidden",
        {"1099511627776 is out of range; use 1 to 1,048,576"});
    // 2^64 - 1, the largest unsigned JSON integer nlohmann keeps exact.
    row("vocab 2^64-1", R"({"model": {"vocab": 18446744073709551615}})", "model.vocab",
        {"18446744073709551615 is out of range; use 1 to 100,000,000"});
    row("norm batchnorm", R"({"model": {"norm": "batchnorm"}})", "model.norm",
        {"'batchnorm' is not allowed", "use layernorm or rmsnorm"});
    row("schedule 1f1f", R"({"parallel": {"schedule": "1f1f"}})", "parallel.schedule",
        {"'1f1f' is not allowed; did you mean '1f1b'?", "use gpipe, 1f1b, interleaved, zb-h1, zb-v or dualpipev"});
    row("order", R"({"parallel": {"order": "dp-tp-pp"}})", "parallel.order", {"use tp-dp-pp or tp-pp-dp"});
    row("backend gpu", R"({"backend": "gpu"})", "backend", {"'gpu' is not allowed", "use auto, cpu or cuda"});
    row("train lr zero", R"({"train": {"lr": 0}})", "train.lr", {"0 is out of range"});
    row("train unknown key", R"({"train": {"step": 3}})", "train.step", {"did you mean 'steps'"});
}

void TestJobSpec::badValues()
{
    QFETCH(QByteArray, input);
    checkRejection(loadJobSpec(patched(input)));
}

// Issue 27, finding 14: null stood for the default of whichever key it was given to
// (grad_bucket_mb, the overlap flags, backend, precision...), silently. It is refused for every key
// of the spec, each with its path.
void TestJobSpec::nullIsRefusedForEveryKey()
{
    const json explicitSpec = toJson(*loadJobSpec(baseSpec()).spec);
    QVERIFY(loadJobSpec(explicitSpec).valid());
    std::vector<json::json_pointer> keys;
    const std::function<void(const json&, const json::json_pointer&)> collect = [&](const json& value,
                                                                                    const json::json_pointer& at) {
        for (const auto& [key, member] : value.items()) {
            keys.push_back(at / key);
            if (member.is_object())
                collect(member, at / key);
        }
    };
    collect(explicitSpec, json::json_pointer());
    QVERIFY(keys.size() > 50);
    for (const json::json_pointer& key : keys) {
        json document = explicitSpec;
        document[key] = nullptr;
        std::string path = key.to_string().substr(1);
        std::replace(path.begin(), path.end(), '/', '.');
        const LoadResult loaded = loadJobSpec(document);
        const bool refused = std::any_of(loaded.errors.begin(), loaded.errors.end(), [&](const SpecError& e) {
            return e.path == path && e.message == "is null; leave the key out for its default, or give it a value";
        });
        QVERIFY2(refused, qPrintable(qs(path) + QStringLiteral(": ") + listErrors(loaded.errors)));
    }
}

void TestJobSpec::badDocuments_data()
{
    addRejectionColumns();
    // Line 3 is `    "layers": 24,,`: 4 spaces, "layers" in columns 5-12, ':' 13, ' ' 14, 24 in 15-16,
    // ',' 17, and the stray ',' in column 18.
    // The path is where the parser was: after the member model.layers.
    row("malformed", "{\n  \"model\": {\n    \"layers\": 24,,\n", "model.layers",
        {"line 3, column 18: not valid JSON: syntax error"});
    row("empty document", "", "", {"line 1, column 1", "not valid JSON"});
    // {} lacks both required sections: model and cluster.
    row("empty object", "{}", "model", {"is required: add a \"model\" object"}, 2);
    row("array at top level", "[1, 2]", "",
        {"a job spec is a JSON object with model, parallel and cluster sections, got array"});
    row("string at top level", "\"job\"", "", {"got string"});
    // 1e400 overflows a double: rejected at parse time, never turned into inf.
    row("1e400", "{\"model\": {\"layers\": 1e400}}", "model.layers", {"number overflow parsing '1e400'", "1.8e308"});
    // Invalid UTF-8 (issue 11): the byte is quoted as \xFF, so the message is text that JSON can carry.
    row("invalid UTF-8 in a string", "{\"name\": \"\xff\"}", "name",
        {"line 1, column 11: not valid JSON", "ill-formed UTF-8 byte", "\\xFF"});
    row("invalid UTF-8 in a key",
        "{\"model\": {\"lay\xc3\x28"
        "ers\": 1}}",
        "model", {"not valid JSON", "ill-formed UTF-8 byte", "\\xC3"});
    // Duplicate keys (issue 11): nlohmann-json keeps the last silently; a spec refuses both, by path.
    row("duplicate key", "{\"model\": {\"layers\": 24, \"hidden\": 1024, \"layers\": 48}}", "model.layers",
        {"appears more than once"});
    row("duplicate key in an array's object", "{\"cluster\": {\"x\": [1, {\"a\": 1}, {\"a\": 1, \"a\": 2}]}}",
        "cluster.x[2].a", {"appears more than once"});
    row("two duplicate keys", "{\"name\": \"a\", \"name\": \"b\", \"backend\": \"cpu\", \"backend\": \"cpu\"}",
        "backend", {"appears more than once"}, 2);
}

void TestJobSpec::badDocuments()
{
    QFETCH(QByteArray, input);
    LoadResult result;
    try {
        result = parseJobSpec(input.toStdString());
    } catch (const std::exception& e) {
        QFAIL(
            qPrintable(QStringLiteral("parseJobSpec threw instead of reporting: %1").arg(QString::fromUtf8(e.what()))));
    }
    checkRejection(result);
}

void TestJobSpec::trainDataRules_data()
{
    addRejectionColumns();
    // The base model: vocab 32000, seq_len 2048. The first three are issue 11's: each planned as valid.
    row("unknown source", R"({"train": {"data": {"source": "zb-h2"}}})", "train.data.source",
        {"'zb-h2' is not allowed", "use markov or file"});
    // The Markov chain's bounds are the model's: order up to seq_len, branching up to vocab.
    row("branching below int64", R"({"train": {"data": {"branching": -9223372036854775809}}})", "train.data.branching",
        {"out of range", "use 2 to 32,000"});
    row("order 0", R"({"train": {"data": {"order": 0}}})", "train.data.order", {"0 is out of range", "use 1 to 2,048"});
    row("order above seq_len", R"({"train": {"data": {"order": 2049}}})", "train.data.order",
        {"2049 is out of range; use 1 to 2,048"});
    row("branching above vocab", R"({"train": {"data": {"branching": 32001}}})", "train.data.branching",
        {"32001 is out of range; use 2 to 32,000"});
    row("vocab too small for markov", R"({"model": {"vocab": 1}})", "model.vocab",
        {"too small for the markov data source"});
    row("branching 1", R"({"train": {"data": {"branching": 1}}})", "train.data.branching", {"1 is out of range"});
    row("order as text", R"({"train": {"data": {"order": "2"}}})", "train.data.order", {"expected an integer"});
    row("data not an object", R"({"train": {"data": 5}})", "train.data", {"expected an object, got number 5"});
    row("unknown key", R"({"train": {"data": {"bogus": 1}}})", "train.data.bogus",
        {"unknown key", "source, order or branching"});
    row("file key on markov", R"({"train": {"data": {"path": "x.bin"}}})", "train.data.path",
        {"is a setting of the file source", "set train.data.source to \"file\""});
    row("markov key on file",
        R"({"train": {"data": {"source": "file", "path": "x.bin", "dtype": "uint16", "order": 1}}})",
        "train.data.order", {"is a setting of the markov source"});
    row("file without path", R"({"train": {"data": {"source": "file", "dtype": "uint16"}}})", "train.data.path",
        {"is required"});
    row("file with empty path", R"({"train": {"data": {"source": "file", "path": "", "dtype": "uint16"}}})",
        "train.data.path", {"is empty"});
    row("path not a string", R"({"train": {"data": {"source": "file", "path": 7, "dtype": "uint16"}}})",
        "train.data.path", {"expected a string, got number 7"});
    row("file without dtype", R"({"train": {"data": {"source": "file", "path": "x.bin"}}})", "train.data.dtype",
        {"is required for a token file"});
    row("bad dtype", R"({"train": {"data": {"source": "file", "path": "x.bin", "dtype": "int8"}}})", "train.data.dtype",
        {"'int8' is not allowed", "use uint16 or uint32"});
}

void TestJobSpec::trainDataRules()
{
    QFETCH(QByteArray, input);
    checkRejection(loadJobSpec(patched(input)));
}

void TestJobSpec::trainDataValues()
{
    LoadResult result =
        loadJobSpec(patched(R"({"train": {"data": {"source": "markov", "order": 3, "branching": 7}}})"));
    QVERIFY2(result.valid(), qPrintable(listErrors(result.errors)));
    QCOMPARE(result.spec->train.data.source, DataSource::Markov);
    QCOMPARE(result.spec->train.data.order, 3);
    QCOMPARE(result.spec->train.data.branchingFor(32000), 7);
    result = loadJobSpec(patched(R"({"train": {"data": {"source": "file", "path": "t.bin", "dtype": "uint32"}}})"));
    QVERIFY2(result.valid(), qPrintable(listErrors(result.errors)));
    QCOMPARE(result.spec->train.data.source, DataSource::File);
    QCOMPARE(qs(result.spec->train.data.path), QStringLiteral("t.bin"));
    QCOMPARE(result.spec->train.data.dtype, TokenDtype::Uint32);
    // Branching defaults to min(4, vocab): 4 here, 3 on a three-token vocabulary.
    QCOMPARE(DataSpec{}.branchingFor(32000), 4);
    QCOMPARE(DataSpec{}.branchingFor(3), 3);
}

void TestJobSpec::launchRules_data()
{
    addRejectionColumns();
    const QStringList list{"must be a non-empty list of strings, e.g. [\"python3\", \"train.py\"]"};
    row("command not a list", R"({"launch": {"command": "python3 train.py"}})", "launch.command", list);
    row("empty command", R"({"launch": {"command": []}})", "launch.command", list);
    row("command of numbers", R"({"launch": {"command": ["python3", 3]}})", "launch.command", list);
    row("no command", R"({"launch": {"cwd": "run"}})", "launch.command",
        {"is required: give a non-empty list of strings, e.g. [\"python3\", \"train.py\"]"});
    row("empty program", R"({"launch": {"command": ["", "train.py"]}})", "launch.command",
        {"names no program: its first string is empty"});
    row("launch not an object", R"({"launch": ["python3"]})", "launch", {"expected an object, got array"});
    row("unknown key", R"({"launch": {"command": ["a"], "args": []}})", "launch.args",
        {"unknown key", "command, cwd or env"});
    row("cwd not a string", R"({"launch": {"command": ["a"], "cwd": 1}})", "launch.cwd",
        {"expected a string, got number 1"});
    row("empty cwd", R"({"launch": {"command": ["a"], "cwd": ""}})", "launch.cwd",
        {"is empty: give a folder, or leave the key out for the job spec's folder"});
    row("env not an object", R"({"launch": {"command": ["a"], "env": ["A=1"]}})", "launch.env",
        {"must be an object of strings, e.g. {\"NCCL_DEBUG\": \"INFO\"}"});
    row("env value not a string", R"({"launch": {"command": ["a"], "env": {"A": 1}}})", "launch.env",
        {"must be an object of strings"});
    row("env name with a dash", R"({"launch": {"command": ["a"], "env": {"MY-VAR": "1"}}})", "launch.env",
        {"'MY-VAR' is not a variable name: use letters, digits and _"});
    row("env name with a digit first", R"({"launch": {"command": ["a"], "env": {"1A": "1"}}})", "launch.env",
        {"'1A' is not a variable name"});
    row("env sets the engine's", R"({"launch": {"command": ["a"], "env": {"MESHBENCH_COLLECTOR": "tcp://x:1"}}})",
        "launch.env", {"'MESHBENCH_COLLECTOR' is the engine's to set"});
    // A launch command leaves the layout's rules as they are.
    layoutRow("layout rules still hold", R"({"launch": {"command": ["a"]}, "parallel": {"dp": 3}})", "parallel.dp",
              {"ranks, but the cluster has 16 devices"});
}

void TestJobSpec::launchRules()
{
    QFETCH(QByteArray, input);
    checkRejection(loadJobSpec(patched(input)));
}

void TestJobSpec::launchValues()
{
    // No launch section: meshbench-agent runs the job, and toJson writes none.
    const LoadResult agent = loadJobSpec(baseSpec());
    QVERIFY(!agent.spec->launch.enabled());
    QVERIFY(!toJson(*agent.spec).contains("launch"));

    const LoadResult launched = loadJobSpec(patched(R"({"launch": {"command": ["python3", "train.py", "--flag"],
        "cwd": "runs/a", "env": {"NCCL_DEBUG": "INFO", "A_1": ""}}})"));
    QVERIFY2(launched.valid(), qPrintable(listErrors(launched.errors)));
    const LaunchSpec& launch = launched.spec->launch;
    QCOMPARE(launch.command, (std::vector<std::string>{"python3", "train.py", "--flag"}));
    QCOMPARE(launch.cwd, std::string("runs/a"));
    QVERIFY((launch.env == std::map<std::string, std::string>{{"A_1", ""}, {"NCCL_DEBUG", "INFO"}}));
    const json written = toJson(*launched.spec);
    QCOMPARE(written["launch"], json::parse(R"({"command": ["python3", "train.py", "--flag"], "cwd": "runs/a",
        "env": {"A_1": "", "NCCL_DEBUG": "INFO"}})"));
    // cwd and env are written only when given.
    const LoadResult bare = loadJobSpec(patched(R"({"launch": {"command": ["./train.sh"]}})"));
    QVERIFY2(bare.valid(), qPrintable(listErrors(bare.errors)));
    QCOMPARE(toJson(*bare.spec)["launch"], json::parse(R"({"command": ["./train.sh"]})"));

    // What only meshbench-agent cannot run (an odd head dimension for its rotary embeddings, a
    // planned-only overlap) refuses the agent's job, not a launch command's; the plan is the same.
    const QByteArray agentCannot = R"({"model": {"hidden": 1040}, "parallel": {"tp_comm_overlap": true}})";
    const LoadResult refused = loadJobSpec(patched(agentCannot));
    QVERIFY2(refused.valid() && refused.refusals.size() == 2, qPrintable(listErrors(refused.refusals)));
    json withLaunch = patched(agentCannot);
    withLaunch["launch"] = {{"command", {"python3", "train.py"}}};
    const LoadResult runnable = loadJobSpec(withLaunch);
    QVERIFY2(runnable.runnable(), qPrintable(listErrors(runnable.errors) + listErrors(runnable.refusals)));
    json planned = planToJson(makePlan(*runnable.spec)), plannedForAgent = planToJson(makePlan(*refused.spec));
    QCOMPARE(planned["spec"]["launch"]["command"], json({"python3", "train.py"}));
    planned.erase("spec");
    plannedForAgent.erase("spec");
    QCOMPARE(planned, plannedForAgent);
}

void TestJobSpec::validateLayoutDirectly()
{
    JobSpec spec = *loadJobSpec(baseSpec()).spec;
    QVERIFY(validateLayout(spec).empty());

    // The issue's example: 30 layers over pp 4 (dp 2 x 4 x 2 = 16 still matches the cluster).
    spec.model.layers = 30;
    spec.parallel.dp = 2;
    spec.parallel.pp = 4;
    std::vector<SpecError> errors = validateLayout(spec);
    QCOMPARE(errors.size(), 1u);
    QCOMPARE(qs(errors[0].path), QStringLiteral("parallel.pp"));
    QCOMPARE(
        qs(errors[0].message),
        QStringLiteral("30 layers do not divide into pp=4 x virtual_stages=1 stages; use pp 2, 3, 5, 6, 10 or 15"));

    // Adding a world-size mismatch (3 x 4 x 2 = 24 vs 16; 16 % 8 == 0 -> dp=2) reports it first.
    spec.parallel.dp = 3;
    errors = validateLayout(spec);
    QCOMPARE(errors.size(), 2u);
    QCOMPARE(qs(errors[0].path), QStringLiteral("parallel.dp"));
    QCOMPARE(qs(errors[0].message), QStringLiteral("dp=3 x pp=4 x tp=2 = 24 ranks, but the cluster has 16 devices "
                                                   "(2 nodes x 8); use dp=2, or change cluster.nodes"));
    QCOMPARE(qs(errors[1].path), QStringLiteral("parallel.pp"));

    // ZeRO-2 is fine without a pipeline: dp 8 x pp 1 x tp 2 = 16.
    spec = *loadJobSpec(baseSpec()).spec;
    spec.parallel.zero = 2;
    spec.parallel.dp = 8;
    spec.parallel.pp = 1;
    QVERIFY2(validateLayout(spec).empty(), qPrintable(listErrors(validateLayout(spec))));
}

void TestJobSpec::oneDeviceSpecRunsEverySchedule_data()
{
    QTest::addColumn<QString>("schedule");
    QTest::addColumn<int>("virtualStages");
    QTest::addColumn<QString>("oneStageSchedule");  // what one device runs
    QTest::newRow("gpipe") << "gpipe" << 1 << "gpipe";
    QTest::newRow("1f1b") << "1f1b" << 1 << "1f1b";
    QTest::newRow("zb-h1") << "zb-h1" << 1 << "zb-h1";
    QTest::newRow("interleaved") << "interleaved" << 2 << "1f1b";
    QTest::newRow("zb-v") << "zb-v" << 2 << "zb-h1";
    QTest::newRow("dualpipev") << "dualpipev" << 2 << "zb-h1";
}

// Issue 27, findings 1 and 8: the one-device form of every valid layout is itself valid (the V
// schedules kept pp 1 and crashed makePlan; interleaved kept its name and was refused).
void TestJobSpec::oneDeviceSpecRunsEverySchedule()
{
    QFETCH(QString, schedule);
    QFETCH(int, virtualStages);
    QFETCH(QString, oneStageSchedule);
    const LoadResult loaded =
        loadJobSpec(patched(QStringLiteral(R"({"parallel": {"schedule": "%1", "virtual_stages": %2,
                                                                   "microbatches": 8}})")
                                .arg(schedule)
                                .arg(virtualStages)
                                .toUtf8()));
    QVERIFY2(loaded.valid(), qPrintable(listErrors(loaded.errors)));
    const JobSpec one = singleDeviceSpec(*loaded.spec);
    QVERIFY2(validateLayout(one).empty(), qPrintable(listErrors(validateLayout(one))));
    QCOMPARE(qs(scheduleName(one.parallel.schedule)), oneStageSchedule);
    // The global batch of dp 4 x 8 micro-batches goes through the one pipeline.
    QCOMPARE(one.parallel.microbatches, 32);
    const Plan plan = makePlan(one);
    QCOMPARE(plan.worldSize, 1);
    QCOMPARE(int(plan.stages.size()), 1);
}

// Issue 27, finding 13: every pp the layer rule suggests is accepted by every rule that reads
// pp, for each schedule (zb-v was told "use pp 1 or 2", then refused pp 1).
void TestJobSpec::suggestedPipelineSizesAreAccepted()
{
    const JobSpec base = *loadJobSpec(baseSpec()).spec;
    int suggestionsTried = 0;
    for (const ScheduleKind kind :
         {ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV}) {
        const int v = kind == ScheduleKind::OneFOneB ? 1 : 2;
        for (int layers = 2; layers <= 36; layers += 2) {
            for (int pp = 2; pp <= 12; ++pp) {
                JobSpec spec = base;
                spec.model.layers = layers;
                spec.parallel.schedule = kind;
                spec.parallel.virtualStages = v;
                spec.parallel.pp = pp;
                std::string message;
                for (const SpecError& e : validateLayout(spec))
                    if (e.path == "parallel.pp")
                        message = e.message;
                const std::size_t use = message.find("use pp ");
                if (use == std::string::npos)
                    continue;
                std::string list = message.substr(use + 7);
                std::replace(list.begin(), list.end(), ',', ' ');
                std::istringstream words(list);
                for (std::string word; words >> word;) {
                    if (word == "or")
                        continue;
                    // Each suggestion, on a cluster of its size with enough micro-batches for it.
                    JobSpec fixed = spec;
                    fixed.parallel.pp = std::stoi(word);
                    fixed.parallel.dp = fixed.parallel.tp = 1;
                    fixed.parallel.microbatches = 2 * fixed.parallel.pp;
                    fixed.cluster.nodes = 1;
                    fixed.cluster.devicesPerNode = fixed.parallel.pp;
                    QVERIFY2(validateLayout(fixed).empty(),
                             qPrintable(qs(message) + QStringLiteral(" -> pp ") + qs(word) + QStringLiteral(": ") +
                                        listErrors(validateLayout(fixed))));
                    ++suggestionsTried;
                }
            }
        }
    }
    QVERIFY(suggestionsTried > 100);
}

void TestJobSpec::roundTrip_data()
{
    QTest::addColumn<QString>("file");  // a job file, or empty when text is given inline
    QTest::addColumn<QByteArray>("text");
    const std::filesystem::path dir = jobsDir();
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(dir))
        for (const auto& entry : std::filesystem::directory_iterator(dir))
            if (entry.path().extension() == ".json")
                files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    // demo.json always gets a row, so a missing resources/jobs fails here rather than passing empty.
    if (std::find(files.begin(), files.end(), dir / "demo.json") == files.end())
        files.insert(files.begin(), dir / "demo.json");
    for (const auto& file : files)
        QTest::newRow(file.filename().c_str()) << QString::fromStdString(file.string()) << QByteArray();

    // Every non-default enum value, so each one goes through toJson and back.
    QTest::newRow("base, every non-default enum")
        << QString()
        << QByteArray::fromStdString(
               patched(
                   R"({"model": {"kv_heads": 4, "norm": "rmsnorm", "activation": "swiglu", "tied_embeddings": false},
                   "parallel": {"recompute": "full", "schedule": "interleaved", "virtual_stages": 3,
                                "microbatches": 8, "micro_batch_size": 2, "order": "tp-pp-dp",
                                "sequence_parallel": true, "zero": 1},
                   "precision": {"grads": "bf16", "activations": "fp32"}, "backend": "cuda", "train": {"steps": 3}})")
                   .dump());
    QTest::newRow("base, launching a program")
        << QString()
        << QByteArray::fromStdString(patched(R"({"launch": {"command": ["torchrun", "--nproc-per-node=1", "t.py"],
                                                "cwd": "/tmp/run", "env": {"OMP_NUM_THREADS": "1"}}})")
                                         .dump());
}

void TestJobSpec::roundTrip()
{
    QFETCH(QString, file);
    QFETCH(QByteArray, text);
    if (!file.isEmpty()) {
        QVERIFY2(std::filesystem::is_regular_file(file.toStdString()), qPrintable(file));
        text = readFile(file.toStdString());
    }
    const LoadResult first = parseJobSpec(text.toStdString());
    QVERIFY2(first.errors.empty(), qPrintable(listErrors(first.errors)));
    QVERIFY(first.valid());

    const LoadResult second = loadJobSpec(toJson(*first.spec));
    QVERIFY2(second.errors.empty(), qPrintable(listErrors(second.errors)));
    QVERIFY(second.valid());
    compareSpecs(*first.spec, *second.spec);
}

void TestJobSpec::deeplyNestedValue_data()
{
    addRejectionColumns();
    QTest::addColumn<bool>("parse");  // through parseJobSpec, or json::parse then loadJobSpec
    // The base spec, on one line, with a million nested arrays (a 2 MB document) where layers
    // belongs. Both entry points refuse the nesting before anything copies or prints the value
    // (either would recurse once per level); the same for a deep value in the pass-through train.
    std::string text = patched(R"({"model": {"layers": "@"}})").dump();
    const std::string nested = std::string(1'000'000, '[') + std::string(1'000'000, ']');
    text.replace(text.find("\"@\""), 3, nested);
    const QByteArray input = QByteArray::fromStdString(text);
    const QStringList expected{"nested deeper than 64 levels"};
    // The path names the first value too deep: the document is level 1, model 2, layers 3, and
    // level 65 is the array 62 levels inside layers.
    const QString inside = QString("[0]").repeated(62);
    QTest::newRow("parseJobSpec") << input << "model.layers" + inside << expected << 1 << false << true;
    QTest::newRow("loadJobSpec") << input << "model.layers" + inside << expected << 1 << false << false;
    std::string train = patched(R"({"train": {"data": "@"}})").dump();
    train.replace(train.find("\"@\""), 3, nested);
    QTest::newRow("train, loadJobSpec") << QByteArray::fromStdString(train) << "train.data" + inside << expected << 1
                                        << false << false;
}

void TestJobSpec::deeplyNestedValue()
{
    QFETCH(QByteArray, input);
    QFETCH(bool, parse);
    checkRejection(parse ? parseJobSpec(input.toStdString()) : loadJobSpec(json::parse(input.toStdString())));
}

QTEST_APPLESS_MAIN(TestJobSpec)
#include "tst_job_spec.moc"
