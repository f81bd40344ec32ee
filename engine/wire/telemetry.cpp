#include "telemetry.h"

#include "record_fields.h"
#include "text.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace meshbench::wire {

namespace {

constexpr std::size_t kRecordHeaderBytes = 8;

constexpr std::string_view kSpanKindNames[] = {"F",         "B",         "W",         "send-act",  "recv-act",
                                               "send-grad", "recv-grad", "optimizer", "dp-reduce", "idle"};
constexpr std::string_view kMemoryCategoryNames[] = {"params", "grads", "optimizer", "activations", "workspace"};
constexpr std::string_view kLogLevelNames[] = {"debug", "info", "warning", "error"};
constexpr std::string_view kRankStateNames[] = {"starting", "running", "finished", "failed", "terminated"};
static_assert(std::size(kSpanKindNames) == std::size_t(kSpanKinds) &&
              std::size(kMemoryCategoryNames) == std::size_t(kMemoryCategories) &&
              std::size(kLogLevelNames) == std::size_t(kLogLevels) &&
              std::size(kRankStateNames) == std::size_t(kRankStates));

// std::to_underlying is C++23.
template <class Enum>
constexpr auto underlying(Enum value)
{
    return static_cast<std::underlying_type_t<Enum>>(value);
}

template <std::size_t N>
std::string_view nameAt(const std::string_view (&names)[N], std::size_t index)
{
    return index < N ? names[index] : std::string_view("unknown");
}

template <class Enum, std::size_t N>
std::optional<Enum> enumFromName(const std::string_view (&names)[N], std::string_view name)
{
    for (std::size_t i = 0; i < N; ++i)
        if (names[i] == name)
            return static_cast<Enum>(i);
    return std::nullopt;
}

// ---- little-endian scalars, whatever the host's byte order ----

template <class T>
using UnsignedOf =
    std::conditional_t<sizeof(T) == 1, std::uint8_t,
                       std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                          std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;

template <class T>
void storeLe(std::uint8_t* at, T value)
{
    using U = UnsignedOf<T>;
    U bits;
    if constexpr (std::is_enum_v<T>)
        bits = static_cast<U>(underlying(value));
    else if constexpr (std::is_floating_point_v<T>)
        bits = std::bit_cast<U>(value);
    else
        bits = static_cast<U>(value);
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(at, &bits, sizeof bits);
    } else {
        for (std::size_t i = 0; i < sizeof bits; ++i)
            at[i] = static_cast<std::uint8_t>(bits >> (8 * i));
    }
}

template <class T>
T loadLe(const std::uint8_t* at)
{
    using U = UnsignedOf<T>;
    U bits;
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(&bits, at, sizeof bits);
    } else {
        bits = 0;
        for (std::size_t i = 0; i < sizeof bits; ++i)
            bits = static_cast<U>(bits | static_cast<U>(U(at[i]) << (8 * i)));
    }
    if constexpr (std::is_floating_point_v<T>)
        return std::bit_cast<T>(bits);
    else
        return static_cast<T>(bits);
}

// ---- UTF-8 ----

// Writes `text` as the encoder sends it (to `out` unless null) and returns its length: each byte
// that does not start a well-formed sequence becomes U+FFFD, and the text ends after the last
// whole character that fits in kMaxTextBytes.
std::size_t sanitizeUtf8(std::string_view text, std::uint8_t* out)
{
    constexpr std::uint8_t kReplacement[] = {0xEF, 0xBF, 0xBD};
    const auto* in = reinterpret_cast<const std::uint8_t*>(text.data());
    std::size_t read = 0;
    std::size_t written = 0;
    while (read < text.size()) {
        const std::size_t room = kMaxTextBytes - written;
        const std::uint8_t* piece = in + read;
        std::size_t consumed = 0;
        std::size_t pieceLength = 0;
        if (in[read] < 0x80) {  // a run of ASCII is copied whole: the common case
            const std::size_t end = std::min(text.size(), read + room);
            while (read + consumed < end && in[read + consumed] < 0x80)
                ++consumed;
            pieceLength = consumed;
        } else if ((consumed = wellFormedUtf8Length(piece, text.size() - read)) > 0) {
            pieceLength = consumed;
        } else {
            piece = kReplacement;
            pieceLength = sizeof kReplacement;
            consumed = 1;
        }
        if (pieceLength == 0 || pieceLength > room)
            break;
        if (out)
            std::memcpy(out + written, piece, pieceLength);
        written += pieceLength;
        read += consumed;
    }
    return written;
}

