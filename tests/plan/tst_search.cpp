// The layout search against an independent enumeration (validateLayout over the whole space,
// split by the agent's capability rule) and against the planner.

#include "plan/capability.h"
#include "plan/planner.h"
#include "plan/search.h"

#include <QtTest>

using namespace meshbench::plan;
using nlohmann::json;

namespace {

JobSpec specFrom(const json& document)
{
    LoadResult loaded = loadJobSpec(document);
    if (!loaded.spec)
        qFatal("test spec does not load: %s", loaded.errors.front().message.c_str());
    return *loaded.spec;
}

json smallMoeJson()
{
    return {{"model",
             {{"layers", 8},
              {"hidden", 64},
              {"heads", 4},
              {"kv_heads", 2},
              {"ffn_hidden", 128},
              {"vocab", 256},
              {"seq_len", 32},
              {"moe", {{"experts", 4}, {"top_k", 2}, {"every_n_layers", 2}}}}},
            {"parallel", {{"dp", 8}, {"microbatches", 2}, {"micro_batch_size", 2}}},
            {"cluster", {{"nodes", 2}, {"devices_per_node", 4}, {"device", "a100-80gb"}}}};
}

struct Counts {
    std::uint64_t valid = 0;    // valid layouts the agent runs
    std::uint64_t refused = 0;  // valid layouts the agent refuses (agentCanRun)
};

// Count every layout validateLayout accepts on base's cluster and global batch, over the same
// axes the search walks: micro-batch sizes are powers of two, and layouts that differ only in a
// knob without effect are listed once (the schedule when pp = 1, sequence parallelism when
// tp = 1). Those the agent refuses are counted apart.
Counts enumerateLayouts(const JobSpec& base)
{
    const int world = int(base.cluster.devices());
    const std::int64_t globalBatch = base.parallel.globalBatch();
    Counts counts;
    JobSpec spec = base;
    ParallelSpec& p = spec.parallel;
    for (int tp = 1; tp <= world; ++tp)
        for (int pp = 1; pp <= world; ++pp) {
            if (world % (tp * pp) != 0)
                continue;
            const int dp = world / (tp * pp);
            if (globalBatch % dp != 0)
                continue;
            for (int ep = 1; ep <= dp; ++ep)
                for (bool sp : {false, true})
                    for (std::int64_t mbs = 1; mbs <= globalBatch / dp; mbs *= 2) {
                        if (globalBatch / dp % mbs != 0)
                            continue;
                        for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
                            for (int v = 1; v <= 8; ++v)
                                for (ScheduleKind k :
                                     {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                                      ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV})
                                    for (int zero = 0; zero <= 3; ++zero) {
                                        if ((pp == 1 && k != ScheduleKind::OneFOneB) || (sp && tp == 1))
                                            continue;
                                        p = {dp, pp, tp, ep, zero, sp, r, k, v, int(globalBatch / dp / mbs), int(mbs)};
                                        if (validateLayout(spec).empty())
                                            ++(agentCanRun(spec) ? counts.valid : counts.refused);
                                    }
                    }
        }
    return counts;
}

}  // namespace

class TestSearch : public QObject {
    Q_OBJECT
private slots:
    void enumeratesExactlyTheValidLayouts();
    void countsTheLayoutsTheAgentRefuses();
    void resultsAreValidFitAndSorted();
    void findsAtLeastTheHandPickedLayout();
    void reportsWhenNothingFits();
    void reportsWhenTheAgentRunsNoLayout();
    void plannedOnlyRanksEveryValidLayout();
    void plannedOnlyTakesEveryOverlapThatHelps();
    void runnableSearchLeavesPlannedOnlyOverlapsOff();
};

void TestSearch::enumeratesExactlyTheValidLayouts()
{
    // On the small MoE (global batch 32) every valid layout is one the agent runs: ZeRO with
    // ep > 1 included, and no pipeline comes near the MPI tag limit.
    const JobSpec base = specFrom(smallMoeJson());
    const Counts counts = enumerateLayouts(base);
    QVERIFY(counts.valid > 100);
    QCOMPARE(counts.refused, std::uint64_t(0));
    const SearchResult result = searchLayouts(base, {});
    QVERIFY(result.errors.empty());
    QCOMPARE(result.globalBatch, base.parallel.globalBatch());
    QCOMPARE(result.evaluated, counts.valid);
    QCOMPARE(result.refused, counts.refused);
}

