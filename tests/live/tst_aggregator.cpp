#include "live/aggregator.h"
#include "live/feed_json.h"

#include "plan/mesh.h"
#include "plan/planner.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

using namespace meshbench;
using live::AddOutcome;
using live::LiveAggregator;
using live::StepAggregate;

namespace {

// The demo job of resources/jobs/demo.json: 4 layers (MoE layers 0 and 2, 4 experts, top-2),
// dp 2 x pp 2 x tp 2, ep 2, 1F1B with 4 micro-batches on the cpu device.
nlohmann::json demoDocument()
{
    return nlohmann::json::parse(R"({
      "name": "live aggregator test",
      "model": { "layers": 4, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "vocab": 512,
                 "seq_len": 64, "norm": "rmsnorm", "activation": "swiglu", "tied_embeddings": true,
                 "moe": { "experts": 4, "top_k": 2, "moe_ffn_hidden": 256, "every_n_layers": 2,
                          "capacity_factor": 1.25, "aux_loss_coef": 0.01 } },
      "parallel": { "dp": 2, "pp": 2, "tp": 2, "ep": 2, "zero": 0, "recompute": "none", "schedule": "1f1b",
                    "microbatches": 4, "micro_batch_size": 2 },
      "cluster": { "nodes": 1, "devices_per_node": 8, "device": "cpu", "intra_node_bandwidth_GBps": 5,
                   "inter_node_bandwidth_GBps": 5, "intra_node_latency_us": 1, "inter_node_latency_us": 1,
                   "compute_efficiency": 0.5 },
      "train": { "steps": 10 },
      "backend": "cpu"
    })");
}

plan::JobSpec specFrom(const nlohmann::json& document)
{
    const plan::LoadResult loaded = plan::loadJobSpec(document);
    if (!loaded.valid())
        qFatal("test spec is invalid: %s: %s", loaded.errors.front().path.c_str(),
               loaded.errors.front().message.c_str());
    return *loaded.spec;
}

plan::JobSpec layoutSpec(int dp, int pp, int tp, int ep, const char* schedule, int virtualStages)
{
    nlohmann::json doc = demoDocument();
    doc["parallel"]["dp"] = dp;
    doc["parallel"]["pp"] = pp;
    doc["parallel"]["tp"] = tp;
    doc["parallel"]["ep"] = ep;
    doc["parallel"]["schedule"] = schedule;
    doc["parallel"]["virtual_stages"] = virtualStages;
    doc["cluster"]["devices_per_node"] = dp * pp * tp;
    return specFrom(doc);
}

// One rank, one stage: 8 layers with MoE layers 0, 2, 4, 6 of 4 experts.
plan::JobSpec singleRankMoeSpec(int layers = 8, int experts = 4)
{
    nlohmann::json doc = demoDocument();
    doc["model"]["layers"] = layers;
    doc["model"]["moe"]["experts"] = experts;
    doc["model"]["moe"]["top_k"] = 1;
    for (const char* key : {"dp", "pp", "tp", "ep"})
        doc["parallel"][key] = 1;
    doc["cluster"]["devices_per_node"] = 1;
    return specFrom(doc);
}

wire::SpanRecord span(int step, wire::SpanKind kind, std::int64_t begin, std::int64_t end, int microbatch = 0)
{
    wire::SpanRecord s;
    s.step = step;
    s.kind = kind;
    s.microbatch = microbatch;
    s.beginNs = begin;
    s.endNs = end;
    return s;
}

wire::StepMetricsRecord metrics(int step, std::int64_t begin = 0, std::int64_t end = 0, double loss = 2.5)
{
    wire::StepMetricsRecord m;
    m.step = step;
    m.beginNs = begin;
    m.endNs = end;
    m.loss = loss;
    m.auxLoss = 0.125;
    m.tokensPerSecond = 1000;
    m.bubbleRatio = 0.25;
    m.tokens = 1024;
    return m;
}

wire::ExpertLoadRecord expertLoad(int step, int layer, std::vector<std::uint32_t> routed,
                                  std::vector<std::uint32_t> dropped)
{
    wire::ExpertLoadRecord load;
    load.step = step;
    load.layer = layer;
    load.routed = std::move(routed);
    load.dropped = std::move(dropped);
    return load;
}

bool near(double actual, double expected, double tolerance = 1e-12)
{
    return std::abs(actual - expected) <= tolerance * std::max(1.0, std::abs(expected));
}

QByteArray describe(const std::optional<double>& actual, double expected)
{
    return (actual ? QByteArray::number(*actual, 'g', 17) : QByteArray("(none)")) +
           " != " + QByteArray::number(expected, 'g', 17);
}

#define CHECK_NEAR(actual, expected, tolerance)                                                                        \
    QVERIFY2((actual).has_value() && near(*(actual), (expected), (tolerance)),                                         \
             describe((actual), (expected)).constData())

// Every step's records of every rank, in the order each rank sends them, from the planner's own
// simulated timeline. One simulated second becomes `scale` ns, chosen so that rounding each time
// to a whole nanosecond moves the bubble by far less than 1e-9.
struct SimulatedRun {
    std::vector<std::vector<wire::Record>> perRank;
    double scale = 0;
};

std::vector<std::uint32_t> routedFor(int step, int layer)
{
    return {std::uint32_t(10 * step), 20, 30, std::uint32_t(40 + layer)};
}

