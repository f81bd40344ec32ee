#include "common/finding_checks.h"

#include "live/findings.h"

#include "plan/mesh.h"
#include "plan/planner.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <stdexcept>

using namespace meshbench;
using live::Finding;
using live::FindingKind;
using live::StepAggregate;

namespace {

// 16 layers by default (MoE layers 0, 2, ..., 14 of 4 experts, top-2, capacity factor 1.25) on
// 8 H100s (80 GB each): dp 2 x pp 4 by default, 1F1B with 4 micro-batches of 2.
plan::JobSpec testSpec(int dp = 2, int pp = 4, int layers = 16)
{
    nlohmann::json doc = nlohmann::json::parse(R"({
      "name": "findings test",
      "model": { "layers": 16, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "vocab": 512,
                 "seq_len": 64, "norm": "rmsnorm", "activation": "swiglu",
                 "moe": { "experts": 4, "top_k": 2, "moe_ffn_hidden": 256, "every_n_layers": 2,
                          "capacity_factor": 1.25, "aux_loss_coef": 0.01 } },
      "parallel": { "dp": 2, "pp": 4, "tp": 1, "ep": 2, "zero": 0, "recompute": "none", "schedule": "1f1b",
                    "microbatches": 4, "micro_batch_size": 2 },
      "cluster": { "nodes": 1, "devices_per_node": 8, "device": "h100-sxm" },
      "train": { "steps": 30 }
    })");
    doc["model"]["layers"] = layers;
    doc["parallel"]["dp"] = dp;
    doc["parallel"]["pp"] = pp;
    doc["cluster"]["devices_per_node"] = dp * pp;
    const plan::LoadResult loaded = plan::loadJobSpec(doc);
    if (!loaded.valid())
        qFatal("test spec is invalid: %s: %s", loaded.errors.front().path.c_str(),
               loaded.errors.front().message.c_str());
    return *loaded.spec;
}

constexpr std::int64_t kWindowNs = 40'000'000;  // every step's pipeline phase: 40 ms

void addLayer(StepAggregate& a, int layer, std::vector<std::uint32_t> routed, std::vector<std::uint32_t> dropped)
{
    live::ExpertLayerStats stats;
    stats.layer = layer;
    std::uint32_t most = 0;
    for (std::size_t e = 0; e < routed.size(); ++e) {
        stats.routedTotal += routed[e];
        stats.droppedTotal += dropped[e];
        if (routed[e] > most) {
            most = routed[e];
            stats.hottestExpert = int(e);
        }
    }
    stats.imbalance = double(most) / (double(stats.routedTotal) / double(routed.size()));
    stats.droppedFraction = double(stats.droppedTotal) / double(stats.routedTotal);
    stats.routed = std::move(routed);
    stats.dropped = std::move(dropped);
    a.expertLayers.push_back(std::move(stats));
}

// A step with the given stage bubbles over a 40 ms pipeline window (stage busy = (1 - bubble) x
// 40 ms), the plan's bubble, and near-even expert loads on every MoE layer.
StepAggregate step(int number, const std::vector<double>& stageBubbles, double planned)
{
    StepAggregate a;
    a.step = number;
    a.pipelineBeginNs = std::int64_t(number) * 1'000'000'000;
    a.pipelineEndNs = a.pipelineBeginNs + kWindowNs;
    double sum = 0;
    for (std::size_t s = 0; s < stageBubbles.size(); ++s) {
        live::StageBubble b;
        b.stage = int(s);
        b.measured = stageBubbles[s];
        b.ranks = 2;
        a.stages.push_back(b);
        sum += stageBubbles[s];
    }
    a.bubble = sum / double(stageBubbles.size());
    a.plannedBubble = planned;
    a.ranksReporting = 8;
    a.ranksFinished = 8;
    for (int layer = 0; layer < 16; layer += 2)
        addLayer(a, layer, {260, 250, 256, 258}, {0, 0, 0, 0});
    return a;
}

// `count` healthy steps from step 1: every stage 30 ms busy (bubble 0.25, plan 0.22).
std::vector<StepAggregate> healthySteps(int count, int pp = 4)
{
    std::vector<StepAggregate> steps;
    for (int i = 1; i <= count; ++i)
        steps.push_back(step(i, std::vector<double>(std::size_t(pp), 0.25), 0.22));
    return steps;
}

// Every rank peaks at `bytes` in total: a tenth params, a tenth grads, a fifth optimizer state,
// the rest activations.
live::RankMemory memoryOf(int rank, int stage, double bytes)
{
    live::RankMemory m;
    m.rank = std::uint32_t(rank);
    m.stage = stage;
    m.samples = 10;
    m.peak = {std::int64_t(bytes / 10), std::int64_t(bytes / 10), std::int64_t(bytes / 5), std::int64_t(bytes * 0.6),
              0};
    m.current = m.peak;
    return m;
}

