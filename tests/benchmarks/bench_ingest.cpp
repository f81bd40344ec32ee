// Session ingest rate, end to end: wire::decodeBatch of realistic frames (~1000 records, mostly
// spans, from 8 ranks) -> SessionWriter::append -> flush() returns with everything committed, in
// records/s. Encoding the frames is outside the timing. The reference, measured in the same run:
// a bare SQLite loop inserting the same rows into identical tables (schema.h, same pragmas) with
// one prepared statement per table, bound by index, committing every 10,000 records as the writer
// does. Targets: >= 0.8 of the reference and >= 500k records/s; a missed target makes the exit
// status 1. Before any figure, the session is read back: every record type's count must be the
// number sent, or the benchmark fails without figures.
//
// The collector decodes on its own thread while the writer thread stores, as in the engine, so the
// wall-clock rate is the writer thread's; CPU seconds of both threads are printed beside it.
//
// usage: bench_ingest [RECORDS]   (default 1,000,000)

#include "store/schema.h"
#include "store/session_store.h"
#include "wire/telemetry.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <unistd.h>

using namespace meshbench;

namespace {

constexpr int kRanks = 8;
constexpr int kRecordsPerFrame = 1000;
constexpr int kRecordsPerTransaction = 10000;

// One frame of a rank: 970 spans of a pipeline step, then samples, expert loads, metrics and logs.
wire::Batch frame(std::uint32_t rank, std::uint64_t sequence, std::int64_t& clock, int step)
{
    wire::Batch batch{rank, sequence, {}};
    batch.records.reserve(kRecordsPerFrame);
    constexpr wire::SpanKind kinds[] = {wire::SpanKind::Forward, wire::SpanKind::SendActivation,
                                        wire::SpanKind::RecvGradient, wire::SpanKind::Backward,
                                        wire::SpanKind::WeightGrad};
    for (int i = 0; i < 970; ++i) {
        const wire::SpanKind kind = kinds[i % 5];
        const bool comm = wire::isCommunicationKind(kind);
        const std::int64_t length = 20'000 + (i * 7919) % 30'000;
        batch.records.push_back(wire::SpanRecord{step, std::int16_t(rank % 4), 0, i / 5, kind,
                                                 comm ? int(rank ^ 1u) : -1, clock, clock + length,
                                                 comm ? std::uint64_t(1) << 22 : 0});
        clock += length + 500;
    }
    for (int c = 0; c < 10; ++c)
        batch.records.push_back(wire::MemorySampleRecord{step, clock + c, wire::MemoryCategory(c % 5),
                                                         std::int64_t(1) << (20 + c), std::int64_t(1) << (21 + c)});
    for (int layer = 0; layer < 2; ++layer) {
        wire::ExpertLoadRecord load{step, layer, {}, {}};
        for (std::uint32_t e = 0; e < 16; ++e) {
            load.routed.push_back(1000 + e * 37);
            load.dropped.push_back(e % 3);
        }
        batch.records.push_back(std::move(load));
    }
    for (int m = 0; m < 2; ++m)
        batch.records.push_back(wire::StepMetricsRecord{step, clock - 1'000'000, clock, 2.5 - step * 1e-4, 1e-3, 0.9,
                                                        3e-4, 123456.7, 0.21, 65536});
    for (int n = 0; n < 2; ++n)
        batch.records.push_back(wire::NodeSampleRecord{clock, "node-" + std::to_string(rank / 4), 64LL << 30,
                                                       20LL << 30, n, 80LL << 30, 30LL << 30, 0.75f});
    for (int l = 0; l < 10; ++l)
        batch.records.push_back(
            wire::LogRecord{clock + l, wire::LogLevel::Info, "step " + std::to_string(step) + " micro-batch done"});
    for (int h = 0; h < 4; ++h)
        batch.records.push_back(wire::HeartbeatRecord{clock + h, wire::RankState::Running, step, 4000 + int(rank), 0, 0,
                                                      "node-" + std::to_string(rank / 4)});
    return batch;
}

struct Timing {
    double wall = 0;
    double cpu = 0;
};

template <typename F>
Timing timed(F&& work)
{
    const auto wall = std::chrono::steady_clock::now();
    const std::clock_t cpu = std::clock();
    work();
    return {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count(),
            double(std::clock() - cpu) / CLOCKS_PER_SEC};
}

// Why the benchmark failed: main says it and exits 1 (exit here would race the session writer's
// thread). Not a std::exception, so that the handlers for the writer's own errors let it through.
struct Failure {
    std::string what;
};

[[noreturn]] void die(const std::string& what) { throw Failure{what}; }

void exec(sqlite3* db, std::string_view sql)
{
    if (sqlite3_exec(db, std::string(sql).c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
        die(sqlite3_errmsg(db));
}

// The reference: the same rows, inserted straight into a fresh file with the session schema.
class BareLoop {
public:
    explicit BareLoop(const std::string& path)
    {
        if (sqlite3_open_v2(path.c_str(), &m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                            nullptr) != SQLITE_OK)
            die("cannot create " + path);
        exec(m_db, store::schema::kWriterPragmas);
        exec(m_db, store::schema::kCreateTables);
        for (auto sql :
             {store::schema::kInsertSpan, store::schema::kInsertExpertLoad, store::schema::kInsertMemorySample,
              store::schema::kInsertStepMetrics, store::schema::kInsertNodeSample, store::schema::kInsertLog,
              store::schema::kInsertHeartbeat}) {
            sqlite3_stmt* statement = nullptr;
            if (sqlite3_prepare_v3(m_db, sql.data(), int(sql.size()), SQLITE_PREPARE_PERSISTENT, &statement, nullptr) !=
                SQLITE_OK)
                die(sqlite3_errmsg(m_db));
            m_insert.push_back(statement);
        }
    }
    ~BareLoop()
    {
        for (sqlite3_stmt* statement : m_insert)
            sqlite3_finalize(statement);
        sqlite3_close(m_db);
    }

    void insertAll(const std::vector<wire::Batch>& batches)
    {
        exec(m_db, "BEGIN");
        std::size_t records = 0;
        for (const wire::Batch& batch : batches) {
            for (const wire::Record& record : batch.records)
                insert(batch.rank, record);
            records += batch.records.size();
            if (records >= kRecordsPerTransaction) {
                exec(m_db, "COMMIT; BEGIN");
                records = 0;
            }
        }
        exec(m_db, "COMMIT");
    }

private:
    void run(sqlite3_stmt* statement)
    {
        if (sqlite3_step(statement) != SQLITE_DONE)
            die(sqlite3_errmsg(m_db));
        sqlite3_reset(statement);
    }

    // The same rows as the writer's: expert loads carry the latest time their rank sent before.
    void insert(std::uint32_t rank, const wire::Record& record)
    {
        sqlite3_stmt* s = m_insert[record.index()];
        std::int64_t& last = m_lastTime[rank];
        std::visit(
            [&](const auto& r) {
                using R = std::decay_t<decltype(r)>;
                if constexpr (std::is_same_v<R, wire::SpanRecord> || std::is_same_v<R, wire::StepMetricsRecord>)
                    last = std::max(last, r.endNs);
                else if constexpr (!std::is_same_v<R, wire::ExpertLoadRecord>)
                    last = std::max(last, r.timeNs);
            },
            record);
        if (const auto* span = std::get_if<wire::SpanRecord>(&record)) {
            sqlite3_bind_int64(s, 1, rank);
            sqlite3_bind_int64(s, 2, span->beginNs);
            sqlite3_bind_int64(s, 3, m_seq++);
            sqlite3_bind_int64(s, 4, span->endNs);
            sqlite3_bind_int64(s, 5, span->step);
            sqlite3_bind_int64(s, 6, span->stage);
            sqlite3_bind_int64(s, 7, span->chunk);
            sqlite3_bind_int64(s, 8, span->microbatch);
            sqlite3_bind_int64(s, 9, int(span->kind));
            sqlite3_bind_int64(s, 10, span->peerRank);
            sqlite3_bind_int64(s, 11, sqlite3_int64(span->bytes));
            run(s);
        } else if (const auto* load = std::get_if<wire::ExpertLoadRecord>(&record)) {
            for (std::size_t e = 0; e < load->routed.size(); ++e) {
                sqlite3_bind_int64(s, 1, m_seq++);
                sqlite3_bind_int64(s, 2, rank);
                sqlite3_bind_int64(s, 3, last);
                sqlite3_bind_int64(s, 4, load->step);
                sqlite3_bind_int64(s, 5, load->layer);
                sqlite3_bind_int64(s, 6, sqlite3_int64(e));
                sqlite3_bind_int64(s, 7, load->routed[e]);
                sqlite3_bind_int64(s, 8, load->dropped[e]);
                run(s);
            }
        } else if (const auto* memory = std::get_if<wire::MemorySampleRecord>(&record)) {
            sqlite3_bind_int64(s, 1, m_seq++);
            sqlite3_bind_int64(s, 2, rank);
            sqlite3_bind_int64(s, 3, memory->timeNs);
            sqlite3_bind_int64(s, 4, memory->step);
            sqlite3_bind_int64(s, 5, int(memory->category));
            sqlite3_bind_int64(s, 6, memory->currentBytes);
            sqlite3_bind_int64(s, 7, memory->peakBytes);
            run(s);
        } else if (const auto* m = std::get_if<wire::StepMetricsRecord>(&record)) {
            sqlite3_bind_int64(s, 1, m_seq++);
            sqlite3_bind_int64(s, 2, rank);
            sqlite3_bind_int64(s, 3, m->step);
            sqlite3_bind_int64(s, 4, m->beginNs);
            sqlite3_bind_int64(s, 5, m->endNs);
            sqlite3_bind_double(s, 6, m->loss);
            sqlite3_bind_double(s, 7, m->auxLoss);
            sqlite3_bind_double(s, 8, m->gradNorm);
            sqlite3_bind_double(s, 9, m->learningRate);
            sqlite3_bind_double(s, 10, m->tokensPerSecond);
            sqlite3_bind_double(s, 11, m->bubbleRatio);
            sqlite3_bind_int64(s, 12, m->tokens);
            run(s);
        } else if (const auto* node = std::get_if<wire::NodeSampleRecord>(&record)) {
            sqlite3_bind_int64(s, 1, m_seq++);
            sqlite3_bind_int64(s, 2, rank);
            sqlite3_bind_int64(s, 3, node->timeNs);
            sqlite3_bind_text(s, 4, node->host.data(), int(node->host.size()), SQLITE_STATIC);
            sqlite3_bind_int64(s, 5, node->hostMemoryTotalBytes);
            sqlite3_bind_int64(s, 6, node->hostMemoryUsedBytes);
            sqlite3_bind_int64(s, 7, node->device);
            sqlite3_bind_int64(s, 8, node->deviceMemoryTotalBytes);
            sqlite3_bind_int64(s, 9, node->deviceMemoryUsedBytes);
            sqlite3_bind_double(s, 10, node->deviceUtilization);
            run(s);
        } else if (const auto* log = std::get_if<wire::LogRecord>(&record)) {
            sqlite3_bind_int64(s, 1, m_seq++);
            sqlite3_bind_int64(s, 2, rank);
            sqlite3_bind_int64(s, 3, log->timeNs);
            sqlite3_bind_int64(s, 4, int(log->level));
            sqlite3_bind_text(s, 5, log->text.data(), int(log->text.size()), SQLITE_STATIC);
            run(s);
        } else {
            const auto& h = std::get<wire::HeartbeatRecord>(record);
            sqlite3_bind_int64(s, 1, m_seq++);
            sqlite3_bind_int64(s, 2, rank);
            sqlite3_bind_int64(s, 3, h.timeNs);
            sqlite3_bind_int64(s, 4, int(h.state));
            sqlite3_bind_int64(s, 5, h.step);
            sqlite3_bind_int64(s, 6, h.pid);
            sqlite3_bind_int64(s, 7, h.detail);
            sqlite3_bind_int64(s, 8, sqlite3_int64(h.droppedRecords));
            sqlite3_bind_text(s, 9, h.host.data(), int(h.host.size()), SQLITE_STATIC);
            run(s);
        }
    }

    sqlite3* m_db = nullptr;
    std::vector<sqlite3_stmt*> m_insert;  // by record type index
    std::int64_t m_seq = 1;
    std::vector<std::int64_t> m_lastTime = std::vector<std::int64_t>(kRanks, 0);
};

}  // namespace

// The records of each type in `batches`, by wire::Record index.
std::vector<std::size_t> countByType(const std::vector<wire::Batch>& batches)
{
    std::vector<std::size_t> counts(std::variant_size_v<wire::Record>, 0);
    for (const wire::Batch& batch : batches)
        for (const wire::Record& record : batch.records)
            ++counts[record.index()];
    return counts;
}

// What the session holds of each type, by the same index; fails with the type's name on a mismatch.
void checkStored(const store::SessionReader& reader, const std::vector<std::size_t>& sent)
{
    const std::vector<std::pair<std::size_t, std::pair<const char*, std::size_t>>> stored{
        {wire::Record(wire::SpanRecord{}).index(), {"spans", std::size_t(reader.spanCount())}},
        {wire::Record(wire::ExpertLoadRecord{}).index(), {"expert loads", reader.expertLoads().size()}},
        {wire::Record(wire::MemorySampleRecord{}).index(), {"memory samples", reader.memorySamples().size()}},
        {wire::Record(wire::StepMetricsRecord{}).index(), {"step metrics", reader.stepMetrics().size()}},
        {wire::Record(wire::NodeSampleRecord{}).index(), {"node samples", reader.nodeSamples().size()}},
        {wire::Record(wire::LogRecord{}).index(), {"log lines", reader.logs().size()}},
        {wire::Record(wire::HeartbeatRecord{}).index(), {"heartbeats", reader.heartbeats().size()}},
    };
    std::size_t checked = 0;
    std::string missing;
    for (const auto& [index, named] : stored) {
        checked += sent[index];
        if (named.second != sent[index])
            missing += std::string(missing.empty() ? "" : ", ") + named.first + ": " + std::to_string(named.second) +
                       " stored of " + std::to_string(sent[index]) + " sent";
    }
    std::size_t total = 0;
    for (std::size_t n : sent)
        total += n;
    if (checked != total)
        missing += (missing.empty() ? "" : ", ") + std::to_string(total - checked) + " records of a type not checked";
    if (!missing.empty())
        die("the session does not hold every record sent (" + missing + "); no figures");
}

namespace {

int runBenchmark(int argc, char** argv)
{
    const long requested = argc > 1 ? std::atol(argv[1]) : 1'000'000;
    if (requested < kRecordsPerFrame)
        die("RECORDS must be at least " + std::to_string(kRecordsPerFrame));
    const int frames = int(requested / kRecordsPerFrame);
    const std::size_t records = std::size_t(frames) * kRecordsPerFrame;

    std::vector<std::vector<std::uint8_t>> encoded;
    std::vector<wire::Batch> decoded;
    std::vector<std::int64_t> clocks(kRanks, 1'700'000'000'000'000'000);
    std::vector<std::uint64_t> sequences(kRanks, 0);
    for (int f = 0; f < frames; ++f) {
        const auto rank = std::uint32_t(f % kRanks);
        wire::Batch batch = frame(rank, sequences[rank], clocks[rank], f / kRanks);
        sequences[rank] += batch.records.size();
        encoded.push_back(wire::encodeBatch(batch));
        decoded.push_back(std::move(batch));
    }

    const auto dir = std::filesystem::temp_directory_path() / ("meshbench-bench-ingest-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string sessionPath = (dir / "ingest.meshbench").string();
    const std::string barePath = (dir / "bare.sqlite").string();
    store::SessionHeader header;
    header.name = "bench_ingest";
    for (int r = 0; r < kRanks; ++r)
        header.ranks.push_back({r, r / 4, r % 4, 0, r / 4, r / 4, r % 4, "", 0});

    std::printf("Session ingest, %zu records in %d frames of %d from %d ranks (97%% spans):\n", records, frames,
                kRecordsPerFrame, kRanks);
    Timing endToEnd;
    try {
        store::SessionWriter writer(sessionPath, header);
        endToEnd = timed([&] {
            for (const auto& bytes : encoded) {
                wire::DecodeResult result = wire::decodeBatch(bytes);
                if (!result.batch)
                    die("a frame does not decode: " + result.error);
                writer.append(std::move(*result.batch));
            }
            writer.flush();
        });
    } catch (const std::exception& e) {
        die(std::string("the session writer failed: ") + e.what());
    }
    const std::vector<std::size_t> sent = countByType(decoded);
    std::optional<store::SessionReader> reader;
    try {
        reader.emplace(sessionPath);
    } catch (const std::exception& e) {
        die(std::string("the session just written does not open: ") + e.what());
    }
    checkStored(*reader, sent);
    Timing bare;
    {
        BareLoop loop(barePath);
        bare = timed([&] { loop.insertAll(decoded); });
    }
    const double rate = double(records) / endToEnd.wall;
    const double reference = double(records) / bare.wall;
    std::printf("  end to end (decode -> append -> flush)  %9.0f records/s  %6.2f s wall  %6.2f s CPU\n", rate,
                endToEnd.wall, endToEnd.cpu);
    std::printf("  bare SQLite prepared-insert loop        %9.0f records/s  %6.2f s wall  %6.2f s CPU\n", reference,
                bare.wall, bare.cpu);
    const bool ratioMet = rate / reference >= 0.80, rateMet = rate >= 500'000;
    std::printf("  ratio %.2f (target >= 0.80: %s), end to end %s 500k records/s\n", rate / reference,
                ratioMet ? "meets" : "MISSES", rateMet ? "meets" : "MISSES");
    std::printf("  read back: all %zu records, by type\n", records);

    // The queries the GUI and replay ask of it, on the session just written.
    const auto [first, last] = reader->timeRange();
    const std::int64_t t0 = first + (last - first) / 2;
    const std::uint32_t ranks[] = {2, 5};
    std::size_t hits = 0;
    const Timing window =
        timed([&] { reader->spans(t0, t0 + 1'000'000, ranks, [&](const store::StoredSpan&) { ++hits; }); });
    std::size_t loads = 0;
    const Timing step = timed([&] { loads = reader->expertLoads(frames / kRanks / 2).size(); });
    std::printf("  of %llu spans: ranks 2 and 5 over 1 ms: %zu spans in %.2f ms; expert loads of one step: %zu in "
                "%.2f ms\n",
                static_cast<unsigned long long>(reader->spanCount()), hits, window.wall * 1e3, loads, step.wall * 1e3);
    reader.reset();
    std::filesystem::remove_all(dir);
    if (!ratioMet || !rateMet) {
        std::fprintf(stderr, "bench_ingest: missed a target (ratio >= 0.80, >= 500k records/s)\n");
        return 1;
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    try {
        return runBenchmark(argc, argv);
    } catch (const Failure& f) {
        std::fprintf(stderr, "bench_ingest: %s\n", f.what.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_ingest: %s\n", e.what());
    } catch (...) {
        std::fprintf(stderr, "bench_ingest: an unknown exception\n");
    }
    return 1;
}
