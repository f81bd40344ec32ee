#include "sessions/compared_session.h"

#include "live/session_replay.h"
#include "live/steady_state.h"
#include "store/session_store.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>

namespace meshbench::app {

SessionFigures sessionFigures(const store::SessionReader& session)
{
    SessionFigures f;
    f.name = QString::fromStdString(session.header().name);
    f.layout = QString::fromStdString(session.header().layout);

    std::map<std::int32_t, wire::StepMetricsRecord>& steps = f.steps;
    for (const auto& m : session.stepMetrics())
        steps.emplace(m.record.step, m.record);
    if (!steps.empty())
        f.finalLoss = steps.rbegin()->second.loss;
    double secondsSum = 0;
    std::int64_t tokens = 0;
    int timed = 0;
    for (auto it = std::next(steps.begin(), std::ptrdiff_t(live::firstSteadyStep(steps.size()))); it != steps.end();
         ++it) {
        const wire::StepMetricsRecord& m = it->second;
        if (m.endNs > m.beginNs) {
            secondsSum += double(m.endNs - m.beginNs) * 1e-9;
            tokens += m.tokens;
            ++timed;
        }
    }
    if (timed > 0) {
        f.meanStepSeconds = secondsSum / timed;
        if (tokens > 0)
            f.tokensPerSecond = double(tokens) / secondsSum;
    }

    // Per (rank, step): each category's peak in that step; the rank's peak is the largest sum.
    std::map<std::pair<std::uint32_t, std::int32_t>, std::array<std::int64_t, wire::kMemoryCategories>> perStep;
    for (const auto& s : session.memorySamples()) {
        if (s.rank == store::kEngineRank)
            continue;
        auto [it, added] = perStep.try_emplace({s.rank, s.record.step});
        if (added)
            it->second.fill(0);
        std::int64_t& slot = it->second[std::size_t(s.record.category)];
        slot = std::max(slot, std::max(s.record.peakBytes, s.record.currentBytes));
    }
    f.peakMemoryBytes.resize(session.header().ranks.size());
    for (const auto& [key, categories] : perStep) {
        if (key.first >= f.peakMemoryBytes.size())
            f.peakMemoryBytes.resize(key.first + 1);
        std::int64_t sum = 0;
        for (std::int64_t bytes : categories)
            sum += bytes;
        std::optional<std::int64_t>& peak = f.peakMemoryBytes[key.first];
        peak = std::max(peak.value_or(0), sum);
    }
    return f;
}

std::optional<double> stepSeconds(const wire::StepMetricsRecord& step)
{
    if (step.endNs <= step.beginNs)
        return std::nullopt;
    return double(step.endNs - step.beginNs) * 1e-9;
}

std::optional<double> stepTokensPerSecond(const wire::StepMetricsRecord& step)
{
    const std::optional<double> seconds = stepSeconds(step);
    if (!seconds || step.tokens <= 0)
        return std::nullopt;
    return double(step.tokens) / *seconds;
}

QString sessionLetter(int i) { return i < 26 ? QString(QChar(u'A' + i)) : QString::number(i + 1); }

ComparedSession loadComparedSession(const QString& path)
{
    const store::SessionReader reader(path.toStdString());
    ComparedSession c;
    c.path = path;
    c.figures = sessionFigures(reader);
    std::optional<live::SessionReplay> replay;
    try {
        replay.emplace(reader);
    } catch (const store::StoreError& e) {
        c.planProblem = QString::fromUtf8(e.what());
        return c;
    }
    const plan::Plan& plan = replay->plan();
    if (plan.step.total > 0)
        c.plannedStepSeconds = plan.step.total;
    if (plan.tokensPerSecond > 0)
        c.plannedTokensPerSecond = plan.tokensPerSecond;
    const std::size_t stages = plan.stages.size();
    if (plan.simulation.completed && plan.simulation.bubbleRatio.size() == stages) {
        c.plannedBubble = plan.simulation.overallBubbleRatio;
        c.plannedStageBubble.assign(plan.simulation.bubbleRatio.begin(), plan.simulation.bubbleRatio.end());
    }
    for (const store::RankInfo& rank : reader.header().ranks) {
        if (rank.rank < 0 || rank.pp < 0 || std::size_t(rank.pp) >= stages)
            continue;
        if (std::size_t(rank.rank) >= c.plannedPeakBytes.size())
            c.plannedPeakBytes.resize(std::size_t(rank.rank) + 1);
        c.plannedPeakBytes[std::size_t(rank.rank)] = plan.stages[std::size_t(rank.pp)].memory.total();
    }

    std::vector<live::StepAggregate> aggregated;
    live::SessionReplay::Handlers handlers;
    handlers.steps = [&aggregated](std::vector<live::StepAggregate> steps, bool) {
        for (live::StepAggregate& step : steps)
            aggregated.push_back(std::move(step));
    };
    replay->play(handlers);
    std::sort(aggregated.begin(), aggregated.end(),
              [](const live::StepAggregate& a, const live::StepAggregate& b) { return a.step < b.step; });
    // The Monitor's figures: plan::measuredBubble over every rank, per step and per stage.
    const std::size_t firstSteady = live::firstSteadyStep(aggregated.size());
    double bubbleSum = 0;
    int bubbles = 0;
    std::vector<double> sums(stages, 0.0);
    std::vector<int> counts(stages, 0);
    for (std::size_t i = 0; i < aggregated.size(); ++i) {
        const live::StepAggregate& step = aggregated[i];
        if (step.bubble)
            c.stepBubble[step.step] = *step.bubble;
        if (i < firstSteady)
            continue;
        if (step.bubble) {
            bubbleSum += *step.bubble;
            ++bubbles;
        }
        for (const live::StageBubble& stage : step.stages)
            if (stage.measured && std::size_t(stage.stage) < stages) {
                sums[std::size_t(stage.stage)] += *stage.measured;
                ++counts[std::size_t(stage.stage)];
            }
    }
    if (bubbles > 0)
        c.meanBubble = bubbleSum / bubbles;
    c.stageBubble.resize(stages);
    for (std::size_t s = 0; s < stages; ++s)
        if (counts[s] > 0)
            c.stageBubble[s] = sums[s] / counts[s];
    return c;
}

}  // namespace meshbench::app