SimulatedRun simulatedRun(const plan::JobSpec& spec, const plan::Plan& plan, int steps)
{
    const plan::SimulationResult& sim = plan.simulation;
    SimulatedRun run;
    run.scale = 1e12 / sim.makespan;
    const auto ns = [&](double seconds) { return std::int64_t(std::llround(seconds * run.scale)); };
    const std::int64_t stepLength = ns(sim.makespan) + 1'000'000;
    const plan::Mesh mesh(spec.parallel);
    run.perRank.resize(std::size_t(mesh.worldSize()));
    for (int step = 1; step <= steps; ++step) {
        const std::int64_t offset = std::int64_t(step) * 4 * stepLength;
        for (int rank = 0; rank < mesh.worldSize(); ++rank) {
            const plan::MeshCoord coord = mesh.coordOf(rank);
            auto& out = run.perRank[std::size_t(rank)];
            std::int64_t last = offset;
            for (const plan::TimedOp& op : sim.timeline[std::size_t(coord.pp)]) {
                const auto kind = wire::spanKindFromName(plan::opKindName(op.op.kind));
                if (!kind)
                    qFatal("op kind without a span kind");
                wire::SpanRecord s = span(step, *kind, offset + ns(op.begin), offset + ns(op.end), op.op.microbatch);
                s.stage = std::int16_t(coord.pp);
                s.chunk = std::int16_t(op.op.chunk);
                out.emplace_back(s);
                last = std::max(last, s.endNs);
            }
            // After the pipeline phase: the data-parallel reduction and the optimizer, then the
            // step's memory sample; each stage's dp 0 / tp 0 rank reports its MoE layers' loads
            // and rank 0 the step metrics.
            out.emplace_back(span(step, wire::SpanKind::DataParallelReduce, last + 10, last + 5000, -1));
            out.emplace_back(span(step, wire::SpanKind::Optimizer, last + 5000, last + 9000, -1));
            wire::MemorySampleRecord memory;
            memory.step = step;
            memory.timeNs = last + 9000;
            memory.category = wire::MemoryCategory::Activations;
            memory.currentBytes = 1000 * step + rank;
            memory.peakBytes = 5000 * step;
            out.emplace_back(memory);
            if (coord.dp == 0 && coord.tp == 0)
                for (int layer = 0; layer < spec.model.layers; ++layer)
                    if (spec.model.isMoeLayer(layer) && layer % spec.parallel.pp == coord.pp)
                        out.emplace_back(expertLoad(step, layer, routedFor(step, layer), {0, 0, 1, 2}));
            if (rank == 0)
                out.emplace_back(metrics(step, offset, offset + 3 * stepLength, 3.0 - 0.1 * step));
        }
    }
    return run;
}

// Feeds records, collecting what becomes final after each one.
struct Feeder {
    LiveAggregator& aggregator;
    std::vector<StepAggregate> steps;
    void operator()(std::uint32_t rank, const wire::Record& record)
    {
        aggregator.add(rank, record);
        for (StepAggregate& s : aggregator.takeCompletedSteps())
            steps.push_back(std::move(s));
    }
};

}  // namespace

class TestAggregator : public QObject {
    Q_OBJECT

private slots:
    void handBuiltTwoStages();
    void matchesSimulator_data();
    void matchesSimulator();
    void shuffledArrival();
    void expertStatistics();
    void nearestRankPercentiles();
    void expertLoadDuplicatesAndErrors();
    void memoryCurrentAndPeak();
    void modelFlopsUtilisation();
    void flushPartialStep();
    void laterOptimizerFinalisesStep();
    void openStepsAreBounded();
    void badInput();
    void jsonKeys();
};

