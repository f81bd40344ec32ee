#pragma once
// The telemetry wire format: what an agent sends the engine, many records per ZeroMQ message.
//
// A batch is a 24-byte header followed by `count` records, all little-endian:
//   u32 magic "MBTW" | u16 format version | u16 flags (0) | u32 rank | u64 sequence | u32 count
// `sequence` is the number of records this rank sent before the batch, so the engine counts
// lost records exactly: the next batch of a rank must start at sequence + count.
// A record is u8 type | u8 reserved (0) | u16 reserved (0) | u32 body length | body. The length
// lets a reader skip a record type it does not know (a newer agent) and ignore fields appended
// to a known type by a newer format version; a body shorter than the fields this version defines
// is malformed. Strings are u32 length + UTF-8 bytes; arrays u32 count + elements.
//
// Record bodies, format version 1 (i/u = signed/unsigned integer, f = IEEE-754 bit pattern, widths
// in bits, no padding; enums are u8), each record's fields in the order record_fields.h lists them
// (the codec, the store and the exports walk that list; the sizes here are checked against it):
//   1 span (41 bytes):           i32 step | i16 stage | i16 chunk | i32 microbatch | u8 kind | i32 peer rank |
//                                i64 begin ns | i64 end ns | u64 bytes
//   2 expert load (16 + 8n):     i32 step | i32 layer | u32 n | n x u32 routed | u32 n | n x u32 dropped
//   3 memory sample (29 bytes):  i32 step | i64 time ns | u8 category | i64 current bytes | i64 peak bytes
//   4 step metrics (76 bytes):   i32 step | i64 begin ns | i64 end ns | f64 loss | f64 aux loss | f64 grad norm |
//                                f64 learning rate | f64 tokens/s | f64 bubble ratio | i64 tokens
//   5 node sample (52 + host):   i64 time ns | string host | i64 host memory total | i64 host memory used |
//                                i32 device | i64 device memory total | i64 device memory used | f32 utilization
//   6 log (13 + text):           i64 time ns | u8 level | string text
//   7 heartbeat (33 + host):     i64 time ns | u8 state | i32 step | i32 pid | i32 detail | u64 dropped records |
//                                string host
//   8 clock offset (24 bytes):   i64 time ns | i64 offset ns | i64 round trip ns
//
// Growing the format: appending fields to a body or adding a record type keeps the format version
// (an older reader ignores the tail, skips the type); the version goes up only when an older
// reader would misread a frame, and a reader refuses versions newer than its own.
//
// The decoder validates every length against the bytes that remain before reading, so no input
// can make it read out of bounds; it rejects anything malformed with a message saying where.
// Limits: a frame of at most kMaxBatchBytes and kMaxRecordsPerBatch records, expert arrays of at
// most kMaxExpertsPerLayer entries, strings of at most kMaxTextBytes bytes of valid UTF-8 (so the
// store, the CSV and the JSON export never meet invalid text).

#include <csignal>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace meshbench::wire {

constexpr std::uint32_t kBatchMagic = 0x5754424D;  // bytes 'M' 'B' 'T' 'W'
constexpr std::uint16_t kFormatVersion = 1;
constexpr std::size_t kBatchHeaderBytes = 24;
constexpr std::size_t kMaxBatchBytes = std::size_t(64) << 20;  // a larger frame is refused unread
constexpr std::uint32_t kMaxRecordsPerBatch = 1u << 22;
constexpr std::uint32_t kMaxExpertsPerLayer = 1u << 16;
constexpr std::uint32_t kMaxTextBytes = 1u << 16;

enum class RecordType : std::uint8_t {
    Span = 1,
    ExpertLoad = 2,
    MemorySample = 3,
    StepMetrics = 4,
    NodeSample = 5,
    Log = 6,
    Heartbeat = 7,
    ClockOffset = 8,
};

