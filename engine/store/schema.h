#pragma once
// The session file's schema (format kSchemaVersion), where each record type is stored, and the
// statements that fill it. Shared by the writer, the reader and bench_ingest, whose bare-SQLite
// reference must insert into identical tables.
//
// Every stored row carries `seq`, a number the writer gives each row in arrival order across all
// tables, so replay can break time ties by arrival. Enumerations are stored as their wire values;
// u64 counters as the int64 with the same bits.
//
// Spans are the bulk of a session (millions per run) and are asked for as "these ranks, overlapping
// [t0, t1]". They live in a WITHOUT ROWID table clustered on (rank, begin_ns, seq): one B-tree,
// where a rowid table plus an index on (rank, begin_ns) needs two, so ingest runs about 1.3x
// faster (measured on the 2-core dev VM: 630k against 480k rows/s) and the file is a third
// smaller; a rank's spans in a window are contiguous leaf pages. Overlap also needs
// end_ns >= t0, which no B-tree orders, so the writer keeps meta.max_span_ns, the longest span
// stored, and the reader scans begin_ns in [t0 - max_span_ns, t1] and filters end_ns >= t0 (a few
// long spans widen the scan by their length, no more). An R*Tree was rejected: its coordinates are
// 32-bit (floats or ints), too narrow for nanosecond timestamps, so it would need a second lookup
// per span, and each insert touches several nodes. meta.span_count saves counting millions of rows.
// The small tables are rowid tables keyed by seq with an index on their time for replay; expert
// loads also have one on step ("expert loads for step s").
//
// Imported sessions (format 3) add their source files, kernel names, kernels and device time per
// class (imported_trace.h). Kernels are clustered as spans are, on (rank, begin_ns, seq), and a
// query for a window bounds its scan by meta.max_kernel_ns, the longest kernel stored.

#include "wire/record_fields.h"

#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace meshbench::store::schema {

inline constexpr std::string_view kCreateTables = R"sql(
CREATE TABLE meta(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  schema_version INTEGER NOT NULL,
  engine_version TEXT NOT NULL,
  created_ns INTEGER NOT NULL,
  name TEXT NOT NULL,
  layout TEXT NOT NULL,
  max_span_ns INTEGER NOT NULL,
  span_count INTEGER NOT NULL,
  max_kernel_ns INTEGER NOT NULL DEFAULT 0);
CREATE TABLE job(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  spec TEXT NOT NULL,
  plan_json TEXT NOT NULL);
CREATE TABLE outcome(
  id INTEGER PRIMARY KEY CHECK (id = 1),
  state TEXT NOT NULL,
  cause TEXT NOT NULL,
  failed_rank INTEGER NOT NULL,
  ended_ns INTEGER NOT NULL);