// ---- record types ----

template <class T>
constexpr RecordType recordTypeOf()
{
    if constexpr (std::is_same_v<T, SpanRecord>)
        return RecordType::Span;
    else if constexpr (std::is_same_v<T, ExpertLoadRecord>)
        return RecordType::ExpertLoad;
    else if constexpr (std::is_same_v<T, MemorySampleRecord>)
        return RecordType::MemorySample;
    else if constexpr (std::is_same_v<T, StepMetricsRecord>)
        return RecordType::StepMetrics;
    else if constexpr (std::is_same_v<T, NodeSampleRecord>)
        return RecordType::NodeSample;
    else if constexpr (std::is_same_v<T, LogRecord>)
        return RecordType::Log;
    else if constexpr (std::is_same_v<T, HeartbeatRecord>)
        return RecordType::Heartbeat;
    else {
        static_assert(std::is_same_v<T, ClockOffsetRecord>, "a new record type needs its RecordType here");
        return RecordType::ClockOffset;
    }
}

std::string_view recordTypeName(RecordType type)
{
    switch (type) {
    case RecordType::Span:
        return "span";
    case RecordType::ExpertLoad:
        return "expert load";
    case RecordType::MemorySample:
        return "memory sample";
    case RecordType::StepMetrics:
        return "step metrics";
    case RecordType::NodeSample:
        return "node sample";
    case RecordType::Log:
        return "log";
    case RecordType::Heartbeat:
        return "heartbeat";
    case RecordType::ClockOffset:
        return "clock offset";
    }
    return {};  // a type this version does not know
}

std::string str(std::string_view text) { return std::string(text); }

// "a span": how the decoder names a record whose body is too short.
std::string aRecordOf(RecordType type)
{
    if (type == RecordType::StepMetrics)
        return "a step metrics record";
    const std::string_view name = recordTypeName(type);
    return (name.find_first_of("aeiou") == 0 ? "an " : "a ") + str(name);
}

// ---- record bodies: the fields of record_fields.h in order ----

template <class T>
inline constexpr bool kIsArray = false;
template <class T>
inline constexpr bool kIsArray<std::vector<T>> = true;

template <class T>
inline constexpr bool kIsString = std::is_same_v<T, std::string>;

// A field's bytes on the wire, without a string's or an array's contents (their u32 length only).
template <class T>
constexpr std::size_t fixedBytes()
{
    if constexpr (kIsString<T> || kIsArray<T>)
        return 4;
    else
        return sizeof(T);
}

// A body's size with empty strings and arrays.
template <class R>
inline constexpr std::size_t kFixedBody =
    std::apply([](const auto&... field) { return (fixedBytes<typename std::decay_t<decltype(field)>::Value>() + ...); },
               kFields<R>);

// The layout table in telemetry.h.
static_assert(kFixedBody<SpanRecord> == 41 && kFixedBody<ExpertLoadRecord> == 16 &&
              kFixedBody<MemorySampleRecord> == 29 && kFixedBody<StepMetricsRecord> == 76 &&
              kFixedBody<NodeSampleRecord> == 52 && kFixedBody<LogRecord> == 13 && kFixedBody<HeartbeatRecord> == 33 &&
              kFixedBody<ClockOffsetRecord> == 24);

// No known record is smaller, so a frame holds at most (bytes / this) records that are kept.
constexpr std::size_t kSmallestKnownRecord = [] {
    std::size_t smallest = kMaxBatchBytes;
    forEachRecordType([&](auto type) { smallest = std::min(smallest, kFixedBody<typename decltype(type)::type>); });
    return kRecordHeaderBytes + smallest;
}();

// ---- encoding ----

[[noreturn]] void refuse(std::size_t index, RecordType type, const std::string& what)
{
    throw std::invalid_argument("telemetry record " + std::to_string(index) + " (" + str(recordTypeName(type)) +
                                "): " + what);
}

void checkEnum(std::size_t index, RecordType type, std::string_view field, unsigned value, int count)
{
    if (value >= unsigned(count))
        refuse(index, type,
               str(field) + " " + std::to_string(value) + " is out of range (0.." + std::to_string(count - 1) + ")");
}

// Expert loads' arrays: one entry per expert in each.
void checkExpertArrays(const ExpertLoadRecord& r, std::size_t index)
{
    if (r.routed.size() != r.dropped.size())
        refuse(index, RecordType::ExpertLoad,
               std::to_string(r.routed.size()) + " routed counts but " + std::to_string(r.dropped.size()) +
                   " dropped counts; both need one entry per expert");
    if (r.routed.size() > kMaxExpertsPerLayer)
        refuse(index, RecordType::ExpertLoad,
               std::to_string(r.routed.size()) + " experts exceed the limit of " + std::to_string(kMaxExpertsPerLayer));
}

