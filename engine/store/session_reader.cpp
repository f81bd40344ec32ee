// SessionReader: checks a session file on opening and answers queries over it. Records come out
// of several queries at once (one per rank for spans, one per table for replay) merged by
// (time, seq): the order of time, ties in arrival order.

#include "schema.h"
#include "session_file.h"
#include "session_store.h"
#include "sqlite_util.h"

#include "wire/error_text.h"
#include "wire/wall_clock.h"

#include <sqlite3.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#include <sys/stat.h>

namespace meshbench::store {

namespace {

using detail::Connection;
using detail::Statement;
using RecordVisitor = std::function<void(std::uint32_t rank, const wire::Record&)>;

constexpr std::int64_t kMinTime = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMaxTime = std::numeric_limits<std::int64_t>::max();

constexpr char kNoHeader[] = " holds no session: the engine that created it stopped before it wrote the session header";

// The earliest begin of a span that reaches `time` when no span is longer than maxSpan. The
// writer clamps durations to int64's maximum, so that value bounds nothing.
std::int64_t earliestBegin(std::int64_t time, std::int64_t maxSpan)
{
    if (maxSpan == kMaxTime || time < kMinTime + maxSpan)
        return kMinTime;
    return time - maxSpan;
}

std::string sql(std::string_view select, std::string_view rest)
{
    std::string text(select);
    text += ' ';
    text += rest;
    return text;
}

template <class R>
using Columns = schema::TableColumns<R>;

// A field's value from its column (an expert load's arrays are read a row per entry).
template <class T>
void readValue(const Statement& row, int column, T& value)
{
    if constexpr (std::is_same_v<T, std::string>)
        value = row.text(column);
    else if constexpr (std::is_enum_v<T>)
        value = row.enumerator<T>(column, wire::EnumInfo<T>::count);
    else if constexpr (std::is_floating_point_v<T>)
        value = static_cast<T>(row.real(column));
    else if constexpr (std::is_same_v<T, std::uint64_t>)
        value = row.bits(column);  // stored as the int64 with the same bits
    else
        value = row.integer<T>(column);
}

template <class R>
R decodeRow(const Statement& row)
{
    R record;
    Columns<R>::forEachFieldColumn(
        record, [&](auto column, const auto&, auto& value) { readValue(row, static_cast<int>(column), value); });
    return record;
}

// What a query of R's table names in messages.
template <class R>
std::string reading()
{
    return "reading " + std::string(schema::kTable<R>.rows);
}

// R's rows in replay order: time, ties in arrival order.
template <class R>
std::string inTimeOrder()
{
    return "ORDER BY " + std::string(schema::kTable<R>.time) + ", seq";
}

// Where merge() keeps a stream: the smallest key comes next.
struct Key {
    std::int64_t time = 0;
    std::int64_t seq = 0;
    // clang-tidy 14 takes the 0 that a defaulted <=> is compared with for a null pointer.
    auto operator<=>(const Key&) const = default;  // NOLINT(modernize-use-nullptr)
};

// A stream of records ordered by Key.
class Cursor {
public:
    virtual ~Cursor() = default;
    // Loads the next record; false at the end (and then never called again).
    virtual bool advance() = 0;
    virtual void visit(const RecordVisitor& visitor) const = 0;

    Key key;
    std::uint32_t rank = 0;
};

// One record per row.
template <typename R>
class RowCursor : public Cursor {
public:
    RowCursor(const Connection& db, const std::string& query) : m_statement(db, query, reading<R>()) {}
    Statement& statement() { return m_statement; }
    const R& record() const { return m_record; }

    bool advance() override
    {
        if (!m_statement.step())
            return false;
        key = {m_statement.int64(kTime), m_statement.int64(kSeq)};
        rank = m_statement.integer<std::uint32_t>(kRank);
        m_record = decodeRow<R>(m_statement);
        return true;
    }
    void visit(const RecordVisitor& visitor) const override { visitor(rank, m_record); }

private:
    static constexpr int kTime = Columns<R>::at(schema::kTable<R>.time);
    static constexpr int kSeq = Columns<R>::at("seq");
    static constexpr int kRank = Columns<R>::at("rank");