std::vector<live::RankMemory> healthyMemory(const plan::JobSpec& spec)
{
    const plan::Mesh mesh(spec.parallel);
    std::vector<live::RankMemory> memory;
    memory.reserve(std::size_t(mesh.worldSize()));
    for (int r = 0; r < mesh.worldSize(); ++r)
        memory.push_back(memoryOf(r, mesh.coordOf(r).pp, 10e9));
    return memory;
}

// Compute spans for one rank and step: `busy` ns split into 4 F and 4 B spans, with transfers
// and the optimizer around them (which are not compute and must not count).
void addRankStep(live::RankTimes& times, std::uint32_t rank, int stepNumber, std::int64_t busy)
{
    std::int64_t t = std::int64_t(stepNumber) * 1'000'000'000;
    const std::int64_t piece = busy / 8;
    for (int i = 0; i < 8; ++i) {
        wire::SpanRecord s;
        s.step = stepNumber;
        s.kind = i < 4 ? wire::SpanKind::Forward : wire::SpanKind::Backward;
        s.microbatch = i % 4;
        s.beginNs = t;
        s.endNs = t + (i == 7 ? busy - 7 * piece : piece);
        times.add(rank, s);
        wire::SpanRecord transfer = s;
        transfer.kind = wire::SpanKind::SendActivation;
        transfer.beginNs = s.endNs;
        transfer.endNs = s.endNs + 3'000'000;
        times.add(rank, transfer);
        t = transfer.endNs;
    }
    wire::SpanRecord optimizer;
    optimizer.step = stepNumber;
    optimizer.kind = wire::SpanKind::Optimizer;
    optimizer.beginNs = t;
    optimizer.endNs = t + 9'000'000;
    times.add(rank, optimizer);
}

bool near(double actual, double expected, double tolerance = 1e-12) { return nearFigure(actual, expected, tolerance); }

#define CHECK_FIGURE(finding, key, expected) CHECK_FIGURE_WITHIN(finding, key, expected, 1e-12)

QByteArray listed(const std::vector<Finding>& findings)
{
    QByteArray text;
    for (const Finding& f : findings)
        text += QByteArray::fromStdString(live::describe(f)) + "\n";
    return text;
}

std::vector<Finding> find(const plan::JobSpec& spec, const std::vector<StepAggregate>& steps,
                          const std::vector<live::RankMemory>& memory, const live::RankTimes* times = nullptr,
                          const plan::Plan* plan = nullptr)
{
    return live::findFindings({spec, plan, steps, memory, times});
}

std::string percentText(double share)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.1f%%", 100 * share);
    return text;
}

}  // namespace

class TestFindings : public QObject {
    Q_OBJECT

private slots:
    // A healthy run, with a terrible first step (warm-up) and one disturbed step in the window,
    // yields nothing: no false positives.
    void aHealthyRunHasNoFindings()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Plan plan = plan::makePlan(spec);
        std::vector<StepAggregate> steps = healthySteps(25);
        steps[0] = step(1, {0.9, 0.1, 0.1, 0.1}, 0.22);  // stage 0 busy 4 ms, the rest 36 ms
        addLayer(steps[0], 2, {1000, 10, 10, 4}, {700, 0, 0, 0});
        steps[14] = step(15, {0.0, 0.6, 0.6, 0.6}, 0.22);  // one disturbed step: stage 0 busy 40 ms
        live::RankTimes times(8);
        for (int s = 1; s <= 25; ++s)
            for (std::uint32_t r = 0; r < 8; ++r)
                addRankStep(times, r, s, s == 1 && r == 3 ? 90'000'000 : 30'000'000 + 100'000 * r);
        const std::vector<Finding> findings = find(spec, steps, healthyMemory(spec), &times, &plan);
        QVERIFY2(findings.empty(), listed(findings).constData());
        // Nothing to say without steps, or with only the warm-up step.
        QVERIFY(find(spec, {}, {}).empty());
        QVERIFY(find(spec, {steps[0]}, {}).empty());
    }

