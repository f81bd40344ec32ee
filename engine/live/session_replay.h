#pragma once
// A stored session played through the live aggregator record by record, as its run fed them: the
// one place the engine's replay (paced, with seeks) and the workbench (everything at once: the
// Monitor's replay, the session comparison) turn a session into step aggregates and memory.

#include "live/aggregator.h"
#include "plan/planner.h"
#include "store/session_store.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace meshbench::live {

class SessionReplay {
public:
    // Reads the spec the session ran (sessionSpecAsRun) and plans it, so the aggregates carry the
    // plan's bubbles and step times. Throws store::StoreError, naming `session` when given, for a
    // stored spec that no longer validates. The reader must outlive this object.
    explicit SessionReplay(const store::SessionReader& reader, const std::string& session = {});

    const plan::JobSpec& spec() const { return m_spec; }
    const plan::Plan& plan() const { return m_plan; }

    struct Handlers {
        // Sees each record before it is aggregated; false leaves it out. It may throw to end the
        // pass (the exception leaves play()). Absent: every record is aggregated.
        std::function<bool(std::uint32_t rank, const wire::Record& record)> admit;
        // Steps that became final after a record; at the end of the pass (`atEnd`), the steps still
        // open, as the aggregator's flush gives them.
        std::function<void(std::vector<StepAggregate> steps, bool atEnd)> steps;
        // The ranks whose memory changed with a record.
        std::function<void(std::vector<RankMemory> memory)> memory;
    };
    // One pass, through a fresh aggregator, over the records stored from `from` on (see
    // store::SessionReader::forEachRecord). Throws store::StoreError when the file turns out corrupt.
    void play(const Handlers& handlers, std::int64_t from = std::numeric_limits<std::int64_t>::min()) const;

private:
    const store::SessionReader& m_reader;
    plan::JobSpec m_spec;
    plan::Plan m_plan;
};

}  // namespace meshbench::live