// A body's size, with the checks that make the frame one the decoder accepts.
template <class R>
std::size_t checkedBodySize(const R& r, std::size_t index)
{
    if constexpr (std::is_same_v<R, ExpertLoadRecord>)
        checkExpertArrays(r, index);
    std::size_t size = kFixedBody<R>;
    forEachField(r, [&](const auto& field, const auto& value) {
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_enum_v<T>)
            checkEnum(index, recordTypeOf<R>(), field.what(), underlying(value), EnumInfo<T>::count);
        else if constexpr (kIsString<T>)
            size += sanitizeUtf8(value, nullptr);
        else if constexpr (kIsArray<T>)
            size += sizeof(typename T::value_type) * value.size();
    });
    return size;
}

// Writes into space the caller has sized exactly, so no write needs a bounds check.
class Writer {
public:
    explicit Writer(std::uint8_t* at) : m_at(at) {}

    std::uint8_t* at() const { return m_at; }

    template <class T>
    void put(T value)
    {
        storeLe(m_at, value);
        m_at += sizeof(T);
    }

    void putString(const std::string& text)
    {
        const std::size_t length = sanitizeUtf8(text, m_at + 4);
        put(static_cast<std::uint32_t>(length));
        m_at += length;
    }

    void putArray(const std::vector<std::uint32_t>& values)
    {
        put(static_cast<std::uint32_t>(values.size()));
        for (std::uint32_t v : values)
            put(v);
    }

    template <class R>
    void writeBody(const R& r)
    {
        forEachField(r, [this](const auto&, const auto& value) {
            using T = std::decay_t<decltype(value)>;
            if constexpr (kIsString<T>)
                putString(value);
            else if constexpr (kIsArray<T>)
                putArray(value);
            else
                put(value);
        });
    }

private:
    std::uint8_t* m_at;
};

// ---- decoding ----

// Reads a record body whose bytes the caller has checked are there.
class Cursor {
public:
    Cursor(const std::uint8_t* at, const std::uint8_t* end) : m_at(at), m_end(end) {}

    std::size_t left() const { return std::size_t(m_end - m_at); }
    const std::uint8_t* at() const { return m_at; }

    template <class T>
    T take()
    {
        const T value = loadLe<T>(m_at);
        m_at += sizeof(T);
        return value;
    }

    void skip(std::size_t bytes) { m_at += bytes; }

private:
    const std::uint8_t* m_at;
    const std::uint8_t* m_end;
};

class FrameDecoder {
public:
    explicit FrameDecoder(std::span<const std::uint8_t> frame) : m_frame(frame) {}

    DecodeResult decode()
    {
        if (!decodeFrame()) {
            m_result.batch.reset();
            m_result.skippedRecords = 0;
        }
        return std::move(m_result);
    }

private:
    bool failFrame(std::string what)
    {
        m_result.error = std::move(what);
        return false;
    }

    bool fail(const std::string& what)
    {
        std::string kind;
        if (m_rawType >= 0) {
            const std::string_view name = recordTypeName(m_type);
            kind = " (" + (name.empty() ? "type " + std::to_string(m_rawType) : str(name)) + ")";
        }
        m_result.error = "record " + std::to_string(m_index) + kind + " at byte offset " +
                         std::to_string(m_recordOffset) + ": " + what;
        return false;
    }

    bool tooShort(std::size_t have, std::size_t need, const std::string& which)
    {
        return fail("body of " + std::to_string(have) + " bytes is shorter than the " + std::to_string(need) +
                    " bytes " + which + " needs; the frame is truncated or corrupt");
    }

    template <class Enum>
    bool takeEnum(Cursor& c, Enum& out, std::string_view field, int count)
    {
        const std::uint8_t raw = c.take<std::uint8_t>();
        if (raw >= count)
            return fail(str(field) + " " + std::to_string(raw) + " is out of range (0.." + std::to_string(count - 1) +
                        "); the frame is corrupt or from an incompatible agent");
        out = static_cast<Enum>(raw);
        return true;
    }

