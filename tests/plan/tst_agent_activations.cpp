// The planner's fp32 activation count (precision.activations = fp32, agent_activations.h) against
// what meshbench-agent's own memory ledger measures: the real agent under mpirun through
// `meshbench-engine run`, every rank's peak of the Activations category from the session file,
// against the plan's stageMemory(stage).activations for that rank's stage. The ledger's peaks restart
// at every step (Trainer::step resets them and samples them at the step's end), so each step's peak
// is that step's alone; the model's buffers do not depend on the data (MoE layers are sized by
// their capacity), so step 1 and step 2 peak alike and step 2 is compared. What the agent counts as
// Workspace (gradients of activations, the core attention selective recompute rebuilds, pipeline
// and collective buffers) is left out on both sides.
//
// Then the schedule arithmetic of agentActivationBytes against an op-by-op walk of every op list
// buildSchedule makes, for shapes too many to run.

#include "plan/agent_activations.h"
#include "plan/cost_model.h"
#include "plan/mesh.h"
#include "plan/schedule.h"
#include "store/session_store.h"

#include "common/process_run.h"

#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <map>

using namespace meshbench;
using namespace meshbench::plan;
using nlohmann::json;

namespace {

// NOLINTNEXTLINE(bugprone-exception-escape): clang-tidy 14 sees an unreachable throw in json's noexcept ctor
struct Row {
    json parallel;  // merged over the defaults below (null: none)
    json model;     // merged over the tiny model below (null: none)
    int ranks() const
    {
        auto degree = [this](const char* key) { return parallel.is_object() ? parallel.value(key, 1) : 1; };
        return degree("dp") * degree("pp") * degree("tp");
    }
};

// Four layers of h = 64, s = 128, b = 2: one layer's activations are ~1 MB next to a 128-token
// vocabulary's 128 KB of logits, so the layer terms dominate the count.
json tinyModel()
{
    return {{"layers", 4},       {"hidden", 64}, {"heads", 4},    {"kv_heads", 4},
            {"ffn_hidden", 128}, {"vocab", 128}, {"seq_len", 128}};
}

json moe(double capacityFactor = 1.25)
{
    return {{"experts", 4}, {"top_k", 2}, {"moe_ffn_hidden", 64}, {"capacity_factor", capacityFactor}};
}

json jobOf(const Row& row)
{
    json model = tinyModel();
    if (row.model.is_object())
        model.merge_patch(row.model);
    json parallel = {{"microbatches", 4}, {"micro_batch_size", 2}};
    if (row.parallel.is_object())
        parallel.merge_patch(row.parallel);
    // No precision.activations: the cpu device's default, fp32, is what is under test.
    return {{"model", model},
            {"parallel", parallel},
            {"cluster", {{"nodes", 1}, {"devices_per_node", row.ranks()}, {"device", "cpu"}}},
            {"train", {{"steps", 2}, {"lr", 1e-3}}}};
}

JobSpec specOf(const json& document)
{
    const LoadResult loaded = loadJobSpec(document);
    if (!loaded.valid()) {
        std::string why;
        for (const SpecError& e : loaded.errors)
            why += e.path + ": " + e.message + "; ";
        qFatal("invalid spec: %s", why.c_str());
    }
    return *loaded.spec;
}

// The peak a stage reaches op by op: every op of the stage's list adds to what the micro-batches in
// flight hold (a forward up to its peak, then keeps `kept`; a backward from `kept` up to its peak,
// then keeps its stash; a W frees the stash). The definition agentActivationBytes condenses.
double walkedPeak(const JobSpec& spec, const Schedule& schedule, int stage)
{
    const ParallelSpec& p = spec.parallel;
    std::vector<AgentChunkActivations> chunks;
    chunks.reserve(std::size_t(p.virtualStages));
    for (int c = 0; c < p.virtualStages; ++c)
        chunks.push_back(agentChunkActivations(spec, c * p.pp + stage));
    double held = 0, peak = 0;
    for (const Op& op : schedule.stages[std::size_t(stage)]) {
        const AgentChunkActivations& c = chunks[std::size_t(op.chunk)];
        switch (op.kind) {
        case OpKind::Forward:
            peak = std::max(peak, held + c.forwardPeak);
            held += c.kept;
            break;
        case OpKind::Backward:
            peak = std::max(peak, held - c.kept + c.backwardPeak);
            held += c.stash - c.kept;
            break;
        case OpKind::WeightGrad:
            held -= c.stash;
            break;
        default:
            break;
        }
    }
    if (std::abs(held) > 1e-6 * std::max(1.0, peak))
        qFatal("the walk ends holding %g bytes", held);
    return peak;
}

}  // namespace

