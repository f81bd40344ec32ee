#include "ingest.h"

#include "plan/units.h"

#include <cstdlib>
#include <type_traits>
#include <variant>

namespace meshbench::service {
namespace {

// A clock this far from the engine's is named in the log when its first offset arrives.
constexpr std::int64_t kNotableOffsetNs = 1'000'000;

// Moves a record's times onto the engine's clock (a clock offset's too, after it was counted); a
// span and a step keep their exact durations.
void toEngineClock(wire::Record& record, const wire::RankClock& clock)
{
    std::visit(
        [&clock](auto& r) {
            using T = std::decay_t<decltype(r)>;
            if constexpr (std::is_same_v<T, wire::SpanRecord>) {
                const std::int64_t offset = clock.offsetAt(r.beginNs);
                r.beginNs -= offset;
                r.endNs -= offset;
            } else if constexpr (std::is_same_v<T, wire::StepMetricsRecord>) {
                const std::int64_t offset = clock.offsetAt(r.endNs);
                r.beginNs -= offset;
                r.endNs -= offset;
            } else if constexpr (!std::is_same_v<T, wire::ExpertLoadRecord>) {
                r.timeNs = clock.toEngine(r.timeNs);
            }
        },
        record);
}

std::string milliseconds(std::int64_t ns) { return plan::formatNumber("%+.1f ms", double(ns) * 1e-6); }

}  // namespace

Ingest::Ingest(std::uint32_t worldSize)
    : m_liveness(worldSize), m_traffic(worldSize), m_nextSequence(worldSize, 0), m_clocks(worldSize)
{
    for (std::uint32_t r = 0; r < worldSize; ++r)
        m_traffic[r].rank = std::int32_t(r);
}

Ingest::Accepted Ingest::accept(std::span<const std::uint8_t> frame, std::int64_t nowNs)
{
    Accepted out;
    wire::DecodeResult decoded = wire::decodeBatch(frame);
    if (!decoded.batch) {
        ++m_rejectedFrames;
        out.problems.push_back("dropped a malformed telemetry frame of " + std::to_string(frame.size()) +
                               " bytes: " + decoded.error);
        return out;
    }
    wire::Batch& batch = *decoded.batch;
    if (batch.rank >= worldSize()) {
        ++m_rejectedFrames;
        out.problems.push_back("dropped " + std::to_string(batch.records.size()) + " records from rank " +
                               std::to_string(batch.rank) + ", which is not in this job (ranks 0.." +
                               std::to_string(worldSize() - 1) + "); is another job sending to this collector?");
        return out;
    }
    if (decoded.skippedRecords > 0)
        out.problems.push_back("rank " + std::to_string(batch.rank) + " sent " +
                               std::to_string(decoded.skippedRecords) +
                               " records of a kind this engine does not know (a newer agent?); they were skipped");
    // Sequence numbers count records: a batch must start where the last one ended.
    store::RankTraffic& traffic = m_traffic[batch.rank];
    std::uint64_t& expected = m_nextSequence[batch.rank];
    if (batch.sequence < expected) {
        ++m_rejectedFrames;
        out.problems.push_back("dropped a repeated batch from rank " + std::to_string(batch.rank) + " (sequence " +
                               std::to_string(batch.sequence) + ", already received up to " + std::to_string(expected) +
                               ")");
        return out;
    }
    if (batch.sequence > expected) {
        traffic.lost += batch.sequence - expected;
        out.problems.push_back("lost " + std::to_string(batch.sequence - expected) + " records of rank " +
                               std::to_string(batch.rank) + " on the way (sequence " + std::to_string(expected) +
                               " to " + std::to_string(batch.sequence - 1) + ")");
    }
    const std::uint64_t count = batch.records.size() + decoded.skippedRecords;
    expected = batch.sequence + count;
    traffic.received += batch.records.size();

    // Any batch shows the rank's sender is alive; heartbeats also say where the rank is.
    RankLiveness& live = m_liveness[batch.rank];
    live.everHeard = true;
    live.lastHeardNs = nowNs;
    wire::RankClock& clock = m_clocks[batch.rank];
    for (wire::Record& record : batch.records) {
        if (const auto* offset = std::get_if<wire::ClockOffsetRecord>(&record)) {
            if (!clock.known() && std::abs(offset->offsetNs) >= kNotableOffsetNs)
                out.notes.push_back("rank " + std::to_string(batch.rank) + "'s clock is " +
                                    milliseconds(offset->offsetNs) + " from the engine's (measured to " +
                                    milliseconds(offset->roundTripNs / 2).substr(1) +
                                    "); its times are moved onto the engine's clock");
            clock.add(offset->timeNs, offset->offsetNs);
        }
        if (clock.known())
            toEngineClock(record, clock);
    }
    for (const wire::Record& record : batch.records)
        if (const auto* h = std::get_if<wire::HeartbeatRecord>(&record)) {
            if (wire::isFinal(h->state) && live.endedNs == 0)
                live.endedNs = nowNs;
            live.state = h->state;
            live.detail = h->detail;
            live.pid = h->pid;
            live.host = h->host;
            live.completedSteps = h->step;
            traffic.dropped = h->droppedRecords;
        }
    out.batch = std::move(batch);
    return out;
}

std::vector<store::RankTraffic> Ingest::traffic() const { return m_traffic; }

std::uint64_t Ingest::lostRecords() const
{
    std::uint64_t total = 0;
    for (const store::RankTraffic& t : m_traffic)
        total += t.lost + t.dropped;
    return total;
}

}  // namespace meshbench::service