// Two stages, one rank each, times in ns. Stage 0: F [0,10] F [10,20], waits for the first
// gradient [20,50], B [50,70] B [70,90]; stage 1: waits [0,10], F [10,20] F [20,30],
// B [30,45] B [45,60], sends. Window [0,90]: stage 0 busy 60 -> 30/90 = 1/3, stage 1 busy 50
// -> 40/90 = 4/9, overall (30 + 40) / (2 x 90) = 7/18.
void TestAggregator::handBuiltTwoStages()
{
    const plan::JobSpec spec = layoutSpec(1, 2, 1, 1, "1f1b", 1);
    const plan::Plan plan = plan::makePlan(spec);
    LiveAggregator aggregator(spec, &plan);
    using K = wire::SpanKind;
    const std::vector<wire::SpanRecord> stage0 = {
        span(1, K::Forward, 0, 10, 0),
        span(1, K::SendActivation, 10, 10, 0),
        span(1, K::Forward, 10, 20, 1),
        span(1, K::SendActivation, 20, 20, 1),
        span(1, K::RecvGradient, 20, 50, 0),
        span(1, K::Idle, 20, 50, 0),
        span(1, K::Backward, 50, 70, 0),
        span(1, K::Backward, 70, 90, 1),
        span(1, K::Forward, 5, 15, 0),  // overlaps both forwards and arrives late: the union is unchanged
        span(1, K::DataParallelReduce, 90, 120, -1),
        span(1, K::Optimizer, 120, 130, -1)};
    const std::vector<wire::SpanRecord> stage1 = {
        span(1, K::RecvActivation, 0, 10, 0), span(1, K::Forward, 10, 20, 0),      span(1, K::Forward, 20, 30, 1),
        span(1, K::Backward, 30, 45, 0),      span(1, K::SendGradient, 45, 45, 0), span(1, K::Backward, 45, 60, 1),
        span(1, K::SendGradient, 60, 60, 1),  span(1, K::Optimizer, 100, 110, -1)};
    for (const auto& s : stage0)
        aggregator.add(0, s);
    for (const auto& s : stage1)
        aggregator.add(1, s);
    QVERIFY(aggregator.takeCompletedSteps().empty());  // no step metrics yet, no MoE loads
    aggregator.add(0, metrics(1, 0, 130));
    aggregator.add(0, expertLoad(1, 0, {1, 1, 1, 1}, {0, 0, 0, 0}));
    QVERIFY(aggregator.takeCompletedSteps().empty());  // layer 2's loads are missing
    aggregator.add(1, expertLoad(1, 2, {1, 1, 1, 1}, {0, 0, 0, 0}));
    const std::vector<StepAggregate> steps = aggregator.takeCompletedSteps();
    QCOMPARE(steps.size(), std::size_t(1));
    const StepAggregate& s = steps[0];
    QCOMPARE(s.step, 1);
    QVERIFY(!s.partial);
    QCOMPARE(s.pipelineBeginNs, std::int64_t(0));
    QCOMPARE(s.pipelineEndNs, std::int64_t(90));
    QCOMPARE(s.ranksReporting, 2);
    QCOMPARE(s.ranksFinished, 2);
    QCOMPARE(s.stages.size(), std::size_t(2));
    CHECK_NEAR(s.stages[0].measured, 1.0 / 3.0, 1e-15);
    CHECK_NEAR(s.stages[1].measured, 4.0 / 9.0, 1e-15);
    CHECK_NEAR(s.bubble, 7.0 / 18.0, 1e-15);
    CHECK_NEAR(s.plannedBubble, plan.simulation.overallBubbleRatio, 0);
    CHECK_NEAR(s.stages[1].planned, plan.simulation.bubbleRatio[1], 0);
    CHECK_NEAR(s.agentBubble, 0.25, 0);
    QCOMPARE(aggregator.counters().ignored, std::uint64_t(1));  // the idle span
}

void TestAggregator::matchesSimulator_data()
{
    QTest::addColumn<int>("dp");
    QTest::addColumn<int>("pp");
    QTest::addColumn<int>("tp");
    QTest::addColumn<QString>("schedule");
    QTest::addColumn<int>("virtualStages");
    QTest::newRow("1f1b p2 dp2 tp2") << 2 << 2 << 2 << "1f1b" << 1;
    QTest::newRow("1f1b p4 dp2") << 2 << 4 << 1 << "1f1b" << 1;
    QTest::newRow("interleaved p2 v2 dp2 tp2") << 2 << 2 << 2 << "interleaved" << 2;
    QTest::newRow("gpipe p2 dp2 tp2") << 2 << 2 << 2 << "gpipe" << 1;
    QTest::newRow("zb-h1 p2 dp2 tp2") << 2 << 2 << 2 << "zb-h1" << 1;
}

// The planner's simulated timeline, replayed as every rank's spans, measures exactly the bubble
// the planner predicted, per stage and overall.
void TestAggregator::matchesSimulator()
{
    QFETCH(int, dp);
    QFETCH(int, pp);
    QFETCH(int, tp);
    QFETCH(QString, schedule);
    QFETCH(int, virtualStages);
    const plan::JobSpec spec = layoutSpec(dp, pp, tp, dp, schedule.toStdString().c_str(), virtualStages);
    const plan::Plan plan = plan::makePlan(spec);
    QVERIFY2(plan.simulation.completed, plan.simulation.error.c_str());
    QVERIFY(plan.simulation.overallBubbleRatio > 0.01);  // a pipeline with a real bubble
    const SimulatedRun run = simulatedRun(spec, plan, 2);
    LiveAggregator aggregator(spec, &plan);
    Feeder feed{aggregator, {}};
    for (std::uint32_t rank = 0; rank < run.perRank.size(); ++rank)
        for (const wire::Record& record : run.perRank[rank])
            feed(rank, record);
    QCOMPARE(feed.steps.size(), std::size_t(2));
    for (const StepAggregate& s : feed.steps) {
        QVERIFY(!s.partial);
        QCOMPARE(s.ranksReporting, dp * pp * tp);
        CHECK_NEAR(s.bubble, plan.simulation.overallBubbleRatio, 1e-9);
        for (int stage = 0; stage < pp; ++stage) {
            CHECK_NEAR(s.stages[std::size_t(stage)].measured, plan.simulation.bubbleRatio[std::size_t(stage)], 1e-9);
            QCOMPARE(s.stages[std::size_t(stage)].ranks, dp * tp);
        }
        // The window is the simulated makespan: the optimizer and dp-reduce spans are outside it.
        QVERIFY(near(double(s.pipelineEndNs - s.pipelineBeginNs), plan.simulation.makespan * run.scale, 1e-9));
    }
    QCOMPARE(aggregator.counters().rejected, std::uint64_t(0));
}

