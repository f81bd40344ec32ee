#include "kineto_reader.h"

#include "import_error.h"
#include "trace_input.h"

#include <rapidjson/error/en.h>
#include <rapidjson/reader.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <unordered_map>
#include <vector>

namespace meshbench::import {

namespace {

// A JSON number (RapidJSON hands numbers over as text) as an integer; nothing for fractions.
std::optional<std::int64_t> integerOf(std::string_view text)
{
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size())
        return std::nullopt;
    return value;
}

// Microseconds as written ("1234.567", "-3", "1.5e3") in integer nanoseconds. Exact for the usual
// fixed-point form, where a double would lose the nanoseconds of an absolute epoch time.
std::optional<std::int64_t> nanosecondsOf(std::string_view text)
{
    const std::size_t point = text.find('.');
    if (text.find_first_of("eE") == std::string_view::npos) {
        const std::optional<std::int64_t> whole = integerOf(text.substr(0, point));
        if (!whole)
            return std::nullopt;
        std::int64_t ns = *whole * 1000;
        if (point != std::string_view::npos) {
            const std::string_view fraction = text.substr(point + 1);
            std::int64_t scale = 100, part = 0;
            for (std::size_t i = 0; i < fraction.size(); ++i) {
                if (fraction[i] < '0' || fraction[i] > '9')
                    return std::nullopt;
                if (i < 3) {
                    part += (fraction[i] - '0') * scale;
                    scale /= 10;
                } else if (i == 3 && fraction[i] >= '5') {
                    ++part;  // round half up on the fourth decimal
                }
            }
            ns += text.front() == '-' ? -part : part;
        }
        return ns;
    }
    const double value = std::strtod(std::string(text).c_str(), nullptr);
    if (!std::isfinite(value))
        return std::nullopt;
    return static_cast<std::int64_t>(std::llround(value * 1000));
}

// Where in the document the reader is.
enum class Frame { TopObject, Events, Event, Args, DistInfo, Groups, Group, GroupRanks, Skip };

// The keys of an event that are read.
enum class EventKey { Name, Ph, Cat, Ts, Dur, Pid, Tid, Id, Bp, Args, Other };

EventKey eventKeyOf(std::string_view key)
{
    switch (key.size()) {
    case 2:
        return key == "ph"   ? EventKey::Ph
               : key == "ts" ? EventKey::Ts
               : key == "id" ? EventKey::Id
               : key == "bp" ? EventKey::Bp
                             : EventKey::Other;
    case 3:
        return key == "cat"   ? EventKey::Cat
               : key == "dur" ? EventKey::Dur
               : key == "pid" ? EventKey::Pid
               : key == "tid" ? EventKey::Tid
                              : EventKey::Other;
    case 4:
        return key == "name" ? EventKey::Name : key == "args" ? EventKey::Args : EventKey::Other;
    default:
        return EventKey::Other;
    }
}

// The argument keys kept from an event.
enum class Arg {
    None,
    Correlation,
    ExternalId,
    Device,
    Stream,
    Collective,
    InElems,
    OutElems,
    DataType,
    GroupSize,
    GroupName,
    GroupDesc,
    GroupRanks,
    SrcRank,
    DstRank,
    Seq,
};

Arg argOf(std::string_view key)
{
    static const std::unordered_map<std::string_view, Arg> kArgs{
        {"correlation", Arg::Correlation},
        {"External id", Arg::ExternalId},
        {"device", Arg::Device},
        {"stream", Arg::Stream},
        {"Collective name", Arg::Collective},
        {"In msg nelems", Arg::InElems},
        {"Out msg nelems", Arg::OutElems},
        {"dtype", Arg::DataType},
        {"Group size", Arg::GroupSize},
        {"Process Group Name", Arg::GroupName},
        {"Process Group Description", Arg::GroupDesc},
        {"Process Group Ranks", Arg::GroupRanks},
        {"Src Rank", Arg::SrcRank},
        {"Dst Rank", Arg::DstRank},
        {"Seq", Arg::Seq},
    };
    const auto found = kArgs.find(key);
    return found == kArgs.end() ? Arg::None : found->second;
}

// The event being read: its fields as they arrive, reset for the next one.
struct EventFields {
    std::string name, ph, cat, bp;
    std::optional<std::int64_t> ts, dur, id;
    std::int64_t pid = -1, tid = 0;
    bool pidIsNumber = false;
    std::optional<std::int64_t> correlation, device, stream;
    CollectiveInfo collective;
    bool hasCollective = false;      // it names its collective
    bool collectiveTouched = false;  // some field of `collective` was set

