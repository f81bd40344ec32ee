#pragma once
// The session file's schema (format kSchemaVersion) and the statements that fill it. Shared by the
// writer, the reader and bench_ingest, whose bare-SQLite reference must insert into identical tables.
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

#include <string_view>

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
  span_count INTEGER NOT NULL);
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
)sql";

// WAL so readers see committed data while the writer goes on and a killed writer loses only the
// transaction in flight; synchronous=NORMAL syncs at checkpoints only, which keeps every commit
// that reached the WAL across a crash of the process (not across a power cut). 64 MiB of page cache
// keeps the B-trees' hot pages in memory during ingest.
inline constexpr std::string_view kWriterPragmas =
    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;";

// Parameters are bound by index in the order the columns are listed.
inline constexpr std::string_view kInsertSpan =
    "INSERT INTO spans(rank, begin_ns, seq, end_ns, step, stage, chunk, microbatch, kind, peer, bytes) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";
inline constexpr std::string_view kInsertExpertLoad =
    "INSERT INTO expert_loads(seq, rank, time_ns, step, layer, expert, routed, dropped) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
inline constexpr std::string_view kInsertMemorySample =
    "INSERT INTO memory_samples(seq, rank, time_ns, step, category, current_bytes, peak_bytes) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
inline constexpr std::string_view kInsertStepMetrics =
    "INSERT INTO step_metrics(seq, rank, step, begin_ns, end_ns, loss, aux_loss, grad_norm, learning_rate, "
    "tokens_per_s, bubble_ratio, tokens) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";
inline constexpr std::string_view kInsertNodeSample =
    "INSERT INTO node_samples(seq, rank, time_ns, host, host_memory_total, host_memory_used, device, "
    "device_memory_total, device_memory_used, device_utilization) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)";
inline constexpr std::string_view kInsertLog =
    "INSERT INTO logs(seq, rank, time_ns, level, text) VALUES (?1, ?2, ?3, ?4, ?5)";
inline constexpr std::string_view kInsertHeartbeat =
    "INSERT INTO heartbeats(seq, rank, time_ns, state, step, pid, detail, dropped_records, host) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

inline constexpr std::string_view kInsertClockOffset =
    "INSERT INTO clock_offsets(seq, rank, time_ns, offset_ns, round_trip_ns) VALUES (?1, ?2, ?3, ?4, ?5)";

}  // namespace meshbench::store::schema
