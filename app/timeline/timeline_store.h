#pragma once
// The timeline's data without Qt: one row per rank, spans stored column-wise and sorted by begin,
// and per row a pyramid of time buckets (level-of-detail summaries) kept up to date as spans are
// appended, so that a paint at any zoom reads a few buckets per pixel column instead of the spans.
//
// Buckets: level 0 buckets are 2^baseShift ns wide, level k buckets 2^(baseShift + k) ns; bucket j
// of level k covers [origin + j * width, origin + (j + 1) * width) where origin is the row's first
// span begin rounded down to a level-0 boundary. A bucket holds, per kind class, the time spans of
// that class overlap it (idle spans count as nothing: they are gaps). baseShift is chosen once, from
// the first spans appended (about 16 spans per level-0 bucket), or set before any span arrives.

#include "wire/telemetry.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace meshbench::app {

// What the level-of-detail summaries tell apart: the kinds that paint differently.
enum class KindClass : std::uint8_t { Forward, Backward, WeightGrad, PointToPoint, DataParallelReduce, Optimizer };
constexpr int kKindClasses = 6;
// Idle is no class: it is drawn as a gap.
std::optional<KindClass> kindClassOf(wire::SpanKind kind);

struct BucketSummary {
    std::array<std::int64_t, kKindClasses> busy{};  // ns per class
    // The longest (non-idle) span that overlaps the bucket: where it is shorter than a pixel, a
    // painter needs the bucket alone, not the spans.
    std::int64_t longest = 0;

    std::int64_t total() const;
    // The class with the most busy time (the first on ties), none when nothing is busy.
    std::optional<KindClass> dominant() const;
    BucketSummary& operator+=(const BucketSummary& other);  // sums busy, takes the larger longest
    bool operator==(const BucketSummary&) const = default;
};

// One span with every field, for appending and for reading one back.
struct TimelineSpan {
    std::int64_t beginNs = 0;
    std::int64_t endNs = 0;
    wire::SpanKind kind = wire::SpanKind::Forward;
    std::int32_t microbatch = -1;
    std::int32_t step = 0;
    std::int16_t chunk = 0;
    std::int16_t stage = 0;  // as the span said; rows group by RowInfo::stage
    std::uint64_t bytes = 0;
    std::int32_t peer = -1;
    bool overlapped = false;  // half of a DualPipeV F&B pair (drawn inside one border)
    bool operator==(const TimelineSpan&) const = default;

    static TimelineSpan fromRecord(const wire::SpanRecord& record);
};

struct RowInfo {
    int rank = 0;
    int stage = 0;
    std::string label;  // e.g. "rank 3 · dp1 pp0 tp1"
};

class TimelineRow {
public:
    explicit TimelineRow(RowInfo info);

    const RowInfo& info() const { return m_info; }
    std::size_t size() const { return m_begin.size(); }
    bool empty() const { return m_begin.empty(); }

    std::int64_t begin(std::size_t i) const { return m_begin[i]; }
    std::int64_t end(std::size_t i) const { return m_end[i]; }
    wire::SpanKind kind(std::size_t i) const { return wire::SpanKind(m_kind[i]); }
    std::int32_t microbatch(std::size_t i) const { return m_microbatch[i]; }
    std::int16_t chunk(std::size_t i) const { return m_chunk[i]; }
    bool overlapped(std::size_t i) const { return m_overlapped[i] != 0; }
    TimelineSpan span(std::size_t i) const;

    // Largest span end in the row (spans are sorted by begin, not by end).
    std::int64_t lastEnd() const { return m_lastEnd; }
    // First index i with begin(i) >= t, searching from `from` on.
    std::size_t lowerBound(std::int64_t t, std::size_t from = 0) const;
    // An index such that every span before it ends at or before t: where a scan for spans that
    // overlap [t, ...) starts. Spans from there may still end before t; skip those.
    std::size_t scanStart(std::int64_t t) const;

