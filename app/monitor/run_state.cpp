#include "monitor/run_state.h"

#include "live/feed_json.h"
#include "live/session_replay.h"

#include <QStringList>

#include <algorithm>
#include <array>
#include <variant>

namespace meshbench::app {

namespace {

constexpr std::array<std::pair<RunPhase, const char*>, 9> kPhaseNames{{
    {RunPhase::Idle, "idle"},
    {RunPhase::Starting, "starting"},
    {RunPhase::Running, "running"},
    {RunPhase::Completed, "completed"},
    {RunPhase::Failed, "failed"},
    {RunPhase::Stopped, "stopped"},
    {RunPhase::Playing, "playing"},
    {RunPhase::Seeking, "seeking"},
    {RunPhase::Ended, "ended"},
}};

std::optional<RunPhase> phaseFromName(const std::string& name)
{
    for (const auto& [phase, text] : kPhaseNames)
        if (name == text)
            return phase;
    return std::nullopt;
}

// Takes `memory` as the rank's latest unless an update with a later sample time is held, and
// extends its history: one point per sample time (the categories of one sampling instant arrive
// one by one, so a point with the same time is overwritten).
bool mergeMemory(std::map<std::uint32_t, RankMemoryTrack>& tracks, const live::RankMemory& memory)
{
    auto [it, added] = tracks.try_emplace(memory.rank);
    RankMemoryTrack& track = it->second;
    if (!added && memory.timeNs < track.latest.timeNs)
        return false;
    track.latest = memory;
    const MemoryPoint point{memory.timeNs, memory.step, memory.currentTotal()};
    if (!track.history.empty() && track.history.back().timeNs == memory.timeNs)
        track.history.back() = point;
    else
        track.history.push_back(point);
    return true;
}

// The first held step numbered `step` or later.
std::vector<live::StepAggregate>::iterator firstStepFrom(std::vector<live::StepAggregate>& steps, std::int32_t step)
{
    return std::lower_bound(steps.begin(), steps.end(), step,
                            [](const live::StepAggregate& held, std::int32_t s) { return held.step < s; });
}

RunPhase phaseOf(store::Outcome outcome)
{
    switch (outcome) {
    case store::Outcome::Completed:
        return RunPhase::Completed;
    case store::Outcome::Failed:
        return RunPhase::Failed;
    case store::Outcome::Stopped:
        return RunPhase::Stopped;
    case store::Outcome::Running:
        break;
    }
    return RunPhase::Running;
}

}  // namespace

QString runPhaseName(RunPhase phase)
{
    for (const auto& [p, text] : kPhaseNames)
        if (p == phase)
            return QString::fromLatin1(text);
    return {};
}

QString stepTimeText(const live::StepAggregate& step)
{
    // planUnit: the unit after the plan's figure too, where it is short enough to repeat.
    const auto figure = [](const std::optional<double>& measured, const std::optional<double>& planned, double scale,
                           const QString& unit, const QString& planUnit) {
        const QString text = QString::number(*measured * scale, 'f', 0) + unit;
        return planned ? QObject::tr("%1 (plan %2%3)").arg(text, QString::number(*planned * scale, 'f', 0), planUnit)
                       : text;
    };
    QStringList parts;
    if (step.stepSeconds)
        parts << figure(step.stepSeconds, step.plannedStepSeconds, 1e3, QStringLiteral(" ms"), QStringLiteral(" ms"));
    if (step.tokensPerSecond)
        parts << figure(step.tokensPerSecond, step.plannedTokensPerSecond, 1, QObject::tr(" tokens/s"), QString());
    return parts.join(QStringLiteral(" · "));
}

SessionAggregates computeSessionAggregates(const store::SessionReader& reader)
{
    SessionAggregates out;
    const live::SessionReplay replay(reader);
    out.spec = replay.spec();
    live::SessionReplay::Handlers handlers;
    handlers.steps = [&out](std::vector<live::StepAggregate> steps, bool) {
        for (live::StepAggregate& step : steps)
            out.steps.push_back(std::move(step));
    };
    handlers.memory = [&out](const std::vector<live::RankMemory>& memory) {
        for (const live::RankMemory& m : memory)
            mergeMemory(out.memory, m);
    };
    replay.play(handlers);
    const store::SessionOutcome outcome = reader.outcome();
    out.phase = phaseOf(outcome.outcome);
    out.cause = QString::fromStdString(outcome.cause);
    for (const store::RankTraffic& traffic : reader.traffic())
        out.lostRecords += traffic.lost + traffic.dropped;
    return out;
}

RunState::RunState(QObject* parent) : QObject(parent) {}

RunState::~RunState() = default;

void RunState::setSpec(const plan::JobSpec& spec)
{
    m_spec = spec;
    m_plan.reset();
    if (plan::validateLayout(spec).empty())
        m_plan = std::make_unique<plan::Plan>(plan::makePlan(spec));
    Q_EMIT specChanged();
}

int RunState::stageCount() const
{
    if (m_spec)
        return m_spec->parallel.pp;
    return m_steps.empty() ? 0 : int(m_steps.back().stages.size());
}

int RunState::expertCount() const
{
    if (m_spec)
        return m_spec->model.moe.experts;
    for (const live::StepAggregate& step : m_steps)
        if (!step.expertLayers.empty())
            return int(step.expertLayers.front().routed.size());
    return 0;
}

std::vector<int> RunState::moeLayers() const
{
    std::vector<int> layers;
    if (m_spec) {
        for (int layer = 0; layer < m_spec->model.layers; ++layer)
            if (m_spec->model.isMoeLayer(layer))
                layers.push_back(layer);
        return layers;
    }
    for (const live::StepAggregate& step : m_steps)
        for (const live::ExpertLayerStats& stats : step.expertLayers)
            if (std::find(layers.begin(), layers.end(), stats.layer) == layers.end())
                layers.push_back(stats.layer);
    std::sort(layers.begin(), layers.end());
    return layers;
}

double RunState::deviceMemoryBytes() const { return m_spec ? m_spec->cluster.device.memoryBytes : 0.0; }

std::optional<double> RunState::plannedBubble() const
{
    if (m_plan && m_plan->simulation.completed)
        return m_plan->simulation.overallBubbleRatio;
    for (auto it = m_steps.rbegin(); it != m_steps.rend(); ++it)
        if (it->plannedBubble)
            return it->plannedBubble;
    return std::nullopt;
}

bool RunState::addStep(live::StepAggregate step)
{
    const auto at = firstStepFrom(m_steps, step.step);
    if (at != m_steps.end() && at->step == step.step)
        return false;
    if (at != m_steps.end())
        ++m_generation;  // a late step: views that append must rebuild
    m_steps.insert(at, std::move(step));
    Q_EMIT stepsChanged();
    return true;
}

bool RunState::updateMemory(const live::RankMemory& memory)
{
    if (m_spec && std::int64_t(memory.rank) >= m_spec->parallel.worldSize()) {
        reject(QStringLiteral("memory of rank %1, but the job has %2 ranks")
                   .arg(memory.rank)
                   .arg(m_spec->parallel.worldSize()));
        return false;
    }
    if (!mergeMemory(m_memory, memory))
        return false;
    Q_EMIT memoryChanged();
    return true;
}

void RunState::applyJobStatus(const nlohmann::json& status)
{
    if (!status.is_object()) {
        reject(QStringLiteral("job message is not a JSON object"));
        return;
    }
    const auto state = status.find("state");
    const std::optional<RunPhase> phase =
        state != status.end() && state->is_string() ? phaseFromName(state->get<std::string>()) : std::nullopt;
    if (!phase) {
        reject(QStringLiteral("job message without a known \"state\""));
        return;
    }
    m_phase = *phase;
    const auto cause = status.find("cause");
    m_cause =
        cause != status.end() && cause->is_string() ? QString::fromStdString(cause->get<std::string>()) : QString();
    const auto step = status.find("step");
    if (step != status.end() && step->is_number_integer() && std::in_range<std::int32_t>(step->get<std::int64_t>()))
        m_currentStep = std::int32_t(step->get<std::int64_t>());
    const auto lost = status.find("lost");
    if (lost != status.end() && lost->is_number_integer() &&
        (lost->is_number_unsigned() || lost->get<std::int64_t>() >= 0))
        m_lost = std::max(m_lost, lost->get<std::uint64_t>());
    if (m_phase == RunPhase::Seeking)
        dropFromStep(m_currentStep);
    Q_EMIT stateChanged();
}

void RunState::dropFromStep(std::int32_t step)
{
    const auto from = firstStepFrom(m_steps, step);
    if (from != m_steps.end()) {
        m_steps.erase(from, m_steps.end());
        ++m_generation;
        Q_EMIT stepsChanged();
    }
    if (!m_memory.empty()) {
        // The replay's aggregator starts afresh from the step (its peaks too): so does memory.
        m_memory.clear();
        Q_EMIT memoryChanged();
    }
}

bool RunState::loadSession(const store::SessionReader& reader, QString* error)
{
    try {
        setSessionAggregates(computeSessionAggregates(reader));
        return true;
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromStdString(e.what());
        return false;
    }
}

void RunState::setSessionAggregates(SessionAggregates aggregates)
{
    setSpec(aggregates.spec);
    m_steps = std::move(aggregates.steps);
    m_memory = std::move(aggregates.memory);
    m_phase = aggregates.phase;
    m_cause = aggregates.cause;
    m_currentStep = m_steps.empty() ? 0 : m_steps.back().step;
    m_lost = aggregates.lostRecords;
    ++m_generation;
    Q_EMIT stepsChanged();
    Q_EMIT memoryChanged();
    Q_EMIT stateChanged();
}

void RunState::reject(const QString& error)
{
    ++m_rejected;
    m_lastError = error;
    Q_EMIT messageRejected(error);
}

void RunState::onStep(const QString& source, const nlohmann::json& payload)
{
    if (!accepts(source))
        return;
    live::StepAggregate step;
    std::string error;
    if (live::fromJson(payload, step, error))
        addStep(std::move(step));
    else
        reject(QString::fromStdString(error));
}

void RunState::onMemory(const QString& source, const nlohmann::json& payload)
{
    if (!accepts(source))
        return;
    live::RankMemory memory;
    std::string error;
    if (live::fromJson(payload, memory, error))
        updateMemory(memory);
    else
        reject(QString::fromStdString(error));
}

void RunState::onJob(const QString& source, const nlohmann::json& payload)
{
    if (accepts(source))
        applyJobStatus(payload);
}

void RunState::clear()
{
    m_steps.clear();
    m_memory.clear();
    ++m_generation;
    m_phase = RunPhase::Idle;
    m_cause.clear();
    m_currentStep = 0;
    m_lost = 0;
    m_rejected = 0;
    m_lastError.clear();
    Q_EMIT stepsChanged();
    Q_EMIT memoryChanged();
    Q_EMIT stateChanged();
}

}  // namespace meshbench::app