    Statement m_statement;
    R m_record;
};

// Expert loads: one record per run of rows with experts 0, 1, ..., n-1 (consecutive seq, so
// adjacent in any order that ends with seq).
class ExpertLoadCursor : public Cursor {
    using R = wire::ExpertLoadRecord;

public:
    ExpertLoadCursor(const Connection& db, const std::string& query) : m_db(db), m_statement(db, query, reading<R>()) {}
    Statement& statement() { return m_statement; }
    const R& record() const { return m_record; }

    bool advance() override
    {
        if (!m_started) {
            m_started = true;
            m_pending = m_statement.step();
        }
        if (!m_pending)
            return false;
        const Statement& row = m_statement;
        key = {row.int64(kTime), row.int64(kSeq)};
        rank = row.integer<std::uint32_t>(kRank);
        // The first row gives the record's scalars; each row adds its expert's entry to the arrays.
        Columns<R>::forEachFieldColumn(m_record, [&](auto column, const auto&, auto& value) {
            if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::vector<std::uint32_t>>)
                value.clear();
            else
                readValue(row, static_cast<int>(column), value);
        });
        do {
            bool sameRecord = row.int64(kExpert) == std::int64_t(m_record.routed.size()) && row.int64(kRank) == rank;
            Columns<R>::forEachFieldColumn(m_record, [&](auto column, const auto&, auto& value) {
                if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::vector<std::uint32_t>>)
                    value.push_back(row.integer<std::uint32_t>(static_cast<int>(column)));
                else
                    sameRecord = sameRecord && row.int64(static_cast<int>(column)) == value;
            });
            if (!sameRecord)
                m_db.fileError("is corrupt: the expert loads of rank " + std::to_string(rank) + ", step " +
                               std::to_string(m_record.step) + ", layer " + std::to_string(m_record.layer) +
                               " are incomplete");
            m_pending = m_statement.step();
        } while (m_pending && row.int64(kExpert) != 0);
        return true;
    }
    void visit(const RecordVisitor& visitor) const override { visitor(rank, m_record); }

private:
    static constexpr int kTime = Columns<R>::at(schema::kTable<R>.time);
    static constexpr int kSeq = Columns<R>::at("seq");
    static constexpr int kRank = Columns<R>::at("rank");
    static constexpr int kExpert = Columns<R>::at("expert");

    const Connection& m_db;
    Statement m_statement;
    bool m_started = false;
    bool m_pending = false;  // a row of the next record is loaded
    R m_record;
};

// Calls onNext for every record of every cursor, smallest key first.
template <typename C, typename F>
void merge(std::vector<std::unique_ptr<C>>& cursors, F&& onNext)
{
    const auto later = [&](std::size_t a, std::size_t b) { return cursors[a]->key > cursors[b]->key; };
    std::vector<std::size_t> heap;
    for (std::size_t i = 0; i < cursors.size(); ++i)
        if (cursors[i]->advance())
            heap.push_back(i);
    std::make_heap(heap.begin(), heap.end(), later);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), later);
        const std::size_t next = heap.back();
        onNext(*cursors[next]);
        if (cursors[next]->advance())
            std::push_heap(heap.begin(), heap.end(), later);
        else
            heap.pop_back();
    }
}

// R's rows, selected and ordered by `rest`.
template <typename R>
std::vector<FromRank<R>> readAll(const Connection& db, std::string_view rest)
{
    RowCursor<R> cursor(db, sql(schema::selectStatement<R>(), rest));
    std::vector<FromRank<R>> records;
    while (cursor.advance())
        records.push_back({cursor.rank, cursor.record()});
    return records;
}