    void clear()
    {
        name.clear();
        ph.clear();
        cat.clear();
        bp.clear();
        ts.reset();
        dur.reset();
        id.reset();
        pid = -1;
        tid = 0;
        pidIsNumber = false;
        correlation.reset();
        device.reset();
        stream.reset();
        if (collectiveTouched)
            collective = {};
        hasCollective = collectiveTouched = false;
    }
};

bool isDeviceCategory(std::string_view cat)
{
    return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "Kernel" || cat == "Memcpy" ||
           cat == "Memset";
}

struct FlowEnds {
    std::int64_t startTs = 0;
    bool started = false;
    bool finished = false;
};

class KinetoHandler : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, KinetoHandler> {
public:
    KinetoHandler(RankTrace& trace, NameTable& names, const ReadOptions& options, const TraceInput& input)
        : m_trace(trace), m_names(names), m_options(options), m_input(input)
    {
    }

    bool StartObject()
    {
        if (m_frames.empty()) {
            m_frames.push_back(Frame::TopObject);
            m_trace.format = "kineto";
            return true;
        }
        switch (top()) {
        case Frame::Events:
            m_event.clear();
            return push(Frame::Event);
        case Frame::Event:
            return push(m_eventKey == EventKey::Args ? Frame::Args : Frame::Skip);
        case Frame::TopObject:
            return push(m_key == "distributedInfo" ? Frame::DistInfo : Frame::Skip);
        case Frame::Groups:
            m_group = {};
            return push(Frame::Group);
        default:
            return push(Frame::Skip);
        }
    }

    bool StartArray()
    {
        if (m_frames.empty()) {
            m_trace.format = "kineto-array";
            return push(Frame::Events);
        }
        if (top() == Frame::TopObject && m_key == "traceEvents") {
            m_sawEvents = true;
            return push(Frame::Events);
        }
        if (top() == Frame::DistInfo && m_key == "pg_config")
            return push(Frame::Groups);
        if (top() == Frame::Group && m_key == "ranks")
            return push(Frame::GroupRanks);
        return push(Frame::Skip);
    }

    bool EndObject(rapidjson::SizeType)
    {
        const Frame ended = top();
        m_frames.pop_back();
        if (ended == Frame::Event)
            return endEvent();
        if (ended == Frame::Group)
            m_trace.groups.push_back(std::move(m_group));
        return true;
    }

    bool EndArray(rapidjson::SizeType)
    {
        m_frames.pop_back();
        return true;
    }

    bool Key(const char* text, rapidjson::SizeType length, bool)
    {
        if (top() == Frame::Args)
            m_arg = argOf(std::string_view(text, length));
        else if (top() == Frame::Event)
            m_eventKey = eventKeyOf(std::string_view(text, length));
        else
            m_key.assign(text, length);
        return true;
    }

    bool String(const char* text, rapidjson::SizeType length, bool)
    {
        return scalar(std::string_view(text, length), false);
    }
    bool RawNumber(const char* text, rapidjson::SizeType length, bool)
    {
        return scalar(std::string_view(text, length), true);
    }
    bool Default() { return true; }  // null, true, false: nothing the import reads

    const std::string& failure() const { return m_failure; }
    std::optional<std::int64_t> baseNs() const { return m_baseNs; }
    std::optional<std::int64_t> rank() const { return m_rank; }
    bool sawEvents() const { return m_trace.format == "kineto-array" || m_sawEvents; }
    std::optional<std::int64_t> worldSize() const { return m_world; }