    // Level-of-detail pyramid.
    int baseShift() const { return m_baseShift; }
    int levels() const { return int(m_levels.size()); }
    std::int64_t origin() const { return m_origin; }
    std::int64_t bucketCount(int level) const { return std::int64_t(m_levels[std::size_t(level)].size()); }
    const BucketSummary& bucket(int level, std::int64_t index) const;
    std::int64_t bucketWidth(int level) const { return std::int64_t(1) << (m_baseShift + level); }
    // Sum of the buckets of `level` that intersect [t0, t1): exact for bucket-aligned windows.
    // `covered`, when given, receives the time those buckets span.
    BucketSummary summary(int level, std::int64_t t0, std::int64_t t1, std::int64_t* covered = nullptr) const;

private:
    friend class TimelineStore;
    void setBaseShift(int shift) { m_baseShift = shift; }
    void append(std::span<const TimelineSpan> spans);
    void pushBack(const TimelineSpan& span);
    void sortFrom(std::size_t first);
    void rebuildBlockMaxEnd(std::size_t firstBlock);
    void addToLevelZero(std::int64_t begin, std::int64_t end, wire::SpanKind kind, std::int64_t& lo, std::int64_t& hi);
    void propagate(std::int64_t lo, std::int64_t hi);
    void rebuildLod();

    RowInfo m_info;
    std::vector<std::int64_t> m_begin, m_end;
    std::vector<std::uint8_t> m_kind;
    std::vector<std::int32_t> m_microbatch, m_step, m_peer;
    std::vector<std::int16_t> m_chunk, m_stage;
    std::vector<std::uint8_t> m_overlapped;
    std::vector<std::uint64_t> m_bytes;
    // Running maximum of the span ends up to the end of each block of kBlock spans: scanStart's index.
    std::vector<std::int64_t> m_blockMaxEnd;
    std::int64_t m_lastEnd = 0;

    int m_baseShift = 0;
    std::int64_t m_origin = 0;
    std::vector<std::vector<BucketSummary>> m_levels;  // [level][bucket]
};

class TimelineStore {
public:
    TimelineStore() = default;
    TimelineStore(TimelineStore&&) noexcept = default;
    TimelineStore& operator=(TimelineStore&&) noexcept = default;

    // Declares rows ahead of their spans (labels, stages). A rank already present keeps its spans
    // and takes the new label and stage.
    void setRows(const std::vector<RowInfo>& rows);
    // Appends spans of one rank (a row is made for a rank not seen yet, its stage taken from the
    // first span). Cheap when the spans come after the row's last begin; earlier ones are sorted in.
    void append(int rank, std::span<const TimelineSpan> input);
    // The span records of a live batch; other record types are ignored. Returns spans taken.
    std::size_t appendBatch(const wire::Batch& batch);

    // Rows in display order: by stage, then rank.
    std::size_t rowCount() const { return m_rows.size(); }
    const TimelineRow& row(std::size_t index) const { return *m_rows[index]; }
    int rowOfRank(int rank) const;
    std::size_t spanCount() const { return m_spanCount; }
    bool empty() const { return m_spanCount == 0; }
    // First span begin and last span end over all rows; {0, 0} when empty.
    std::int64_t beginTime() const { return m_spanCount ? m_beginTime : 0; }
    std::int64_t endTime() const { return m_spanCount ? m_endTime : 0; }
    // Earliest begin of a span of `step` (steps 0 .. 2^20).
    std::optional<std::int64_t> stepBegin(int step) const;

    // The ops a schedule runs as overlapped F&B pairs, by key (overlappedKey): measured spans carry
    // no such flag, so the store marks the matching ones, those already here and those to come.
    using OverlappedOps = std::unordered_set<std::uint64_t>;
    static std::uint64_t overlappedKey(int stage, wire::SpanKind kind, int microbatch, int chunk);
    void setOverlappedOps(OverlappedOps ops);
    const OverlappedOps& overlappedOps() const { return m_overlappedOps; }

    // Level-0 bucket width 2^shift ns for every row; only before the first span (ignored after).
    void setBaseShift(int shift);
    int baseShift() const { return m_baseShift; }
    // The shift that puts about 16 spans in a level-0 bucket when spans come every nsPerSpan.
    static int shiftForSpacing(double nsPerSpan);

private:
    TimelineRow& rowFor(int rank, int stage);
    void reindex();

    std::vector<std::unique_ptr<TimelineRow>> m_rows;
    std::unordered_map<int, std::size_t> m_rowOfRank;
    std::size_t m_spanCount = 0;
    std::int64_t m_beginTime = 0, m_endTime = 0;
    std::vector<std::int64_t> m_stepBegin;
    int m_baseShift = -1;  // not chosen yet
    OverlappedOps m_overlappedOps;
};

// "rank 3 · dp1 pp0 tp1"
std::string rankLabel(int rank, int dp, int pp, int tp);

}  // namespace meshbench::app
