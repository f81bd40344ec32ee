#pragma once
// Comparing step aggregates in the Monitor suites: what a RunState holds against what the engine
// (or an independent aggregation) produced.

#include "live/aggregator.h"

#include <QtTest>

#include <cmath>
#include <optional>

namespace monitor_steps {

using namespace meshbench;

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

}  // namespace monitor_steps