    // Every flow must have both ends.
    bool checkFlows()
    {
        for (const auto& [key, ends] : m_flows) {
            const std::int64_t id = key / 4;
            if (ends.started && !ends.finished)
                return fail("the flow with id " + std::to_string(id) + " that starts at ts " +
                            std::to_string(double(ends.startTs) / 1000) + " us has no end (ph \"f\")");
            if (!ends.started)
                return fail("the flow with id " + std::to_string(id) + " ends without a start (ph \"s\")");
        }
        return true;
    }

private:
    Frame top() const { return m_frames.back(); }
    bool push(Frame frame)
    {
        m_frames.push_back(frame);
        return true;
    }
    bool fail(std::string message)
    {
        m_failure = std::move(message);
        return false;
    }

    bool scalar(std::string_view text, bool number)
    {
        switch (top()) {
        case Frame::Event:
            return eventField(text, number);
        case Frame::Args:
            argField(text, number);
            return true;
        case Frame::TopObject:
            if (m_key == "baseTimeNanoseconds" && number)
                m_baseNs = integerOf(text);
            return true;
        case Frame::DistInfo:
            if (number && m_key == "rank")
                m_rank = integerOf(text);
            else if (number && m_key == "world_size")
                m_world = integerOf(text);
            return true;
        case Frame::Group:
            if (m_key == "pg_name")
                m_group.name = text;
            else if (m_key == "pg_desc")
                m_group.desc = text;
            else if (m_key == "ranks" && !number)  // Kineto writes the list as a string
                m_group.ranks = ranksListed(text);
            return true;
        case Frame::GroupRanks:
            if (const auto rank = integerOf(text); number && rank)
                m_group.ranks.push_back(static_cast<int>(*rank));
            return true;
        default:
            return true;
        }
    }

    bool eventField(std::string_view text, bool number)
    {
        switch (m_eventKey) {
        case EventKey::Name:
            m_event.name = text;
            break;
        case EventKey::Ph:
            m_event.ph = text;
            break;
        case EventKey::Cat:
            m_event.cat = text;
            break;
        case EventKey::Ts:
        case EventKey::Dur: {
            const std::optional<std::int64_t> ns = number ? nanosecondsOf(text) : std::nullopt;
            const bool ts = m_eventKey == EventKey::Ts;
            if (!ns)
                return fail(std::string(ts ? "\"ts\"" : "\"dur\"") + " is " + std::string(text) +
                            ", not a number of microseconds");
            (ts ? m_event.ts : m_event.dur) = ns;
            break;
        }
        case EventKey::Pid: {
            const std::optional<std::int64_t> pid = number ? integerOf(text) : std::nullopt;
            m_event.pidIsNumber = pid.has_value();
            m_event.pid = pid.value_or(-1);
            break;
        }
        case EventKey::Tid:
            m_event.tid = (number ? integerOf(text) : std::nullopt).value_or(0);
            break;
        case EventKey::Id:
            m_event.id = integerOf(text);
            break;
        case EventKey::Bp:
            m_event.bp = text;
            break;
        case EventKey::Args:
        case EventKey::Other:
            break;
        }
        return true;
    }