// Ranks' streams interleaved at random (each rank's own order kept, as one ZeroMQ stream per rank
// does) give the same aggregates as rank after rank; every step comes out once, in order.
void TestAggregator::shuffledArrival()
{
    const plan::JobSpec spec = layoutSpec(2, 2, 2, 2, "interleaved", 2);
    const plan::Plan plan = plan::makePlan(spec);
    const SimulatedRun run = simulatedRun(spec, plan, 4);

    LiveAggregator ordered(spec, &plan);
    Feeder orderedFeed{ordered, {}};
    for (std::uint32_t rank = 0; rank < run.perRank.size(); ++rank)
        for (const wire::Record& record : run.perRank[rank])
            orderedFeed(rank, record);
    QCOMPARE(orderedFeed.steps.size(), std::size_t(4));

    for (unsigned seed : {1u, 2u, 3u}) {
        std::mt19937 random(seed);
        std::vector<std::size_t> next(run.perRank.size(), 0);
        std::vector<std::uint32_t> pending;
        for (std::uint32_t rank = 0; rank < run.perRank.size(); ++rank)
            pending.push_back(rank);
        LiveAggregator shuffled(spec, &plan);
        Feeder feed{shuffled, {}};
        std::size_t fed = 0;
        std::size_t stepsSeenBeforeEnd = 0;
        std::size_t total = 0;
        for (const auto& records : run.perRank)
            total += records.size();
        while (!pending.empty()) {
            const std::size_t pick = std::size_t(random() % pending.size());
            const std::uint32_t rank = pending[pick];
            feed(rank, run.perRank[rank][next[rank]++]);
            if (++fed == total / 2)
                stepsSeenBeforeEnd = feed.steps.size();
            if (next[rank] == run.perRank[rank].size())
                pending.erase(pending.begin() + std::ptrdiff_t(pick));
        }
        QVERIFY(shuffled.flush().empty());
        QCOMPARE(feed.steps.size(), std::size_t(4));
        QVERIFY(stepsSeenBeforeEnd >= 1);  // steps come out while the run goes on
        for (std::size_t i = 0; i < feed.steps.size(); ++i) {
            QCOMPARE(feed.steps[i].step, int(i) + 1);
            QCOMPARE(toJson(feed.steps[i]).dump(), toJson(orderedFeed.steps[i]).dump());
        }
        for (std::size_t rank = 0; rank < run.perRank.size(); ++rank)
            QCOMPARE(toJson(shuffled.memory()[rank]).dump(), toJson(ordered.memory()[rank]).dump());
    }
}

// Four MoE layers (0, 2, 4, 6) of 4 experts, worked by hand:
//   layer 0 routed 10 20 30 40, dropped 0 0 5 10: mean 25, imbalance 40/25 = 1.6, dropped 15/100
//   layer 2 routed 25 25 25 25, dropped none:     imbalance 1, hottest expert 0 (the lowest on a tie)
//   layer 4 routed 0 0 0 80, dropped 0 0 0 30:    mean 20, imbalance 4, dropped 30/80
//   layer 6 routed 10 10 20 20, dropped 0 0 2 2:  mean 15, imbalance 4/3, dropped 4/60
// Sorted imbalances 1, 4/3, 1.6, 4: p50 is the ceil(2)nd = 4/3, p95 the ceil(3.8)th = 4.
// Step dropped fraction (15 + 0 + 30 + 4) / (100 + 100 + 80 + 60) = 49/340.
void TestAggregator::expertStatistics()
{
    const plan::JobSpec spec = singleRankMoeSpec();
    LiveAggregator aggregator(spec, nullptr);
    aggregator.add(0, span(3, wire::SpanKind::Forward, 0, 100));
    aggregator.add(0, span(3, wire::SpanKind::Optimizer, 100, 110, -1));
    aggregator.add(0, metrics(3));
    aggregator.add(0, expertLoad(3, 6, {10, 10, 20, 20}, {0, 0, 2, 2}));
    aggregator.add(0, expertLoad(3, 0, {10, 20, 30, 40}, {0, 0, 5, 10}));
    aggregator.add(0, expertLoad(3, 4, {0, 0, 0, 80}, {0, 0, 0, 30}));
    QVERIFY(aggregator.takeCompletedSteps().empty());
    aggregator.add(0, expertLoad(3, 2, {25, 25, 25, 25}, {0, 0, 0, 0}));
    const std::vector<StepAggregate> steps = aggregator.takeCompletedSteps();
    QCOMPARE(steps.size(), std::size_t(1));
    const StepAggregate& s = steps[0];
    QCOMPARE(s.expertLayers.size(), std::size_t(4));
    const int layers[] = {0, 2, 4, 6};
    const double imbalance[] = {1.6, 1.0, 4.0, 4.0 / 3.0};
    const double dropped[] = {0.15, 0.0, 0.375, 4.0 / 60.0};
    const int hottest[] = {3, 0, 3, 2};
    const std::uint64_t routedTotal[] = {100, 100, 80, 60};
    for (std::size_t i = 0; i < 4; ++i) {
        const live::ExpertLayerStats& l = s.expertLayers[i];
        QCOMPARE(l.layer, layers[i]);
        CHECK_NEAR(l.imbalance, imbalance[i], 1e-15);
        CHECK_NEAR(l.droppedFraction, dropped[i], 1e-15);
        QCOMPARE(l.hottestExpert, hottest[i]);
        QCOMPARE(l.routedTotal, routedTotal[i]);
    }
    QCOMPARE(s.expertLayers[0].routed, (std::vector<std::uint32_t>{10, 20, 30, 40}));
    QCOMPARE(s.expertLayers[2].dropped, (std::vector<std::uint32_t>{0, 0, 0, 30}));
    CHECK_NEAR(s.imbalanceP50, 4.0 / 3.0, 1e-15);
    CHECK_NEAR(s.imbalanceP95, 4.0, 1e-15);
    CHECK_NEAR(s.droppedFraction, 49.0 / 340.0, 1e-15);
    QVERIFY(!s.partial);
    QVERIFY(!s.mfu);  // no plan given
    QVERIFY(!s.plannedBubble);
}