CREATE TABLE ranks(
  rank INTEGER PRIMARY KEY,
  dp INTEGER NOT NULL, pp INTEGER NOT NULL, tp INTEGER NOT NULL, ep INTEGER NOT NULL,
  node INTEGER NOT NULL, local_device INTEGER NOT NULL,
  host TEXT NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE traffic(
  rank INTEGER PRIMARY KEY,
  received INTEGER NOT NULL, lost INTEGER NOT NULL, dropped INTEGER NOT NULL);
CREATE TABLE spans(
  rank INTEGER NOT NULL, begin_ns INTEGER NOT NULL, seq INTEGER NOT NULL,
  end_ns INTEGER NOT NULL, step INTEGER NOT NULL, stage INTEGER NOT NULL, chunk INTEGER NOT NULL,
  microbatch INTEGER NOT NULL, kind INTEGER NOT NULL, peer INTEGER NOT NULL, bytes INTEGER NOT NULL,
  PRIMARY KEY (rank, begin_ns, seq)) WITHOUT ROWID;
CREATE TABLE expert_loads(
  seq INTEGER PRIMARY KEY, rank INTEGER NOT NULL, time_ns INTEGER NOT NULL,
  step INTEGER NOT NULL, layer INTEGER NOT NULL, expert INTEGER NOT NULL,
  routed INTEGER NOT NULL, dropped INTEGER NOT NULL);
CREATE INDEX expert_loads_by_step ON expert_loads(step);
CREATE INDEX expert_loads_by_time ON expert_loads(time_ns);
CREATE TABLE memory_samples(
  seq INTEGER PRIMARY KEY, rank INTEGER NOT NULL, time_ns INTEGER NOT NULL, step INTEGER NOT NULL,
  category INTEGER NOT NULL, current_bytes INTEGER NOT NULL, peak_bytes INTEGER NOT NULL);
CREATE INDEX memory_samples_by_time ON memory_samples(time_ns);
CREATE TABLE step_metrics(
  seq INTEGER PRIMARY KEY, rank INTEGER NOT NULL, step INTEGER NOT NULL,
  begin_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  loss REAL, aux_loss REAL, grad_norm REAL, learning_rate REAL, tokens_per_s REAL, bubble_ratio REAL,
  tokens INTEGER NOT NULL);
CREATE INDEX step_metrics_by_end ON step_metrics(end_ns);
CREATE TABLE node_samples(
  seq INTEGER PRIMARY KEY, rank INTEGER NOT NULL, time_ns INTEGER NOT NULL, host TEXT NOT NULL,
  host_memory_total INTEGER NOT NULL, host_memory_used INTEGER NOT NULL, device INTEGER NOT NULL,
  device_memory_total INTEGER NOT NULL, device_memory_used INTEGER NOT NULL, device_utilization REAL);
CREATE INDEX node_samples_by_time ON node_samples(time_ns);
CREATE TABLE logs(
  seq INTEGER PRIMARY KEY, rank INTEGER NOT NULL, time_ns INTEGER NOT NULL, level INTEGER NOT NULL,
  text TEXT NOT NULL);
CREATE INDEX logs_by_time ON logs(time_ns);
CREATE TABLE heartbeats(
  seq INTEGER PRIMARY KEY, rank INTEGER NOT NULL, time_ns INTEGER NOT NULL, state INTEGER NOT NULL,
  step INTEGER NOT NULL, pid INTEGER NOT NULL, detail INTEGER NOT NULL, dropped_records INTEGER NOT NULL,
  host TEXT NOT NULL);
CREATE INDEX heartbeats_by_time ON heartbeats(time_ns);
CREATE TABLE clock_offsets(
  seq INTEGER PRIMARY KEY, rank INTEGER NOT NULL, time_ns INTEGER NOT NULL, offset_ns INTEGER NOT NULL,
  round_trip_ns INTEGER NOT NULL);
CREATE INDEX clock_offsets_by_time ON clock_offsets(time_ns);
CREATE TABLE import_sources(
  seq INTEGER PRIMARY KEY, path TEXT NOT NULL, bytes INTEGER NOT NULL, digest TEXT NOT NULL, format TEXT NOT NULL,
  rank INTEGER NOT NULL, recognised TEXT NOT NULL, inferred TEXT NOT NULL);
CREATE TABLE kernel_names(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE kernels(
  rank INTEGER NOT NULL, begin_ns INTEGER NOT NULL, seq INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  device INTEGER NOT NULL, stream INTEGER NOT NULL, class INTEGER NOT NULL, name INTEGER NOT NULL,
  step INTEGER NOT NULL,
  PRIMARY KEY (rank, begin_ns, seq)) WITHOUT ROWID;
CREATE TABLE device_time(
  rank INTEGER NOT NULL, step INTEGER NOT NULL, class INTEGER NOT NULL, busy_ns INTEGER NOT NULL,
  exposed_ns INTEGER NOT NULL,
  PRIMARY KEY (rank, step, class)) WITHOUT ROWID;
)sql";

// WAL so readers see committed data while the writer goes on and a killed writer loses only the
// transaction in flight; synchronous=NORMAL syncs at checkpoints only, which keeps every commit
// that reached the WAL across a crash of the process (not across a power cut). 64 MiB of page cache
// keeps the B-trees' hot pages in memory during ingest.
inline constexpr std::string_view kWriterPragmas =
    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;";

// Where each record type is stored: its table, what messages call its rows, and the column replay
// orders them by.
template <class R>
struct TableOf {
    std::string_view name;
    std::string_view rows;
    std::string_view time;
};

template <class R>
constexpr TableOf<R> table(std::string_view name, std::string_view rows, std::string_view time = "time_ns")
{
    return {name, rows, time};
}

inline constexpr auto kTables = std::tuple{
    table<wire::SpanRecord>("spans", "spans", "begin_ns"),
    table<wire::ExpertLoadRecord>("expert_loads", "expert loads"),
    table<wire::MemorySampleRecord>("memory_samples", "memory samples"),
    table<wire::StepMetricsRecord>("step_metrics", "step metrics", "end_ns"),
    table<wire::NodeSampleRecord>("node_samples", "node samples"),
    table<wire::LogRecord>("logs", "log lines"),
    table<wire::HeartbeatRecord>("heartbeats", "heartbeats"),
    table<wire::ClockOffsetRecord>("clock_offsets", "clock offsets"),
};

template <class R>
inline constexpr TableOf<R> kTable = std::get<TableOf<R>>(kTables);

// The columns of a record's rows in the table's order: those no field fills (seq, rank; expert
// loads' time and expert index, one row per expert) and the record's fields, by the names
// record_fields.h gives them. The statements below and the reader's queries list the columns in
// this order; tst_session_store checks it against the tables kCreateTables makes.
inline constexpr std::string_view kSeqRankAndFields[] = {"seq", "rank", wire::kOtherFields};
inline constexpr std::string_view kSpanColumns[] = {"rank", "begin_ns", "seq", "end_ns", wire::kOtherFields};
inline constexpr std::string_view kExpertLoadColumns[] = {"seq",   "rank",   "time_ns",         "step",
                                                          "layer", "expert", wire::kOtherFields};
inline constexpr std::string_view kMemorySampleColumns[] = {"seq", "rank", "time_ns", wire::kOtherFields};

template <class R>
constexpr const auto& columnOrder()
{
    if constexpr (std::is_same_v<R, wire::SpanRecord>)
        return kSpanColumns;
    else if constexpr (std::is_same_v<R, wire::ExpertLoadRecord>)
        return kExpertLoadColumns;
    else if constexpr (std::is_same_v<R, wire::MemorySampleRecord>)
        return kMemorySampleColumns;
    else
        return kSeqRankAndFields;
}

template <class R>
using TableColumns = wire::Columns<R, columnOrder<R>()>;

// The columns of R's table, comma-separated.
template <class R>
std::string columnList()
{
    std::string list;
    for (std::string_view column : TableColumns<R>::names) {
        if (!list.empty())
            list += ", ";
        list += column;
    }
    return list;
}

// Parameters are bound by index in the order the columns are listed.
template <class R>
std::string insertStatement()
{
    std::string sql = "INSERT INTO " + std::string(kTable<R>.name) + "(" + columnList<R>() + ") VALUES (";
    for (std::size_t i = 1; i <= TableColumns<R>::count; ++i)
        sql += (i > 1 ? ", ?" : "?") + std::to_string(i);
    return sql + ")";
}

// Columns come out in the order they are listed; the caller adds WHERE and ORDER BY.
template <class R>
std::string selectStatement()
{
    return "SELECT " + columnList<R>() + " FROM " + std::string(kTable<R>.name);
}

// bench_ingest's bare-SQLite reference binds these by index, as the writer does.
inline const std::string kInsertSpan = insertStatement<wire::SpanRecord>();
inline const std::string kInsertExpertLoad = insertStatement<wire::ExpertLoadRecord>();
inline const std::string kInsertMemorySample = insertStatement<wire::MemorySampleRecord>();
inline const std::string kInsertStepMetrics = insertStatement<wire::StepMetricsRecord>();
inline const std::string kInsertNodeSample = insertStatement<wire::NodeSampleRecord>();
inline const std::string kInsertLog = insertStatement<wire::LogRecord>();
inline const std::string kInsertHeartbeat = insertStatement<wire::HeartbeatRecord>();

}  // namespace meshbench::store::schema