    // The string's length field is at the cursor; `need` is the body size with this string empty,
    // and grows by its length.
    bool takeString(Cursor& c, std::string& out, std::size_t bodyLength, std::size_t& need, std::string_view field)
    {
        const std::uint32_t length = c.take<std::uint32_t>();
        if (length > kMaxTextBytes)
            return fail(str(field) + " of " + std::to_string(length) + " bytes exceeds the limit of " +
                        std::to_string(kMaxTextBytes) + " bytes");
        if (bodyLength < need + length)
            return tooShort(bodyLength, need + length,
                            "a " + str(recordTypeName(m_type)) + " with a " + std::to_string(length) + "-byte " +
                                str(field));
        const std::span<const std::uint8_t> bytes(c.at(), length);
        const std::size_t bad = firstInvalidUtf8(bytes);
        if (bad != length)
            return fail(str(field) + " is not valid UTF-8 (byte " + std::to_string(bad) + " of " +
                        std::to_string(length) + ")");
        out.assign(reinterpret_cast<const char*>(bytes.data()), length);
        c.skip(length);
        need += length;
        return true;
    }

    // An expert load's arrays (routed, then dropped), one entry per expert: the first gives the
    // number of experts, the second must have as many. `taken` counts the arrays read before.
    // Checked up to the next array's count first, so unequal arrays are named as such.
    bool takeExpertArray(Cursor& c, std::vector<std::uint32_t>& out, std::size_t bodyLength, std::size_t taken,
                         std::uint32_t& experts)
    {
        constexpr std::size_t kArrays = 2;
        const std::uint32_t length = c.take<std::uint32_t>();
        if (taken == 0) {
            if (length > kMaxExpertsPerLayer)
                return fail(std::to_string(length) + " experts exceed the limit of " +
                            std::to_string(kMaxExpertsPerLayer));
            experts = length;
        } else if (length != experts) {
            return fail(std::to_string(experts) + " routed counts but " + std::to_string(length) +
                        " dropped counts; both need one entry per expert");
        }
        const std::size_t arrayBytes = sizeof(std::uint32_t) * std::size_t(experts);
        if (bodyLength < kFixedBody<ExpertLoadRecord> + (taken + 1) * arrayBytes)
            return tooShort(bodyLength, kFixedBody<ExpertLoadRecord> + kArrays * arrayBytes,
                            "an expert load of " + std::to_string(experts) + " experts");
        out.resize(experts);
        for (std::uint32_t& v : out)
            v = c.take<std::uint32_t>();
        return true;
    }

    template <class T>
    T& emplace()
    {
        return std::get<T>(m_result.batch->records.emplace_back(std::in_place_type<T>));
    }

    // A body of a known type, field by field.
    template <class R>
    bool decodeRecord(Cursor c)
    {
        const std::size_t bodyLength = c.left();
        if (bodyLength < kFixedBody<R>)
            return tooShort(bodyLength, kFixedBody<R>, aRecordOf(recordTypeOf<R>()));
        R& r = emplace<R>();
        std::size_t need = kFixedBody<R>;  // grows by the strings read
        std::size_t arrays = 0;            // expert loads' arrays read
        std::uint32_t experts = 0;
        return forEachField(r, [&](const auto& field, auto& value) {
            using T = std::decay_t<decltype(value)>;
            if constexpr (std::is_enum_v<T>) {
                return takeEnum(c, value, field.what(), EnumInfo<T>::count);
            } else if constexpr (kIsString<T>) {
                return takeString(c, value, bodyLength, need, field.what());
            } else if constexpr (kIsArray<T>) {
                static_assert(std::is_same_v<typename std::decay_t<decltype(field)>::Record, ExpertLoadRecord>,
                              "only expert loads have arrays");
                return takeExpertArray(c, value, bodyLength, arrays++, experts);
            } else {
                value = c.take<T>();
                return true;
            }
        });
    }

    bool decodeBody(Cursor body)
    {
        switch (m_type) {
        case RecordType::Span:
            return decodeRecord<SpanRecord>(body);
        case RecordType::ExpertLoad:
            return decodeRecord<ExpertLoadRecord>(body);
        case RecordType::MemorySample:
            return decodeRecord<MemorySampleRecord>(body);
        case RecordType::StepMetrics:
            return decodeRecord<StepMetricsRecord>(body);
        case RecordType::NodeSample:
            return decodeRecord<NodeSampleRecord>(body);
        case RecordType::Log:
            return decodeRecord<LogRecord>(body);
        case RecordType::Heartbeat:
            return decodeRecord<HeartbeatRecord>(body);
        case RecordType::ClockOffset:
            return decodeRecord<ClockOffsetRecord>(body);
        }
        ++m_result.skippedRecords;  // a type from a newer agent
        return true;
    }

