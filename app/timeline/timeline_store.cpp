#include "timeline/timeline_store.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

namespace meshbench::app {

namespace {

constexpr std::size_t kBlock = 64;                  // spans per scanStart block
constexpr std::int64_t kMinLevelZeroCap = 1 << 16;  // level-0 buckets a row may always have
constexpr int kMinShift = 6;
constexpr int kMaxShift = 40;
constexpr int kMaxStepIndex = 1 << 20;
constexpr std::int64_t kMaxTime = std::int64_t(1) << 61;  // about 73 years of nanoseconds

}  // namespace

std::optional<KindClass> kindClassOf(wire::SpanKind kind)
{
    switch (kind) {
    case wire::SpanKind::Forward:
        return KindClass::Forward;
    case wire::SpanKind::Backward:
        return KindClass::Backward;
    case wire::SpanKind::WeightGrad:
        return KindClass::WeightGrad;
    case wire::SpanKind::SendActivation:
    case wire::SpanKind::RecvActivation:
    case wire::SpanKind::SendGradient:
    case wire::SpanKind::RecvGradient:
        return KindClass::PointToPoint;
    case wire::SpanKind::DataParallelReduce:
        return KindClass::DataParallelReduce;
    case wire::SpanKind::Optimizer:
        return KindClass::Optimizer;
    case wire::SpanKind::Idle:
        break;
    }
    return std::nullopt;
}

std::int64_t BucketSummary::total() const { return std::accumulate(busy.begin(), busy.end(), std::int64_t(0)); }

std::optional<KindClass> BucketSummary::dominant() const
{
    const auto top = std::max_element(busy.begin(), busy.end());
    if (*top <= 0)
        return std::nullopt;
    return KindClass(top - busy.begin());
}

BucketSummary& BucketSummary::operator+=(const BucketSummary& other)
{
    for (std::size_t c = 0; c < busy.size(); ++c)
        busy[c] += other.busy[c];
    longest = std::max(longest, other.longest);
    return *this;
}

TimelineSpan TimelineSpan::fromRecord(const wire::SpanRecord& record)
{
    TimelineSpan span;
    span.beginNs = record.beginNs;
    span.endNs = std::max(record.endNs, record.beginNs);  // a reversed span is drawn as an instant
    span.kind = record.kind;
    span.microbatch = record.microbatch;
    span.step = record.step;
    span.chunk = record.chunk;
    span.stage = record.stage;
    span.bytes = record.bytes;
    span.peer = record.peerRank;
    return span;
}

std::string rankLabel(int rank, int dp, int pp, int tp)
{
    return "rank " + std::to_string(rank) + " \u00b7 dp" + std::to_string(dp) + " pp" + std::to_string(pp) + " tp" +
           std::to_string(tp);
}

// ---------------------------------------------------------------------------------------------
// TimelineRow

TimelineRow::TimelineRow(RowInfo info) : m_info(std::move(info)) {}

TimelineSpan TimelineRow::span(std::size_t i) const
{
    TimelineSpan s;
    s.beginNs = m_begin[i];
    s.endNs = m_end[i];
    s.kind = wire::SpanKind(m_kind[i]);
    s.microbatch = m_microbatch[i];
    s.step = m_step[i];
    s.chunk = m_chunk[i];
    s.stage = m_stage[i];
    s.bytes = m_bytes[i];
    s.peer = m_peer[i];
    s.overlapped = m_overlapped[i] != 0;
    return s;
}

std::size_t TimelineRow::lowerBound(std::int64_t t, std::size_t from) const
{
    // Galloping from `from`: a painter's next span is usually near, so this reads a few cache lines
    // where a plain binary search over the row would miss the cache at every step.
    const std::size_t n = m_begin.size();
    if (from >= n || m_begin[from] >= t)
        return std::min(from, n);
    std::size_t below = from, step = 1;
    while (from + step < n && m_begin[from + step] < t) {
        below = from + step;
        step *= 2;
    }
    const std::size_t above = std::min(n, from + step);
    return std::size_t(
        std::lower_bound(m_begin.begin() + std::ptrdiff_t(below) + 1, m_begin.begin() + std::ptrdiff_t(above), t) -
        m_begin.begin());
}

std::size_t TimelineRow::scanStart(std::int64_t t) const
{
    const auto block = std::upper_bound(m_blockMaxEnd.begin(), m_blockMaxEnd.end(), t) - m_blockMaxEnd.begin();
    return std::min(std::size_t(block) * kBlock, m_begin.size());
}

const BucketSummary& TimelineRow::bucket(int level, std::int64_t index) const
{
    return m_levels[std::size_t(level)][std::size_t(index)];
}

BucketSummary TimelineRow::summary(int level, std::int64_t t0, std::int64_t t1, std::int64_t* covered) const
{
    BucketSummary sum;
    if (covered)
        *covered = 0;
    if (m_levels.empty() || t1 <= t0 || level < 0 || level >= levels())
        return sum;
    const auto& buckets = m_levels[std::size_t(level)];
    const int shift = m_baseShift + level;
    const std::int64_t last = std::int64_t(buckets.size()) - 1;
    if (t1 <= m_origin || ((t0 - m_origin) >> shift) > last)
        return sum;
    const std::int64_t j0 = std::max<std::int64_t>(0, (t0 - m_origin) >> shift);
    const std::int64_t j1 = std::min(last, (t1 - 1 - m_origin) >> shift);
    for (std::int64_t j = j0; j <= j1; ++j)
        sum += buckets[std::size_t(j)];
    if (covered)
        *covered = (j1 - j0 + 1) << shift;
    return sum;
}

void TimelineRow::pushBack(const TimelineSpan& span)
{
    m_begin.push_back(span.beginNs);
    m_end.push_back(span.endNs);
    m_kind.push_back(std::uint8_t(span.kind));
    m_microbatch.push_back(span.microbatch);
    m_step.push_back(span.step);
    m_chunk.push_back(span.chunk);
    m_stage.push_back(span.stage);
    m_bytes.push_back(span.bytes);
    m_peer.push_back(span.peer);
    m_overlapped.push_back(span.overlapped ? 1 : 0);
    m_lastEnd = m_begin.size() == 1 ? span.endNs : std::max(m_lastEnd, span.endNs);
    const std::size_t block = (m_begin.size() - 1) / kBlock;
    if (block == m_blockMaxEnd.size())
        m_blockMaxEnd.push_back(m_lastEnd);
    else
        m_blockMaxEnd[block] = m_lastEnd;
}

void TimelineRow::sortFrom(std::size_t first)
{
    // A stable permutation of the tail keeps spans with equal begins in arrival order.
    std::vector<std::uint32_t> order(m_begin.size() - first);
    std::iota(order.begin(), order.end(), std::uint32_t(first));
    std::stable_sort(order.begin(), order.end(),
                     [this](std::uint32_t a, std::uint32_t b) { return m_begin[a] < m_begin[b]; });
    const auto permute = [&](auto& column) {
        const std::vector<typename std::decay_t<decltype(column)>::value_type> tail(
            column.begin() + std::ptrdiff_t(first), column.end());
        for (std::size_t k = 0; k < order.size(); ++k)
            column[first + k] = tail[order[k] - first];
    };
    permute(m_begin);
    permute(m_end);
    permute(m_kind);
    permute(m_microbatch);
    permute(m_step);
    permute(m_chunk);
    permute(m_stage);
    permute(m_bytes);
    permute(m_peer);
    permute(m_overlapped);
    rebuildBlockMaxEnd(first / kBlock);
}

void TimelineRow::rebuildBlockMaxEnd(std::size_t firstBlock)
{
    m_blockMaxEnd.resize((m_begin.size() + kBlock - 1) / kBlock);
    std::int64_t running = firstBlock > 0 ? m_blockMaxEnd[firstBlock - 1] : std::numeric_limits<std::int64_t>::min();
    for (std::size_t b = firstBlock; b < m_blockMaxEnd.size(); ++b) {
        const std::size_t stop = std::min(m_begin.size(), (b + 1) * kBlock);
        for (std::size_t i = b * kBlock; i < stop; ++i)
            running = std::max(running, m_end[i]);
        m_blockMaxEnd[b] = running;
    }
}

void TimelineRow::addToLevelZero(std::int64_t begin, std::int64_t end, wire::SpanKind kind, std::int64_t& lo,
                                 std::int64_t& hi)
{
    const auto cls = kindClassOf(kind);
    if (!cls || end <= begin)
        return;
    auto& buckets = m_levels[0];
    const std::int64_t j0 = (begin - m_origin) >> m_baseShift;
    const std::int64_t j1 = (end - 1 - m_origin) >> m_baseShift;
    if (j1 >= std::int64_t(buckets.size()))
        buckets.resize(std::size_t(j1 + 1));
    const std::int64_t width = std::int64_t(1) << m_baseShift;
    for (std::int64_t j = j0; j <= j1; ++j) {
        const std::int64_t b0 = m_origin + j * width;
        BucketSummary& bucket = buckets[std::size_t(j)];
        bucket.busy[std::size_t(*cls)] += std::min(end, b0 + width) - std::max(begin, b0);
        bucket.longest = std::max(bucket.longest, end - begin);
    }
    lo = std::min(lo, j0);
    hi = std::max(hi, j1);
}

void TimelineRow::propagate(std::int64_t lo, std::int64_t hi)
{
    for (std::size_t k = 0; m_levels[k].size() > 1; ++k) {
        const std::size_t parents = (m_levels[k].size() + 1) / 2;
        if (k + 1 == m_levels.size()) {
            m_levels.emplace_back();
            lo = 0;  // a new level takes every existing child, not only the changed ones
            hi = std::int64_t(m_levels[k].size()) - 1;
        }
        m_levels[k + 1].resize(parents);
        const auto& children = m_levels[k];
        auto& up = m_levels[k + 1];
        for (std::int64_t p = lo / 2; p <= hi / 2; ++p) {
            const std::size_t c = std::size_t(2 * p);
            up[std::size_t(p)] = children[c];
            if (c + 1 < children.size())
                up[std::size_t(p)] += children[c + 1];
        }
        lo /= 2;
        hi /= 2;
    }
}

void TimelineRow::rebuildLod()
{
    m_levels.clear();
    if (m_begin.empty())
        return;
    const std::int64_t first = m_begin.front();
    const std::int64_t cap = kMinLevelZeroCap + 4 * std::int64_t(m_begin.size());
    // Bad clocks (a span an hour away) coarsen the row's buckets instead of filling memory.
    while (m_baseShift < 62 && ((m_lastEnd - ((first >> m_baseShift) << m_baseShift)) >> m_baseShift) >= cap)
        ++m_baseShift;
    m_origin = (first >> m_baseShift) << m_baseShift;
    m_levels.emplace_back(1);
    std::int64_t lo = 0, hi = 0;
    for (std::size_t i = 0; i < m_begin.size(); ++i)
        addToLevelZero(m_begin[i], m_end[i], wire::SpanKind(m_kind[i]), lo, hi);
    propagate(0, std::int64_t(m_levels[0].size()) - 1);
}

void TimelineRow::append(std::span<const TimelineSpan> spans)
{
    if (spans.empty())
        return;
    const std::size_t old = m_begin.size();
    std::int64_t earliest = std::numeric_limits<std::int64_t>::max();
    std::int64_t earliestOutOfOrder = earliest;
    for (const TimelineSpan& s : spans) {
        if (!m_begin.empty() && s.beginNs < m_begin.back())
            earliestOutOfOrder = std::min(earliestOutOfOrder, s.beginNs);
        earliest = std::min(earliest, s.beginNs);
        pushBack(s);
    }
    if (earliestOutOfOrder != std::numeric_limits<std::int64_t>::max()) {
        // Old spans with the same begin stay before the new ones.
        const auto first = std::upper_bound(m_begin.begin(), m_begin.begin() + std::ptrdiff_t(old), earliestOutOfOrder);
        sortFrom(std::size_t(first - m_begin.begin()));
    }

    const std::int64_t cap = kMinLevelZeroCap + 4 * std::int64_t(m_begin.size());
    if (m_levels.empty() || earliest < m_origin || ((m_lastEnd - m_origin) >> m_baseShift) >= cap) {
        rebuildLod();
        return;
    }
    std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = -1;
    for (const TimelineSpan& s : spans)
        addToLevelZero(s.beginNs, s.endNs, s.kind, lo, hi);
    if (hi >= 0)
        propagate(lo, hi);
}

// ---------------------------------------------------------------------------------------------
// TimelineStore

int TimelineStore::shiftForSpacing(double nsPerSpan)
{
    const double width = std::max(1.0, 16.0 * nsPerSpan);
    return std::clamp(int(std::ceil(std::log2(width))), kMinShift, kMaxShift);
}

void TimelineStore::setBaseShift(int shift)
{
    if (m_spanCount > 0)
        return;
    m_baseShift = std::clamp(shift, kMinShift, kMaxShift);
    for (auto& row : m_rows)
        row->setBaseShift(m_baseShift);
}

int TimelineStore::rowOfRank(int rank) const
{
    const auto it = m_rowOfRank.find(rank);
    return it == m_rowOfRank.end() ? -1 : int(it->second);
}

void TimelineStore::reindex()
{
    std::stable_sort(m_rows.begin(), m_rows.end(), [](const auto& a, const auto& b) {
        return std::pair(a->info().stage, a->info().rank) < std::pair(b->info().stage, b->info().rank);
    });
    m_rowOfRank.clear();
    for (std::size_t i = 0; i < m_rows.size(); ++i)
        m_rowOfRank[m_rows[i]->info().rank] = i;
}

void TimelineStore::setRows(const std::vector<RowInfo>& rows)
{
    for (const RowInfo& info : rows) {
        const int index = rowOfRank(info.rank);
        if (index >= 0) {
            m_rows[std::size_t(index)]->m_info = info;
        } else {
            m_rows.push_back(std::make_unique<TimelineRow>(info));
            m_rows.back()->setBaseShift(std::max(m_baseShift, kMinShift));
            m_rowOfRank[info.rank] = m_rows.size() - 1;
        }
    }
    reindex();
}

TimelineRow& TimelineStore::rowFor(int rank, int stage)
{
    const int index = rowOfRank(rank);
    if (index >= 0)
        return *m_rows[std::size_t(index)];
    setRows({RowInfo{rank, stage, "rank " + std::to_string(rank)}});
    return *m_rows[std::size_t(rowOfRank(rank))];
}

void TimelineStore::append(int rank, std::span<const TimelineSpan> input)
{
    if (input.empty())
        return;
    // Times far outside any clock (a corrupt agent) are clamped so bucket arithmetic cannot overflow;
    // a reversed span becomes an instant.
    std::vector<TimelineSpan> clamped;
    std::span<const TimelineSpan> spans = input;
    const auto wild = [](const TimelineSpan& s) {
        return s.beginNs < -kMaxTime || s.beginNs > kMaxTime || s.endNs > kMaxTime || s.endNs < s.beginNs;
    };
    if (std::any_of(input.begin(), input.end(), wild)) {
        clamped.assign(input.begin(), input.end());
        for (TimelineSpan& s : clamped) {
            s.beginNs = std::clamp(s.beginNs, -kMaxTime, kMaxTime);
            s.endNs = std::clamp(s.endNs, s.beginNs, kMaxTime);
        }
        spans = clamped;
    }
    if (!m_overlappedOps.empty()) {
        if (clamped.empty())
            clamped.assign(input.begin(), input.end());
        for (TimelineSpan& s : clamped)
            s.overlapped = s.overlapped || m_overlappedOps.count(overlappedKey(s.stage, s.kind, s.microbatch, s.chunk));
        spans = clamped;
    }
    std::int64_t lo = spans.front().beginNs, hi = spans.front().endNs;
    for (const TimelineSpan& s : spans) {
        lo = std::min(lo, s.beginNs);
        hi = std::max(hi, s.endNs);
    }
    if (m_baseShift < 0)
        setBaseShift(shiftForSpacing(double(hi - lo) / double(spans.size())));
    rowFor(rank, spans.front().stage).append(spans);

    m_beginTime = m_spanCount ? std::min(m_beginTime, lo) : lo;
    m_endTime = m_spanCount ? std::max(m_endTime, hi) : hi;
    m_spanCount += spans.size();
    for (const TimelineSpan& s : spans) {
        if (s.step < 0 || s.step >= kMaxStepIndex)
            continue;
        if (std::size_t(s.step) >= m_stepBegin.size())
            m_stepBegin.resize(std::size_t(s.step) + 1, std::numeric_limits<std::int64_t>::max());
        m_stepBegin[std::size_t(s.step)] = std::min(m_stepBegin[std::size_t(s.step)], s.beginNs);
    }
}

std::uint64_t TimelineStore::overlappedKey(int stage, wire::SpanKind kind, int microbatch, int chunk)
{
    return (std::uint64_t(std::uint16_t(stage)) << 48) | (std::uint64_t(std::uint8_t(kind)) << 40) |
           (std::uint64_t(std::uint8_t(chunk)) << 32) | std::uint32_t(microbatch);
}

void TimelineStore::setOverlappedOps(OverlappedOps ops)
{
    m_overlappedOps = std::move(ops);
    for (const std::unique_ptr<TimelineRow>& row : m_rows)
        for (std::size_t i = 0; i < row->size(); ++i) {
            const std::uint64_t key =
                overlappedKey(row->m_stage[i], row->kind(i), row->m_microbatch[i], row->m_chunk[i]);
            row->m_overlapped[i] = m_overlappedOps.count(key) ? 1 : 0;
        }
}

std::size_t TimelineStore::appendBatch(const wire::Batch& batch)
{
    std::vector<TimelineSpan> spans;
    for (const wire::Record& record : batch.records)
        if (const auto* span = std::get_if<wire::SpanRecord>(&record))
            spans.push_back(TimelineSpan::fromRecord(*span));
    append(int(batch.rank), spans);
    return spans.size();
}

std::optional<std::int64_t> TimelineStore::stepBegin(int step) const
{
    if (step < 0 || std::size_t(step) >= m_stepBegin.size() ||
        m_stepBegin[std::size_t(step)] == std::numeric_limits<std::int64_t>::max())
        return std::nullopt;
    return m_stepBegin[std::size_t(step)];
}

}  // namespace meshbench::app