std::int64_t pragmaValue(const Connection& db, const char* pragma)
{
    Statement statement(db, std::string("PRAGMA ") + pragma, std::string("reading PRAGMA ") + pragma);
    return statement.step() ? statement.int64(0) : 0;
}

std::string hex(std::int64_t value)
{
    char text[32];
    std::snprintf(text, sizeof text, "0x%llX", static_cast<unsigned long long>(value));
    return text;
}

bool hasWalFrames(const std::string& path)
{
    struct stat wal {};
    return ::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 32;  // 32: the WAL header alone
}

struct stat statOrThrow(const std::string& path)
{
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int error = errno;
        throw StoreError(error == ENOENT
                             ? "session " + detail::quoted(path) + " does not exist"
                             : "cannot open session " + detail::quoted(path) + ": " + wire::errorText(error));
    }
    if (!S_ISREG(st.st_mode))
        throw StoreError(detail::quoted(path) + " is not a session file (it is not a regular file)");
    if (st.st_size == 0 && !hasWalFrames(path))
        throw StoreError(detail::quoted(path) + kNoHeader);
    return st;
}

// Whether a file whose first read failed is shorter than its header says: cut short. Without WAL
// frames every page lives in the main file, so that file must hold all the pages the header
// counts. The header is read through SQLite's own descriptor of the file: opening and closing
// another one would drop SQLite's locks (see session_file.h).
bool isTruncated(const Connection& db, const struct stat& st)
{
    sqlite3_file* file = nullptr;
    if (sqlite3_file_control(db.handle(), "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || !file ||
        !file->pMethods || hasWalFrames(db.path()))
        return false;
    unsigned char header[100] = {};
    if (file->pMethods->xRead(file, header, sizeof header, 0) != SQLITE_OK)
        return false;
    // https://sqlite.org/fileformat.html: page size at offset 16 (big-endian, 1 means 65536), page
    // count at offset 28.
    const std::int64_t pageSize = header[16] == 0 && header[17] == 1 ? 65536 : header[16] << 8 | header[17];
    const std::int64_t pages = std::int64_t(header[28]) << 24 | header[29] << 16 | header[30] << 8 | header[31];
    return pageSize * pages > st.st_size;
}

// The cheap checks that tell a session from anything else, before any table is read.
void checkSession(const Connection& db, const struct stat& st)
{
    const std::string& path = db.path();
    std::int64_t applicationId = 0;
    try {
        applicationId = pragmaValue(db, "application_id");
    } catch (const StoreError&) {
        // The first read opens the file's first page, which SQLite checks against the file's size.
        if (db.errorCode() == SQLITE_NOTADB)
            throw StoreError(detail::quoted(path) + " is not a Meshbench session: it is not an SQLite database");
        if (isTruncated(db, st))
            throw StoreError(detail::quoted(path) + " is truncated: it holds " + std::to_string(st.st_size) +
                             " bytes, fewer than its header counts (copied while it was written, or the disk "
                             "filled up?)");
        throw;
    }
    if (applicationId == 0 && pragmaValue(db, "schema_version") == 0)  // no table was ever created
        throw StoreError(detail::quoted(path) + kNoHeader);
    if (applicationId != kApplicationId)
        throw StoreError(detail::quoted(path) + " is an SQLite database but not a Meshbench session (application id " +
                         hex(applicationId) + ", a session has " + hex(kApplicationId) + ")");
    const std::int64_t version = pragmaValue(db, "user_version");
    if (version > kSchemaVersion)
        throw StoreError(detail::quoted(path) + " was written by a newer Meshbench (session format " +
                         std::to_string(version) + ", this build reads up to " + std::to_string(kSchemaVersion) +
                         "); upgrade Meshbench to open it");
    if (version < 1)
        throw StoreError(detail::quoted(path) + " is corrupt: its session format is " + std::to_string(version));
}

// "file:" URI of a path: the characters URIs give a meaning are escaped (https://sqlite.org/uri.html).
std::string fileUri(const std::string& path)
{
    std::string uri = "file:";
    for (const char c : path) {
        if (c == '?' || c == '#' || c == '%') {
            char escaped[4];
            std::snprintf(escaped, sizeof escaped, "%%%02X", static_cast<unsigned char>(c));
            uri += escaped;
        } else {
            uri += c;
        }
    }
    return uri;
}

Connection openSession(const std::string& path, const struct stat& st)
{
    // Without a WAL file no writer is at work (a writer keeps one while it has the session open), so
    // the file cannot change and SQLite may read it as immutable: without locks, and without the
    // -wal and -shm files a WAL reader makes beside it (in a folder it may not even write).
    struct stat wal {};
    if (::stat((path + "-wal").c_str(), &wal) != 0) {
        Connection db(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, fileUri(path) + "?immutable=1");
        checkSession(db, st);
        return db;
    }
    Connection db(path, SQLITE_OPEN_READONLY);
    checkSession(db, st);
    return db;
}

SessionHeader readHeader(const Connection& db)
{
    SessionHeader header;
    Statement meta(db, "SELECT engine_version, created_ns, name, layout FROM meta WHERE id = 1",
                   "reading the session header");
    if (!meta.step())
        db.fileError("is corrupt: it has no session header");
    header.engineVersion = meta.text(0);
    header.createdNs = meta.int64(1);
    header.name = meta.text(2);
    header.layout = meta.text(3);
    Statement job(db, "SELECT spec, plan_json FROM job WHERE id = 1", "reading the job spec");
    if (!job.step())
        db.fileError("is corrupt: it has no job spec");
    header.jobSpec = job.text(0);
    header.planJson = job.text(1);
    Statement ranks(db, "SELECT rank, dp, pp, tp, ep, node, local_device, host, pid FROM ranks ORDER BY rank",
                    "reading the ranks");
    while (ranks.step()) {
        RankInfo rank;
        rank.rank = ranks.integer<std::int32_t>(0);
        rank.dp = ranks.integer<std::int32_t>(1);
        rank.pp = ranks.integer<std::int32_t>(2);
        rank.tp = ranks.integer<std::int32_t>(3);
        rank.ep = ranks.integer<std::int32_t>(4);
        rank.node = ranks.integer<std::int32_t>(5);
        rank.localDevice = ranks.integer<std::int32_t>(6);
        rank.host = ranks.text(7);
        rank.pid = ranks.integer<std::int32_t>(8);
        header.ranks.push_back(std::move(rank));
    }
    return header;
}

}  // namespace