void TestSearch::countsTheLayoutsTheAgentRefuses()
{
    // Global batch 16,384: long pipelines of small micro-batches name more messages than MPI tags
    // (2 x m x pp x v > 32,767; pp 4 x m 8,192 at micro-batch 1, pp 2 x v 2 x m 4,096), while
    // larger micro-batches, shorter pipelines and pp 1 stay under it. The search skips exactly
    // the layouts the independent enumeration finds refused, and prices the others.
    json doc = smallMoeJson();
    doc["parallel"]["microbatches"] = 1024;
    const JobSpec base = specFrom(doc);
    QCOMPARE(base.parallel.globalBatch(), std::int64_t(16384));
    const Counts counts = enumerateLayouts(base);
    QVERIFY(counts.valid > 100);
    QVERIFY(counts.refused > 100);
    const SearchResult result = searchLayouts(base, {5, 0});
    QVERIFY(result.errors.empty());
    QCOMPARE(result.evaluated, counts.valid);
    QCOMPARE(result.refused, counts.refused);
    QVERIFY(!result.best.empty());
    JobSpec ranked = base;
    for (const SearchCandidate& c : result.best) {
        ranked.parallel = c.parallel;
        QVERIFY(agentCanRun(ranked));
    }
}

void TestSearch::resultsAreValidFitAndSorted()
{
    JobSpec spec = specFrom(smallMoeJson());
    const SearchResult result = searchLayouts(spec, {5, 0});
    QCOMPARE(int(result.best.size()), 5);
    for (std::size_t i = 0; i < result.best.size(); ++i) {
        const SearchCandidate& c = result.best[i];
        spec.parallel = c.parallel;
        QVERIFY(validateLayout(spec).empty());
        QVERIFY(agentCanRun(spec));
        QCOMPARE(c.parallel.globalBatch(), result.globalBatch);
        // (The row's step time and memory are copied from this layout's makePlan: comparing them
        // with it again could not fail, so only what the plan says of the layout is checked.)
        QVERIFY(makePlan(spec).fits);
        QVERIFY(c.memoryBytes <= spec.cluster.device.memoryBytes);
        if (i > 0)
            QVERIFY(result.best[i - 1].stepTime <= c.stepTime);
    }
}

