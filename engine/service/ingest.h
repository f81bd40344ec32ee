#pragma once
// The collector's bookkeeping: every frame that arrives on the telemetry socket is decoded and
// checked here before anything is stored. A malformed frame, a frame from a rank outside the job,
// a gap or a repeat in a rank's sequence numbers each become a problem in words; nothing is ever
// thrown for what arrives from the network. Per rank it keeps what was received and lost and the
// last heartbeat, which failure detection reads, and its clock: the rank's records are moved onto
// the engine's clock with the offsets it measured (wire::RankClock), all but the offsets
// themselves, which are stored as sent.

#include "store/session_store.h"
#include "wire/clock.h"
#include "wire/telemetry.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace meshbench::service {

// The life of a rank as the engine sees it.
struct RankLiveness {
    bool everHeard = false;
    std::int64_t lastHeardNs = 0;  // engine clock (wire::wallAlignedNowNs) of its last batch
    wire::RankState state = wire::RankState::Starting;
    std::int32_t detail = 0;
    std::int32_t pid = 0;
    std::string host;
    std::int32_t completedSteps = 0;
    // Engine clock when its last heartbeat (finished, failed, terminated) arrived, 0 before: which rank
    // ended first, in one clock whatever the ranks' own clocks say.
    std::int64_t endedNs = 0;
};

class Ingest {
public:
    explicit Ingest(std::uint32_t worldSize);

    struct Accepted {
        std::optional<wire::Batch> batch;   // records to store, when the frame was good
        std::vector<std::string> problems;  // what was wrong, one line each (empty when fine)
        std::vector<std::string> notes;     // worth a line in the log: a clock far from the engine's
    };
    // nowNs: the engine's clock when the frame arrived.
    Accepted accept(std::span<const std::uint8_t> frame, std::int64_t nowNs);

    std::uint32_t worldSize() const { return std::uint32_t(m_liveness.size()); }
    const RankLiveness& liveness(std::uint32_t rank) const { return m_liveness[rank]; }
    std::span<const RankLiveness> liveness() const { return m_liveness; }
    const wire::RankClock& clock(std::uint32_t rank) const { return m_clocks[rank]; }
    std::vector<store::RankTraffic> traffic() const;
    std::uint64_t rejectedFrames() const { return m_rejectedFrames; }
    // Records lost on the way or dropped by agents, over all ranks.
    std::uint64_t lostRecords() const;

private:
    std::vector<RankLiveness> m_liveness;
    std::vector<store::RankTraffic> m_traffic;
    std::vector<std::uint64_t> m_nextSequence;
    std::vector<wire::RankClock> m_clocks;
    std::uint64_t m_rejectedFrames = 0;
};

}  // namespace meshbench::service
