#include "session_export.h"

#include "session_file.h"

#include "wire/error_text.h"
#include "wire/record_fields.h"
#include "wire/text.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <type_traits>
#include <utility>

namespace meshbench::store {

namespace {

// A write-only file filled through a large buffer, so millions of small events cost few syscalls.
class OutputFile {
public:
    explicit OutputFile(std::string path) : m_path(std::move(path)), m_file(std::fopen(m_path.c_str(), "wb"))
    {
        if (!m_file)
            fail();
        m_buffer.reserve(kBufferBytes);
    }
    ~OutputFile()
    {
        if (m_file)
            std::fclose(m_file);
    }
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    std::string& buffer() { return m_buffer; }
    void write(std::string_view text)
    {
        m_buffer += text;
        flushIfFull();
    }
    void flushIfFull()
    {
        if (m_buffer.size() >= kBufferBytes)
            flush();
    }
    // Writes what is buffered and closes; a write error that shows only at close still throws.
    void close()
    {
        flush();
        std::FILE* file = std::exchange(m_file, nullptr);
        if (std::fclose(file) != 0)
            fail();
    }

private:
    static constexpr std::size_t kBufferBytes = std::size_t(1) << 20;

    void flush()
    {
        if (std::fwrite(m_buffer.data(), 1, m_buffer.size(), m_file) != m_buffer.size())
            fail();
        m_buffer.clear();
    }
    [[noreturn]] void fail() const
    {
        throw ExportError("cannot write " + detail::quoted(m_path) + ": " + wire::errorText(errno));
    }

    std::string m_path;
    std::FILE* m_file;
    std::string m_buffer;
};

// Numbers in their shortest exact form (doubles and floats read back bit for bit).
template <typename T>
void appendNumber(std::string& out, T value)
{
    char text[64];
    const auto end = std::to_chars(text, text + sizeof text, value).ptr;
    out.append(text, end);
}

// end - start for start <= end, exactly, even when the difference does not fit int64.
std::uint64_t distance(std::int64_t start, std::int64_t end)
{
    return end > start ? static_cast<std::uint64_t>(end) - static_cast<std::uint64_t>(start) : 0;
}

double microseconds(std::uint64_t nanoseconds) { return static_cast<double>(nanoseconds) / 1000.0; }

// ---- Chrome trace -------------------------------------------------------------------------------

// One thread track per kind group, tid = index; spans of one group never overlap on one rank, so
// each track nests cleanly.
constexpr const char* kTrackNames[] = {"", "compute", "pipeline", "data-parallel", "optimizer", "idle"};
constexpr int kTracks = 5;
static_assert(std::size(kTrackNames) == kTracks + 1);

int trackOf(wire::SpanKind kind)
{
    using wire::SpanKind;
    switch (kind) {
    case SpanKind::Forward:
    case SpanKind::Backward:
    case SpanKind::WeightGrad:
        return 1;
    case SpanKind::SendActivation:
    case SpanKind::RecvActivation:
    case SpanKind::SendGradient:
    case SpanKind::RecvGradient:
        return 2;
    case SpanKind::DataParallelReduce:
        return 3;
    case SpanKind::Optimizer:
        return 4;
    case SpanKind::Idle:
        break;
    }
    return 5;
}

// The pairing of a send with its recv. A send on rank A to peer B and a recv on B from peer A
// belong together when they move the same thing (activation or gradient) of the same micro-batch
// in the same step. Where several share that key (an interleaved schedule passes a micro-batch
// between two ranks once per chunk), the k-th send pairs with the k-th recv, each side in begin
// order: MPI delivers the messages between two ranks in the order they were sent. A send or recv
// whose partner was lost on the wire gets no arrow.
struct FlowKey {
    std::int32_t step;
    std::int64_t sender;
    std::int64_t receiver;
    bool gradient;
    std::int32_t microbatch;
    // clang-tidy 14 takes the 0 that a defaulted <=> is compared with for a null pointer.
    auto operator<=>(const FlowKey&) const = default;  // NOLINT(modernize-use-nullptr)
};

// A span's args, by field name; kind, begin and end are the event's own.
constexpr std::string_view kSpanArgs[] = {"step", "stage", "chunk", "microbatch", "bytes", "peer"};

struct FlowEnd {
    std::uint32_t rank;
    std::int64_t timeNs;  // the span's midpoint: inside it, so the arrow binds to that span
};

class ChromeTraceWriter {
public:
    ChromeTraceWriter(const SessionReader& session, const std::string& outPath)
        : m_session(session), m_out(outPath), m_memory(session.memorySamples()), m_origin(origin(session, m_memory))
    {
    }

