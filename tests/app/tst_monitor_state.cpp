// RunState and the live feed's JSON: round trips against live::toJson, feeding order, duplicates,
// the latest memory, job states, and a hand-made session aggregated in-process.
#include "live/feed_json.h"
#include "monitor/run_state.h"

#include "common/step_aggregates.h"

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

using namespace meshbench;
using namespace step_aggregates;
using app::RunPhase;
using app::RunState;

namespace {

// Two stages (dp 1 x pp 2 x tp 1), 4 layers with MoE layers 0 and 2 of 4 experts, cpu device.
nlohmann::json twoStageDocument()
{
    return nlohmann::json::parse(R"({
      "name": "monitor state test",
      "model": { "layers": 4, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn_hidden": 512, "vocab": 512,
                 "seq_len": 64, "norm": "rmsnorm", "activation": "swiglu", "tied_embeddings": true,
                 "moe": { "experts": 4, "top_k": 2, "moe_ffn_hidden": 256, "every_n_layers": 2,
                          "capacity_factor": 1.25, "aux_loss_coef": 0.01 } },
      "parallel": { "dp": 1, "pp": 2, "tp": 1, "ep": 1, "recompute": "none", "schedule": "1f1b",
                    "microbatches": 2, "micro_batch_size": 2 },
      "cluster": { "nodes": 1, "devices_per_node": 2, "device": "cpu" },
      "train": { "steps": 2 },
      "backend": "cpu"
    })");
}

plan::JobSpec twoStageSpec()
{
    const plan::LoadResult loaded = plan::loadJobSpec(twoStageDocument());
    if (!loaded.valid())
        qFatal("test spec is invalid: %s", loaded.errors.front().message.c_str());
    return *loaded.spec;
}

wire::SpanRecord span(int step, wire::SpanKind kind, std::int64_t begin, std::int64_t end)
{
    wire::SpanRecord s;
    s.step = step;
    s.stage = 0;
    s.microbatch = kind == wire::SpanKind::Optimizer ? -1 : 0;
    s.kind = kind;
    s.beginNs = begin;
    s.endNs = end;
    return s;
}

wire::MemorySampleRecord memorySample(int step, std::int64_t time, wire::MemoryCategory category, std::int64_t current,
                                      std::int64_t peak)
{
    return {step, time, category, current, peak};
}

}  // namespace