// 20 MoE layers of 2 experts; layer ordinal i routes 50 + i and 50 - i tokens, imbalance
// 1 + i/50. Nearest rank over 20 values: p50 is the 10th (i = 9, 1.18), p95 the 19th (i = 18, 1.36).
void TestAggregator::nearestRankPercentiles()
{
    const plan::JobSpec spec = singleRankMoeSpec(40, 2);
    LiveAggregator aggregator(spec, nullptr);
    std::vector<int> order(20);
    for (int i = 0; i < 20; ++i)
        order[std::size_t(i)] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(7));
    for (int i : order)
        QCOMPARE(aggregator.add(0, expertLoad(1, 2 * i, {std::uint32_t(50 + i), std::uint32_t(50 - i)}, {0, 0})),
                 AddOutcome::Accepted);
    const std::vector<StepAggregate> steps = aggregator.flush();
    QCOMPARE(steps.size(), std::size_t(1));
    QVERIFY(steps[0].partial);  // no spans, no step metrics
    CHECK_NEAR(steps[0].imbalanceP50, 1.18, 1e-15);
    CHECK_NEAR(steps[0].imbalanceP95, 1.36, 1e-15);
    CHECK_NEAR(steps[0].droppedFraction, 0.0, 0);
    QCOMPARE(steps[0].expertLayers.size(), std::size_t(20));
    QCOMPARE(steps[0].expertLayers[19].layer, 38);
}

void TestAggregator::expertLoadDuplicatesAndErrors()
{
    const plan::JobSpec spec = layoutSpec(2, 2, 2, 2, "1f1b", 1);
    LiveAggregator aggregator(spec, nullptr);
    QCOMPARE(aggregator.add(0, expertLoad(1, 0, {10, 20, 30, 40}, {0, 0, 5, 10})), AddOutcome::Accepted);
    // The same layer from another rank (identical or not) does not count twice.
    QCOMPARE(aggregator.add(2, expertLoad(1, 0, {10, 20, 30, 40}, {0, 0, 5, 10})), AddOutcome::Duplicate);
    QCOMPARE(aggregator.add(4, expertLoad(1, 0, {99, 99, 99, 99}, {0, 0, 0, 0})), AddOutcome::Duplicate);
    QCOMPARE(aggregator.add(4, expertLoad(1, 1, {1, 1, 1, 1}, {0, 0, 0, 0})), AddOutcome::Rejected);
    QVERIFY2(aggregator.rejection().find("not an MoE layer") != std::string::npos, aggregator.rejection().c_str());
    QCOMPARE(aggregator.add(4, expertLoad(1, 2, {1, 1, 1}, {0, 0, 0})), AddOutcome::Rejected);
    QVERIFY2(aggregator.rejection().find("4 experts") != std::string::npos, aggregator.rejection().c_str());
    QCOMPARE(aggregator.add(4, expertLoad(1, 2, {1, 1, 1, 1}, {0, 0, 0})), AddOutcome::Rejected);
    QCOMPARE(aggregator.add(4, expertLoad(1, 2, {1, 1, 1, 1}, {0, 2, 0, 0})), AddOutcome::Rejected);
    QVERIFY2(aggregator.rejection().find("expert 1 dropped 2 tokens but only 1") != std::string::npos,
             aggregator.rejection().c_str());
    QCOMPARE(aggregator.add(4, expertLoad(1, 4, {1, 1, 1, 1}, {0, 0, 0, 0})), AddOutcome::Rejected);
    QVERIFY2(aggregator.rejection().find("layers 0..3") != std::string::npos, aggregator.rejection().c_str());
    QCOMPARE(aggregator.counters().duplicates, std::uint64_t(2));
    QCOMPARE(aggregator.counters().rejected, std::uint64_t(5));
    const std::vector<StepAggregate> steps = aggregator.flush();
    QCOMPARE(steps.size(), std::size_t(1));
    QCOMPARE(steps[0].expertLayers.size(), std::size_t(1));
    QCOMPARE(steps[0].expertLayers[0].routed, (std::vector<std::uint32_t>{10, 20, 30, 40}));
    CHECK_NEAR(steps[0].droppedFraction, 0.15, 1e-15);
}