    // Stage busy 30/20/20/20 ms: mean 22.5 ms, stage 0 is 30 / 22.5 - 1 = 33.3% above it. With 12
    // layers, 3 per stage, the lightest stage makes a layer 20 / 3 = 6.67 ms, so
    // (30 - 22.5) / 6.67 = 1.125: 1 layer should move.
    void theBoundingStageAndHowMuchItExceedsTheMean()
    {
        const plan::JobSpec spec = testSpec(2, 4, 12);
        const plan::Plan plan = plan::makePlan(spec);
        std::vector<StepAggregate> steps;
        for (int i = 1; i <= 12; ++i)
            steps.push_back(step(i, {0.25, 0.5, 0.5, 0.5}, 0.40));  // overall 0.4375: not above the plan
        const std::vector<Finding> findings = find(spec, steps, healthyMemory(spec), nullptr, &plan);
        QCOMPARE(int(findings.size()), 1);
        const Finding& f = findings[0];
        QCOMPARE(f.kind, FindingKind::BoundingStage);
        QCOMPARE(f.stage, std::optional<int>(0));
        CHECK_FIGURE(f, "busy_s", 0.030);
        CHECK_FIGURE(f, "mean_busy_s", 0.0225);
        CHECK_FIGURE(f, "excess", 1.0 / 3.0);
        CHECK_FIGURE(f, "layer_s", 0.020 / 3);
        CHECK_FIGURE(f, "layers_to_move", 1);
        QVERIFY(near(f.severity, 0.25));  // 1 - 22.5 / 30
        // The plan's own imbalance of stage 0, from its simulated busy times.
        double plannedMean = 0;
        for (double b : plan.simulation.busy)
            plannedMean += b / 4;
        CHECK_FIGURE(f, "planned_excess", plan.simulation.busy[0] / plannedMean - 1);
        QVERIFY2(f.title.find("stage 0 bounds the pipeline: 33.3% slower than the mean stage (30.00 ms vs 22.50 ms") ==
                     0,
                 f.title.c_str());
        QVERIFY2(f.suggestion.find("move 1 layer off stage 0") == 0, f.suggestion.c_str());
        QVERIFY2(f.suggestion.find("the first stage also runs the embedding") != std::string::npos,
                 f.suggestion.c_str());
        // The schedule alternatives come with the bubble their own plan predicts.
        plan::JobSpec zeroBubble = spec;
        zeroBubble.parallel.schedule = plan::ScheduleKind::ZeroBubbleH1;
        const double zbBubble = plan::makePlan(zeroBubble).simulation.overallBubbleRatio;
        QVERIFY(zbBubble < plan.simulation.overallBubbleRatio);
        QVERIFY2(f.suggestion.find("schedule zb-h1 (plan: bubble " + percentText(zbBubble) + ")") != std::string::npos,
                 f.suggestion.c_str());

        // 36/20/20/20 ms: mean 24 ms, (36 - 24) / 6.67 = 1.8: 2 layers. (A layer priced on the
        // heaviest stage, 36 / 3 = 12 ms, would move only 1.)
        steps.clear();
        for (int i = 1; i <= 12; ++i)
            steps.push_back(step(i, {0.1, 0.5, 0.5, 0.5}, 0.40));
        const std::vector<Finding> two = find(spec, steps, healthyMemory(spec));
        QVERIFY2(two.size() == 1, listed(two).constData());
        CHECK_FIGURE(two[0], "excess", 0.5);
        CHECK_FIGURE(two[0], "layers_to_move", 2);
        QVERIFY2(two[0].suggestion.find("move 2 layers off stage 0") == 0, two[0].suggestion.c_str());

        // Under 10% above the mean is not yet a finding: 24.6/22.5/22.5/20.4 ms is 9.3% above.
        steps.clear();
        for (int i = 1; i <= 12; ++i)
            steps.push_back(step(i, {1 - 24.6 / 40, 1 - 22.5 / 40, 1 - 22.5 / 40, 1 - 20.4 / 40}, 0.40));
        const std::vector<Finding> none = find(spec, steps, healthyMemory(spec));
        QVERIFY2(none.empty(), listed(none).constData());
    }

    // The same figure measured from spans through the live aggregator: stage 0's ranks compute
    // 30 ms, stage 1's 20 ms inside a 32 ms window: mean 25 ms, stage 0 is 20% above it. (The
    // bubble, 14 / 64 = 21.9%, stays under the plan's.)
    void theBoundingStageFromSpansThroughTheAggregator()
    {
        const plan::JobSpec spec = testSpec(4, 2);
        const plan::Plan plan = plan::makePlan(spec);
        live::LiveAggregator aggregator(spec, &plan);
        const plan::Mesh mesh(spec.parallel);
        std::vector<StepAggregate> steps;
        for (int s = 1; s <= 6; ++s) {
            const std::int64_t t0 = std::int64_t(s) * 1'000'000'000;
            for (int r = 0; r < mesh.worldSize(); ++r) {
                const int stage = mesh.coordOf(r).pp;
                const std::int64_t busy = stage == 0 ? 30'000'000 : 20'000'000;
                const std::int64_t begin = stage == 0 ? t0 : t0 + 32'000'000 - busy;
                aggregator.add(std::uint32_t(r), wire::SpanRecord{s, std::int16_t(stage), 0, 0, wire::SpanKind::Forward,
                                                                  -1, begin, begin + busy, 0});
                aggregator.add(std::uint32_t(r),
                               wire::SpanRecord{s, std::int16_t(stage), 0, -1, wire::SpanKind::Optimizer, -1,
                                                t0 + 41'000'000, t0 + 42'000'000, 0});
            }
            // The rest of a complete step: its metrics and every MoE layer's (even) expert loads.
            wire::StepMetricsRecord metrics;
            metrics.step = s;
            metrics.beginNs = t0;
            metrics.endNs = t0 + 42'000'000;
            aggregator.add(0, metrics);
            for (int layer = 0; layer < spec.model.layers; layer += 2)
                aggregator.add(0, wire::ExpertLoadRecord{s, layer, {256, 256, 256, 256}, {0, 0, 0, 0}});
        }
        steps = aggregator.flush();
        QCOMPARE(int(steps.size()), 6);
        // The H100 plan's step time is not these synthetic spans': only the stage is at issue here.
        std::vector<Finding> findings = find(spec, steps, {});
        std::erase_if(findings, [](const Finding& f) { return f.kind == FindingKind::StepTimeOffPlan; });
        QVERIFY2(findings.size() == 1, listed(findings).constData());
        QCOMPARE(findings[0].kind, FindingKind::BoundingStage);
        QCOMPARE(findings[0].stage, std::optional<int>(0));
        CHECK_FIGURE(findings[0], "busy_s", 0.030);
        CHECK_FIGURE(findings[0], "mean_busy_s", 0.025);
        CHECK_FIGURE(findings[0], "excess", 0.2);
        // 8 layers per stage: 20 / 8 = 2.5 ms a layer on the lightest stage, (30 - 25) / 2.5 = 2.
        CHECK_FIGURE(findings[0], "layer_s", 0.0025);
        CHECK_FIGURE(findings[0], "layers_to_move", 2);
    }

