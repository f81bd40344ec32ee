#pragma once
// A session file: one SQLite database per run, written only by the engine and read by replay,
// export and the GUI. WAL mode so readers see committed data while the run goes on; one writer
// thread that commits queued records in batched transactions, so a killed engine leaves a file
// whose every committed batch is complete and that passes PRAGMA integrity_check.
//
// The schema version lives in PRAGMA user_version and the application id in PRAGMA
// application_id; a reader refuses a foreign SQLite file or one written by a newer format with a
// message that says so.

#include "imported_trace.h"
#include "wire/telemetry.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::store {

// Format 2 adds clock_offsets; a format-1 file reads as one without clock offsets. Format 3 adds what
// an import holds (imported_trace.h); an older file reads as one without.
constexpr std::int32_t kSchemaVersion = 3;
constexpr std::int32_t kApplicationId = 0x4D534842;  // "MSHB"

// Anything wrong with a session file: missing, not SQLite, not a session, corrupt, too new,
// locked by another writer, disk full. The message names the file and what to do.
class StoreError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class Outcome { Running, Completed, Failed, Stopped };
std::string_view outcomeName(Outcome outcome);
std::optional<Outcome> outcomeFromName(std::string_view name);

// The rank under which the engine stores records of its own: the launcher's output and its log
// lines about the run (a failure's cause, frames it rejected).
constexpr std::uint32_t kEngineRank = 0xFFFFFFFFu;

// One rank of the job and where it ran. host and pid are filled in once its first heartbeat arrives.
struct RankInfo {
    std::int32_t rank = 0;
    std::int32_t dp = 0, pp = 0, tp = 0, ep = 0;
    std::int32_t node = 0;
    std::int32_t localDevice = 0;
    std::string host;
    std::int32_t pid = 0;
    bool operator==(const RankInfo&) const = default;
};

struct SessionHeader {
    std::string name;      // the job's name
    std::string jobSpec;   // the job spec exactly as the user wrote it
    std::string planJson;  // engine/plan's plan of it (report JSON)
    std::string layout;    // short form, e.g. "dp2 pp2 tp2 ep2 1f1b"
    std::vector<RankInfo> ranks;
    std::int64_t createdNs = 0;  // wall clock
    std::string engineVersion;
    bool operator==(const SessionHeader&) const = default;
};

struct SessionOutcome {
    Outcome outcome = Outcome::Running;
    std::string cause;  // for failed and stopped: what happened, in words
    std::int32_t failedRank = -1;
    std::int64_t endedNs = 0;
    bool operator==(const SessionOutcome&) const = default;
};

// What arrived from one rank: records stored, records lost on the way (gaps in the sequence
// numbers) and records its agent had to drop (reported in its heartbeats).
struct RankTraffic {
    std::int32_t rank = 0;
    std::uint64_t received = 0;
    std::uint64_t lost = 0;
    std::uint64_t dropped = 0;
    bool operator==(const RankTraffic&) const = default;
};

class SessionWriter {
public:
    // Creates `path` (refusing to overwrite an existing file) and stores the header. Takes an
    // exclusive lock on the file for as long as the writer lives: a second writer gets a
    // StoreError naming the session.
    SessionWriter(const std::string& path, const SessionHeader& header);
    ~SessionWriter();  // commits everything queued, then closes
    SessionWriter(const SessionWriter&) = delete;
    SessionWriter& operator=(const SessionWriter&) = delete;

    // Thread-safe and non-blocking: queues a decoded batch for the writer thread.
    void append(wire::Batch batch);
    void updateRank(const RankInfo& rank);
    void setTraffic(const RankTraffic& traffic);
    void setOutcome(const SessionOutcome& outcome);
    // What an import adds (imported_trace.h). Kernel names are numbered from 0 in the order given,
    // over every call; a kernel's nameId refers to them.
    void addImportSource(const ImportSource& source);
    void addKernelNames(std::vector<std::string> names);
    void appendKernels(std::uint32_t rank, std::vector<KernelRow> kernels);
    void addDeviceTime(std::vector<DeviceTimeRow> rows);
    // Blocks until everything queued so far is committed. Throws StoreError if the writer thread
    // failed (disk full, file removed); everything committed before stays readable.
    void flush();
    const std::string& path() const;
    // Records queued and not yet committed: the collector stops taking frames while this is large,
    // so a store that falls behind pushes back on the agents instead of filling memory.
    std::size_t queuedRecords() const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// A span as stored, with the rank that produced it.
struct StoredSpan {
    std::uint32_t rank = 0;
    wire::SpanRecord span;
};
template <typename T>
struct FromRank {
    std::uint32_t rank = 0;
    T record;
    bool operator==(const FromRank&) const = default;
};

// The one-line description `meshbench-engine sessions` lists.
struct SessionSummary {
    std::string path;
    std::string name;
    std::int64_t createdNs = 0;
    std::string layout;
    SessionOutcome outcome;
    std::int32_t steps = 0;  // steps with metrics
    std::optional<double> finalLoss;
};

// The times a session's records may carry: from kClockMarginNs before the session was created to as
// long after it ended (or after now, for a session whose engine never said it ended); the margin
// allows for other hosts' clocks. A record dated beyond is damage, which would make a replay sleep,
// and an export draw, for as long as it says.
constexpr std::int64_t kClockMarginNs = 60'000'000'000;
struct RunWindow {
    std::int64_t beginNs = 0;
    std::int64_t endNs = 0;
    // Throws StoreError naming `session`, the rank and how far outside the window `timeNs` lies.
    void check(const std::string& session, std::uint32_t rank, std::int64_t timeNs) const;
};

// Reads a session, also one an engine is still writing (it sees what is committed). One reader may
// be used from several threads: SQLite serializes its connection. Every query throws StoreError
// when the file turns out to be corrupt.
class SessionReader {
public:
    // Opens read-only. Throws StoreError for a missing, truncated, corrupt, foreign or too-new file.
    explicit SessionReader(const std::string& path);
    ~SessionReader();
    SessionReader(const SessionReader&) = delete;
    SessionReader& operator=(const SessionReader&) = delete;