    void write()
    {
        m_out.write("{\"traceEvents\":[\n");
        for (const RankInfo& rank : m_session.header().ranks)
            processMetadata(static_cast<std::uint32_t>(rank.rank), processName(rank));
        m_session.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                        [this](const StoredSpan& span) { this->span(span); });
        for (const auto& sample : m_memory)
            counter(sample.rank, sample.record);
        for (const auto& [rank, tracks] : m_tracksUsed) {
            if (!m_namedProcesses.contains(rank))
                processMetadata(rank, "rank " + std::to_string(rank));
            for (int tid = 1; tid <= kTracks; ++tid)
                if (tracks & (1u << tid))
                    threadMetadata(rank, tid);
        }
        m_out.write("\n],\n\"displayTimeUnit\":\"ns\",\n\"metadata\":");
        m_out.write(wire::jsonText(metadata()));
        m_out.write("}\n");
        m_out.close();
    }

private:
    // The session's first timestamp: its first span's begin or its first memory sample.
    static std::int64_t origin(const SessionReader& session,
                               const std::vector<FromRank<wire::MemorySampleRecord>>& memory)
    {
        std::optional<std::int64_t> first;
        if (session.spanCount() > 0)
            first = session.timeRange().first;
        for (const auto& sample : memory)
            first = std::min(first.value_or(sample.record.timeNs), sample.record.timeNs);
        return first.value_or(0);
    }

    static std::string processName(const RankInfo& rank)
    {
        std::string name = "rank " + std::to_string(rank.rank) + " (dp" + std::to_string(rank.dp) + " pp" +
                           std::to_string(rank.pp) + " tp" + std::to_string(rank.tp) + " ep" + std::to_string(rank.ep) +
                           ")";
        if (!rank.host.empty())
            name += " " + rank.host + ":" + std::to_string(rank.pid);
        return name;
    }

    nlohmann::json metadata() const
    {
        const SessionHeader& header = m_session.header();
        const SessionOutcome outcome = m_session.outcome();
        return {{"session", header.name},         {"layout", header.layout}, {"engine_version", header.engineVersion},
                {"created_ns", header.createdNs}, {"origin_ns", m_origin},   {"outcome", outcomeName(outcome.outcome)},
                {"cause", outcome.cause}};
    }

    // Starts an event: separator, ph, pid, tid and ts.
    std::string& begin(const char* ph, std::uint32_t pid, int tid, std::int64_t timeNs)
    {
        std::string& out = m_out.buffer();
        if (m_events++ > 0)
            out += ",\n";
        out += "{\"ph\":\"";
        out += ph;
        out += "\",\"pid\":";
        appendNumber(out, pid);
        out += ",\"tid\":";
        appendNumber(out, tid);
        out += ",\"ts\":";
        appendNumber(out, microseconds(distance(m_origin, timeNs)));
        return out;
    }
    void end()
    {
        m_out.buffer() += '}';
        m_out.flushIfFull();
    }

    void processMetadata(std::uint32_t rank, const std::string& name)
    {
        m_namedProcesses.insert(rank);
        std::string& out = begin("M", rank, 0, m_origin);
        out += ",\"name\":\"process_name\",\"args\":{\"name\":";
        out += wire::jsonText(nlohmann::json(name));
        out += '}';
        end();
        begin("M", rank, 0, m_origin);
        out += ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":";
        appendNumber(out, rank);
        out += '}';
        end();
    }