Q_DECLARE_METATYPE(Row)

class TestAgentActivations : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void defaultFollowsTheDevice();
    void bf16KeepsMegatron();
    void layerTermsByHand();
    void scheduleArithmeticMatchesTheOpLists_data();
    void scheduleArithmeticMatchesTheOpLists();
    void plannedEqualsMeasured_data();
    void plannedEqualsMeasured();
    void cleanupTestCase();

private:
    QTemporaryDir m_dir;
    QElapsedTimer m_runs;
    qint64 m_runMs = 0;
};

void TestAgentActivations::initTestCase() { QVERIFY(m_dir.isValid()); }

void TestAgentActivations::defaultFollowsTheDevice()
{
    // The cpu device runs our agent (fp32); a GPU device is priced as Megatron-LM (bf16); a given
    // value wins either way.
    json doc = jobOf({{}, {}});
    QCOMPARE(specOf(doc).precision.activations, ActivationDtype::Fp32);
    doc["cluster"]["device"] = "h100-sxm";
    QCOMPARE(specOf(doc).precision.activations, ActivationDtype::Bf16);
    doc["precision"] = {{"activations", "fp32"}};
    QCOMPARE(specOf(doc).precision.activations, ActivationDtype::Fp32);
    doc["cluster"]["device"] = "cpu";
    doc["precision"] = {{"activations", "bf16"}};
    QCOMPARE(specOf(doc).precision.activations, ActivationDtype::Bf16);
    // local-cpu is the cpu device too.
    doc.erase("precision");
    doc["cluster"] = {{"preset", "local-cpu"}, {"nodes", 1}, {"devices_per_node", 1}};
    QCOMPARE(specOf(doc).precision.activations, ActivationDtype::Fp32);
    // toJson writes the key, so a value against the device's default survives a round trip.
    for (const auto& [device, value] : {std::pair{"cpu", "bf16"}, std::pair{"h100-sxm", "fp32"}}) {
        json given = jobOf({{}, {}});
        given["cluster"] = {{"nodes", 1}, {"devices_per_node", 1}, {"device", device}, {"compute_efficiency", 0.5}};
        given["precision"] = {{"activations", value}};
        const json written = toJson(specOf(given));
        QCOMPARE(QString::fromStdString(written["precision"]["activations"].get<std::string>()),
                 QString::fromLatin1(value));
        QCOMPARE(specOf(written).precision.activations, specOf(given).precision.activations);
    }
    // A wrong value names the key and the choices.
    doc["precision"] = {{"activations", "fp16"}};
    const LoadResult bad = loadJobSpec(doc);
    QVERIFY(!bad.valid());
    QCOMPARE(QString::fromStdString(bad.errors.at(0).path), QStringLiteral("precision.activations"));
    QVERIFY(QString::fromStdString(bad.errors.at(0).message).contains(QStringLiteral("use bf16 or fp32")));
}

void TestAgentActivations::bf16KeepsMegatron()
{
    // The same job priced both ways: bf16 is the Megatron count (2-byte activations, far less than
    // the agent's fp32 copies), fp32 is agentActivationBytes.
    json doc = jobOf({{{"pp", 2}, {"schedule", "1f1b"}}, {}});
    doc["precision"] = {{"activations", "fp32"}};
    const JobSpec fp32 = specOf(doc);
    doc["precision"] = {{"activations", "bf16"}};
    const JobSpec bf16 = specOf(doc);
    // fp32: the peak of an op-by-op walk of the stage's own op list (walkedPeak), not the condensed
    // arithmetic the cost model calls.
    const Schedule ops = buildSchedule(fp32.parallel.scheduleShape());
    for (int stage = 0; stage < 2; ++stage) {
        QCOMPARE(CostModel(fp32, {}).activationBytes(stage), walkedPeak(fp32, ops, stage));
        QVERIFY(CostModel(bf16, {}).activationBytes(stage) < CostModel(fp32, {}).activationBytes(stage));
    }
    // bf16, worked by hand from Korthikanti et al. 2022, Table 2 (no sequence parallelism, t = 1,
    // flash attention so no s x s term): s b h (10 + 24 / t) = 34 s b h bytes per layer and
    // micro-batch, x 1.05 overall as Megatron-LM's compute_activation_memory_without_sp. Here
    // s = 128, b = 2, h = 64: s b h = 16,384, 2 layers per stage. Stage 0 holds p = 2 micro-batches
    // (1F1B) plus the embedding's input and dropout, (8 s b + s b h) each; stage 1 holds one and the
    // output layer's inputs, 2 (s b V + s b h) with V = 128.
    const double sbh = 128.0 * 2 * 64, sb = 128.0 * 2;
    QCOMPARE(CostModel(bf16, {}).activationBytes(0), 1.05 * (2 * 2 * 34 * sbh + 2 * (8 * sb + sbh)));
    QCOMPARE(CostModel(bf16, {}).activationBytes(1), 1.05 * (1 * 2 * 34 * sbh + 2 * (sb * 128 + sbh)));
}