    void argField(std::string_view text, bool number)
    {
        const std::optional<std::int64_t> value = number ? integerOf(text) : std::nullopt;
        CollectiveInfo& c = m_event.collective;
        m_event.collectiveTouched = m_event.collectiveTouched || m_arg >= Arg::Collective;
        switch (m_arg) {
        case Arg::Correlation:
            m_event.correlation = value;
            break;
        case Arg::ExternalId:
            break;
        case Arg::Device:
            m_event.device = value;
            break;
        case Arg::Stream:
            m_event.stream = value;
            break;
        case Arg::Collective:
            c.name = text;
            m_event.hasCollective = true;
            break;
        case Arg::InElems:
            c.inElems = value.value_or(-1);
            break;
        case Arg::OutElems:
            c.outElems = value.value_or(-1);
            break;
        case Arg::DataType:
            c.dtype = text;
            break;
        case Arg::GroupSize:
            c.groupSize = static_cast<std::int32_t>(value.value_or(-1));
            break;
        case Arg::GroupName:
            c.group = text;
            break;
        case Arg::GroupDesc:
            c.groupDesc = text;
            break;
        case Arg::GroupRanks:
            c.groupRanks = text;
            break;
        case Arg::SrcRank:
            c.srcRank = static_cast<std::int32_t>(value.value_or(-1));
            break;
        case Arg::DstRank:
            c.dstRank = static_cast<std::int32_t>(value.value_or(-1));
            break;
        case Arg::Seq:
            c.seq = value.value_or(-1);
            break;
        case Arg::None:
            break;
        }
        m_arg = Arg::None;
    }

    std::string where() const
    {
        // The index in traceEvents, counted from 0 (the event's own count is already taken).
        std::string at = "event " + std::to_string(m_eventIndex - 1);
        if (m_event.ts)
            at += " (\"" + m_event.name + "\" at ts " + std::to_string(double(*m_event.ts) / 1000) + " us)";
        return at;
    }

    bool endEvent()
    {
        ++m_eventIndex;
        ++m_trace.events;
        if ((m_eventIndex & 0xFFFF) == 0) {
            if (m_options.progress)
                m_options.progress(m_input.fileBytesRead(), m_trace.events);
            if (m_options.cancelled())
                return fail("cancelled");
        }
        const EventFields& e = m_event;
        if (e.ph == "X") {
            if (!e.ts || !e.dur)
                return fail(where() + " is a complete event (ph \"X\") without " + (e.ts ? "\"dur\"" : "\"ts\""));
            if (*e.dur < 0)
                return fail(where() + " has a negative duration (" + std::to_string(double(*e.dur) / 1000) + " us)");
            completeEvent();
        } else if (e.ph == "s" || e.ph == "f") {
            if (!e.id)
                return fail(where() + " is a flow event without an \"id\"");
            // ac2g (launch to kernel) and fwdbwd ids are counted apart and may coincide.
            const std::int64_t key = *e.id * 4 + (e.cat == "ac2g" ? 0 : e.cat == "fwdbwd" ? 1 : 2);
            FlowEnds& ends = m_flows[key];
            (e.ph == "s" ? ends.started : ends.finished) = true;
            if (e.ph == "s")
                ends.startTs = e.ts.value_or(0);
            if (ends.started && ends.finished)
                m_flows.erase(key);  // only flows still open are kept
        }
        return true;
    }

    void completeEvent()
    {
        const EventFields& e = m_event;
        const std::int64_t begin = *e.ts, end = *e.ts + *e.dur;
        if (isDeviceCategory(e.cat)) {
            DeviceEvent d;
            d.beginNs = begin;
            d.endNs = end;
            d.device = static_cast<std::int32_t>(e.device.value_or(e.pidIsNumber ? e.pid : 0));
            d.stream = static_cast<std::int32_t>(e.stream.value_or(e.tid));
            d.correlation = e.correlation.value_or(-1);
            d.nameId = m_names.id(e.name);
            d.deviceClass = e.cat == "gpu_memcpy" || e.cat == "Memcpy"   ? store::DeviceClass::Memcpy
                            : e.cat == "gpu_memset" || e.cat == "Memset" ? store::DeviceClass::Memset
                                                                         : m_names.kernelClass(d.nameId);
            if (store::isCommunicationClass(d.deviceClass) || e.hasCollective) {
                d.collective = static_cast<std::int32_t>(m_trace.collectives.size());
                m_trace.collectives.push_back(e.collective);
                d.deviceClass = store::DeviceClass::CommOther;
            }
            m_trace.device.push_back(d);
            return;
        }
        if (e.cat.starts_with("gpu_"))  // gpu_user_annotation: the device copy of a host range
            return;
        if ((e.cat == "cuda_runtime" || e.cat == "cuda_driver") && e.correlation) {
            m_trace.launches.push_back({*e.correlation, begin, e.tid});
            return;
        }
        if (m_options.steps.step(e.name) || parseOpName(e.name))
            m_trace.ranges.push_back({m_names.id(e.name), begin, end, e.tid});
    }