struct SessionReader::Impl {
    explicit Impl(const std::string& sessionPath)
        : path(sessionPath), use(sessionPath), file(statOrThrow(sessionPath)), db(openSession(sessionPath, file))
    {
        // Cheap extra defence against corrupt pages: SQLite checks each cell's size as it reads it.
        db.exec("PRAGMA cell_size_check = ON", "setting up the reader");
        header = readHeader(db);
        const std::int64_t version = pragmaValue(db, "user_version");
        hasClockOffsets = version >= 2;
        hasImport = version >= 3;
    }

    // Ranks that have spans, by walking the spans' primary key from one rank to the next.
    std::vector<std::uint32_t> spanRanks() const;
    // max_span_ns, span_count.
    std::pair<std::int64_t, std::int64_t> spanStats() const;
    std::vector<std::unique_ptr<RowCursor<wire::SpanRecord>>> spanCursors(std::int64_t t0, std::int64_t t1,
                                                                          std::span<const std::uint32_t> ranks) const;

    const std::string path;
    detail::ReaderUse use;  // unregistered after the connection is closed (declared before it)
    const struct stat file;
    const Connection db;
    SessionHeader header;
    bool hasClockOffsets = false;  // format 2 on
    bool hasImport = false;        // format 3 on
};

std::vector<std::uint32_t> SessionReader::Impl::spanRanks() const
{
    Statement next(db, "SELECT rank FROM spans WHERE rank > ?1 ORDER BY rank LIMIT 1", "listing the ranks with spans");
    std::vector<std::uint32_t> ranks;
    std::int64_t after = -1;
    for (;;) {
        next.bindInt(1, after);
        if (!next.step())
            break;
        const auto rank = next.integer<std::uint32_t>(0);
        if (rank <= after)  // out of key order: the B-tree is damaged, and the walk would never end
            db.fileError("is corrupt: its spans are out of order");
        ranks.push_back(rank);
        after = rank;
        next.reset();
    }
    return ranks;
}

