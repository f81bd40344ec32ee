#pragma once
// Step aggregates and rank memory in the live feed and Monitor suites: samples with every figure set
// (or none), and field-by-field comparison of what a RunState or a JSON round trip holds against
// what the engine (or an independent aggregation) produced.

#include "live/aggregator.h"
#include "live/feed_json.h"

#include <nlohmann/json.hpp>

#include <QtTest>

#include <cmath>
#include <optional>

namespace step_aggregates {

using namespace meshbench;

inline live::StepAggregate fullStep(int number)
{
    live::StepAggregate s;
    s.step = number;
    s.partial = true;
    s.pipelineBeginNs = 1'000'000'000'123;
    s.pipelineEndNs = 1'000'000'900'456;
    s.stages = {{0, 0.125, 0.1, 2}, {1, 0.375, 0.3, 2}};
    s.bubble = 0.25;
    s.plannedBubble = 0.2;
    s.agentBubble = 0.26;
    s.ranksReporting = 4;
    s.ranksFinished = 3;
    s.loss = 2.718281828459045;
    s.auxLoss = 0.0123;
    s.tokensPerSecond = 12345.678;
    s.stepSeconds = 0.9;
    s.mfu = 0.4321;
    s.plannedStepSeconds = 0.85;
    s.plannedTokensPerSecond = 4321;
    s.commSeconds = 0.125;
    live::ExpertLayerStats layer;
    layer.layer = 2;
    layer.routed = {10, 20, 30, 4'000'000'000u};
    layer.dropped = {0, 1, 2, 3};
    layer.routedTotal = 4'000'000'060u;
    layer.droppedTotal = 6;
    layer.imbalance = 3.99;
    layer.droppedFraction = 1.5e-9;
    layer.hottestExpert = 3;
    s.expertLayers = {layer};
    s.imbalanceP50 = 3.99;
    s.imbalanceP95 = 3.99;
    s.droppedFraction = 1.5e-9;
    return s;
}

inline live::StepAggregate emptyStep(int number)
{
    live::StepAggregate s;
    s.step = number;
    s.stages = {{0, std::nullopt, std::nullopt, 0}};
    live::ExpertLayerStats layer;
    layer.layer = 0;
    layer.routed = {0, 0};
    layer.dropped = {0, 0};
    s.expertLayers = {layer};
    return s;
}

inline live::RankMemory memoryOf(std::uint32_t rank, std::int64_t timeNs, std::int64_t params, std::int64_t activations)
{
    live::RankMemory m;
    m.rank = rank;
    m.stage = int(rank % 2);
    m.samples = 2;
    m.step = 1;
    m.timeNs = timeNs;
    m.current = {params, 0, 0, activations, 0};
    m.peak = {params, 0, 0, activations + 100, 7};
    return m;
}

inline void compareMemory(const live::RankMemory& a, const live::RankMemory& b)
{
    QCOMPARE(a.rank, b.rank);
    QCOMPARE(a.stage, b.stage);
    QCOMPARE(a.samples, b.samples);
    QCOMPARE(a.step, b.step);
    QCOMPARE(a.timeNs, b.timeNs);
    QCOMPARE(a.current, b.current);
    QCOMPARE(a.peak, b.peak);
}

// A step message of fullStep(1) with `key` set to the JSON `value` (removed when empty).
inline nlohmann::json damagedStep(const QString& key, const QString& value)
{
    nlohmann::json payload = live::toJson(fullStep(1));
    if (value.isEmpty())
        payload.erase(key.toStdString());
    else
        payload[key.toStdString()] = nlohmann::json::parse(value.toStdString());
    return payload;
}

// Step messages that are not one, for a data function: the key damaged, its JSON value (empty
// removes it), and the name a refusal must give.
inline void malformedStepRows()
{
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");  // JSON; empty removes the key
    QTest::addColumn<QString>("named");
    QTest::newRow("missing step") << "step"
                                  << ""
                                  << "\"step\"";
    QTest::newRow("step as text") << "step"
                                  << "\"3\""
                                  << "\"step\"";
    QTest::newRow("step out of range") << "step"
                                       << "1099511627776"
                                       << "\"step\"";
    QTest::newRow("loss as bool") << "loss"
                                  << "true"
                                  << "\"loss\"";
    QTest::newRow("wrong type") << "type"
                                << "\"memory\""
                                << "\"type\"";
    QTest::newRow("stage not an object") << "stages"
                                         << "[3]"
                                         << "\"stages[0]\"";
    QTest::newRow("negative routed") << "expert_layers"
                                     << R"([{"layer":0,"routed":[-1],"dropped":[0],"imbalance":null,)"
                                        R"("dropped_fraction":null,"hottest_expert":0}])"
                                     << "\"expert_layers[0].routed\"";
    QTest::newRow("dropped shorter") << "expert_layers"
                                     << R"([{"layer":0,"routed":[1,2],"dropped":[0],"imbalance":null,)"
                                        R"("dropped_fraction":null,"hottest_expert":0}])"
                                     << "\"expert_layers[0].dropped\"";
}

inline bool sameRatio(const std::optional<double>& a, const std::optional<double>& b, double tolerance)
{
    return a.has_value() == b.has_value() && (!a || std::abs(*a - *b) <= tolerance);
}

// Field by field, so a failure names the field. Measured bubble ratios may differ by `ratioTolerance`
// (sums of the same spans taken in another order); every other field must be equal.
inline void compareSteps(const live::StepAggregate& a, const live::StepAggregate& b, double ratioTolerance = 0)
{
    QCOMPARE(a.step, b.step);
    QCOMPARE(a.partial, b.partial);
    QCOMPARE(a.pipelineBeginNs, b.pipelineBeginNs);
    QCOMPARE(a.pipelineEndNs, b.pipelineEndNs);
    QCOMPARE(a.stages.size(), b.stages.size());
    for (std::size_t i = 0; i < a.stages.size(); ++i) {
        QCOMPARE(a.stages[i].stage, b.stages[i].stage);
        QVERIFY(sameRatio(a.stages[i].measured, b.stages[i].measured, ratioTolerance));
        QCOMPARE(a.stages[i].planned, b.stages[i].planned);
        QCOMPARE(a.stages[i].ranks, b.stages[i].ranks);
    }
    QVERIFY2(sameRatio(a.bubble, b.bubble, ratioTolerance), qPrintable(QString("step %1").arg(a.step)));
    QCOMPARE(a.plannedBubble, b.plannedBubble);
    QCOMPARE(a.agentBubble, b.agentBubble);
    QCOMPARE(a.ranksReporting, b.ranksReporting);
    QCOMPARE(a.ranksFinished, b.ranksFinished);
    QCOMPARE(a.loss, b.loss);
    QCOMPARE(a.auxLoss, b.auxLoss);
    QCOMPARE(a.tokensPerSecond, b.tokensPerSecond);
    QCOMPARE(a.stepSeconds, b.stepSeconds);
    QCOMPARE(a.mfu, b.mfu);
    QCOMPARE(a.plannedStepSeconds, b.plannedStepSeconds);
    QCOMPARE(a.plannedTokensPerSecond, b.plannedTokensPerSecond);
    QCOMPARE(a.expertLayers.size(), b.expertLayers.size());
    for (std::size_t i = 0; i < a.expertLayers.size(); ++i) {
        const live::ExpertLayerStats& x = a.expertLayers[i];
        const live::ExpertLayerStats& y = b.expertLayers[i];
        QCOMPARE(x.layer, y.layer);
        QCOMPARE(x.routed, y.routed);
        QCOMPARE(x.dropped, y.dropped);
        QCOMPARE(x.routedTotal, y.routedTotal);
        QCOMPARE(x.droppedTotal, y.droppedTotal);
        QCOMPARE(x.imbalance, y.imbalance);
        QCOMPARE(x.droppedFraction, y.droppedFraction);
        QCOMPARE(x.hottestExpert, y.hottestExpert);
    }
    QCOMPARE(a.imbalanceP50, b.imbalanceP50);
    QCOMPARE(a.imbalanceP95, b.imbalanceP95);
    QCOMPARE(a.droppedFraction, b.droppedFraction);
}

}  // namespace step_aggregates