void TestAgentActivations::layerTermsByHand()
{
    // One dense GELU layer with LayerNorm, h = 64, 4 heads of 16, f = 128, T = 256 tokens, fp32,
    // no TP. Kept without recompute, from GptModel::LayerActivations: a, xMid, c 3 x T h; the four
    // norm statistics 4 T; q, k, v 3 T h; att T h; lse T x 4 heads; u, g 2 T f; the input T h.
    const double T = 256, h = 64, f = 128, heads = 4;
    json doc = jobOf({{{"recompute", "none"}}, {}});
    AgentLayerActivations l = agentLayerActivations(specOf(doc), false);
    QCOMPARE(l.input, 4 * T * h);
    QCOMPARE(l.kept, 4 * (3 * T * h + 4 * T + 3 * T * h + T * h + T * heads + 2 * T * f));
    QCOMPARE(l.working, l.kept);
    // Selective drops att and lse; full keeps the input only.
    doc["parallel"]["recompute"] = "selective";
    QCOMPARE(agentLayerActivations(specOf(doc), false).kept, l.kept - 4 * (T * h + T * heads));
    doc["parallel"]["recompute"] = "full";
    QCOMPARE(agentLayerActivations(specOf(doc), false).kept, 0.0);
    // TP 2 with SP: the stream's rows (input, a, xMid, c, statistics) halve, the gathered norm
    // outputs aFull and cFull add T h each, heads and f halve.
    doc = jobOf({{{"tp", 2}, {"sequence_parallel", true}, {"recompute", "none"}}, {}});
    l = agentLayerActivations(specOf(doc), false);
    QCOMPARE(l.input, 4 * T / 2 * h);
    QCOMPARE(l.kept,
             4 * (3 * T / 2 * h + 4 * T / 2 + 2 * T * h + 3 * T * h / 2 + T * h / 2 + T * heads / 2 + 2 * T * f / 2));
    // An MoE layer (4 experts, top 2, capacity factor 1.25: capacity ceil(256 x 2 / 4 x 1.25) = 160
    // rows per expert, 640 in all) keeps expertIn, eu, eg and eout instead of u and g.
    doc = jobOf({{{"recompute", "none"}}, {{"moe", moe()}}});
    const double R = 640, fm = 64;
    QCOMPARE(agentLayerActivations(specOf(doc), true).kept,
             4 * (3 * T * h + 4 * T + 3 * T * h + T * h + T * heads + 2 * R * h + 2 * R * fm));
    // zb-h1's stash of a dense layer, copies of dy and x of each linear layer: fc2 (T h + T f), fc1
    // (T f + T h), proj (T h + T h), and the q, k and v blocks of qkv (T h + T h each: 4 kv heads).
    doc = jobOf({{{"pp", 2}, {"schedule", "zb-h1"}}, {}});
    QCOMPARE(agentLayerActivations(specOf(doc), false).stash,
             4 * ((T * h + T * f) + (T * f + T * h) + (T * h + T * h) + 3 * (T * h + T * h)));
}

void TestAgentActivations::scheduleArithmeticMatchesTheOpLists_data()
{
    QTest::addColumn<QString>("schedule");
    QTest::addColumn<QString>("recompute");
    QTest::addColumn<bool>("moeModel");
    for (const char* schedule : {"1f1b", "gpipe", "zb-h1", "interleaved"})
        for (const char* recompute : {"none", "selective", "full"})
            for (bool moeModel : {false, true})
                QTest::addRow("%s %s %s", schedule, recompute, moeModel ? "moe" : "dense")
                    << schedule << recompute << moeModel;
}

