#include "clock.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace meshbench::wire {
namespace {

constexpr std::uint32_t kRequestMagic = 0x5143424D;  // bytes 'M' 'B' 'C' 'Q'
constexpr std::uint32_t kReplyMagic = 0x5243424D;    // bytes 'M' 'B' 'C' 'R'
constexpr std::size_t kRequestBytes = 16;
constexpr std::size_t kReplyBytes = 32;

template <class T>
void put(std::vector<std::uint8_t>& out, T value)
{
    static_assert(std::endian::native == std::endian::little, "the clock frames are little-endian");
    const std::size_t at = out.size();
    out.resize(at + sizeof value);
    std::memcpy(out.data() + at, &value, sizeof value);
}

template <class T>
T take(std::span<const std::uint8_t> frame, std::size_t at)
{
    T value;
    std::memcpy(&value, frame.data() + at, sizeof value);
    return value;
}

}  // namespace

std::vector<std::uint8_t> encodeClockRequest(const ClockRequest& request)
{
    std::vector<std::uint8_t> out;
    out.reserve(kRequestBytes);
    put(out, kRequestMagic);
    put(out, request.rank);
    put(out, request.sentNs);
    return out;
}

std::optional<ClockRequest> decodeClockRequest(std::span<const std::uint8_t> frame)
{
    if (frame.size() != kRequestBytes || take<std::uint32_t>(frame, 0) != kRequestMagic)
        return std::nullopt;
    return ClockRequest{take<std::uint32_t>(frame, 4), take<std::int64_t>(frame, 8)};
}

std::vector<std::uint8_t> encodeClockReply(const ClockReply& reply)
{
    std::vector<std::uint8_t> out;
    out.reserve(kReplyBytes);
    put(out, kReplyMagic);
    put(out, reply.rank);
    put(out, reply.requestSentNs);
    put(out, reply.receivedNs);
    put(out, reply.repliedNs);
    return out;
}

std::optional<ClockReply> decodeClockReply(std::span<const std::uint8_t> frame)
{
    if (frame.size() != kReplyBytes || take<std::uint32_t>(frame, 0) != kReplyMagic)
        return std::nullopt;
    return ClockReply{take<std::uint32_t>(frame, 4), take<std::int64_t>(frame, 8), take<std::int64_t>(frame, 16),
                      take<std::int64_t>(frame, 24)};
}

ClockMeasurement measureClock(const ClockReply& reply, std::int64_t replyReceivedNs)
{
    const std::int64_t t1 = reply.requestSentNs, t2 = reply.receivedNs, t3 = reply.repliedNs, t4 = replyReceivedNs;
    ClockMeasurement m;
    m.offsetNs = ((t1 - t2) + (t4 - t3)) / 2;
    m.roundTripNs = (t4 - t1) - (t3 - t2);
    m.midpointNs = t1 + (t4 - t1) / 2;
    return m;
}

void RankClock::add(std::int64_t rankTimeNs, std::int64_t offsetNs)
{
    if (m_samples == 0) {
        m_firstTimeNs = rankTimeNs;
        m_firstOffsetNs = offsetNs;
    }
    ++m_samples;
    m_lastTimeNs = rankTimeNs;
    m_lastOffsetNs = offsetNs;
    const double x = double(rankTimeNs - m_firstTimeNs) * 1e-9, y = double(offsetNs - m_firstOffsetNs);
    m_sx += x;
    m_sy += y;
    m_sxx += x * x;
    m_sxy += x * y;
}

double RankClock::driftNsPerSecond() const
{
    constexpr double kMaxDrift = 500e-6 * 1e9;  // 500 ppm
    const double n = m_samples;
    const double spread = n * m_sxx - m_sx * m_sx;
    if (m_samples < 2 || double(m_lastTimeNs - m_firstTimeNs) < 1e9 || spread <= 0)
        return 0.0;
    return std::clamp((n * m_sxy - m_sx * m_sy) / spread, -kMaxDrift, kMaxDrift);
}

std::int64_t RankClock::offsetAt(std::int64_t rankTimeNs) const
{
    if (m_samples == 0)
        return 0;
    return m_lastOffsetNs + std::int64_t(driftNsPerSecond() * double(rankTimeNs - m_lastTimeNs) * 1e-9);
}

}  // namespace meshbench::wire
