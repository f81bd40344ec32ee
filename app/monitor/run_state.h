#pragma once
// Everything the Monitor shows of one source: a live job ("job-N") or a replay ("replay-N", or a
// session file aggregated in-process). It holds the job's spec and plan, the step aggregates in
// step order, the latest memory of each rank with a history of its total, and the job's state.
// Fed from the engine's live feed (the JSON payloads of live::toJson and LivePublisher::job) or
// from a stored session (loadSession). The charts read it and follow its signals.

#include "live/aggregator.h"
#include "plan/job_spec.h"
#include "plan/planner.h"
#include "store/session_store.h"

#include <QObject>
#include <QString>

#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace meshbench::app {

enum class RunPhase { Idle, Starting, Running, Completed, Failed, Stopped, Playing, Seeking, Ended };
QString runPhaseName(RunPhase phase);

// A step's measured time and throughput beside the plan's, as the bubble shows its plan:
// "125 ms (plan 119 ms) · 8192 tokens/s (plan 8627)"; a figure without metrics is left out.
QString stepTimeText(const live::StepAggregate& step);

// One point of a rank's memory history: its total when a sample arrived.
struct MemoryPoint {
    std::int64_t timeNs = 0;
    std::int32_t step = 0;
    std::int64_t totalBytes = 0;
    bool operator==(const MemoryPoint&) const = default;
};

struct RankMemoryTrack {
    live::RankMemory latest;
    std::vector<MemoryPoint> history;  // by time, one point per sample time
};

// What a stored session aggregates to; computed off the GUI thread by computeSessionAggregates.
struct SessionAggregates {
    plan::JobSpec spec;
    std::vector<live::StepAggregate> steps;
    std::map<std::uint32_t, RankMemoryTrack> memory;
    RunPhase phase = RunPhase::Ended;
    QString cause;
    std::uint64_t lostRecords = 0;
};

// Plays every record of the session in time order through live::SessionReplay, as the engine's
// replay does, and keeps what it emits. Reads the whole session: call it on a worker thread for a
// large one. Throws store::StoreError (an unreadable session) or std::invalid_argument.
SessionAggregates computeSessionAggregates(const store::SessionReader& reader);

class RunState : public QObject {
    Q_OBJECT
public:
    explicit RunState(QObject* parent = nullptr);
    ~RunState() override;

    // The live feed's source this state follows; the slots ignore messages of other sources.
    // Empty: every message is taken.
    void setSource(const QString& source) { m_source = source; }
    const QString& source() const { return m_source; }

    // The job's spec, planned here (no plan when its layout does not validate).
    void setSpec(const plan::JobSpec& spec);
    const std::optional<plan::JobSpec>& spec() const { return m_spec; }
    const plan::Plan* plan() const { return m_plan.get(); }
    // From the spec, or from the data when there is none.
    int stageCount() const;
    int expertCount() const;
    std::vector<int> moeLayers() const;  // global layer indices
    double deviceMemoryBytes() const;    // 0 when unknown
    // The plan's overall bubble, or what the feed said it was.
    std::optional<double> plannedBubble() const;

    const std::vector<live::StepAggregate>& steps() const { return m_steps; }
    // Goes up whenever steps are removed or inserted before the end: a view that appends from its
    // last index must rebuild instead.
    int generation() const { return m_generation; }
    const std::map<std::uint32_t, RankMemoryTrack>& memory() const { return m_memory; }

    RunPhase phase() const { return m_phase; }
    const QString& cause() const { return m_cause; }
    std::int32_t currentStep() const { return m_currentStep; }
    std::uint64_t lostRecords() const { return m_lost; }
    // Payloads refused (not the feed's format); the last one's reason.
    std::uint64_t rejectedMessages() const { return m_rejected; }
    const QString& lastError() const { return m_lastError; }

    // Kept in step order; a step already held is a duplicate and ignored (false).
    bool addStep(live::StepAggregate step);
    // A rank's memory; an update older than what is held is ignored (false).
    bool updateMemory(const live::RankMemory& memory);
    // A "job" payload: state, cause, step, lost. "seeking" to step N drops the steps from N on and
    // all memory (the replay re-aggregates from there, peaks included).
    void applyJobStatus(const nlohmann::json& status);

    // Replaces everything with a stored session's aggregates. False with `error` when it cannot be
    // read; the state is then left as it was.
    bool loadSession(const store::SessionReader& reader, QString* error = nullptr);
    void setSessionAggregates(SessionAggregates aggregates);

public Q_SLOTS:
    // The live feed's payloads for `source`, as EngineClient's stepArrived, memoryArrived and
    // jobChanged deliver them.
    void onStep(const QString& source, const nlohmann::json& payload);
    void onMemory(const QString& source, const nlohmann::json& payload);
    void onJob(const QString& source, const nlohmann::json& payload);
    // Drops steps, memory and the job's state (a new run); the source and spec stay.
    void clear();

Q_SIGNALS:
    void specChanged();
    void stepsChanged();
    void memoryChanged();
    void stateChanged();
    // A payload was refused; lastError() says why.
    void messageRejected(const QString& error);

private:
    bool accepts(const QString& source) const { return m_source.isEmpty() || source == m_source; }
    void reject(const QString& error);
    void dropFromStep(std::int32_t step);

    QString m_source;
    std::optional<plan::JobSpec> m_spec;
    std::unique_ptr<plan::Plan> m_plan;
    std::vector<live::StepAggregate> m_steps;
    int m_generation = 0;
    std::map<std::uint32_t, RankMemoryTrack> m_memory;
    RunPhase m_phase = RunPhase::Idle;
    QString m_cause;
    std::int32_t m_currentStep = 0;
    std::uint64_t m_lost = 0;
    std::uint64_t m_rejected = 0;
    QString m_lastError;
};

}  // namespace meshbench::app