void TestAgentActivations::scheduleArithmeticMatchesTheOpLists()
{
    // Every stage of p = 2..4 stages, 1..12 micro-batches, 1..3 chunks (interleaved), with a MoE
    // layer every second layer (chunks that differ), a large vocabulary (a heavy last chunk) and a
    // stash larger or smaller than a forward's activations.
    QFETCH(QString, schedule);
    QFETCH(QString, recompute);
    QFETCH(bool, moeModel);
    int checked = 0;
    for (int p : {2, 3, 4})
        for (int v : schedule == QLatin1String("interleaved") ? std::vector<int>{2, 3} : std::vector<int>{1})
            for (int m = 1; m <= 12; ++m)
                for (int vocab : {128, 4096}) {
                    json doc = jobOf({{{"pp", p},
                                       {"microbatches", m},
                                       {"virtual_stages", v},
                                       {"schedule", schedule.toStdString()},
                                       {"recompute", recompute.toStdString()}},
                                      {{"layers", 12 * v}, {"vocab", vocab}}});
                    if (moeModel) {
                        json moeSection = moe();
                        moeSection["every_n_layers"] = 2;
                        doc["model"]["moe"] = moeSection;
                    }
                    const LoadResult loaded = loadJobSpec(doc);
                    if (!loaded.valid())
                        continue;  // interleaving's rules on m
                    const JobSpec& spec = *loaded.spec;
                    const Schedule ops = buildSchedule(spec.parallel.scheduleShape());
                    for (int stage = 0; stage < p; ++stage) {
                        const double walked = walkedPeak(spec, ops, stage);
                        const double counted = agentActivationBytes(spec, stage);
                        QVERIFY2(std::abs(counted - walked) <= 1e-9 * walked,
                                 qPrintable(QStringLiteral("p %1 v %2 m %3 V %4 stage %5: %6 counted, %7 op by op")
                                                .arg(p)
                                                .arg(v)
                                                .arg(m)
                                                .arg(vocab)
                                                .arg(stage)
                                                .arg(counted, 0, 'f', 0)
                                                .arg(walked, 0, 'f', 0)));
                        ++checked;
                    }
                }
    QVERIFY(checked > 50);
}