std::pair<std::int64_t, std::int64_t> SessionReader::Impl::spanStats() const
{
    Statement stats(db, "SELECT max_span_ns, span_count FROM meta WHERE id = 1", "reading the session header");
    if (!stats.step())
        db.fileError("is corrupt: it has no session header");
    return {std::max<std::int64_t>(stats.int64(0), 0), stats.int64(1)};
}

std::vector<std::unique_ptr<RowCursor<wire::SpanRecord>>>
SessionReader::Impl::spanCursors(std::int64_t t0, std::int64_t t1, std::span<const std::uint32_t> ranks) const
{
    std::vector<std::uint32_t> chosen(ranks.begin(), ranks.end());
    if (chosen.empty())
        chosen = spanRanks();
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    // A span [b, e] overlaps [t0, t1] when b <= t1 and e >= t0; no span is longer than maxSpan, so
    // b >= t0 - maxSpan bounds the scan of the (rank, begin_ns) key.
    const std::int64_t maxSpan = spanStats().first;
    const std::int64_t lowest = earliestBegin(t0, maxSpan);
    const std::string query =
        sql(schema::selectStatement<wire::SpanRecord>(),
            "WHERE rank = ?1 AND begin_ns BETWEEN ?2 AND ?3 AND end_ns >= ?4 ORDER BY begin_ns, seq");
    std::vector<std::unique_ptr<RowCursor<wire::SpanRecord>>> cursors;
    for (std::uint32_t rank : chosen) {
        auto cursor = std::make_unique<RowCursor<wire::SpanRecord>>(db, query);
        cursor->statement().bindInt(1, rank);
        cursor->statement().bindInt(2, lowest);
        cursor->statement().bindInt(3, t1);
        cursor->statement().bindInt(4, t0);
        cursors.push_back(std::move(cursor));
    }
    return cursors;
}

SessionReader::SessionReader(const std::string& path) : m_impl(std::make_unique<Impl>(path)) {}

SessionReader::~SessionReader() = default;

const SessionHeader& SessionReader::header() const { return m_impl->header; }

SessionOutcome SessionReader::outcome() const
{
    const Connection& db = m_impl->db;
    Statement row(db, "SELECT state, cause, failed_rank, ended_ns FROM outcome WHERE id = 1", "reading the outcome");
    if (!row.step())
        db.fileError("is corrupt: it has no outcome");
    const std::string state = row.text(0);
    const std::optional<Outcome> outcome = outcomeFromName(state);
    if (!outcome)
        db.fileError("is corrupt: its outcome is '" + state + "'");
    return {*outcome, row.text(1), row.integer<std::int32_t>(2), row.int64(3)};
}

std::vector<RankTraffic> SessionReader::traffic() const
{
    Statement row(m_impl->db, "SELECT rank, received, lost, dropped FROM traffic ORDER BY rank",
                  "reading the traffic counts");
    std::vector<RankTraffic> traffic;
    while (row.step())
        traffic.push_back({row.integer<std::int32_t>(0), row.bits(1), row.bits(2), row.bits(3)});
    return traffic;
}

