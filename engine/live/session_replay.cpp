#include "live/session_replay.h"

#include "live/session_spec.h"

namespace meshbench::live {

SessionReplay::SessionReplay(const store::SessionReader& reader, const std::string& session)
    : m_reader(reader), m_spec(sessionSpecAsRun(reader, session)), m_plan(plan::makePlan(m_spec))
{
}

void SessionReplay::play(const Handlers& handlers, std::int64_t from) const
{
    LiveAggregator aggregator(m_spec, &m_plan);
    m_reader.forEachRecord(
        [&](std::uint32_t rank, const wire::Record& record) {
            if (handlers.admit && !handlers.admit(rank, record))
                return;
            if (aggregator.add(rank, record) != AddOutcome::Accepted)
                return;
            std::vector<StepAggregate> steps = aggregator.takeCompletedSteps();
            if (!steps.empty() && handlers.steps)
                handlers.steps(std::move(steps), false);
            std::vector<RankMemory> memory = aggregator.takeChangedMemory();
            if (!memory.empty() && handlers.memory)
                handlers.memory(std::move(memory));
        },
        from);
    std::vector<StepAggregate> rest = aggregator.flush();
    if (!rest.empty() && handlers.steps)
        handlers.steps(std::move(rest), true);
}

}  // namespace meshbench::live