    void threadMetadata(std::uint32_t rank, int tid)
    {
        std::string& out = begin("M", rank, tid, m_origin);
        out += ",\"name\":\"thread_name\",\"args\":{\"name\":\"";
        out += kTrackNames[tid];
        out += "\"}";
        end();
        begin("M", rank, tid, m_origin);
        out += ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":";
        appendNumber(out, tid);
        out += '}';
        end();
    }

    void span(const StoredSpan& stored)
    {
        const wire::SpanRecord& span = stored.span;
        const int track = trackOf(span.kind);
        m_tracksUsed[stored.rank] |= 1u << track;
        std::string& out = begin("X", stored.rank, track, span.beginNs);
        out += ",\"dur\":";
        appendNumber(out, microseconds(distance(span.beginNs, span.endNs)));
        out += ",\"name\":\"";
        out += wire::spanLabel(span);
        out += "\",\"cat\":\"";
        out += kTrackNames[track];
        out += "\",\"args\":{";
        wire::Columns<wire::SpanRecord, kSpanArgs>::forEachFieldColumn(
            span, [&out](auto column, const auto& field, const auto& value) {
                if (column > 0)
                    out += ',';
                out += '"';
                out += field.name;
                out += "\":";
                appendNumber(out, value);
            });
        out += '}';
        end();
        flow(stored);
    }

    void flow(const StoredSpan& stored)
    {
        using wire::SpanKind;
        const wire::SpanRecord& span = stored.span;
        const bool send = span.kind == SpanKind::SendActivation || span.kind == SpanKind::SendGradient;
        const bool recv = span.kind == SpanKind::RecvActivation || span.kind == SpanKind::RecvGradient;
        if ((!send && !recv) || span.peerRank < 0)
            return;
        const bool gradient = span.kind == SpanKind::SendGradient || span.kind == SpanKind::RecvGradient;
        const auto halfLength = static_cast<std::int64_t>(distance(span.beginNs, span.endNs) / 2);
        const FlowEnd here{stored.rank, span.beginNs + halfLength};
        const FlowKey key = send ? FlowKey{span.step, stored.rank, span.peerRank, gradient, span.microbatch}
                                 : FlowKey{span.step, span.peerRank, stored.rank, gradient, span.microbatch};
        auto& partners = send ? m_pendingRecvs : m_pendingSends;
        const auto partner = partners.find(key);
        if (partner == partners.end()) {
            (send ? m_pendingSends : m_pendingRecvs)[key].push_back(here);
            return;
        }
        const FlowEnd other = partner->second.front();
        partner->second.pop_front();
        if (partner->second.empty())
            partners.erase(partner);
        const char* name = gradient ? "gradient" : "activation";
        const std::uint64_t id = ++m_flows;
        for (const auto& [ph, at] : {std::pair{"s", send ? here : other}, std::pair{"f", send ? other : here}}) {
            std::string& out = begin(ph, at.rank, trackOf(span.kind), at.timeNs);
            out += ",\"id\":";
            appendNumber(out, id);
            out += ",\"name\":\"";
            out += name;
            out += "\",\"cat\":\"flow\"";
            if (ph[0] == 'f')
                out += ",\"bp\":\"e\"";
            end();
        }
    }

    void counter(std::uint32_t rank, const wire::MemorySampleRecord& sample)
    {
        std::string& out = begin("C", rank, 0, sample.timeNs);
        out += ",\"name\":\"memory ";
        out += wire::memoryCategoryName(sample.category);
        out += "\",\"args\":{\"bytes\":";
        appendNumber(out, sample.currentBytes);
        out += '}';
        end();
    }