    // dp 4 x pp 2: four ranks per stage. In stage 1, one rank computes 12 ms where the others take
    // 10 ms: the median is 10 ms and it is 20% slower. A rank 5% slower, and one slow only in 3 of
    // the 20 recent steps, are not stragglers.
    void stragglersAgainstTheirStageMedian()
    {
        const plan::JobSpec spec = testSpec(4, 2);
        const plan::Mesh mesh(spec.parallel);
        std::vector<int> stage0, stage1;
        for (int r = 0; r < mesh.worldSize(); ++r)
            (mesh.coordOf(r).pp == 0 ? stage0 : stage1).push_back(r);
        const int slow = stage1[2];
        const int slightlySlow = stage0[1];
        const int onceSlow = stage0[3];
        live::RankTimes times(8);
        for (int s = 1; s <= 25; ++s)
            for (int r = 0; r < 8; ++r) {
                std::int64_t busy = 10'000'000;
                if (r == slow)
                    busy = 12'000'000;
                else if (r == slightlySlow)
                    busy = 10'500'000;
                else if (r == onceSlow && s >= 20 && s <= 22)
                    busy = 30'000'000;
                addRankStep(times, std::uint32_t(r), s, busy);
            }
        const std::vector<StepAggregate> steps = healthySteps(25, 2);
        const std::vector<Finding> findings = find(spec, steps, healthyMemory(spec), &times);
        QCOMPARE(int(findings.size()), 1);
        const Finding& f = findings[0];
        QCOMPARE(f.kind, FindingKind::Straggler);
        QCOMPARE(f.rank, std::optional<int>(slow));
        QCOMPARE(f.stage, std::optional<int>(1));
        CHECK_FIGURE(f, "busy_s", 0.012);
        CHECK_FIGURE(f, "stage_median_s", 0.010);
        CHECK_FIGURE(f, "excess", 0.2);
        QVERIFY(near(f.severity, 1 - 1 / 1.2));
        QVERIFY2(f.title.find("20.0% slower than its stage's median") != std::string::npos, f.title.c_str());
        QVERIFY2(f.suggestion.find("throttling") != std::string::npos, f.suggestion.c_str());
        // Without the ranks' times there is nothing to compare.
        QVERIFY(find(spec, steps, healthyMemory(spec)).empty());
    }