    // As it was when the reader opened (a rank's host and pid arrive later, with updateRank).
    const SessionHeader& header() const;
    SessionOutcome outcome() const;
    std::vector<RankTraffic> traffic() const;
    SessionSummary summary() const;
    // Reads every page once (SQLite's quick_check: b-tree structure, not index contents) and throws
    // StoreError, naming the file, at the first damage: for those that read a whole session (export,
    // replay), which then fail before they write or play anything. Linear in the file's size.
    void checkStructure() const;
    // The window as the session stands now (it moves while an engine writes the session).
    RunWindow runWindow() const;
    // RunWindow::check for every record, in one pass: for those that read a whole session (export).
    void checkRecordTimes() const;
    // First span begin and last span end over all ranks, or {0, 0} without spans.
    std::pair<std::int64_t, std::int64_t> timeRange() const;

    // Spans that overlap [t0, t1] on the given ranks (all ranks when empty), by begin time.
    void spans(std::int64_t t0, std::int64_t t1, std::span<const std::uint32_t> ranks,
               const std::function<void(const StoredSpan&)>& visit) const;
    // Orders: expert loads by step, step metrics by step then rank, the others by time; ties in
    // arrival order. A NaN (a diverged loss) is stored as NULL and reads back as NaN. An expert
    // load with no experts stores nothing.
    std::vector<FromRank<wire::ExpertLoadRecord>> expertLoads(std::optional<std::int32_t> step = {}) const;
    std::vector<FromRank<wire::StepMetricsRecord>> stepMetrics() const;
    std::vector<FromRank<wire::MemorySampleRecord>> memorySamples() const;
    std::vector<FromRank<wire::NodeSampleRecord>> nodeSamples() const;
    std::vector<FromRank<wire::LogRecord>> logs() const;
    std::vector<FromRank<wire::HeartbeatRecord>> heartbeats() const;
    // The clock offsets each rank measured, their times on the engine's clock like every stored
    // record's (the rank's own clock read time + offset).
    std::vector<FromRank<wire::ClockOffsetRecord>> clockOffsets() const;
    std::uint64_t spanCount() const;

    // What an import added (empty for sessions of our own agent and older files).
    std::vector<ImportSource> importSources() const;
    std::vector<std::string> kernelNames() const;
    // Kernels that overlap [t0, t1] on the given ranks (all when empty), by rank then begin time.
    void kernels(std::int64_t t0, std::int64_t t1, std::span<const std::uint32_t> ranks,
                 const std::function<void(std::uint32_t rank, const KernelRow&)>& visit) const;
    std::uint64_t kernelCount() const;
    // By rank, step and class.
    std::vector<DeviceTimeRow> deviceTime() const;

    // Every stored record in time order (a record's time: span begin, step end, sample time, ...),
    // for replay; ties keep arrival order. Expert loads carry no time: theirs is the latest time
    // (span or step end, sample time) their rank sent before them, i.e. the end of their step.
    // With `from`, only the records whose time is at or after it (and the spans still running then):
    // a replay that seeks starts there instead of reading the session from its beginning.
    void forEachRecord(const std::function<void(std::uint32_t rank, const wire::Record&)>& visit,
                       std::int64_t from = std::numeric_limits<std::int64_t>::min()) const;

private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
};

// Every session file (*.meshbench) in `dir`, newest first; files that fail to open are listed
// apart with the reason. Throws StoreError when `dir` does not exist or cannot be listed.
struct SessionListing {
    std::vector<SessionSummary> sessions;
    std::vector<std::pair<std::string, std::string>> unreadable;  // path, why
};
SessionListing listSessions(const std::string& dir);

}  // namespace meshbench::store