    bool decodeFrame()
    {
        const std::size_t size = m_frame.size();
        if (size > kMaxBatchBytes)
            return failFrame("frame of " + std::to_string(size) + " bytes exceeds the limit of " +
                             std::to_string(kMaxBatchBytes) + " bytes; the agent must send smaller batches");
        if (size < kBatchHeaderBytes)
            return failFrame("frame of " + std::to_string(size) + " bytes is shorter than the " +
                             std::to_string(kBatchHeaderBytes) +
                             "-byte batch header; it is truncated or not telemetry");
        const std::uint8_t* data = m_frame.data();
        const auto magic = loadLe<std::uint32_t>(data);
        if (magic != kBatchMagic)
            return failFrame(
                "bad magic: the frame does not start with \"MBTW\"; it is not a Meshbench telemetry batch");
        m_result.version = loadLe<std::uint16_t>(data + 4);
        if (m_result.version == 0)
            return failFrame("format version 0 does not exist; the frame is corrupt");
        if (m_result.version > kFormatVersion)
            return failFrame("format version " + std::to_string(m_result.version) +
                             " is newer than this engine reads (up to " + std::to_string(kFormatVersion) +
                             "); upgrade the engine to read it");
        const auto flags = loadLe<std::uint16_t>(data + 6);
        if (flags != 0)
            return failFrame("header flags are " + std::to_string(flags) + " but must be 0 in format version " +
                             std::to_string(m_result.version) + "; the frame is corrupt");
        Batch& batch = m_result.batch.emplace();
        batch.rank = loadLe<std::uint32_t>(data + 8);
        batch.sequence = loadLe<std::uint64_t>(data + 12);
        const auto count = loadLe<std::uint32_t>(data + 20);
        if (count > kMaxRecordsPerBatch)
            return failFrame("header says " + std::to_string(count) + " records, more than the limit of " +
                             std::to_string(kMaxRecordsPerBatch) + " per batch");
        const std::size_t bodyBytes = size - kBatchHeaderBytes;
        if (count > bodyBytes / kRecordHeaderBytes)
            return failFrame("header says " + std::to_string(count) + " records but the " + std::to_string(bodyBytes) +
                             " bytes after it hold at most " + std::to_string(bodyBytes / kRecordHeaderBytes) +
                             "; the frame is truncated or corrupt");
        batch.records.reserve(std::min<std::size_t>(count, bodyBytes / kSmallestKnownRecord));

        std::size_t offset = kBatchHeaderBytes;
        for (m_index = 0; m_index < count; ++m_index) {
            m_recordOffset = offset;
            m_rawType = -1;
            const std::size_t left = size - offset;
            if (left < kRecordHeaderBytes)
                return fail("only " + std::to_string(left) + " bytes left for the " +
                            std::to_string(kRecordHeaderBytes) + "-byte record header; the frame is truncated");
            m_rawType = data[offset];
            m_type = static_cast<RecordType>(data[offset]);
            if (data[offset + 1] != 0 || loadLe<std::uint16_t>(data + offset + 2) != 0)
                return fail("reserved bytes of the record header are not 0; the frame is corrupt");
            const auto bodyLength = loadLe<std::uint32_t>(data + offset + 4);
            if (bodyLength > left - kRecordHeaderBytes)
                return fail("body length " + std::to_string(bodyLength) + " exceeds the " +
                            std::to_string(left - kRecordHeaderBytes) + " bytes left in the frame; it is truncated");
            const std::uint8_t* body = data + offset + kRecordHeaderBytes;
            if (!decodeBody(Cursor(body, body + bodyLength)))
                return false;
            offset += kRecordHeaderBytes + bodyLength;
        }
        if (offset != size)
            return failFrame(std::to_string(size - offset) + " trailing bytes at byte offset " +
                             std::to_string(offset) + " after the last of " + std::to_string(count) +
                             " records; the frame is corrupt");
        return true;
    }

    std::span<const std::uint8_t> m_frame;
    DecodeResult m_result;
    std::uint32_t m_index = 0;
    std::size_t m_recordOffset = 0;
    int m_rawType = -1;  // the current record's type byte, -1 before its header is read
    RecordType m_type{};
};

}  // namespace

std::string spanLabel(const SpanRecord& span)
{
    std::string label(spanKindName(span.kind));
    if (span.microbatch >= 0)
        label += " mb" + std::to_string(span.microbatch) + " chunk" + std::to_string(span.chunk);
    return label;
}