    // Layer 2, half the recent steps routed [400, 200, 200, 224] (80 dropped), half [300, 240, 240,
    // 244]: expert 0 got 10 x 400 + 10 x 300 = 7000 of 20 x 1024 = 20480 tokens, mean 5120 per
    // expert, overload 1.3671875; peak step 400 / 256 = 1.5625; dropped 800 / 20480 = 3.90625%.
    // Layer 4 [330, 230, 232, 232] every step, nothing dropped: overload 330 / 256 = 1.2890625.
    void hotExpertsWithTheirOverload()
    {
        const plan::JobSpec spec = testSpec();
        std::vector<StepAggregate> steps = healthySteps(30);
        for (StepAggregate& s : steps) {
            s.expertLayers.clear();
            for (int layer = 0; layer < 16; layer += 2) {
                if (s.step >= 11 && layer == 2)
                    addLayer(s, layer,
                             s.step % 2 == 0 ? std::vector<std::uint32_t>{400, 200, 200, 224}
                                             : std::vector<std::uint32_t>{300, 240, 240, 244},
                             {s.step % 2 == 0 ? 80u : 0u, 0, 0, 0});
                else if (layer == 4)
                    addLayer(s, layer, {330, 230, 232, 232}, {0, 0, 0, 0});
                else if (layer == 8 && s.step <= 10)  // hot only before the recent window: forgotten
                    addLayer(s, layer, {900, 50, 50, 24}, {600, 0, 0, 0});
                else
                    addLayer(s, layer, {256, 256, 256, 256}, {0, 0, 0, 0});
            }
        }
        const std::vector<Finding> findings = find(spec, steps, healthyMemory(spec));
        QCOMPARE(int(findings.size()), 2);
        const Finding& hot = findings[0];
        QCOMPARE(hot.kind, FindingKind::HotExpert);
        QCOMPARE(hot.layer, std::optional<int>(2));
        QCOMPARE(hot.expert, std::optional<int>(0));
        CHECK_FIGURE(hot, "overload", 1.3671875);
        CHECK_FIGURE(hot, "peak_step_overload", 1.5625);
        CHECK_FIGURE(hot, "dropped_fraction", 0.0390625);
        CHECK_FIGURE(hot, "capacity_factor", 1.25);
        QVERIFY(near(hot.severity, 1 - 1 / 1.3671875 + 0.0390625));
        // Capacity at the peak step's overload, rounded up to 0.05: 1.5625 -> 1.60.
        QVERIFY2(hot.suggestion.find("raise model.moe.capacity_factor from 1.25 to at least 1.60") == 0,
                 hot.suggestion.c_str());
        QVERIFY2(hot.suggestion.find("0.01 -> 0.02") != std::string::npos, hot.suggestion.c_str());

        const Finding& warm = findings[1];
        QCOMPARE(warm.kind, FindingKind::HotExpert);
        QCOMPARE(warm.layer, std::optional<int>(4));
        QCOMPARE(warm.expert, std::optional<int>(0));
        CHECK_FIGURE(warm, "overload", 1.2890625);
        CHECK_FIGURE(warm, "dropped_fraction", 0.0);
        QVERIFY(near(warm.severity, 1 - 256.0 / 330.0));
        QVERIFY2(warm.suggestion.find("double model.moe.aux_loss_coef (0.01 -> 0.02)") == 0, warm.suggestion.c_str());

        // Without a load-balancing loss there is nothing to double: the suggestion turns it on.
        plan::JobSpec noAux = spec;
        noAux.model.moe.auxLossCoef = 0;
        const std::vector<Finding> unbalanced = find(noAux, steps, healthyMemory(spec));
        QCOMPARE(int(unbalanced.size()), 2);
        QVERIFY2(unbalanced[1].suggestion.find("set model.moe.aux_loss_coef to 0.01") == 0,
                 unbalanced[1].suggestion.c_str());
    }

    // 80 GB devices, threshold 85%. Stage 1: one rank peaks at 72 GB (90%, activations 43.2 GB the
    // largest), one at 70 GB (87.5%), the others at 10 GB. Stage 0: one rank at 76 GB (95%).
    void ranksNearTheirMemoryCapacity()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        std::vector<live::RankMemory> memory = healthyMemory(spec);
        std::vector<int> stage1;
        for (int r = 0; r < 8; ++r)
            if (mesh.coordOf(r).pp == 1)
                stage1.push_back(r);
        memory[std::size_t(stage1[0])] = memoryOf(stage1[0], 1, 70e9);
        memory[std::size_t(stage1[1])] = memoryOf(stage1[1], 1, 72e9);
        // Stage 0's rank 0: the optimizer state is the largest category.
        memory[0].peak = {std::int64_t(8e9), std::int64_t(16e9), std::int64_t(40e9), std::int64_t(12e9), 0};
        // Ignored: a rank without samples, and one outside the job.
        memory[4].samples = 0;
        memory[4].peak[3] = std::int64_t(79e9);
        memory.push_back(memoryOf(99, 0, 79e9));

        const std::vector<Finding> findings = find(spec, healthySteps(5), memory);
        QCOMPARE(int(findings.size()), 2);
        const Finding& worst = findings[0];
        QCOMPARE(worst.kind, FindingKind::MemoryPressure);
        QCOMPARE(worst.rank, std::optional<int>(0));
        QCOMPARE(worst.stage, std::optional<int>(0));
        QCOMPARE(worst.category, std::optional<std::string>("optimizer"));
        CHECK_FIGURE(worst, "fraction", 0.95);
        CHECK_FIGURE(worst, "peak_bytes", 76e9);
        CHECK_FIGURE(worst, "capacity_bytes", 80e9);
        CHECK_FIGURE(worst, "largest_bytes", 40e9);
        CHECK_FIGURE(worst, "ranks_over", 1);
        QVERIFY(near(worst.severity, (0.95 - 0.85) / 0.15));
        QVERIFY2(worst.suggestion.find("set parallel.zero to 1") == 0, worst.suggestion.c_str());