void SessionReader::checkStructure() const
{
    Statement row(m_impl->db, "PRAGMA quick_check(1)", "checking the file's structure");
    if (row.step() && row.text(0) != "ok")
        throw StoreError(detail::quoted(m_impl->path) + " is corrupt: " + row.text(0) +
                         " (SQLite's quick_check); export what is readable table by table with the sqlite3 shell's "
                         ".recover, or use another session");
}

void RunWindow::check(const std::string& session, std::uint32_t rank, std::int64_t timeNs) const
{
    if (timeNs >= beginNs && timeNs <= endNs)
        return;
    const double hours = double(timeNs < beginNs ? beginNs - timeNs : timeNs - endNs) / 3.6e12;
    char offset[32];
    std::snprintf(offset, sizeof offset, "%.1f h", hours);
    throw StoreError(session + " is damaged: a record of rank " + std::to_string(rank) + " is dated " + offset +
                     (timeNs < beginNs ? " before the session began" : " after the session ended") +
                     "; use another session of the run, or a copy from before the damage");
}

RunWindow SessionReader::runWindow() const
{
    const std::int64_t endedNs = outcome().endedNs;
    return {m_impl->header.createdNs - kClockMarginNs,
            (endedNs > 0 ? endedNs : wire::wallAlignedNowNs()) + kClockMarginNs};
}

void SessionReader::checkRecordTimes() const
{
    const RunWindow window = runWindow();
    forEachRecord([&](std::uint32_t rank, const wire::Record& record) {
        if (const std::optional<std::int64_t> time = wire::recordTimeNs(record))
            window.check(m_impl->path, rank, *time);
    });
}

SessionSummary SessionReader::summary() const
{
    const Connection& db = m_impl->db;
    SessionSummary summary;
    summary.path = m_impl->path;
    summary.name = m_impl->header.name;
    summary.createdNs = m_impl->header.createdNs;
    summary.layout = m_impl->header.layout;
    summary.outcome = outcome();
    Statement steps(db, "SELECT COUNT(DISTINCT step) FROM step_metrics", "counting steps");
    if (steps.step())
        summary.steps = steps.integer<std::int32_t>(0);
    Statement last(db, "SELECT loss FROM step_metrics ORDER BY step DESC, seq DESC LIMIT 1", "reading the final loss");
    if (last.step())
        summary.finalLoss = last.real(0);
    return summary;
}

std::pair<std::int64_t, std::int64_t> SessionReader::timeRange() const
{
    const Connection& db = m_impl->db;
    const std::int64_t maxSpan = m_impl->spanStats().first;
    Statement bounds(db, "SELECT MIN(begin_ns), MAX(begin_ns) FROM spans WHERE rank = ?1", "reading the time range");
    // The last end lies within maxSpan of the last begin, so only those spans are read.
    Statement lastEnd(db, "SELECT MAX(end_ns) FROM spans WHERE rank = ?1 AND begin_ns >= ?2", "reading the time range");
    std::optional<std::pair<std::int64_t, std::int64_t>> range;
    for (std::uint32_t rank : m_impl->spanRanks()) {
        bounds.bindInt(1, rank);
        bounds.step();
        const std::int64_t first = bounds.int64(0);
        const std::int64_t lastBegin = bounds.int64(1);
        bounds.reset();
        lastEnd.bindInt(1, rank);
        lastEnd.bindInt(2, earliestBegin(lastBegin, maxSpan));
        lastEnd.step();
        const std::int64_t last = lastEnd.int64(0);
        lastEnd.reset();
        range =
            range ? std::pair{std::min(range->first, first), std::max(range->second, last)} : std::pair{first, last};
    }
    return range.value_or(std::pair<std::int64_t, std::int64_t>{0, 0});
}

void SessionReader::spans(std::int64_t t0, std::int64_t t1, std::span<const std::uint32_t> ranks,
                          const std::function<void(const StoredSpan&)>& visit) const
{
    if (t1 < t0)
        return;
    auto cursors = m_impl->spanCursors(t0, t1, ranks);
    merge(cursors, [&](const RowCursor<wire::SpanRecord>& cursor) { visit(StoredSpan{cursor.rank, cursor.record()}); });
}