void TestAggregator::memoryCurrentAndPeak()
{
    const plan::JobSpec spec = layoutSpec(2, 2, 2, 2, "1f1b", 1);
    LiveAggregator aggregator(spec, nullptr);
    const auto sample = [](int step, std::int64_t time, wire::MemoryCategory category, std::int64_t current,
                           std::int64_t peak) {
        wire::MemorySampleRecord m;
        m.step = step;
        m.timeNs = time;
        m.category = category;
        m.currentBytes = current;
        m.peakBytes = peak;
        return m;
    };
    using C = wire::MemoryCategory;
    // Out of time order: the newest by time (t = 30) is current, the largest peak (300) stays.
    aggregator.add(3, sample(1, 10, C::Activations, 100, 150));
    aggregator.add(3, sample(3, 30, C::Activations, 80, 120));
    aggregator.add(3, sample(2, 20, C::Activations, 200, 300));
    aggregator.add(3, sample(1, 10, C::Params, 1000, 1000));
    aggregator.add(5, sample(1, 5, C::Grads, 400, 0));  // a peak below current: current is the peak
    QCOMPARE(aggregator.add(5, sample(1, 6, C(9), 1, 1)), AddOutcome::Rejected);
    QCOMPARE(aggregator.add(5, sample(1, 6, C::Grads, -1, 1)), AddOutcome::Rejected);

    const std::vector<live::RankMemory> changed = aggregator.takeChangedMemory();
    QCOMPARE(changed.size(), std::size_t(2));
    QCOMPARE(changed[0].rank, 3u);
    QCOMPARE(changed[1].rank, 5u);
    QVERIFY(aggregator.takeChangedMemory().empty());
    const live::RankMemory& r3 = aggregator.memory()[3];
    QCOMPARE(r3.current[std::size_t(C::Activations)], std::int64_t(80));
    QCOMPARE(r3.peak[std::size_t(C::Activations)], std::int64_t(300));
    QCOMPARE(r3.current[std::size_t(C::Params)], std::int64_t(1000));
    QCOMPARE(r3.currentTotal(), std::int64_t(1080));
    QCOMPARE(r3.step, 3);
    QCOMPARE(r3.timeNs, std::int64_t(30));
    QCOMPARE(r3.samples, 4);
    QCOMPARE(r3.stage, plan::Mesh(spec.parallel).coordOf(3).pp);
    QCOMPARE(aggregator.memory()[5].peak[std::size_t(C::Grads)], std::int64_t(400));

    const nlohmann::json json = toJson(r3);
    QCOMPARE(json.at("type").get<std::string>(), std::string("memory"));
    QCOMPARE(json.at("current").at("activations").get<std::int64_t>(), std::int64_t(80));
    QCOMPARE(json.at("peak").at("activations").get<std::int64_t>(), std::int64_t(300));
    QCOMPARE(json.at("current").at("params").get<std::int64_t>(), std::int64_t(1000));
    QCOMPARE(json.at("current_total").get<std::int64_t>(), std::int64_t(1080));

    aggregator.add(3, sample(4, 40, C::Activations, 50, 60));
    QCOMPARE(aggregator.takeChangedMemory().size(), std::size_t(1));
}

// The demo's model FLOPs by hand (Megatron-LM's formula, no recomputation):
// 12 B s h^2 [L (1 + kv/heads + s/h) + (2 x 512 + 2 x 256 x 2) / h x 1.5 + V / 2h]
// = 12 x 16 x 64 x 128^2 x (4 x 2 + 24 + 2) = 6 845 104 128. A 0.5 s step on 8 cpu devices of
// 96 GFLOP/s: MFU = 6 845 104 128 / (0.5 x 8 x 96e9) = 0.017825792.
void TestAggregator::modelFlopsUtilisation()
{
    const plan::JobSpec spec = specFrom(demoDocument());
    QCOMPARE(spec.cluster.device.peakFlops, 96e9);
    const plan::Plan plan = plan::makePlan(spec);
    QCOMPARE(plan.flopsPerStep, 6845104128.0);
    LiveAggregator aggregator(spec, &plan);
    QCOMPARE(aggregator.modelFlopsPerStep(), 6845104128.0);
    QCOMPARE(aggregator.devicePeakFlops(), 96e9);
    aggregator.add(0, metrics(1, 1'000'000'000, 1'500'000'000));
    const std::vector<StepAggregate> steps = aggregator.flush();
    QCOMPARE(steps.size(), std::size_t(1));
    CHECK_NEAR(steps[0].stepSeconds, 0.5, 1e-15);
    CHECK_NEAR(steps[0].mfu, 0.017825792, 1e-12);
    CHECK_NEAR(steps[0].loss, 2.5, 0);
    CHECK_NEAR(steps[0].auxLoss, 0.125, 0);
    CHECK_NEAR(steps[0].tokensPerSecond, 1000, 0);
    QVERIFY(!steps[0].bubble);  // no spans arrived
}