// What a span of a rank's timeline was doing. The names are the agent's op names (plan::opKindName
// for pipeline ops), so a measured span and a planned op compare by name.
enum class SpanKind : std::uint8_t {
    Forward = 0,             // "F"
    Backward = 1,            // "B"
    WeightGrad = 2,          // "W"  (zero-bubble split backward)
    SendActivation = 3,      // "send-act"
    RecvActivation = 4,      // "recv-act"
    SendGradient = 5,        // "send-grad"
    RecvGradient = 6,        // "recv-grad"
    Optimizer = 7,           // "optimizer"
    DataParallelReduce = 8,  // "dp-reduce"
    Idle = 9,                // "idle"
};
constexpr int kSpanKinds = 10;
std::string_view spanKindName(SpanKind kind);
std::optional<SpanKind> spanKindFromName(std::string_view name);
// Forward, backward and weight-gradient work: what the bubble ratio counts as busy.
bool isComputeKind(SpanKind kind);
// Compute and the four sends and receives: the spans of a step's pipeline phase.
bool isPipelineKind(SpanKind kind);
bool isCommunicationKind(SpanKind kind);

struct SpanRecord {
    std::int32_t step = 0;
    std::int16_t stage = 0;
    std::int16_t chunk = 0;        // virtual pipeline chunk
    std::int32_t microbatch = -1;  // -1 for spans of the whole step
    SpanKind kind = SpanKind::Forward;
    std::int32_t peerRank = -1;  // world rank on the other side of a send/recv, else -1
    std::int64_t beginNs = 0;    // wall-clock aligned nanoseconds (see below)
    std::int64_t endNs = 0;
    std::uint64_t bytes = 0;  // moved, for communication
    bool operator==(const SpanRecord&) const = default;
};
// A span's name on every timeline (the Chrome trace, NVTX ranges): its kind, and for a
// micro-batch's op the micro-batch and the virtual chunk, "F mb3 chunk0".
std::string spanLabel(const SpanRecord& span);

// Tokens routed to (before capacity) and dropped by (capacity) each expert of one MoE layer in one
// step, summed over the step's micro-batches and the data-parallel group.
struct ExpertLoadRecord {
    std::int32_t step = 0;
    std::int32_t layer = 0;              // global layer index
    std::vector<std::uint32_t> routed;   // [experts]
    std::vector<std::uint32_t> dropped;  // [experts], same length as routed
    bool operator==(const ExpertLoadRecord&) const = default;
};

enum class MemoryCategory : std::uint8_t { Params = 0, Grads = 1, Optimizer = 2, Activations = 3, Workspace = 4 };
constexpr int kMemoryCategories = 5;
std::string_view memoryCategoryName(MemoryCategory category);
std::optional<MemoryCategory> memoryCategoryFromName(std::string_view name);

struct MemorySampleRecord {
    std::int32_t step = 0;
    std::int64_t timeNs = 0;
    MemoryCategory category = MemoryCategory::Params;
    std::int64_t currentBytes = 0;
    std::int64_t peakBytes = 0;  // peak during the step
    bool operator==(const MemorySampleRecord&) const = default;
};

struct StepMetricsRecord {
    std::int32_t step = 0;
    std::int64_t beginNs = 0;
    std::int64_t endNs = 0;
    double loss = 0;
    double auxLoss = 0;
    double gradNorm = 0;
    double learningRate = 0;
    double tokensPerSecond = 0;
    double bubbleRatio = 0;   // as the agent measured it over the pipeline phase
    std::int64_t tokens = 0;  // tokens in the step's global batch
    bool operator==(const StepMetricsRecord&) const = default;
};

// A node's view, sent by local rank 0 of each node. -1 where a figure is not available (no GPU).
struct NodeSampleRecord {
    std::int64_t timeNs = 0;
    std::string host;
    std::int64_t hostMemoryTotalBytes = -1;
    std::int64_t hostMemoryUsedBytes = -1;
    std::int32_t device = -1;  // local device index, -1 for the CPU
    std::int64_t deviceMemoryTotalBytes = -1;
    std::int64_t deviceMemoryUsedBytes = -1;
    float deviceUtilization = -1;  // 0..1
    bool operator==(const NodeSampleRecord&) const = default;
};

enum class LogLevel : std::uint8_t { Debug = 0, Info = 1, Warning = 2, Error = 3 };
constexpr int kLogLevels = 4;
std::string_view logLevelName(LogLevel level);

struct LogRecord {
    std::int64_t timeNs = 0;
    LogLevel level = LogLevel::Info;
    std::string text;
    bool operator==(const LogRecord&) const = default;
};