std::vector<FromRank<wire::ExpertLoadRecord>> SessionReader::expertLoads(std::optional<std::int32_t> step) const
{
    ExpertLoadCursor cursor(m_impl->db, sql(schema::selectStatement<wire::ExpertLoadRecord>(),
                                            step ? "WHERE step = ?1 ORDER BY seq" : "ORDER BY step, seq"));
    if (step)
        cursor.statement().bindInt(1, *step);
    std::vector<FromRank<wire::ExpertLoadRecord>> loads;
    while (cursor.advance())
        loads.push_back({cursor.rank, cursor.record()});
    return loads;
}

std::vector<FromRank<wire::StepMetricsRecord>> SessionReader::stepMetrics() const
{
    return readAll<wire::StepMetricsRecord>(m_impl->db, "ORDER BY step, rank, seq");
}

std::vector<FromRank<wire::MemorySampleRecord>> SessionReader::memorySamples() const
{
    return readAll<wire::MemorySampleRecord>(m_impl->db, inTimeOrder<wire::MemorySampleRecord>());
}

std::vector<FromRank<wire::NodeSampleRecord>> SessionReader::nodeSamples() const
{
    return readAll<wire::NodeSampleRecord>(m_impl->db, inTimeOrder<wire::NodeSampleRecord>());
}

std::vector<FromRank<wire::LogRecord>> SessionReader::logs() const
{
    return readAll<wire::LogRecord>(m_impl->db, inTimeOrder<wire::LogRecord>());
}

std::vector<FromRank<wire::HeartbeatRecord>> SessionReader::heartbeats() const
{
    return readAll<wire::HeartbeatRecord>(m_impl->db, inTimeOrder<wire::HeartbeatRecord>());
}

std::vector<FromRank<wire::ClockOffsetRecord>> SessionReader::clockOffsets() const
{
    if (!m_impl->hasClockOffsets)
        return {};
    return readAll<wire::ClockOffsetRecord>(m_impl->db, inTimeOrder<wire::ClockOffsetRecord>());
}

std::uint64_t SessionReader::spanCount() const { return static_cast<std::uint64_t>(m_impl->spanStats().second); }

void SessionReader::forEachRecord(const RecordVisitor& visit, std::int64_t from) const
{
    const Connection& db = m_impl->db;
    std::vector<std::unique_ptr<Cursor>> cursors;
    for (auto& span : m_impl->spanCursors(from, kMaxTime, {}))
        cursors.push_back(std::move(span));
    // Every other table from `from` on, through its time index.
    wire::forEachRecordType([&](auto type) {
        using R = typename decltype(type)::type;
        if constexpr (!std::is_same_v<R, wire::SpanRecord>) {
            if (std::is_same_v<R, wire::ClockOffsetRecord> && !m_impl->hasClockOffsets)
                return;
            const std::string time(schema::kTable<R>.time);
            const std::string query = sql(schema::selectStatement<R>(), "WHERE " + time + " >= ?1 " + inTimeOrder<R>());
            using CursorOf =
                std::conditional_t<std::is_same_v<R, wire::ExpertLoadRecord>, ExpertLoadCursor, RowCursor<R>>;
            auto cursor = std::make_unique<CursorOf>(db, query);
            cursor->statement().bindInt(1, from);
            cursors.push_back(std::move(cursor));
        }
    });
    merge(cursors, [&](const Cursor& cursor) { cursor.visit(visit); });
}

std::vector<ImportSource> SessionReader::importSources() const
{
    if (!m_impl->hasImport)
        return {};
    Statement row(m_impl->db,
                  "SELECT path, bytes, digest, format, rank, recognised, inferred FROM import_sources ORDER BY seq",
                  "reading the imported files");
    std::vector<ImportSource> sources;
    while (row.step())
        sources.push_back({row.text(0), row.int64(1), row.text(2), row.text(3), row.integer<std::int32_t>(4),
                           row.text(5), row.text(6)});
    return sources;
}