// Step 1 completes; of step 2 only half of the ranks report before the run ends: flush emits it
// as partial with what is known, and later records of either step are late.
void TestAggregator::flushPartialStep()
{
    const plan::JobSpec spec = layoutSpec(2, 2, 2, 2, "1f1b", 1);
    const plan::Plan plan = plan::makePlan(spec);
    const SimulatedRun run = simulatedRun(spec, plan, 2);
    LiveAggregator aggregator(spec, &plan);
    Feeder feed{aggregator, {}};
    std::vector<std::pair<std::uint32_t, wire::SpanRecord>> withheld;
    for (std::uint32_t rank = 0; rank < run.perRank.size(); ++rank)
        for (const wire::Record& record : run.perRank[rank]) {
            const auto* s = std::get_if<wire::SpanRecord>(&record);
            if (s != nullptr && s->step == 2 && rank % 2 == 1 && s->kind != wire::SpanKind::DataParallelReduce)
                withheld.emplace_back(rank, *s);
            else
                feed(rank, record);
        }
    QCOMPARE(feed.steps.size(), std::size_t(1));
    QCOMPARE(feed.steps[0].step, 1);
    QVERIFY(!feed.steps[0].partial);
    const std::vector<StepAggregate> flushed = aggregator.flush();
    QCOMPARE(flushed.size(), std::size_t(1));
    const StepAggregate& s = flushed[0];
    QCOMPARE(s.step, 2);
    QVERIFY(s.partial);
    QCOMPARE(s.ranksReporting, 4);
    QCOMPARE(s.ranksFinished, 4);
    CHECK_NEAR(s.loss, 3.0 - 0.2, 1e-15);  // rank 0 sent the metrics
    // The even ranks cover both stages, so the bubble is still the simulated one.
    CHECK_NEAR(s.bubble, plan.simulation.overallBubbleRatio, 1e-9);
    QCOMPARE(s.stages[0].ranks, 2);
    QCOMPARE(s.stages[1].ranks, 2);
    QVERIFY(aggregator.flush().empty());
    QVERIFY(!withheld.empty());
    for (const auto& [rank, record] : withheld)
        QCOMPARE(aggregator.add(rank, record), AddOutcome::Late);
    QCOMPARE(aggregator.add(0, span(1, wire::SpanKind::Forward, 0, 1)), AddOutcome::Late);
    QVERIFY(aggregator.takeCompletedSteps().empty());
}

// Without step metrics, a step is final once every rank has sent a later step's optimizer span.
void TestAggregator::laterOptimizerFinalisesStep()
{
    const plan::JobSpec spec = layoutSpec(1, 2, 1, 1, "1f1b", 1);
    LiveAggregator aggregator(spec, nullptr);
    for (std::uint32_t rank = 0; rank < 2; ++rank) {
        aggregator.add(rank, span(1, wire::SpanKind::Forward, 0, 10));
        aggregator.add(rank, span(1, wire::SpanKind::Optimizer, 20, 30, -1));
    }
    QVERIFY(aggregator.takeCompletedSteps().empty());  // no metrics, no expert loads
    aggregator.add(0, span(2, wire::SpanKind::Optimizer, 100, 110, -1));
    QVERIFY(aggregator.takeCompletedSteps().empty());  // rank 1 has not finished step 2
    wire::Batch batch;                                 // a whole batch of rank 1 at once
    batch.rank = 1;
    batch.records = {span(2, wire::SpanKind::Forward, 50, 60), span(2, wire::SpanKind::Optimizer, 100, 110, -1)};
    aggregator.add(batch);
    const std::vector<StepAggregate> steps = aggregator.takeCompletedSteps();
    QCOMPARE(steps.size(), std::size_t(1));
    QCOMPARE(steps[0].step, 1);
    QVERIFY(steps[0].partial);
    QVERIFY(!steps[0].loss);
    CHECK_NEAR(steps[0].bubble, 0.0, 0);  // both ranks computed through the whole window [0, 10]
    QCOMPARE(aggregator.flush().size(), std::size_t(1));
}

