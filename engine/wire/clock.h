#pragma once
// The clock exchange between a rank and the engine, NTP's four timestamps (RFC 5905, sec. 8): the
// rank sends a request stamped t1 (its clock), the engine stamps its arrival t2 and its reply t3
// (the engine's clock), and the rank stamps the reply's arrival t4. Then
//   offset = ((t1 - t2) + (t4 - t3)) / 2     the rank's clock minus the engine's
//   round trip = (t4 - t1) - (t3 - t2)       time on the wire, both ways
// and the offset is off by at most half the round trip (the two legs' difference). The messages
// are fixed-size little-endian frames on a ZeroMQ DEALER (rank) to ROUTER (engine) pair:
//   request (16 bytes): u32 magic "MBCQ" | u32 rank | i64 t1
//   reply   (32 bytes): u32 magic "MBCR" | u32 rank | i64 t1 | i64 t2 | i64 t3
// The reply echoes t1, so a late reply to an earlier request is told apart. Anything else is not
// an exchange message and decodes to nothing.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace meshbench::wire {

struct ClockRequest {
    std::uint32_t rank = 0;
    std::int64_t sentNs = 0;  // t1
    bool operator==(const ClockRequest&) const = default;
};

struct ClockReply {
    std::uint32_t rank = 0;
    std::int64_t requestSentNs = 0;  // t1, echoed
    std::int64_t receivedNs = 0;     // t2
    std::int64_t repliedNs = 0;      // t3
    bool operator==(const ClockReply&) const = default;
};

std::vector<std::uint8_t> encodeClockRequest(const ClockRequest& request);
std::optional<ClockRequest> decodeClockRequest(std::span<const std::uint8_t> frame);
std::vector<std::uint8_t> encodeClockReply(const ClockReply& reply);
std::optional<ClockReply> decodeClockReply(std::span<const std::uint8_t> frame);

struct ClockMeasurement {
    std::int64_t offsetNs = 0;  // the rank's clock minus the engine's
    std::int64_t roundTripNs = 0;
    std::int64_t midpointNs = 0;  // (t1 + t4) / 2, the rank's clock: when the offset held
};
// The exchange's result, from the reply and t4.
ClockMeasurement measureClock(const ClockReply& reply, std::int64_t replyReceivedNs);

// A rank's clock against the engine's, from the offsets it measured (ClockOffsetRecord's fields):
// the latest offset, carried forward at the drift fitted by least squares over all of them once
// they span a second. The drift is held to NTP's 500 ppm bound (RFC 5905), past which a clock is
// broken, not drifting.
class RankClock {
public:
    void add(std::int64_t rankTimeNs, std::int64_t offsetNs);
    bool known() const { return m_samples > 0; }
    // The rank's clock minus the engine's at `rankTimeNs` (the rank's clock); 0 while unknown.
    std::int64_t offsetAt(std::int64_t rankTimeNs) const;
    // Nanoseconds the offset grows per second.
    double driftNsPerSecond() const;
    // The engine's clock at `rankTimeNs`.
    std::int64_t toEngine(std::int64_t rankTimeNs) const { return rankTimeNs - offsetAt(rankTimeNs); }

private:
    int m_samples = 0;
    std::int64_t m_firstTimeNs = 0, m_firstOffsetNs = 0;  // the origin of the fit's sums
    std::int64_t m_lastTimeNs = 0, m_lastOffsetNs = 0;
    double m_sx = 0, m_sy = 0, m_sxx = 0, m_sxy = 0;  // x: seconds, y: nanoseconds from the origin
};

}  // namespace meshbench::wire