void TestSearch::findsAtLeastTheHandPickedLayout()
{
    // The layout Narayanan et al. 2021 picked for GPT-3 on 1,024 GPUs lies inside the search
    // space, so the best layout found can be no slower than it.
    QFile f(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/gpt3-175b.json"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const LoadResult loaded = parseJobSpec(f.readAll().toStdString());
    QVERIFY(loaded.valid());
    const Plan handPicked = makePlan(*loaded.spec);
    const SearchResult result = searchLayouts(*loaded.spec, {3, 0});
    QVERIFY(!result.best.empty());
    QVERIFY2(result.best.front().stepTime <= handPicked.step.total,
             qPrintable(QStringLiteral("search %1 s, hand-picked %2 s")
                            .arg(result.best.front().stepTime)
                            .arg(handPicked.step.total)));
}

void TestSearch::reportsWhenNothingFits()
{
    // 175 B parameters on one 80 GB GPU: 18 bytes per parameter alone is 3.2 TB.
    const json doc = {
        {"model", {{"layers", 96}, {"hidden", 12288}, {"heads", 96}, {"vocab", 51200}, {"seq_len", 2048}}},
        {"cluster", {{"nodes", 1}, {"devices_per_node", 1}, {"device", "h100-sxm"}}},
        {"parallel", {{"microbatches", 4}}}};
    const SearchResult result = searchLayouts(specFrom(doc), {});
    QVERIFY(result.errors.empty());
    QVERIFY(result.evaluated > 0);
    QCOMPARE(result.fitting, std::uint64_t(0));
    QVERIFY(result.best.empty());
}

void TestSearch::reportsWhenTheAgentRunsNoLayout()
{
    // An odd head dimension is no layout's: the search says why it ranks nothing, on the key to
    // change.
    json doc = smallMoeJson();
    doc["model"]["hidden"] = 3 * doc["model"]["heads"].get<int>();
    const SearchResult result = searchLayouts(specFrom(doc), {});
    QCOMPARE(result.errors.size(), std::size_t(1));
    QCOMPARE(QString::fromStdString(result.errors.front().path), QString("model.hidden"));
    QCOMPARE(result.evaluated, std::uint64_t(0));
    QVERIFY(result.best.empty());
}

void TestSearch::plannedOnlyRanksEveryValidLayout()
{
    // Planned only, the search skips nothing the agent refuses: it prices every valid layout of
    // the independent enumeration, refused ones included.
    json doc = smallMoeJson();
    doc["parallel"]["microbatches"] = 1024;
    const JobSpec base = specFrom(doc);
    const Counts counts = enumerateLayouts(base);
    SearchOptions options{5, 0};
    options.plannedOnly = true;
    const SearchResult result = searchLayouts(base, options);
    QVERIFY(result.errors.empty());
    QVERIFY(result.plannedOnly);
    QCOMPARE(result.refused, std::uint64_t(0));
    QCOMPARE(result.evaluated, counts.valid + counts.refused);
}

namespace {

// GPT-style dense model on two 8-GPU nodes, planning Megatron-LM: the spec asks for both of
// its planned-only overlaps, which implies a planned-only search.
JobSpec megatronSpec()
{
    return specFrom(
        {{"model",
          {{"layers", 8}, {"hidden", 1024}, {"heads", 16}, {"ffn_hidden", 4096}, {"vocab", 32000}, {"seq_len", 2048}}},
         {"parallel", {{"dp", 16}, {"microbatches", 4}, {"overlap_param_gather", true}, {"tp_comm_overlap", true}}},
         {"cluster", {{"preset", "dgx-h100"}, {"nodes", 2}}}});
}

}  // namespace

void TestSearch::plannedOnlyTakesEveryOverlapThatHelps()
{
    // Each overlap only hides time, so the best layouts take every one that applies (the
    // reduction with dp > 1, the gather with ZeRO and dp > 1, TP's with a TP group inside a node),
    // and turning any of them off plans the same layout slower in full. The best hundred hold
    // layouts with and without TP.
    const JobSpec spec = megatronSpec();
    const SearchResult result = searchLayouts(spec, {100, 0});
    QVERIFY(result.errors.empty());
    QVERIFY(result.plannedOnly);
    QVERIFY(!result.best.empty());
    bool sawTpOverlap = false, sawGatherOverlap = false;
    for (const SearchCandidate& c : result.best) {
        const ParallelSpec& p = c.parallel;
        QCOMPARE(p.overlapGradReduce, true);
        QCOMPARE(p.overlapParamGather, p.zero >= 1 && p.dp > 1);
        QCOMPARE(p.tpCommOverlap, p.tp > 1 && p.tp <= 8);
        sawTpOverlap = sawTpOverlap || p.tpCommOverlap;
        sawGatherOverlap = sawGatherOverlap || p.overlapParamGather;
        JobSpec ranked = spec;
        ranked.parallel = p;
        for (bool ParallelSpec::*flag :
             {&ParallelSpec::overlapGradReduce, &ParallelSpec::overlapParamGather, &ParallelSpec::tpCommOverlap}) {
            if (!(p.*flag))
                continue;
            JobSpec without = ranked;
            without.parallel.*flag = false;
            QVERIFY(makePlan(without).step.total > c.stepTime);
        }
    }
    QVERIFY(sawTpOverlap);
    QVERIFY(sawGatherOverlap);
}

void TestSearch::runnableSearchLeavesPlannedOnlyOverlapsOff()
{
    // Asked for what the agent runs, the same model ranks layouts without Megatron's planned-only
    // overlaps, each one the agent accepts.
    JobSpec spec = megatronSpec();
    spec.parallel.overlapParamGather = spec.parallel.tpCommOverlap = false;
    const SearchResult result = searchLayouts(spec, {8, 0});
    QVERIFY(result.errors.empty());
    QVERIFY(!result.plannedOnly);
    QVERIFY(!result.best.empty());
    for (const SearchCandidate& c : result.best) {
        QVERIFY(!c.parallel.overlapParamGather);
        QVERIFY(!c.parallel.tpCommOverlap);
        JobSpec ranked = spec;
        ranked.parallel = c.parallel;
        QVERIFY(agentCanRun(ranked));
    }
}

QTEST_APPLESS_MAIN(TestSearch)
#include "tst_search.moc"