// With at most 2 open steps, a record of step 3 pushes step 1 out as it is; step 1 is then late.
void TestAggregator::openStepsAreBounded()
{
    const plan::JobSpec spec = layoutSpec(1, 2, 1, 1, "1f1b", 1);
    LiveAggregator aggregator(spec, nullptr, live::AggregatorOptions{2});
    aggregator.add(0, span(1, wire::SpanKind::Forward, 0, 10));
    aggregator.add(0, span(2, wire::SpanKind::Forward, 100, 110));
    QVERIFY(aggregator.takeCompletedSteps().empty());
    aggregator.add(0, span(3, wire::SpanKind::Forward, 200, 210));
    std::vector<StepAggregate> steps = aggregator.takeCompletedSteps();
    QCOMPARE(steps.size(), std::size_t(1));
    QCOMPARE(steps[0].step, 1);
    QVERIFY(steps[0].partial);
    QCOMPARE(aggregator.counters().forcedSteps, std::uint64_t(1));
    QCOMPARE(aggregator.add(1, span(1, wire::SpanKind::Forward, 0, 10)), AddOutcome::Late);
    // A step number far ahead moves the window past everything open, without walking every step.
    aggregator.add(0, span(2'000'000'000, wire::SpanKind::Forward, 0, 1));
    steps = aggregator.takeCompletedSteps();
    QCOMPARE(steps.size(), std::size_t(2));
    QCOMPARE(steps[0].step, 2);
    QCOMPARE(steps[1].step, 3);
    QCOMPARE(aggregator.flush().size(), std::size_t(1));
}

void TestAggregator::badInput()
{
    const plan::JobSpec spec = layoutSpec(2, 2, 2, 2, "1f1b", 1);
    LiveAggregator aggregator(spec, nullptr);
    QCOMPARE(aggregator.add(99, span(1, wire::SpanKind::Forward, 0, 10)), AddOutcome::Rejected);
    QVERIFY2(aggregator.rejection().find("rank 99") != std::string::npos &&
                 aggregator.rejection().find("0..7") != std::string::npos,
             aggregator.rejection().c_str());
    QCOMPARE(aggregator.add(0, span(-1, wire::SpanKind::Forward, 0, 10)), AddOutcome::Rejected);
    QCOMPARE(aggregator.add(0, span(1, wire::SpanKind::Forward, 10, 0)), AddOutcome::Rejected);
    QVERIFY2(aggregator.rejection().find("before it begins") != std::string::npos, aggregator.rejection().c_str());
    QCOMPARE(aggregator.add(0, span(1, wire::SpanKind(42), 0, 10)), AddOutcome::Rejected);
    QCOMPARE(aggregator.add(0, metrics(1, 10, 5)), AddOutcome::Rejected);
    QCOMPARE(aggregator.add(0, wire::HeartbeatRecord{}), AddOutcome::Ignored);
    QCOMPARE(aggregator.add(0, wire::LogRecord{}), AddOutcome::Ignored);
    QCOMPARE(aggregator.add(0, wire::NodeSampleRecord{}), AddOutcome::Ignored);
    QCOMPARE(aggregator.add(0, metrics(1)), AddOutcome::Accepted);
    QCOMPARE(aggregator.add(1, metrics(1, 0, 0, 9.0)), AddOutcome::Duplicate);
    // Too many compute spans on one rank in one step: 8 x 4 micro-batches + 64 are allowed.
    for (int i = 0; i < 96; ++i)
        QCOMPARE(aggregator.add(2, span(1, wire::SpanKind::Forward, i, i + 1)), AddOutcome::Accepted);
    QCOMPARE(aggregator.add(2, span(1, wire::SpanKind::Forward, 96, 97)), AddOutcome::Rejected);
    QCOMPARE(aggregator.counters().rejected, std::uint64_t(6));
    const std::vector<StepAggregate> steps = aggregator.flush();
    QCOMPARE(steps.size(), std::size_t(1));
    CHECK_NEAR(steps[0].loss, 2.5, 0);  // the first step metrics count

    plan::JobSpec broken = spec;
    broken.parallel.dp = 3;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, LiveAggregator(broken, nullptr));
    const plan::Plan otherPlan = plan::makePlan(layoutSpec(1, 2, 1, 1, "1f1b", 1));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, LiveAggregator(spec, &otherPlan));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, LiveAggregator(spec, nullptr, live::AggregatorOptions{0}));
    try {
        LiveAggregator wrong(spec, &otherPlan);
        QFAIL("a plan of another layout was accepted");
    } catch (const std::invalid_argument& e) {
        QVERIFY2(std::string(e.what()).find("2 ranks, pp 2") != std::string::npos, e.what());
    }
}

void TestAggregator::jsonKeys()
{
    const plan::JobSpec spec = specFrom(demoDocument());
    const plan::Plan plan = plan::makePlan(spec);
    LiveAggregator aggregator(spec, &plan);
    aggregator.add(0, span(1, wire::SpanKind::Forward, 0, 10));
    aggregator.add(0, expertLoad(1, 0, {1, 2, 3, 4}, {0, 0, 0, 1}));
    const std::vector<StepAggregate> steps = aggregator.flush();
    QCOMPARE(steps.size(), std::size_t(1));
    const nlohmann::json json = toJson(steps[0]);
    std::vector<std::string> keys;
    for (const auto& item : json.items())
        keys.push_back(item.key());
    std::sort(keys.begin(), keys.end());
    const std::vector<std::string> expected = {"agent_bubble",
                                               "aux_loss",
                                               "bubble",
                                               "comm_seconds",
                                               "dropped_fraction",
                                               "expert_layers",
                                               "imbalance_p50",
                                               "imbalance_p95",
                                               "loss",
                                               "mfu",
                                               "partial",
                                               "pipeline_begin_ns",
                                               "pipeline_end_ns",
                                               "planned_bubble",
                                               "planned_step_seconds",
                                               "planned_tokens_per_s",
                                               "ranks_finished",
                                               "ranks_reporting",
                                               "stages",
                                               "step",
                                               "step_seconds",
                                               "tokens_per_s",
                                               "type"};
    QCOMPARE(keys, expected);
    QVERIFY(json.at("loss").is_null());  // no step metrics arrived
    QVERIFY(json.at("mfu").is_null());
    QCOMPARE(json.at("bubble").get<double>(), 0.0);
    QCOMPARE(json.at("partial").get<bool>(), true);
    QCOMPARE(json.at("planned_bubble").get<double>(), plan.simulation.overallBubbleRatio);
    QCOMPARE(json.at("stages").size(), std::size_t(2));
    QVERIFY(json.at("stages")[1].at("bubble").is_null());  // stage 1 sent nothing
    QCOMPARE(json.at("stages")[1].at("planned_bubble").get<double>(), plan.simulation.bubbleRatio[1]);
    const nlohmann::json& layer = json.at("expert_layers")[0];
    QCOMPARE(layer.at("layer").get<int>(), 0);
    QCOMPARE(layer.at("routed"), nlohmann::json({1, 2, 3, 4}));
    QCOMPARE(layer.at("dropped"), nlohmann::json({0, 0, 0, 1}));
    QCOMPARE(layer.at("hottest_expert").get<int>(), 3);
    QCOMPARE(layer.at("imbalance").get<double>(), 1.6);
    QCOMPARE(layer.at("dropped_fraction").get<double>(), 0.1);
}

QTEST_APPLESS_MAIN(TestAggregator)
#include "tst_aggregator.moc"