// Where a rank is in its life. Running heartbeats come every second; the last heartbeat of a rank
// that ends by itself says Finished (detail 0) or Failed (detail = exit status), and one that is
// asked to stop by a signal says Terminated (detail = the signal).
//
// How the engine stops a job: kEngineStopSignal to the launcher, which mpirun forwards to every rank
// (it forwards SIGUSR1 and SIGUSR2). A rank of a multi-rank job then says Terminated and waits, its
// connections still open, to be ended (SIGTERM, or kStopLingerSeconds at most): a rank that exited at
// once would make its peers' MPI abort them before they had said so. Any other stop signal
// (SIGTERM, SIGINT, SIGHUP) ends the rank right after its last heartbeat.
// (The agent has the handler whenever it sends telemetry, as every agent the engine starts does.)
constexpr int kEngineStopSignal = SIGUSR2;
constexpr int kStopLingerSeconds = 30;
// The exit status, and the Failed heartbeat's detail, of a rank whose collective failed: a peer
// ended or the network broke. The engine weighs it below any evidence about that peer.
constexpr int kCommunicationFailedStatus = 3;
enum class RankState : std::uint8_t { Starting = 0, Running = 1, Finished = 2, Failed = 3, Terminated = 4 };
constexpr int kRankStates = 5;
std::string_view rankStateName(RankState state);
// Finished, Failed or Terminated: a rank's last word.
bool isFinal(RankState state);

struct HeartbeatRecord {
    std::int64_t timeNs = 0;
    RankState state = RankState::Running;
    std::int32_t step = 0;  // optimizer steps completed
    std::int32_t pid = 0;
    std::int32_t detail = 0;
    std::uint64_t droppedRecords = 0;  // dropped by the agent's bounded queue so far
    std::string host;
    bool operator==(const HeartbeatRecord&) const = default;
};

// How far this rank's clock is from the engine's, measured by the clock exchange (wire/clock.h):
// the rank's clock minus the engine's at timeNs (the rank's clock), from the exchange with the
// shortest round trip of a burst, which bounds the error by half that round trip. A rank sends one
// before anything else it sends and then every few seconds; the engine moves the rank's later
// records onto its own clock with them (and stores them as sent).
struct ClockOffsetRecord {
    std::int64_t timeNs = 0;
    std::int64_t offsetNs = 0;
    std::int64_t roundTripNs = 0;
    bool operator==(const ClockOffsetRecord&) const = default;
};

using Record = std::variant<SpanRecord, ExpertLoadRecord, MemorySampleRecord, StepMetricsRecord, NodeSampleRecord,
                            LogRecord, HeartbeatRecord, ClockOffsetRecord>;
// A record's time: a span's begin, a step's end, a sample's time; none for an expert load (it is
// the end of its step, which its rank's other records give).
std::optional<std::int64_t> recordTimeNs(const Record& record);

RecordType recordType(const Record& record);

struct Batch {
    std::uint32_t rank = 0;
    std::uint64_t sequence = 0;
    std::vector<Record> records;
    bool operator==(const Batch&) const = default;
};

// Appends the encoding of `batch` to `out`. Strings are made to fit: invalid UTF-8 bytes become
// U+FFFD and a string longer than kMaxTextBytes is cut after its last whole character that fits.
// Throws std::invalid_argument (leaving `out` as it was) for what the agent must not send: an enum
// value out of range, expert arrays of unequal length or longer than kMaxExpertsPerLayer, more
// than kMaxRecordsPerBatch records or a frame over kMaxBatchBytes (split the batch).
void encodeBatch(const Batch& batch, std::vector<std::uint8_t>& out);
std::vector<std::uint8_t> encodeBatch(const Batch& batch);

struct DecodeResult {
    std::optional<Batch> batch;        // set when the frame is valid
    std::string error;                 // otherwise: what is wrong and at which byte offset
    std::uint32_t skippedRecords = 0;  // records of types this version does not know
    std::uint16_t version = 0;         // the frame's format version, when the header was readable
};
DecodeResult decodeBatch(std::span<const std::uint8_t> frame);

}  // namespace meshbench::wire