    const SessionReader& m_session;
    OutputFile m_out;
    const std::vector<FromRank<wire::MemorySampleRecord>> m_memory;
    const std::int64_t m_origin;
    std::uint64_t m_events = 0;
    std::uint64_t m_flows = 0;
    std::set<std::uint32_t> m_namedProcesses;
    std::map<std::uint32_t, unsigned> m_tracksUsed;  // rank -> bit per tid
    std::map<FlowKey, std::deque<FlowEnd>> m_pendingSends, m_pendingRecvs;
};

// ---- CSV ----------------------------------------------------------------------------------------

// One CSV file, written row by row.
class CsvFile {
public:
    CsvFile(const std::filesystem::path& dir, const char* name, std::string_view header) : m_out((dir / name).string())
    {
        m_out.write(header);
        m_out.write("\r\n");
    }
    CsvFile& operator<<(std::string_view stored)
    {
        separate();
        // A damaged session's bytes that are not UTF-8 become U+FFFD: CSV readers expect text.
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(stored.data());
        std::string repaired;
        if (wire::firstInvalidUtf8({bytes, stored.size()}) != stored.size())
            repaired = wire::validUtf8(stored);
        const std::string_view text = repaired.empty() ? stored : std::string_view(repaired);
        // RFC 4180: quote a field holding a comma, a quote or a line break; double its quotes.
        if (text.find_first_of(",\"\r\n") == std::string_view::npos) {
            m_out.buffer() += text;
            return *this;
        }
        std::string& out = m_out.buffer();
        out += '"';
        for (char c : text) {
            if (c == '"')
                out += '"';
            out += c;
        }
        out += '"';
        return *this;
    }
    template <typename T>
    requires std::is_arithmetic_v<T> CsvFile& operator<<(T value)
    {
        separate();
        appendNumber(m_out.buffer(), value);
        return *this;
    }
    void endRow()
    {
        m_out.buffer() += "\r\n";
        m_fields = 0;
        m_out.flushIfFull();
    }
    void close() { m_out.close(); }

private:
    void separate()
    {
        if (m_fields++ > 0)
            m_out.buffer() += ',';
    }
    OutputFile m_out;
    int m_fields = 0;
};

void writeSession(const SessionReader& session, const std::filesystem::path& dir)
{
    CsvFile csv(dir, "session.csv", "name,layout,engine_version,created_ns,outcome,cause,failed_rank,ended_ns");
    const SessionHeader& header = session.header();
    const SessionOutcome outcome = session.outcome();
    csv << header.name << header.layout << header.engineVersion << header.createdNs << outcomeName(outcome.outcome)
        << outcome.cause << outcome.failedRank << outcome.endedNs;
    csv.endRow();
    csv.close();
}

// A CSV file of one record type: the columns of Order (record_fields.h's Columns), headed by the
// fields' CSV names; the columns that are no field are the rank and an expert load's expert.
template <class R, const auto& Order>
class RecordCsv {
    using Columns = wire::Columns<R, Order>;

public:
    RecordCsv(const std::filesystem::path& dir, const char* name) : m_csv(dir, name, header()) {}

    // A row, or an expert load's row per expert.
    void add(std::uint32_t rank, const R& record)
    {
        if constexpr (std::is_same_v<R, wire::ExpertLoadRecord>) {
            for (std::size_t e = 0; e < record.routed.size(); ++e)
                row(rank, record, e);
        } else {
            row(rank, record, 0);
        }
    }
    void close() { m_csv.close(); }

private:
    static std::string header()
    {
        std::string text;
        const auto add = [&text](std::string_view name) {
            if (!text.empty())
                text += ',';
            text += name;
        };
        const R sample{};
        Columns::forEach(
            sample, [&](auto, const auto& field, const auto&) { add(field.csv()); },
            [&](auto column) { add(Columns::names[column]); });
        return text;
    }

    void row(std::uint32_t rank, const R& record, std::size_t element)
    {
        Columns::forEach(
            record,
            [&](auto, const auto&, const auto& value) {
                using T = std::decay_t<decltype(value)>;
                if constexpr (std::is_enum_v<T>)
                    m_csv << wire::EnumInfo<T>::name(value);
                else if constexpr (std::is_same_v<T, std::vector<std::uint32_t>>)
                    m_csv << value[element];
                else
                    m_csv << value;
            },
            [&](auto column) {
                constexpr std::string_view name = Columns::names[column];
                if constexpr (name == "rank") {
                    m_csv << rank;
                } else {
                    static_assert(name == "expert", "a CSV column that is no field is the rank or the expert");
                    m_csv << element;
                }
            });
        m_csv.endRow();
    }

