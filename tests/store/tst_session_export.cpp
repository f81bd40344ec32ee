// Exports: the Chrome trace parses and follows the Trace Event Format (types, microseconds, one
// process per rank, counters, send->recv flows on the right spans); every CSV file parses back
// (RFC 4180) to the stored values.

#include "store/session_export.h"
#include "store_samples.h"

#include <QtTest>

#include <nlohmann/json.hpp>

#include <charconv>
#include <fstream>
#include <map>
#include <set>

using namespace meshbench;
using nlohmann::json;

namespace {

std::string readFile(const std::string& path)
{
    std::ifstream file(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// RFC 4180: records end with CRLF; a quoted field may hold commas, CRLF, LF and doubled quotes.
std::vector<std::vector<std::string>> parseCsv(const std::string& text)
{
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> row;
    std::string field;
    std::size_t i = 0;
    while (i < text.size()) {
        if (text[i] == '"') {
            for (++i; i < text.size(); ++i) {
                if (text[i] != '"')
                    field += text[i];
                else if (i + 1 < text.size() && text[i + 1] == '"')
                    field += text[++i];
                else
                    break;
            }
            ++i;  // the closing quote
        }
        while (i < text.size() && text[i] != ',' && text[i] != '\r')
            field += text[i++];
        row.push_back(std::move(field));
        field.clear();
        if (i < text.size() && text[i] == ',') {
            ++i;
        } else {
            if (text.compare(i, 2, "\r\n") != 0)
                qFatal("a CSV record does not end with CRLF at byte %zu", i);
            i += 2;
            rows.push_back(std::move(row));
            row.clear();
        }
    }
    return rows;
}

template <typename T>
T number(const std::string& text)
{
    T value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size())
        qFatal("'%s' is not a number of the expected type", text.c_str());
    return value;
}

// The kind groups the trace puts on one track each, as the issue lists them.
std::string groupOf(wire::SpanKind kind)
{
    switch (kind) {
    case wire::SpanKind::Forward:
    case wire::SpanKind::Backward:
    case wire::SpanKind::WeightGrad:
        return "compute";
    case wire::SpanKind::DataParallelReduce:
        return "data-parallel";
    case wire::SpanKind::Optimizer:
        return "optimizer";
    case wire::SpanKind::Idle:
        return "idle";
    default:
        return "pipeline";
    }
}

struct SpanAt {
    std::uint32_t rank;
    std::int64_t begin;
    // clang-tidy 14 takes the 0 a defaulted <=> compares with for a null pointer.
    auto operator<=>(const SpanAt&) const = default;  // NOLINT(modernize-use-nullptr)
};

// Two pipelines (ranks 0 -> 1 and 2 -> 3) over two steps: forward, send-act, recv-act, backward,
// send-grad, recv-grad per micro-batch, then dp-reduce and optimizer. Micro-batch 2 travels twice
// between each pair (two chunks, as an interleaved schedule does), and one extra send-act of
// step 1 has no recv (lost on the wire).
struct PipelineSession {
    std::vector<std::pair<std::uint32_t, wire::SpanRecord>> spans;
    std::vector<std::pair<std::uint32_t, wire::MemorySampleRecord>> memory;
    std::set<std::pair<SpanAt, SpanAt>> flows;  // send, recv
};

PipelineSession pipeline()
{
    PipelineSession s;
    std::map<std::uint32_t, std::int64_t> clock{
        {0, 5'000'000'123}, {1, 5'000'000'123}, {2, 5'000'000'000}, {3, 5'000'000'500}};
    const auto add = [&](std::uint32_t rank, int step, int mb, int chunk, wire::SpanKind kind, int peer,
                         std::int64_t length) {
        const std::int64_t begin = clock[rank];
        s.spans.push_back({rank,
                           {step, std::int16_t(rank % 2), std::int16_t(chunk), mb, kind, peer, begin, begin + length,
                            peer >= 0 ? std::uint64_t(4096 * (mb + 1)) : 0}});
        clock[rank] = begin + length + 17;
        return SpanAt{rank, begin};
    };
    for (int step = 0; step < 2; ++step) {
        for (std::uint32_t first : {0u, 2u}) {
            const std::uint32_t second = first + 1;
            for (int mb = 0; mb < 4; ++mb) {
                for (int chunk = 0; chunk < (mb == 2 ? 2 : 1); ++chunk) {
                    add(first, step, mb, chunk, wire::SpanKind::Forward, -1, 1000 + 13 * mb);
                    clock[second] = std::max(clock[second], clock[first]);
                    const SpanAt send = add(first, step, mb, chunk, wire::SpanKind::SendActivation, int(second), 301);
                    const SpanAt recv = add(second, step, mb, chunk, wire::SpanKind::RecvActivation, int(first), 299);
                    s.flows.insert({send, recv});
                    add(second, step, mb, chunk, wire::SpanKind::Forward, -1, 1001);
                }
            }
            for (int mb = 0; mb < 4; ++mb) {
                add(second, step, mb, 0, wire::SpanKind::Backward, -1, 2001);
                const SpanAt send = add(second, step, mb, 0, wire::SpanKind::SendGradient, int(first), 450);
                clock[first] = std::max(clock[first], clock[second]);
                const SpanAt recv = add(first, step, mb, 0, wire::SpanKind::RecvGradient, int(second), 449);
                s.flows.insert({send, recv});
                add(first, step, mb, 0, wire::SpanKind::Backward, -1, 1999);
            }
            if (step == 1)
                add(first, step, 7, 0, wire::SpanKind::SendActivation, int(second), 10);  // lost
            for (std::uint32_t rank : {first, second}) {
                add(rank, step, -1, 0, wire::SpanKind::DataParallelReduce, int(rank ^ 2u), 3000);
                add(rank, step, -1, 0, wire::SpanKind::Optimizer, -1, 0);  // zero length
                for (int c = 0; c < wire::kMemoryCategories; ++c)
                    s.memory.push_back({rank,
                                        {step, clock[rank] + c, wire::MemoryCategory(c),
                                         (std::int64_t(c) + 1) << 20 | rank, std::int64_t(c + 2) << 20}});
            }
        }
    }
    return s;
}

// Writes the pipeline session plus one record of every other type per rank.
void writePipeline(const std::string& path, const PipelineSession& s)
{
    store::SessionHeader header = samples::header(4);
    for (store::RankInfo& rank : header.ranks) {
        rank.host = "node-" + std::to_string(rank.node);
        rank.pid = 4242 + rank.rank;
    }
    store::SessionWriter writer(path, header);
    for (const auto& [rank, span] : s.spans)
        writer.append({rank, 0, {span}});
    for (const auto& [rank, sample] : s.memory)
        writer.append({rank, 0, {sample}});
    for (std::uint32_t rank = 0; rank < 4; ++rank) {
        std::vector<wire::Record> others;
        for (wire::Record& record : samples::everyRecordType(6'000'000'000 + rank, int(rank), rank))
            if (!std::holds_alternative<wire::SpanRecord>(record) &&
                !std::holds_alternative<wire::MemorySampleRecord>(record))
                others.push_back(std::move(record));
        writer.append({rank, 0, std::move(others)});
    }
    writer.setTraffic({0, 1234, 1, 0});
    writer.setTraffic({3, std::numeric_limits<std::uint64_t>::max(), 0, 7});
    writer.setOutcome({store::Outcome::Stopped, "stopped by the user, \"Ctrl-C\"", -1, 7'000'000'000});
}

double microsecondsSince(std::int64_t origin, std::int64_t time) { return double(time - origin) / 1000.0; }

}  // namespace

class TestSessionExport : public QObject {
    Q_OBJECT
private slots:
    void chromeTraceFollowsTheFormat();
    void csvFilesReadBackEqual();
    void unwritableOutputsAreReported();
};

void TestSessionExport::chromeTraceFollowsTheFormat()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("run.meshbench").toStdString();
    const std::string out = dir.filePath("trace.json").toStdString();
    const PipelineSession s = pipeline();
    writePipeline(path, s);
    const store::SessionReader reader(path);
    store::exportChromeTrace(reader, out);

    const json trace = json::parse(readFile(out));
    QVERIFY(trace.is_object());
    QCOMPARE(trace["displayTimeUnit"], json("ns"));
    QCOMPARE(trace["metadata"]["session"], json(reader.header().name));
    QCOMPARE(trace["metadata"]["outcome"], json("stopped"));
    std::int64_t origin = std::numeric_limits<std::int64_t>::max();
    for (const auto& [rank, span] : s.spans)
        origin = std::min(origin, span.beginNs);
    for (const auto& [rank, sample] : s.memory)
        origin = std::min(origin, sample.timeNs);
    QCOMPARE(trace["metadata"]["origin_ns"].get<std::int64_t>(), origin);

    std::map<std::pair<int, int>, std::string> threadNames;
    std::map<int, std::string> processNames;
    std::vector<json> slices, counters;
    std::map<std::uint64_t, std::vector<json>> flows;
    for (const json& event : trace["traceEvents"]) {
        QVERIFY(event["ph"].is_string() && event["ts"].is_number() && event["pid"].is_number_integer() &&
                event["tid"].is_number_integer());
        const std::string ph = event["ph"];
        if (ph == "M") {
            QCOMPARE(event["ts"].get<double>(), 0.0);
            if (event["name"] == "process_name")
                processNames[event["pid"].get<int>()] = event["args"]["name"];
            else if (event["name"] == "thread_name")
                threadNames[{event["pid"].get<int>(), event["tid"].get<int>()}] = event["args"]["name"];
            else
                QVERIFY(event["name"] == "process_sort_index" || event["name"] == "thread_sort_index");
        } else if (ph == "X") {
            QVERIFY(event["dur"].is_number() && event["dur"].get<double>() >= 0);
            QVERIFY(event["name"].is_string() && event["cat"].is_string());
            for (const char* arg : {"step", "stage", "chunk", "microbatch", "bytes", "peer"})
                QVERIFY2(event["args"][arg].is_number_integer(), arg);
            slices.push_back(event);
        } else if (ph == "C") {
            counters.push_back(event);
        } else {
            QVERIFY(ph == "s" || ph == "f");
            QVERIFY(event["id"].is_number_integer());
            flows[event["id"].get<std::uint64_t>()].push_back(event);
        }
    }

    // One named process per rank, with its coordinates, host and pid.
    QCOMPARE(processNames.size(), std::size_t(4));
    QCOMPARE(processNames[3], std::string("rank 3 (dp1 pp1 tp0 ep1) node-1:4245"));
    QCOMPARE(processNames[0], std::string("rank 0 (dp0 pp0 tp0 ep0) node-0:4242"));

    // Every span is one X event: microseconds since the origin, exactly ns / 1000, on its group's track.
    QCOMPARE(slices.size(), s.spans.size());
    std::multiset<std::tuple<int, double, double, std::string, std::string, int, int>> expected, actual;
    for (const auto& [rank, span] : s.spans) {
        std::string name(wire::spanKindName(span.kind));
        if (span.microbatch >= 0)
            name += " mb" + std::to_string(span.microbatch) + " chunk" + std::to_string(span.chunk);
        expected.insert({int(rank), microsecondsSince(origin, span.beginNs), double(span.endNs - span.beginNs) / 1000.0,
                         name, groupOf(span.kind), span.microbatch, span.peerRank});
    }
    for (const json& x : slices) {
        const std::pair<int, int> track{x["pid"].get<int>(), x["tid"].get<int>()};
        QCOMPARE(threadNames[track], x["cat"].get<std::string>());
        actual.emplace(x["pid"].get<int>(), x["ts"].get<double>(), x["dur"].get<double>(), x["name"].get<std::string>(),
                       x["cat"].get<std::string>(), x["args"]["microbatch"].get<int>(), x["args"]["peer"].get<int>());
    }
    QVERIFY(actual == expected);

    // One counter per rank and memory category, in bytes.
    QCOMPARE(counters.size(), s.memory.size());
    std::multiset<std::tuple<int, double, std::string, std::int64_t>> wantedCounters, gotCounters;
    for (const auto& [rank, m] : s.memory)
        wantedCounters.insert({int(rank), microsecondsSince(origin, m.timeNs),
                               "memory " + std::string(wire::memoryCategoryName(m.category)), m.currentBytes});
    for (const json& c : counters)
        gotCounters.emplace(c["pid"].get<int>(), c["ts"].get<double>(), c["name"].get<std::string>(),
                            c["args"]["bytes"].get<std::int64_t>());
    QVERIFY(gotCounters == wantedCounters);

    // Each flow: one s on the sender's send span, one f (bound to its enclosing slice) on the
    // receiver's matching recv span; exactly the pairs the session was built with.
    const auto sliceAt = [&](const json& at) -> const json* {
        for (const json& x : slices)
            if (x["pid"] == at["pid"] && x["tid"] == at["tid"] && x["ts"].get<double>() <= at["ts"].get<double>() &&
                at["ts"].get<double>() <= x["ts"].get<double>() + x["dur"].get<double>())
                return &x;
        return nullptr;
    };
    std::set<std::pair<SpanAt, SpanAt>> linked;
    for (const auto& [id, ends] : flows) {
        QCOMPARE(ends.size(), std::size_t(2));
        const json& start = ends[0]["ph"] == "s" ? ends[0] : ends[1];
        const json& finish = ends[0]["ph"] == "s" ? ends[1] : ends[0];
        QCOMPARE(start["ph"], json("s"));
        QCOMPARE(finish["ph"], json("f"));
        QCOMPARE(finish["bp"], json("e"));
        QCOMPARE(start["name"], finish["name"]);
        QCOMPARE(start["cat"], finish["cat"]);
        const json* send = sliceAt(start);
        const json* recv = sliceAt(finish);
        QVERIFY(send && recv);
        QVERIFY((*send)["name"].get<std::string>().starts_with("send-"));
        QVERIFY((*recv)["name"].get<std::string>().starts_with("recv-"));
        QCOMPARE((*send)["args"]["peer"], (*recv)["pid"]);
        QCOMPARE((*recv)["args"]["peer"], (*send)["pid"]);
        QCOMPARE((*send)["args"]["step"], (*recv)["args"]["step"]);
        QCOMPARE((*send)["args"]["microbatch"], (*recv)["args"]["microbatch"]);
        QCOMPARE((*send)["args"]["chunk"], (*recv)["args"]["chunk"]);  // the k-th send meets the k-th recv
        const auto begin = [&](const json& x) {
            return origin + std::int64_t(std::llround(x["ts"].get<double>() * 1000.0));
        };
        linked.emplace(SpanAt{(*send)["pid"].get<std::uint32_t>(), begin(*send)},
                       SpanAt{(*recv)["pid"].get<std::uint32_t>(), begin(*recv)});
    }
    QCOMPARE(flows.size(), s.flows.size());
    QVERIFY(linked == s.flows);
}

void TestSessionExport::csvFilesReadBackEqual()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("run.meshbench").toStdString();
    const std::string out = dir.filePath("csv/nested").toStdString();
    writePipeline(path, pipeline());
    const store::SessionReader reader(path);
    store::exportCsv(reader, out);
    const auto table = [&](const char* name, const char* header) {
        auto rows = parseCsv(readFile(out + "/" + name));
        if (rows.empty())
            qFatal("%s is empty", name);
        std::string first;
        for (const std::string& field : rows.front())
            first += (first.empty() ? "" : ",") + field;
        if (first != header)
            qFatal("%s has header %s", name, first.c_str());
        rows.erase(rows.begin());
        return rows;
    };

    const auto steps = table("steps.csv", "step,loss,aux_loss,tokens_per_s,bubble_ratio,grad_norm,lr,tokens,begin_ns,"
                                          "end_ns,rank");
    const auto metrics = reader.stepMetrics();
    QCOMPARE(steps.size(), metrics.size());
    for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto& [rank, m] = metrics[i];
        const auto& row = steps[i];
        wire::StepMetricsRecord parsed{number<std::int32_t>(row[0]), number<std::int64_t>(row[8]),
                                       number<std::int64_t>(row[9]), number<double>(row[1]),
                                       number<double>(row[2]),       number<double>(row[5]),
                                       number<double>(row[6]),       number<double>(row[3]),
                                       number<double>(row[4]),       number<std::int64_t>(row[7])};
        QVERIFY(parsed == m);  // doubles bit for bit: 0.1 + 0.2, 1/3, 2.718281828459045
        QCOMPARE(number<std::uint32_t>(row[10]), rank);
    }

    const auto logs = table("logs.csv", "rank,time_ns,level,text");
    const auto storedLogs = reader.logs();
    QCOMPARE(logs.size(), std::size_t(4));
    for (std::size_t i = 0; i < logs.size(); ++i) {
        QCOMPARE(number<std::uint32_t>(logs[i][0]), storedLogs[i].rank);
        QCOMPARE(number<std::int64_t>(logs[i][1]), storedLogs[i].record.timeNs);
        QCOMPARE(logs[i][2], std::string("warning"));
        QCOMPARE(logs[i][3], storedLogs[i].record.text);  // commas, quotes and a line break
    }
    QVERIFY(logs[0][3].find(',') != std::string::npos && logs[0][3].find('"') != std::string::npos &&
            logs[0][3].find('\n') != std::string::npos);

    const auto spans = table("spans.csv", "rank,step,stage,chunk,microbatch,kind,peer,begin_ns,end_ns,bytes");
    std::vector<std::vector<std::string>> wantedSpans;
    reader.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                 [&](const store::StoredSpan& stored) {
                     const wire::SpanRecord& x = stored.span;
                     wantedSpans.push_back({std::to_string(stored.rank), std::to_string(x.step),
                                            std::to_string(x.stage), std::to_string(x.chunk),
                                            std::to_string(x.microbatch), std::string(wire::spanKindName(x.kind)),
                                            std::to_string(x.peerRank), std::to_string(x.beginNs),
                                            std::to_string(x.endNs), std::to_string(x.bytes)});
                 });
    QVERIFY(spans == wantedSpans);

    const auto experts = table("expert_loads.csv", "rank,step,layer,expert,routed,dropped");
    std::vector<std::vector<std::string>> wantedExperts;
    for (const auto& [rank, load] : reader.expertLoads())
        for (std::size_t e = 0; e < load.routed.size(); ++e)
            wantedExperts.push_back({std::to_string(rank), std::to_string(load.step), std::to_string(load.layer),
                                     std::to_string(e), std::to_string(load.routed[e]),
                                     std::to_string(load.dropped[e])});
    QCOMPARE(experts.size(), std::size_t(16));
    QVERIFY(experts == wantedExperts);

    const auto memory = table("memory.csv", "rank,step,time_ns,category,current_bytes,peak_bytes");
    const auto samples = reader.memorySamples();
    QCOMPARE(memory.size(), samples.size());
    for (std::size_t i = 0; i < memory.size(); ++i) {
        const auto& [rank, m] = samples[i];
        QVERIFY((memory[i] == std::vector<std::string>{std::to_string(rank), std::to_string(m.step),
                                                       std::to_string(m.timeNs),
                                                       std::string(wire::memoryCategoryName(m.category)),
                                                       std::to_string(m.currentBytes), std::to_string(m.peakBytes)}));
    }

    const auto nodes = table("nodes.csv", "rank,time_ns,host,host_memory_total_bytes,host_memory_used_bytes,device,"
                                          "device_memory_total_bytes,device_memory_used_bytes,device_utilization");
    const auto storedNodes = reader.nodeSamples();
    QCOMPARE(nodes.size(), storedNodes.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const auto& row = nodes[i];
        const wire::NodeSampleRecord parsed{number<std::int64_t>(row[1]), row[2],
                                            number<std::int64_t>(row[3]), number<std::int64_t>(row[4]),
                                            number<std::int32_t>(row[5]), number<std::int64_t>(row[6]),
                                            number<std::int64_t>(row[7]), number<float>(row[8])};
        QVERIFY(parsed == storedNodes[i].record);
    }

    const auto heartbeats = table("heartbeats.csv", "rank,time_ns,state,step,pid,detail,dropped_records,host");
    const auto storedHeartbeats = reader.heartbeats();
    QCOMPARE(heartbeats.size(), storedHeartbeats.size());
    for (std::size_t i = 0; i < heartbeats.size(); ++i) {
        const auto& row = heartbeats[i];
        const auto& h = storedHeartbeats[i].record;
        QCOMPARE(row[2], std::string(wire::rankStateName(h.state)));
        QCOMPARE(number<std::uint64_t>(row[6]), h.droppedRecords);
        QCOMPARE(row[7], h.host);
        QCOMPARE(number<std::int32_t>(row[5]), h.detail);
    }

    const auto clocks = table("clocks.csv", "rank,time_ns,offset_ns,round_trip_ns");
    const auto storedClocks = reader.clockOffsets();
    QCOMPARE(clocks.size(), storedClocks.size());
    for (std::size_t i = 0; i < clocks.size(); ++i) {
        const wire::ClockOffsetRecord parsed{number<std::int64_t>(clocks[i][1]), number<std::int64_t>(clocks[i][2]),
                                             number<std::int64_t>(clocks[i][3])};
        QVERIFY(parsed == storedClocks[i].record);
        QCOMPARE(number<std::uint32_t>(clocks[i][0]), storedClocks[i].rank);
    }

    const auto ranks = table("ranks.csv", "rank,dp,pp,tp,ep,node,local_device,host,pid");
    QCOMPARE(ranks.size(), std::size_t(4));
    QVERIFY((ranks[3] == std::vector<std::string>{"3", "1", "1", "0", "1", "1", "1", "node-1", "4245"}));

    const auto traffic = table("traffic.csv", "rank,received,lost,dropped");
    QVERIFY((traffic ==
             std::vector<std::vector<std::string>>{{"0", "1234", "1", "0"}, {"3", "18446744073709551615", "0", "7"}}));

    const auto session =
        table("session.csv", "name,layout,engine_version,created_ns,outcome,cause,failed_rank,ended_ns");
    QCOMPARE(session.size(), std::size_t(1));
    QVERIFY((session[0] == std::vector<std::string>{reader.header().name, reader.header().layout, "0.1.0",
                                                    std::to_string(reader.header().createdNs), "stopped",
                                                    "stopped by the user, \"Ctrl-C\"", "-1", "7000000000"}));
}

void TestSessionExport::unwritableOutputsAreReported()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("run.meshbench").toStdString();
    writePipeline(path, pipeline());
    const store::SessionReader reader(path);
    const std::string missing = dir.filePath("no/such/folder/trace.json").toStdString();
    try {
        store::exportChromeTrace(reader, missing);
        QFAIL("exported into a folder that does not exist");
    } catch (const store::StoreError& error) {
        QVERIFY(std::string(error.what()).find("cannot write '" + missing + "'") != std::string::npos);
    }
    const std::string file = dir.filePath("a-file").toStdString();
    std::ofstream(file) << "x";
    try {
        store::exportCsv(reader, file);
        QFAIL("exported CSV files into a regular file");
    } catch (const store::StoreError& error) {
        QVERIFY(std::string(error.what()).find("'" + file + "'") != std::string::npos);
    }
}

QTEST_APPLESS_MAIN(TestSessionExport)
#include "tst_session_export.moc"