std::string_view spanKindName(SpanKind kind) { return nameAt(kSpanKindNames, underlying(kind)); }

std::optional<SpanKind> spanKindFromName(std::string_view name) { return enumFromName<SpanKind>(kSpanKindNames, name); }

bool isComputeKind(SpanKind kind)
{
    return kind == SpanKind::Forward || kind == SpanKind::Backward || kind == SpanKind::WeightGrad;
}

bool isPipelineKind(SpanKind kind)
{
    // The data-parallel reduction overlaps the backward and may run past it: not pipeline time.
    return isComputeKind(kind) || (isCommunicationKind(kind) && kind != SpanKind::DataParallelReduce);
}

bool isCommunicationKind(SpanKind kind)
{
    switch (kind) {
    case SpanKind::SendActivation:
    case SpanKind::RecvActivation:
    case SpanKind::SendGradient:
    case SpanKind::RecvGradient:
    case SpanKind::DataParallelReduce:
        return true;
    default:
        return false;
    }
}

std::string_view memoryCategoryName(MemoryCategory category)
{
    return nameAt(kMemoryCategoryNames, underlying(category));
}

std::optional<MemoryCategory> memoryCategoryFromName(std::string_view name)
{
    return enumFromName<MemoryCategory>(kMemoryCategoryNames, name);
}

std::string_view logLevelName(LogLevel level) { return nameAt(kLogLevelNames, underlying(level)); }

bool isFinal(RankState state)
{
    return state == RankState::Finished || state == RankState::Failed || state == RankState::Terminated;
}

std::string_view rankStateName(RankState state) { return nameAt(kRankStateNames, underlying(state)); }

RecordType recordType(const Record& record)
{
    return std::visit([](const auto& r) { return recordTypeOf<std::decay_t<decltype(r)>>(); }, record);
}

void encodeBatch(const Batch& batch, std::vector<std::uint8_t>& out)
{
    const std::size_t count = batch.records.size();
    if (count > kMaxRecordsPerBatch)
        throw std::invalid_argument("telemetry batch of " + std::to_string(count) + " records exceeds the limit of " +
                                    std::to_string(kMaxRecordsPerBatch) + "; split it");
    // Sizing first lets the writer fill exact space with no capacity checks, and refuse before
    // anything is appended.
    std::size_t size = kBatchHeaderBytes;
    for (std::size_t i = 0; i < count; ++i)
        size += kRecordHeaderBytes + std::visit([i](const auto& r) { return checkedBodySize(r, i); }, batch.records[i]);
    if (size > kMaxBatchBytes)
        throw std::invalid_argument("telemetry batch of " + std::to_string(size) + " bytes exceeds the limit of " +
                                    std::to_string(kMaxBatchBytes) + "; split it");

    const std::size_t start = out.size();
    out.resize(start + size);
    Writer w(out.data() + start);
    w.put(kBatchMagic);
    w.put(kFormatVersion);
    w.put(std::uint16_t(0));
    w.put(batch.rank);
    w.put(batch.sequence);
    w.put(static_cast<std::uint32_t>(count));
    for (const Record& record : batch.records) {
        std::visit(
            [&w](const auto& r) {
                w.put(recordTypeOf<std::decay_t<decltype(r)>>());
                w.put(std::uint8_t(0));
                w.put(std::uint16_t(0));
                std::uint8_t* lengthAt = w.at();
                w.put(std::uint32_t(0));
                w.writeBody(r);
                storeLe(lengthAt, static_cast<std::uint32_t>(w.at() - lengthAt - 4));
            },
            record);
    }
}

std::vector<std::uint8_t> encodeBatch(const Batch& batch)
{
    std::vector<std::uint8_t> out;
    encodeBatch(batch, out);
    return out;
}

DecodeResult decodeBatch(std::span<const std::uint8_t> frame) { return FrameDecoder(frame).decode(); }

std::optional<std::int64_t> recordTimeNs(const Record& record)
{
    return std::visit(
        [](const auto& r) -> std::optional<std::int64_t> {
            using T = std::decay_t<decltype(r)>;
            if constexpr (std::is_same_v<T, SpanRecord>)
                return r.beginNs;
            else if constexpr (std::is_same_v<T, StepMetricsRecord>)
                return r.endNs;
            else if constexpr (std::is_same_v<T, ExpertLoadRecord>)
                return std::nullopt;
            else
                return r.timeNs;
        },
        record);
}

}  // namespace meshbench::wire