    CsvFile m_csv;
};

constexpr std::string_view kRankAndFields[] = {"rank", wire::kOtherFields};
// steps.csv keeps the order it was published in (session_export.h: it starts with step,loss,...).
constexpr std::string_view kStepsColumns[] = {
    "step",      "loss",          "aux_loss", "tokens_per_s",     "bubble_ratio",
    "grad_norm", "learning_rate", "tokens",   wire::kOtherFields, "rank"};
constexpr std::string_view kExpertLoadsColumns[] = {"rank", "step", "layer", "expert", wire::kOtherFields};

// Every record of a list read from the session.
template <class R, const auto& Order>
void writeRecords(const std::filesystem::path& dir, const char* name, const std::vector<FromRank<R>>& records)
{
    RecordCsv<R, Order> csv(dir, name);
    for (const auto& [rank, record] : records)
        csv.add(rank, record);
    csv.close();
}

void writeSteps(const SessionReader& session, const std::filesystem::path& dir)
{
    writeRecords<wire::StepMetricsRecord, kStepsColumns>(dir, "steps.csv", session.stepMetrics());
}

void writeSpans(const SessionReader& session, const std::filesystem::path& dir)
{
    RecordCsv<wire::SpanRecord, kRankAndFields> csv(dir, "spans.csv");
    session.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                  [&csv](const StoredSpan& stored) { csv.add(stored.rank, stored.span); });
    csv.close();
}

void writeExpertLoads(const SessionReader& session, const std::filesystem::path& dir)
{
    writeRecords<wire::ExpertLoadRecord, kExpertLoadsColumns>(dir, "expert_loads.csv", session.expertLoads());
}

void writeMemory(const SessionReader& session, const std::filesystem::path& dir)
{
    writeRecords<wire::MemorySampleRecord, kRankAndFields>(dir, "memory.csv", session.memorySamples());
}

void writeNodes(const SessionReader& session, const std::filesystem::path& dir)
{
    writeRecords<wire::NodeSampleRecord, kRankAndFields>(dir, "nodes.csv", session.nodeSamples());
}

void writeLogs(const SessionReader& session, const std::filesystem::path& dir)
{
    writeRecords<wire::LogRecord, kRankAndFields>(dir, "logs.csv", session.logs());
}

void writeHeartbeats(const SessionReader& session, const std::filesystem::path& dir)
{
    writeRecords<wire::HeartbeatRecord, kRankAndFields>(dir, "heartbeats.csv", session.heartbeats());
}

void writeClocks(const SessionReader& session, const std::filesystem::path& dir)
{
    writeRecords<wire::ClockOffsetRecord, kRankAndFields>(dir, "clocks.csv", session.clockOffsets());
}

void writeRanks(const SessionReader& session, const std::filesystem::path& dir)
{
    CsvFile csv(dir, "ranks.csv", "rank,dp,pp,tp,ep,node,local_device,host,pid");
    for (const RankInfo& r : session.header().ranks) {
        csv << r.rank << r.dp << r.pp << r.tp << r.ep << r.node << r.localDevice << r.host << r.pid;
        csv.endRow();
    }
    csv.close();
}

void writeTraffic(const SessionReader& session, const std::filesystem::path& dir)
{
    CsvFile csv(dir, "traffic.csv", "rank,received,lost,dropped");
    for (const RankTraffic& t : session.traffic()) {
        csv << t.rank << t.received << t.lost << t.dropped;
        csv.endRow();
    }
    csv.close();
}

}  // namespace

void exportChromeTrace(const SessionReader& session, const std::string& outPath)
{
    ChromeTraceWriter(session, outPath).write();
}

void exportCsv(const SessionReader& session, const std::string& outDir)
{
    const std::filesystem::path dir(outDir);
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error || !std::filesystem::is_directory(dir))
        throw ExportError("cannot write CSV files into " + detail::quoted(outDir) + ": " +
                          (error ? error.message() : std::string("it is not a folder")));
    for (auto* write : {writeSession, writeSteps, writeSpans, writeExpertLoads, writeMemory, writeNodes, writeLogs,
                        writeHeartbeats, writeClocks, writeRanks, writeTraffic})
        write(session, dir);
}

}  // namespace meshbench::store