class TestMonitorState : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void stepTimeAgainstThePlan()
    {
        live::StepAggregate s = fullStep(7);
        s.stepSeconds = 0.125;
        s.plannedStepSeconds = 0.119;
        s.tokensPerSecond = 8192.4;
        s.plannedTokensPerSecond = 8627;
        QCOMPARE(app::stepTimeText(s), QString("125 ms (plan 119 ms) · 8192 tokens/s (plan 8627)"));
        s.plannedStepSeconds.reset();
        s.plannedTokensPerSecond.reset();
        QCOMPARE(app::stepTimeText(s), QString("125 ms · 8192 tokens/s"));
        QCOMPARE(app::stepTimeText(emptyStep(8)), QString());
    }

    void badPayloadsAreDropped_data() { malformedStepRows(); }
    void badPayloadsAreDropped()
    {
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, named);
        const nlohmann::json payload = damagedStep(key, value);
        // The feed's parser names the key (tst_feed_json); the run state counts and drops it.
        Q_UNUSED(named);
        RunState state;
        QSignalSpy rejected(&state, &RunState::messageRejected);
        state.onStep(QString(), payload);
        QCOMPARE(rejected.count(), 1);
        QCOMPARE(state.rejectedMessages(), 1u);
        QVERIFY(state.steps().empty());
    }

    void feedKeepsStepOrderAndIgnoresDuplicates()
    {
        RunState state;
        state.setSource(QStringLiteral("job-1"));
        QSignalSpy changed(&state, &RunState::stepsChanged);
        const auto feed = [&](const QString& source, int step) { state.onStep(source, live::toJson(fullStep(step))); };
        feed(QStringLiteral("job-1"), 0);
        feed(QStringLiteral("job-1"), 1);
        const int generation = state.generation();
        feed(QStringLiteral("job-1"), 3);
        QCOMPARE(state.generation(), generation);  // appended at the end
        feed(QStringLiteral("job-1"), 2);          // late: inserted in order
        QVERIFY(state.generation() > generation);
        feed(QStringLiteral("job-1"), 1);  // duplicate
        feed(QStringLiteral("job-2"), 4);  // another source
        QCOMPARE(changed.count(), 4);
        QCOMPARE(state.steps().size(), 4u);
        for (int i = 0; i < 4; ++i)
            QCOMPARE(state.steps()[std::size_t(i)].step, i);
        QCOMPARE(state.rejectedMessages(), 0u);
    }

    void latestMemoryWins()
    {
        RunState state;
        state.setSpec(twoStageSpec());
        QSignalSpy changed(&state, &RunState::memoryChanged);
        state.onMemory(QString(), live::toJson(memoryOf(1, 100, 1000, 50)));
        state.onMemory(QString(), live::toJson(memoryOf(1, 200, 1000, 70)));
        state.onMemory(QString(), live::toJson(memoryOf(1, 150, 1000, 60)));  // older: ignored
        state.onMemory(QString(), live::toJson(memoryOf(1, 200, 1000, 90)));  // same instant: replaces
        state.onMemory(QString(), live::toJson(memoryOf(0, 120, 500, 0)));
        state.onMemory(QString(), live::toJson(memoryOf(5, 120, 500, 0)));  // no rank 5 in 2 ranks
        QCOMPARE(changed.count(), 4);
        QCOMPARE(state.rejectedMessages(), 1u);
        QCOMPARE(state.memory().size(), 2u);
        const app::RankMemoryTrack& rank1 = state.memory().at(1);
        QCOMPARE(rank1.latest.timeNs, 200);
        QCOMPARE(rank1.latest.currentTotal(), 1090);
        QCOMPARE(rank1.history.size(), 2u);
        QCOMPARE(rank1.history[0], (app::MemoryPoint{100, 1, 1050}));
        QCOMPARE(rank1.history[1], (app::MemoryPoint{200, 1, 1090}));
        QCOMPARE(state.memory().at(0).latest.currentTotal(), 500);
    }

    void jobStatus()
    {
        RunState state;
        QSignalSpy changed(&state, &RunState::stateChanged);
        state.onJob(QString(), nlohmann::json{{"type", "job"}, {"state", "running"}, {"step", 3}});
        QCOMPARE(state.phase(), RunPhase::Running);
        QCOMPARE(state.currentStep(), 3);
        state.onJob(
            QString(),
            nlohmann::json{{"state", "failed"}, {"cause", "rank 2 exited with status 1"}, {"step", 4}, {"lost", 17}});
        QCOMPARE(state.phase(), RunPhase::Failed);
        QCOMPARE(state.cause(), QStringLiteral("rank 2 exited with status 1"));
        QCOMPARE(state.lostRecords(), 17u);
        QCOMPARE(app::runPhaseName(state.phase()), QStringLiteral("failed"));
        state.onJob(QString(), nlohmann::json{{"state", "exploded"}});
        QCOMPARE(state.phase(), RunPhase::Failed);  // unknown state: refused, kept
        QCOMPARE(state.rejectedMessages(), 1u);
        QCOMPARE(changed.count(), 2);
    }

    void seekDropsLaterSteps()
    {
        RunState state;
        for (int step = 0; step < 6; ++step)
            state.addStep(fullStep(step));
        state.updateMemory(memoryOf(0, 10, 1, 1));
        QSignalSpy steps(&state, &RunState::stepsChanged);
        state.applyJobStatus({{"state", "seeking"}, {"step", 3}});
        QCOMPARE(state.phase(), RunPhase::Seeking);
        QCOMPARE(state.steps().size(), 3u);
        QCOMPARE(state.steps().back().step, 2);
        QVERIFY(state.memory().empty());
        QCOMPARE(steps.count(), 1);
        state.clear();
        QVERIFY(state.steps().empty());
        QCOMPARE(state.phase(), RunPhase::Idle);
    }

    void loadSessionComputesTheAggregates()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string path = dir.filePath(QStringLiteral("run.meshbench")).toStdString();
        const plan::JobSpec spec = twoStageSpec();
        const plan::Plan plan = plan::makePlan(spec);
        {
            store::SessionHeader header;
            header.name = "monitor state test";
            header.jobSpec = twoStageDocument().dump(2);
            header.ranks = {store::RankInfo{0, 0, 0, 0, 0, 0, 0, "", 0}, store::RankInfo{1, 0, 1, 0, 0, 0, 1, "", 0}};
            store::SessionWriter writer(path, header);
            using K = wire::SpanKind;
            using C = wire::MemoryCategory;
            const std::vector<std::vector<std::uint32_t>> routed0 = {{10, 20, 30, 40}, {5, 5, 5, 45}};
            const std::vector<std::vector<std::uint32_t>> dropped0 = {{0, 0, 0, 8}, {0, 0, 0, 20}};
            const std::vector<std::vector<std::uint32_t>> routed2 = {{25, 25, 25, 25}, {12, 4, 4, 4}};
            for (int step = 0; step < 2; ++step) {
                const std::int64_t t = 1000 * step;
                // Stage 0 (rank 0): F F ... B B; busy 400 of the window [0, 700].
                wire::Batch r0{0, 0, {}};
                r0.records = {
                    span(step, K::Forward, t + 0, t + 100),
                    span(step, K::Forward, t + 100, t + 200),
                    span(step, K::Backward, t + 500, t + 600),
                    span(step, K::Backward, t + 600, t + 700),
                    span(step, K::Optimizer, t + 800, t + 850),
                    wire::ExpertLoadRecord{step, 0, routed0[std::size_t(step)], dropped0[std::size_t(step)]},
                    wire::StepMetricsRecord{step, t, t + 900, 3.0 - 0.5 * step, 0.01, 1.0, 1e-3, 1000.0, 0.4, 1024}};
                if (step == 0)
                    r0.records.insert(r0.records.begin(), memorySample(0, 10, C::Params, 1000, 1000));
                r0.records.insert(r0.records.begin() + 4,
                                  memorySample(step, t + 120, C::Activations, step == 0 ? 500 : 0, 800 + 100 * step));
                writer.append(r0);
                // Stage 1 (rank 1): F then B; busy 350 of 700.
                wire::Batch r1{1, 0, {}};
                r1.records = {span(step, K::Forward, t + 100, t + 250), span(step, K::Backward, t + 250, t + 450),
                              span(step, K::Optimizer, t + 800, t + 850),
                              wire::ExpertLoadRecord{step, 2, routed2[std::size_t(step)], {0, 0, 0, 0}}};
                if (step == 0)
                    r1.records.insert(r1.records.begin(), memorySample(0, 15, C::Params, 2000, 2000));
                writer.append(r1);
            }
            writer.setTraffic({0, 20, 3, 2});
            writer.setTraffic({1, 10, 1, 0});
            writer.setOutcome({store::Outcome::Completed, "", -1, 5000});
            writer.flush();
        }
        store::SessionReader reader(path);
        RunState state;
        QSignalSpy steps(&state, &RunState::stepsChanged);
        QString error;
        QVERIFY2(state.loadSession(reader, &error), qPrintable(error));
        QCOMPARE(steps.count(), 1);
        QCOMPARE(state.phase(), RunPhase::Completed);
        QCOMPARE(state.lostRecords(), 6u);
        QVERIFY(state.plan());
        QCOMPARE(state.stageCount(), 2);
        QCOMPARE(state.steps().size(), 2u);

        for (int step = 0; step < 2; ++step) {
            const live::StepAggregate& s = state.steps()[std::size_t(step)];
            QCOMPARE(s.step, step);
            QVERIFY(!s.partial);
            QCOMPARE(s.pipelineBeginNs, 1000 * step);
            QCOMPARE(s.pipelineEndNs, 1000 * step + 700);
            QCOMPARE(s.stages.size(), 2u);
            QCOMPARE(*s.stages[0].measured, 300.0 / 700.0);
            QCOMPARE(*s.stages[1].measured, 350.0 / 700.0);
            QCOMPARE(*s.bubble, 650.0 / 1400.0);
            QCOMPARE(*s.plannedBubble, plan.simulation.overallBubbleRatio);
            QCOMPARE(*s.agentBubble, 0.4);
            QCOMPARE(*s.loss, 3.0 - 0.5 * step);
            QCOMPARE(*s.stepSeconds, 900e-9);
            QCOMPARE(*s.mfu, plan.flopsPerStep / (900e-9 * 2 * spec.cluster.device.peakFlops));
            QCOMPARE(s.expertLayers.size(), 2u);
        }
        // Step 0: layer 0 max 40 / mean 25, layer 2 even; p50 and p95 by nearest rank of {1.0, 1.6}.
        const live::StepAggregate& s0 = state.steps()[0];
        QCOMPARE(*s0.expertLayers[0].imbalance, 1.6);
        QCOMPARE(s0.expertLayers[0].hottestExpert, 3);
        QCOMPARE(*s0.expertLayers[1].imbalance, 1.0);
        QCOMPARE(*s0.imbalanceP50, 1.0);
        QCOMPARE(*s0.imbalanceP95, 1.6);
        QCOMPARE(*s0.droppedFraction, 8.0 / 200.0);
        // Step 1: layer 0 max 45 / mean 15 = 3, layer 2 max 12 / mean 6 = 2.
        const live::StepAggregate& s1 = state.steps()[1];
        QCOMPARE(*s1.expertLayers[0].imbalance, 3.0);
        QCOMPARE(*s1.expertLayers[1].imbalance, 2.0);
        QCOMPARE(*s1.imbalanceP50, 2.0);
        QCOMPARE(*s1.imbalanceP95, 3.0);
        QCOMPARE(*s1.droppedFraction, 20.0 / 84.0);

        // Memory: rank 0 params 1000, activations 500 then 0; peaks are the largest ever.
        QCOMPARE(state.memory().size(), 2u);
        const app::RankMemoryTrack& rank0 = state.memory().at(0);
        QCOMPARE(rank0.latest.currentTotal(), 1000);
        QCOMPARE(rank0.latest.peak[std::size_t(wire::MemoryCategory::Activations)], 900);
        QCOMPARE(rank0.history.size(), 3u);
        QCOMPARE(rank0.history[0], (app::MemoryPoint{10, 0, 1000}));
        QCOMPARE(rank0.history[1], (app::MemoryPoint{120, 0, 1500}));
        QCOMPARE(rank0.history[2], (app::MemoryPoint{1120, 1, 1000}));
        QCOMPARE(state.memory().at(1).latest.currentTotal(), 2000);
    }

    void loadSessionRefusesWhatItCannotAggregate_data()
    {
        QTest::addColumn<QString>("jobSpec");
        QTest::addColumn<int>("ranks");
        QTest::addColumn<QString>("named");
        QTest::newRow("spec that no longer validates") << R"({"model": {"layers": 0}})" << 2 << "validation";
    }
    void loadSessionRefusesWhatItCannotAggregate()
    {
        QFETCH(QString, jobSpec);
        QFETCH(int, ranks);
        QFETCH(QString, named);
        QTemporaryDir dir;
        const std::string path = dir.filePath(QStringLiteral("bad.meshbench")).toStdString();
        {
            store::SessionHeader header;
            header.jobSpec = jobSpec.toStdString();
            for (int r = 0; r < ranks; ++r)
                header.ranks.push_back(store::RankInfo{r, 0, r, 0, 0, 0, r, "", 0});
            store::SessionWriter writer(path, header);
        }
        store::SessionReader reader(path);
        RunState state;
        state.addStep(fullStep(5));
        QSignalSpy steps(&state, &RunState::stepsChanged);
        QString error;
        QVERIFY(!state.loadSession(reader, &error));
        QVERIFY2(error.contains(named), qPrintable(error));
        QCOMPARE(steps.count(), 0);  // left as it was
        QCOMPARE(state.steps().size(), 1u);
    }

    void loadSessionOfAOneDeviceRun()
    {
        // One rank ran the two-stage job (meshbench-engine run --one-device): it is aggregated
        // under the layout that ran, one stage on one device, as the engine's replay does.
        QTemporaryDir dir;
        const std::string path = dir.filePath(QStringLiteral("one-device.meshbench")).toStdString();
        {
            store::SessionHeader header;
            header.jobSpec = twoStageDocument().dump();
            header.ranks.push_back(store::RankInfo{0, 0, 0, 0, 0, 0, 0, "", 0});
            store::SessionWriter writer(path, header);
        }
        store::SessionReader reader(path);
        RunState state;
        QString error;
        QVERIFY2(state.loadSession(reader, &error), qPrintable(error));
        QCOMPARE(state.stageCount(), 1);
        QVERIFY(state.plan() != nullptr);
        QCOMPARE(state.plan()->worldSize, 1);
    }
};

QTEST_GUILESS_MAIN(TestMonitorState)
#include "tst_monitor_state.moc"