void TestAgentActivations::plannedEqualsMeasured_data()
{
    QTest::addColumn<Row>("row");
    const json gqaSwiglu = {{"kv_heads", 2}, {"activation", "swiglu"}, {"norm", "rmsnorm"}, {"ffn_hidden", 96}};
    // One rank: recompute none / selective / full, dense and MoE, GQA + SwiGLU + RMSNorm.
    QTest::newRow("1 rank none") << Row{{{"recompute", "none"}}, {}};
    QTest::newRow("1 rank selective gqa swiglu rmsnorm") << Row{{{"recompute", "selective"}}, gqaSwiglu};
    QTest::newRow("1 rank full moe") << Row{{{"recompute", "full"}}, {{"moe", moe()}}};
    // TP with and without SP; EP on an MoE model.
    QTest::newRow("tp2 none") << Row{{{"tp", 2}, {"recompute", "none"}}, {}};
    QTest::newRow("tp2 sp selective gqa swiglu") << Row{{{"tp", 2}, {"sequence_parallel", true}}, gqaSwiglu};
    QTest::newRow("tp2 sp full moe") << Row{{{"tp", 2}, {"sequence_parallel", true}, {"recompute", "full"}},
                                            {{"moe", moe()}}};
    QTest::newRow("dp2 ep2 moe none") << Row{{{"dp", 2}, {"ep", 2}, {"recompute", "none"}}, {{"moe", moe(1.0)}}};
    // Pipelines: every schedule, every recompute mode.
    QTest::newRow("pp2 1f1b none") << Row{{{"pp", 2}, {"schedule", "1f1b"}, {"recompute", "none"}}, {}};
    QTest::newRow("pp2 1f1b full") << Row{{{"pp", 2}, {"schedule", "1f1b"}, {"recompute", "full"}}, {}};
    QTest::newRow("pp2 gpipe selective") << Row{{{"pp", 2}, {"schedule", "gpipe"}}, {}};
    QTest::newRow("pp2 gpipe full moe") << Row{{{"pp", 2}, {"schedule", "gpipe"}, {"recompute", "full"}},
                                               {{"moe", moe()}}};
    QTest::newRow("pp2 interleaved v2 none")
        << Row{{{"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}, {"recompute", "none"}}, {}};
    QTest::newRow("pp2 interleaved v2 full gqa swiglu")
        << Row{{{"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2}, {"recompute", "full"}}, gqaSwiglu};
    QTest::newRow("pp2 zb-h1 none") << Row{{{"pp", 2}, {"schedule", "zb-h1"}, {"recompute", "none"}}, {}};
    QTest::newRow("pp2 zb-h1 full") << Row{{{"pp", 2}, {"schedule", "zb-h1"}, {"recompute", "full"}}, {}};
    // A capacity of T per expert (factor E / k) drops no token, so the experts' deferred rows are
    // exactly T k and the MoE stash is exact.
    QTest::newRow("pp2 zb-h1 selective moe") << Row{{{"pp", 2}, {"schedule", "zb-h1"}}, {{"moe", moe(2.0)}}};
    // Four ranks: TP + SP inside an interleaved pipeline, and zb-h1 over four stages.
    QTest::newRow("pp2 tp2 sp interleaved v2 selective moe")
        << Row{{{"pp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"schedule", "interleaved"}, {"virtual_stages", 2}},
               {{"moe", moe()}}};
    QTest::newRow("pp4 zb-h1 selective") << Row{{{"pp", 4}, {"schedule", "zb-h1"}}, {}};
    // The V schedules: stage 0 holds the first chunk and the last (the logits); every backward
    // stashes for its W, and DualPipeV runs some of them whole.
    QTest::newRow("pp2 zb-v none") << Row{
        {{"pp", 2}, {"schedule", "zb-v"}, {"virtual_stages", 2}, {"recompute", "none"}}, {}};
    QTest::newRow("pp2 zb-v full") << Row{
        {{"pp", 2}, {"schedule", "zb-v"}, {"virtual_stages", 2}, {"recompute", "full"}}, {}};
    QTest::newRow("pp2 dualpipev selective moe")
        << Row{{{"pp", 2}, {"schedule", "dualpipev"}, {"virtual_stages", 2}}, {{"moe", moe(2.0)}}};
    QTest::newRow("pp2 tp2 sp zb-v selective")
        << Row{{{"pp", 2}, {"tp", 2}, {"sequence_parallel", true}, {"schedule", "zb-v"}, {"virtual_stages", 2}}, {}};
    QTest::newRow("pp4 dualpipev none") << Row{
        {{"pp", 4}, {"schedule", "dualpipev"}, {"virtual_stages", 2}, {"microbatches", 8}, {"recompute", "none"}},
        {{"layers", 8}}};
}

void TestAgentActivations::plannedEqualsMeasured()
{
    QFETCH(Row, row);
    const QString tag = QString::fromLatin1(QTest::currentDataTag()).replace(' ', '-');
    const json doc = jobOf(row);
    const JobSpec spec = specOf(doc);
    QCOMPARE(spec.precision.activations, ActivationDtype::Fp32);
    const QString job = m_dir.filePath(tag + ".json"), session = m_dir.filePath(tag + ".meshbench");
    {
        QFile f(job);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::fromStdString(doc.dump()));
    }
    m_runs.start();
    const ProcessRun run =
        runProcess(QStringLiteral(MESHBENCH_ENGINE), {"run", job, "--session", session, "--steps", "2"});
    m_runMs += m_runs.elapsed();
    QVERIFY2(run.exitCode == 0, qPrintable(run.out + run.err));

    // Every rank's Activations peak of each step.
    std::map<std::pair<std::uint32_t, int>, std::int64_t> peaks, workspace;
    for (const auto& s : store::SessionReader(session.toStdString()).memorySamples()) {
        if (s.record.category == wire::MemoryCategory::Activations)
            peaks[{s.rank, s.record.step}] = s.record.peakBytes;
        if (s.record.category == wire::MemoryCategory::Workspace)
            workspace[{s.rank, s.record.step}] = s.record.peakBytes;
    }
    QCOMPARE(int(peaks.size()), row.ranks() * 2);

    const CostModel costs(spec, {});
    const Mesh mesh(spec.parallel);
    for (int rank = 0; rank < row.ranks(); ++rank) {
        const int stage = mesh.coordOf(rank).pp;
        const double planned = costs.stageMemory(stage).activations;
        const double measured = double(peaks[{std::uint32_t(rank), 2}]);
        const double first = double(peaks[{std::uint32_t(rank), 1}]);
        // The Workspace peak is shown for scale only: neither side counts it as activations.
        qInfo("%-42s rank %d stage %d: measured %9.0f (step 1 %9.0f), planned %9.0f, %+.4f%%; workspace %9lld",
              qPrintable(tag), rank, stage, measured, first, planned, 100.0 * (planned - measured) / measured,
              static_cast<long long>(workspace[{std::uint32_t(rank), 2}]));
        QVERIFY(measured > 0);
        // Both sides count the same tensors, byte for byte: any difference is a tensor one side misses.
        QVERIFY2(planned == measured,
                 qPrintable(QStringLiteral("rank %1 (stage %2): the ledger's Activations peak is %3 bytes, the plan %4")
                                .arg(rank)
                                .arg(stage)
                                .arg(measured, 0, 'f', 0)
                                .arg(planned, 0, 'f', 0)));
    }
}

void TestAgentActivations::cleanupTestCase() { qInfo("agent runs: %.1f s in all", double(m_runMs) / 1000.0); }

QTEST_GUILESS_MAIN(TestAgentActivations)
#include "tst_agent_activations.moc"