        const Finding& next = findings[1];
        QCOMPARE(next.rank, std::optional<int>(stage1[1]));
        QCOMPARE(next.stage, std::optional<int>(1));
        QCOMPARE(next.category, std::optional<std::string>("activations"));
        CHECK_FIGURE(next, "fraction", 0.9);
        CHECK_FIGURE(next, "largest_bytes", 72e9 * 0.6);
        CHECK_FIGURE(next, "ranks_over", 2);
        QVERIFY(near(next.severity, (0.9 - 0.85) / 0.15));
        QVERIFY2(next.title.find("90.0% of its 80.00 GB") != std::string::npos, next.title.c_str());
        QVERIFY2(next.suggestion.find("set parallel.recompute to selective") == 0, next.suggestion.c_str());
    }

    // Measured bubble 38% and 42% on alternate steps (median 40%) against a plan of 20%: 2x and 20
    // points above it. 1.4x (28% vs 20%) and 2x of a small plan (4% vs 2%) are not findings.
    void aBubbleFarAboveThePlan()
    {
        const plan::JobSpec spec = testSpec();
        const auto run = [&](double low, double high, double planned) {
            std::vector<StepAggregate> steps;
            steps.push_back(step(1, {0.9, 0.9, 0.9, 0.9}, planned));  // warm-up: left out
            for (int i = 2; i <= 21; ++i) {
                const double b = i % 2 == 0 ? low : high;
                steps.push_back(step(i, {b, b, b, b}, planned));
            }
            return find(spec, steps, healthyMemory(spec));
        };
        const std::vector<Finding> findings = run(0.38, 0.42, 0.20);
        QCOMPARE(int(findings.size()), 1);
        const Finding& f = findings[0];
        QCOMPARE(f.kind, FindingKind::BubbleAbovePlan);
        CHECK_FIGURE(f, "measured", 0.40);
        CHECK_FIGURE(f, "planned", 0.20);
        QVERIFY(near(f.severity, 0.20));
        QVERIFY2(f.title == "the pipeline bubble is 40.0%, 2.0x the plan's 20.0%", f.title.c_str());
        plan::JobSpec zeroBubble = spec;
        zeroBubble.parallel.schedule = plan::ScheduleKind::ZeroBubbleH1;
        const double zbBubble = plan::makePlan(zeroBubble).simulation.overallBubbleRatio;
        QVERIFY2(f.suggestion.find("schedule zb-h1 (plan: bubble " + percentText(zbBubble) + ")") != std::string::npos,
                 f.suggestion.c_str());
        QVERIFY2(f.suggestion.find("parallel.microbatches 8 with micro_batch_size 1") != std::string::npos,
                 f.suggestion.c_str());

        QVERIFY(run(0.28, 0.28, 0.20).empty());
        QVERIFY(run(0.04, 0.04, 0.02).empty());
    }

    // Steps 50% above the plan's 100 ms name the first cause they can see, in order:
    // oversubscribed CPU cores, a stage slow against its plan, communication above the plan's
    // share, else the device table; 20% off raises nothing.
    void stepTimeOffThePlanWithItsCause()
    {
        const plan::JobSpec spec = testSpec();
        plan::Plan planned = plan::makePlan(spec);
        planned.step = {};
        planned.step.compute = 0.09;
        planned.step.dataParallelComm = 0.01;
        planned.step.total = 0.1;
        planned.tokensPerSecond = 20000;
        planned.simulation.busy.assign(4, 0.03);
        const auto run = [&](const plan::JobSpec& job, double seconds, const std::vector<double>& bubbles, double comm,
                             int cores) {
            std::vector<StepAggregate> steps;
            for (int i = 1; i <= 10; ++i) {
                StepAggregate s = step(i, bubbles, 0.22);
                s.stepSeconds = seconds;
                s.plannedStepSeconds = planned.step.total;
                s.tokensPerSecond = 2000 / seconds;
                s.plannedTokensPerSecond = planned.tokensPerSecond;
                s.commSeconds = comm;
                steps.push_back(s);
            }
            live::FindingsInput in{job, &planned, steps, healthyMemory(job)};
            in.coresPerNode = cores;
            std::vector<Finding> out;
            for (Finding& f : live::findFindings(in))
                if (f.kind == FindingKind::StepTimeOffPlan)
                    out.push_back(std::move(f));
            return out;
        };
        const std::vector<double> even(4, 0.25);
        plan::JobSpec cpu = spec;
        cpu.cluster.device.kind = "cpu";
        const std::string head = "steps take 150.00 ms, 50.0% above the plan's 100.00 ms, 13333 vs 20000 tokens/s: ";

        auto f = run(cpu, 0.15, even, 0.01, 2);
        QCOMPARE(int(f.size()), 1);
        QCOMPARE(*f[0].category, std::string("oversubscribed"));
        QVERIFY2(f[0].title == head + "8 ranks share 2 cores", f[0].title.c_str());
        QVERIFY2(f[0].suggestion.find("meshbench-engine calibrate") != std::string::npos, f[0].suggestion.c_str());
        CHECK_FIGURE(f[0], "measured_s", 0.15);
        CHECK_FIGURE(f[0], "planned_s", 0.1);
        CHECK_FIGURE(f[0], "cores", 2);
        QVERIFY(near(f[0].severity, 1.0 / 3.0));
        QCOMPARE(QString::fromStdString(toJson(f[0])["kind"].get<std::string>()), QString("step_time_off_plan"));

        f = run(cpu, 0.15, {0.25, 0.25, 0.25, 0.0}, 0.01, 8);  // enough cores: stage 3 at 40 ms vs 30 planned
        QCOMPARE(int(f.size()), 1);
        QCOMPARE(*f[0].category, std::string("slow_stage"));
        QVERIFY2(f[0].title.find("stage 3 computes 1.33x its planned time") != std::string::npos, f[0].title.c_str());
        CHECK_FIGURE(f[0], "stage", 3);

        f = run(spec, 0.15, even, 0.06, 0);  // 40% of the step in transfers against the plan's 10%
        QCOMPARE(int(f.size()), 1);
        QCOMPARE(*f[0].category, std::string("slow_link"));
        QVERIFY2(f[0].title == head + "communication takes 40.0% of the step against the plan's 10.0%",
                 f[0].title.c_str());

        f = run(spec, 0.15, even, 0.01, 0);
        QCOMPARE(int(f.size()), 1);
        QCOMPARE(*f[0].category, std::string("device_rate"));
        QVERIFY2(f[0].title == head + "the device runs slower than its table", f[0].title.c_str());

        f = run(spec, 0.06, even, 0.001, 0);
        QCOMPARE(int(f.size()), 1);
        QVERIFY2(f[0].title.find("40.0% below the plan's") != std::string::npos &&
                     f[0].title.find("runs faster than its table") != std::string::npos,
                 f[0].title.c_str());

        QVERIFY(run(cpu, 0.12, {0.25, 0.25, 0.25, 0.0}, 0.06, 2).empty());
        QVERIFY(run(spec, 0.08, even, 0.01, 0).empty());
    }

    // Findings of every kind at once come out worst first: memory (95% of capacity: severity
    // 0.667), the hot expert (1 - 256/400 = 0.36), the bounding stage (0.25).
    void findingsAreSortedBySeverity()
    {
        const plan::JobSpec spec = testSpec();
        std::vector<StepAggregate> steps;
        for (int i = 1; i <= 10; ++i) {
            StepAggregate s = step(i, {0.25, 0.5, 0.5, 0.5}, 0.40);
            s.expertLayers.clear();
            addLayer(s, 6, {400, 200, 200, 224}, {0, 0, 0, 0});
            steps.push_back(s);
        }
        std::vector<live::RankMemory> memory = healthyMemory(spec);
        memory[5] = memoryOf(5, plan::Mesh(spec.parallel).coordOf(5).pp, 76e9);
        const std::vector<Finding> findings = find(spec, steps, memory);
        QCOMPARE(int(findings.size()), 3);
        QCOMPARE(findings[0].kind, FindingKind::MemoryPressure);
        QCOMPARE(findings[1].kind, FindingKind::HotExpert);
        QCOMPARE(findings[2].kind, FindingKind::BoundingStage);
        QVERIFY(near(findings[0].severity, 2.0 / 3.0));
        QVERIFY(near(findings[1].severity, 0.36));
        QVERIFY(near(findings[2].severity, 0.25));
    }

    void describeAndJson()
    {
        const plan::JobSpec spec = testSpec();
        std::vector<StepAggregate> steps;
        for (int i = 1; i <= 5; ++i)
            steps.push_back(step(i, {0.25, 0.5, 0.5, 0.5}, 0.40));
        const std::vector<Finding> findings = find(spec, steps, {});
        QCOMPARE(int(findings.size()), 1);
        const Finding& f = findings[0];
        QCOMPARE(live::describe(f), f.title + "; " + f.suggestion);
        const nlohmann::json j = live::toJson(f);
        QCOMPARE(j["type"], "finding");
        QCOMPARE(j["kind"], "bounding_stage");
        QCOMPARE(j["severity"].get<double>(), f.severity);
        QCOMPARE(j["title"].get<std::string>(), f.title);
        QCOMPARE(j["suggestion"].get<std::string>(), f.suggestion);
        QCOMPARE(j["stage"], 0);
        QVERIFY(j["rank"].is_null() && j["layer"].is_null() && j["expert"].is_null() && j["category"].is_null());
        QCOMPARE(j["figures"].size(), f.figures.size());
        QCOMPARE(j["figures"]["excess"].get<double>(), *f.figure("excess"));
        QCOMPARE(live::findingKindName(FindingKind::Straggler), std::string_view("straggler"));
        QCOMPARE(live::findingKindName(FindingKind::MemoryPressure), std::string_view("memory_pressure"));
    }

    // Compute spans summed per rank and step; transfers, the optimizer, bad ranks, reversed spans
    // and steps older than the kept window are ignored.
    void rankTimesSumComputeSpans()
    {
        live::RankTimes times(2, 4);
        addRankStep(times, 1, 3, 8'000'000);
        addRankStep(times, 1, 3, 1'000'000);  // more spans of the same step add up
        QVERIFY(times.busySeconds(3, 1).has_value() && near(*times.busySeconds(3, 1), 0.009));
        QCOMPARE(times.busySeconds(3, 0), std::optional<double>());
        QCOMPARE(times.busySeconds(4, 1), std::optional<double>());
        wire::SpanRecord reversed{3, 0, 0, 0, wire::SpanKind::Forward, -1, 500, 100, 0};
        times.add(0, reversed);
        times.add(7, wire::SpanRecord{3, 0, 0, 0, wire::SpanKind::Forward, -1, 0, 100, 0});
        QCOMPARE(times.busySeconds(3, 0), std::optional<double>());
        QCOMPARE(times.busySeconds(3, 7), std::optional<double>());
        QCOMPARE(times.busySeconds(-1, 0), std::optional<double>());
        // Step 7 pushes step 3 out of the 4 kept (4..7); its late spans are ignored.
        wire::Batch batch;
        batch.rank = 0;
        batch.records.push_back(wire::SpanRecord{7, 0, 0, 0, wire::SpanKind::WeightGrad, -1, 0, 2'000'000, 0});
        batch.records.push_back(wire::StepMetricsRecord{});
        times.add(batch);
        QVERIFY(times.busySeconds(7, 0).has_value() && near(*times.busySeconds(7, 0), 0.002));
        QCOMPARE(times.busySeconds(3, 1), std::optional<double>());
        addRankStep(times, 1, 3, 8'000'000);
        QCOMPARE(times.busySeconds(3, 1), std::optional<double>());
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, live::RankTimes(0));
    }

    // RecentSteps keeps the first step and the last 20, and findings over it equal findings over
    // the whole list.
    void recentStepsKeepWhatFindingsRead()
    {
        const plan::JobSpec spec = testSpec();
        std::vector<StepAggregate> all;
        live::RecentSteps recent;
        for (int i = 1; i <= 40; ++i) {
            // Stage 0 heavier in steps 21..40 only, by an amount that grows with the step.
            const double b0 = i > 20 ? 0.25 - 0.002 * (i - 20) : 0.5;
            all.push_back(step(i, {b0, 0.5, 0.5, 0.5}, 0.45));
            recent.add(all.back());
        }
        QCOMPARE(int(recent.steps().size()), 21);
        QCOMPARE(recent.steps().front().step, 1);
        QCOMPARE(recent.steps()[1].step, 21);
        QCOMPARE(recent.steps().back().step, 40);
        const std::vector<Finding> fromAll = find(spec, all, {});
        const std::vector<Finding> fromRecent = live::findFindings({spec, nullptr, recent.steps(), {}, nullptr});
        QCOMPARE(int(fromAll.size()), 1);
        QCOMPARE(listed(fromRecent), listed(fromAll));
        // Median of stage 0's busy over steps 21..40: bubbles 0.248 .. 0.21, median 0.229.
        CHECK_FIGURE(fromAll[0], "busy_s", (1 - 0.229) * 0.040);
    }

    // Inconsistent input is skipped, never trusted, and an invalid layout is refused by name.
    void badInputIsSkippedOrRefused()
    {
        const plan::JobSpec spec = testSpec();
        std::vector<StepAggregate> steps = healthySteps(10);
        steps[1].stages.pop_back();  // a stage missing
        steps[2].stages[0].measured = std::numeric_limits<double>::quiet_NaN();
        steps[3].pipelineEndNs = steps[3].pipelineBeginNs - 5;  // a negative window
        steps[4].bubble = std::numeric_limits<double>::infinity();
        addLayer(steps[4], 99, {1000, 0, 0, 0}, {900, 0, 0, 0});  // no such layer
        addLayer(steps[4], 3, {1000, 0, 0, 0}, {900, 0, 0, 0});   // not an MoE layer
        addLayer(steps[5], 2, {1000, 0, 0}, {900, 0, 0});         // three experts of four
        steps[5].stages[0].measured = 0.0;                        // one step alone is not a pattern
        std::vector<live::RankMemory> memory = healthyMemory(spec);
        memory[3].peak[1] = -std::int64_t(1e12);  // a negative peak: the rank is skipped
        memory[3].peak[0] = std::int64_t(1e15);
        live::RankTimes otherWorld(3);
        const std::vector<Finding> findings = find(spec, steps, memory, &otherWorld);
        QVERIFY2(findings.empty(), listed(findings).constData());

        plan::JobSpec invalid = spec;
        invalid.parallel.dp = 3;
        try {
            find(invalid, steps, memory);
            QFAIL("an invalid layout was accepted");
        } catch (const std::invalid_argument& e) {
            QVERIFY2(std::string(e.what()).find("parallel.dp") != std::string::npos, e.what());
        }
    }
};

QTEST_APPLESS_MAIN(TestFindings)
#include "tst_findings.moc"