    RankTrace& m_trace;
    NameTable& m_names;
    const ReadOptions& m_options;
    const TraceInput& m_input;
    std::vector<Frame> m_frames;
    std::string m_key;  // outside events
    EventKey m_eventKey = EventKey::Other;
    Arg m_arg = Arg::None;
    EventFields m_event;
    ProcessGroup m_group;
    std::unordered_map<std::int64_t, FlowEnds> m_flows;
    std::uint64_t m_eventIndex = 0;
    std::optional<std::int64_t> m_baseNs;
    std::optional<std::int64_t> m_rank, m_world;
    std::string m_failure;
    bool m_sawEvents = false;
};

}  // namespace

bool looksLikeKinetoTrace(const std::string& path)
{
    try {
        TraceInput input(path);
        std::string head;
        for (char c = input.Take(); c != '\0' && head.size() < (1u << 20); c = input.Take())
            head += c;
        const std::size_t first = head.find_first_not_of(" \t\r\n");
        if (first == std::string::npos)
            return false;
        return head.find("\"traceEvents\"") != std::string::npos ||
               (head[first] == '[' && head.find("\"ph\"") != std::string::npos);
    } catch (const ImportError&) {
        return false;
    }
}

RankTrace readKinetoTrace(const std::string& path, NameTable& names, const ReadOptions& options)
{
    RankTrace trace;
    trace.path = path;
    TraceInput input(path);
    const char first = [&] {
        while (input.Peek() == ' ' || input.Peek() == '\n' || input.Peek() == '\r' || input.Peek() == '\t')
            input.Take();
        return input.Peek();
    }();
    if (!input.error().empty())
        throw ImportError(path + ": " + input.error());
    if (first != '{' && first != '[')
        throw ImportError(path + ": is not a torch.profiler trace: it does not begin with a JSON object or array "
                                 "(give the .json or .json.gz that torch.profiler's export_chrome_trace or "
                                 "tensorboard_trace_handler wrote)");
    KinetoHandler handler(trace, names, options, input);
    rapidjson::Reader reader;
    constexpr unsigned kFlags = rapidjson::kParseNumbersAsStringsFlag | rapidjson::kParseStopWhenDoneFlag;
    const rapidjson::ParseResult result = reader.Parse<kFlags>(input, handler);
    if (!input.error().empty())
        throw ImportError(path + ": " + input.error());
    if (options.cancelled())
        throw ImportError(path + ": the import was cancelled");
    if (!handler.failure().empty())
        throw ImportError(path + ": " + handler.failure());
    if (result.IsError())
        throw ImportError(path + ": is not valid JSON at byte " + std::to_string(result.Offset()) + " (" +
                          rapidjson::GetParseError_En(result.Code()) + ")");
    if (!handler.sawEvents())
        throw ImportError(path + ": is a JSON object without \"traceEvents\": not a torch.profiler trace");
    if (!handler.checkFlows())
        throw ImportError(path + ": " + handler.failure());
    if (handler.rank())
        trace.rank = static_cast<int>(*handler.rank());
    if (handler.worldSize())
        trace.worldSize = static_cast<int>(*handler.worldSize());
    // Relative times become the rank's absolute clock.
    if (const std::optional<std::int64_t> base = handler.baseNs()) {
        for (HostRange& r : trace.ranges) {
            r.beginNs += *base;
            r.endNs += *base;
        }
        for (Launch& l : trace.launches)
            l.ns += *base;
        for (DeviceEvent& d : trace.device) {
            d.beginNs += *base;
            d.endNs += *base;
        }
    }
    trace.digest = input.digest();
    if (options.progress)
        options.progress(input.fileBytesRead(), trace.events);
    sortTrace(trace);
    return trace;
}

}  // namespace meshbench::import