std::vector<std::string> SessionReader::kernelNames() const
{
    if (!m_impl->hasImport)
        return {};
    Statement row(m_impl->db, "SELECT id, name FROM kernel_names ORDER BY id", "reading kernel names");
    std::vector<std::string> names;
    while (row.step()) {
        if (row.int64(0) != std::int64_t(names.size()))
            m_impl->db.fileError("is corrupt: its kernel names are not numbered 0, 1, 2, ...");
        names.push_back(row.text(1));
    }
    return names;
}

void SessionReader::kernels(std::int64_t t0, std::int64_t t1, std::span<const std::uint32_t> ranks,
                            const std::function<void(std::uint32_t rank, const KernelRow&)>& visit) const
{
    if (!m_impl->hasImport || t1 < t0)
        return;
    const Connection& db = m_impl->db;
    Statement stats(db, "SELECT max_kernel_ns FROM meta WHERE id = 1", "reading the session header");
    const std::int64_t maxKernel = stats.step() ? std::max<std::int64_t>(stats.int64(0), 0) : 0;
    std::vector<std::uint32_t> chosen(ranks.begin(), ranks.end());
    if (chosen.empty()) {
        Statement all(db, "SELECT DISTINCT rank FROM kernels ORDER BY rank", "listing the ranks with kernels");
        while (all.step())
            chosen.push_back(all.integer<std::uint32_t>(0));
    }
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    Statement row(db,
                  "SELECT begin_ns, end_ns, device, stream, class, name, step FROM kernels "
                  "WHERE rank = ?1 AND begin_ns BETWEEN ?2 AND ?3 AND end_ns >= ?4 ORDER BY begin_ns, seq",
                  "reading kernels");
    for (std::uint32_t rank : chosen) {
        row.bindInt(1, rank);
        row.bindInt(2, earliestBegin(t0, maxKernel));
        row.bindInt(3, t1);
        row.bindInt(4, t0);
        while (row.step()) {
            const int deviceClass = row.integer<std::int32_t>(4);
            if (deviceClass < 0 || deviceClass >= kDeviceClasses)
                db.fileError("is corrupt: a kernel of rank " + std::to_string(rank) + " has class " +
                             std::to_string(deviceClass));
            visit(rank, KernelRow{row.int64(0), row.int64(1), row.integer<std::int32_t>(2),
                                  row.integer<std::int32_t>(3), static_cast<DeviceClass>(deviceClass),
                                  row.integer<std::int32_t>(5), row.integer<std::int32_t>(6)});
        }
        row.reset();
    }
}

std::uint64_t SessionReader::kernelCount() const
{
    if (!m_impl->hasImport)
        return 0;
    Statement count(m_impl->db, "SELECT COUNT(*) FROM kernels", "counting kernels");
    return count.step() ? static_cast<std::uint64_t>(count.int64(0)) : 0;
}

std::vector<DeviceTimeRow> SessionReader::deviceTime() const
{
    if (!m_impl->hasImport)
        return {};
    Statement row(m_impl->db,
                  "SELECT rank, step, class, busy_ns, exposed_ns FROM device_time ORDER BY rank, step, class",
                  "reading device time");
    std::vector<DeviceTimeRow> rows;
    while (row.step()) {
        const int deviceClass = row.integer<std::int32_t>(2);
        if (deviceClass < 0 || deviceClass >= kDeviceClasses)
            m_impl->db.fileError("is corrupt: device time of class " + std::to_string(deviceClass));
        rows.push_back({row.integer<std::int32_t>(0), row.integer<std::int32_t>(1),
                        static_cast<DeviceClass>(deviceClass), row.int64(3), row.int64(4)});
    }
    return rows;
}

}  // namespace meshbench::store
