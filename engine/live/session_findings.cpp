#include "session_findings.h"

#include "session_replay.h"

#include "plan/mesh.h"

#include <map>
#include <variant>

namespace meshbench::live {

std::vector<Finding> sessionFindings(const store::SessionReader& reader, const std::string& session)
{
    const SessionReplay replay(reader, session);
    const plan::Mesh mesh(replay.spec().parallel);
    RecentSteps steps;
    RankTimes rankTimes(mesh.worldSize());
    std::map<std::uint32_t, RankMemory> memory;
    SessionReplay::Handlers handlers;
    handlers.admit = [&rankTimes](std::uint32_t rank, const wire::Record& record) {
        if (const auto* span = std::get_if<wire::SpanRecord>(&record))
            rankTimes.add(rank, *span);
        return true;
    };
    handlers.steps = [&steps](const std::vector<StepAggregate>& done, bool) {
        for (const StepAggregate& step : done)
            steps.add(step);
    };
    handlers.memory = [&memory](const std::vector<RankMemory>& changed) {
        for (const RankMemory& m : changed)
            memory[m.rank] = m;
    };
    replay.play(handlers);
    std::vector<RankMemory> latest;
    latest.reserve(memory.size());
    for (const auto& [rank, m] : memory)
        latest.push_back(m);
    const std::optional<DeviceEvidence> device = readDeviceEvidence(reader, mesh);
    return findFindings(
        {replay.spec(), &replay.plan(), steps.steps(), latest, &rankTimes, 0, device ? &*device : nullptr});
}

}  // namespace meshbench::live
