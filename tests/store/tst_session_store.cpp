// Session files: every record type read back equal, the span window and rank filters against a
// brute-force filter, replay order, the exclusive writer, bad files refused with the right words,
// and a writer killed mid-stream leaving only complete batches.

#include "store/schema.h"
#include "store/session_store.h"
#include "store_samples.h"

#include "common/other_user.h"
#include "common/session_checks.h"

#include <QtTest>

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include <csignal>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace meshbench;
using store::StoreError;

namespace {

struct Written {
    std::uint32_t rank;
    wire::Record record;
};

// Appends `records` from `rank` as one batch and remembers them in arrival order.
void append(store::SessionWriter& writer, std::vector<Written>& written, std::uint32_t rank,
            std::vector<wire::Record> records)
{
    for (const wire::Record& record : records)
        written.push_back({rank, record});
    writer.append({rank, 0, std::move(records)});
}

// The records of type R in arrival order, stably sorted by `key`.
template <typename R, typename Key>
std::vector<store::FromRank<R>> expected(const std::vector<Written>& written, Key key)
{
    std::vector<store::FromRank<R>> records;
    for (const Written& w : written)
        if (const R* record = std::get_if<R>(&w.record))
            records.push_back({w.rank, *record});
    std::stable_sort(records.begin(), records.end(),
                     [&](const store::FromRank<R>& a, const store::FromRank<R>& b) { return key(a) < key(b); });
    return records;
}

template <typename T>
bool sameList(const std::vector<T>& actual, const std::vector<T>& wanted)
{
    if (actual.size() != wanted.size()) {
        qWarning("%zu records, expected %zu", actual.size(), wanted.size());
        return false;
    }
    for (std::size_t i = 0; i < actual.size(); ++i)
        if (!(actual[i] == wanted[i])) {
            qWarning("record %zu differs", i);
            return false;
        }
    return true;
}

std::vector<std::pair<std::uint32_t, wire::SpanRecord>>
readSpans(const store::SessionReader& reader, std::int64_t t0, std::int64_t t1, const std::vector<std::uint32_t>& ranks)
{
    std::vector<std::pair<std::uint32_t, wire::SpanRecord>> spans;
    reader.spans(t0, t1, ranks, [&](const store::StoredSpan& s) { spans.emplace_back(s.rank, s.span); });
    return spans;
}

std::string failureOf(const std::function<void()>& action)
{
    try {
        action();
    } catch (const StoreError& error) {
        return error.what();
    }
    return "(no error)";
}

bool mentions(const std::string& message, std::initializer_list<std::string> words)
{
    for (const std::string& word : words)
        if (message.find(word) == std::string::npos) {
            qWarning("'%s' is missing from: %s", word.c_str(), message.c_str());
            return false;
        }
    return true;
}

using meshbench::testing::integrityCheck;

void execSql(const std::string& path, const char* sql)
{
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK ||
        sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK)
        qFatal("%s: %s", sql, sqlite3_errmsg(db));
    sqlite3_close(db);
}

void writeFile(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string readFile(const std::string& path)
{
    std::ifstream file(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// A session with `count` spans over 4 ranks, closed cleanly (so its WAL is checkpointed away).
void writeSpanSession(const std::string& path, int count)
{
    store::SessionWriter writer(path, samples::header(4));
    wire::Batch batch;
    for (int i = 0; i < count; ++i) {
        const std::int64_t begin = 1'000'000 + std::int64_t(i) * 1000;
        batch.records.push_back(
            wire::SpanRecord{i / 100, 0, 0, i % 8, wire::SpanKind::Forward, -1, begin, begin + 900, std::uint64_t(i)});
        if (batch.records.size() == 1000 || i + 1 == count) {
            batch.rank = std::uint32_t(i % 4);
            writer.append(std::move(batch));
            batch = {};
        }
    }
}

// Every query of the reader, so a damaged file is read everywhere.
void readEverything(const store::SessionReader& reader)
{
    reader.outcome();
    reader.traffic();
    reader.summary();
    reader.timeRange();
    readSpans(reader, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {});
    reader.expertLoads();
    reader.stepMetrics();
    reader.memorySamples();
    reader.nodeSamples();
    reader.logs();
    reader.heartbeats();
    reader.forEachRecord([](std::uint32_t, const wire::Record&) {});
}

// A batch whose every record carries `tag` (step fields, log text), for the all-or-nothing check.
std::vector<wire::Record> taggedBatch(int tag)
{
    const std::int64_t t = 1'000'000'000 + std::int64_t(tag) * 100'000;
    const std::vector<wire::Record> everyType = samples::everyRecordType(t, tag, 0);
    std::vector<wire::Record> records;
    records.reserve(200 + everyType.size());
    for (int i = 0; i < 200; ++i)
        records.emplace_back(
            wire::SpanRecord{tag, 0, 0, i, wire::SpanKind::Forward, -1, t + i * 10, t + i * 10 + 5, 0});
    for (const wire::Record& record : everyType)
        records.push_back(record);
    return records;
}
constexpr int kTaggedSpans = 201;  // 200 + the span of everyRecordType

}  // namespace

class TestSessionStore : public QObject {
    Q_OBJECT
private slots:
    void outcomeNames();
    void everyRecordTypeRoundTrips();
    void extremeValuesRoundTrip();
    void spansWindowAndRankFilters();
    void expertLoadsOfOneStep();
    void forEachRecordInTimeOrder();
    void secondWriterIsRefused();
    void writerInAnotherProcessIsRefused();
    void existingFileIsRefused();
    void badFilesAreRefused();
    void formatOneReadsWithoutClockOffsets();
    void tablesHoldTheFieldLists();
    void corruptPagesGiveErrorsNotCrashes();
    void sessionInReadOnlyFolderOpens();
    void killedWriterLeavesCompleteBatches();
    void writerKilledEarlyKeepsItsHeader();
    void writerFailureIsReported();
    void listSessionsNewestFirst();
    void queuedRecordsCountWhatIsNotCommitted();
};

void TestSessionStore::outcomeNames()
{
    for (auto outcome :
         {store::Outcome::Running, store::Outcome::Completed, store::Outcome::Failed, store::Outcome::Stopped})
        QCOMPARE(store::outcomeFromName(store::outcomeName(outcome)), outcome);
    QCOMPARE(store::outcomeName(store::Outcome::Failed), std::string_view("failed"));
    QVERIFY(!store::outcomeFromName("crashed"));
}

void TestSessionStore::everyRecordTypeRoundTrips()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("run.meshbench").toStdString();
    const store::SessionHeader header = samples::header(2);
    store::SessionHeader expectedHeader = header;
    expectedHeader.ranks[1].host = "node-b";
    expectedHeader.ranks[1].pid = 999;
    const store::SessionOutcome outcome{store::Outcome::Failed, "rank 1 was killed by SIGKILL", 1, 9'000'000'000};
    std::vector<Written> written;
    {
        store::SessionWriter writer(path, header);
        QCOMPARE(writer.path(), path);
        for (int b = 0; b < 6; ++b)
            append(writer, written, std::uint32_t(b % 2),
                   samples::everyRecordType(5'000'000'000 - std::int64_t(b) * 1'000'000, b, std::uint32_t(b % 2)));
        writer.updateRank(expectedHeader.ranks[1]);
        writer.setTraffic({0, 300, 2, 1});
        writer.setTraffic({1, std::numeric_limits<std::uint64_t>::max(), 0, 5});
        writer.setTraffic({0, 301, 2, 1});  // replaces the first
        writer.setOutcome(outcome);
        writer.flush();
        // WAL: a reader sees everything committed while the writer goes on.
        const store::SessionReader live(path);
        QCOMPARE(live.spanCount(), std::uint64_t(6));
        QCOMPARE(live.outcome(), outcome);
    }
    const store::SessionReader reader(path);
    QCOMPARE(reader.header(), expectedHeader);
    QCOMPARE(reader.outcome(), outcome);
    const std::vector<store::RankTraffic> traffic{{0, 301, 2, 1}, {1, std::numeric_limits<std::uint64_t>::max(), 0, 5}};
    QVERIFY(reader.traffic() == traffic);

    const auto spans = expected<wire::SpanRecord>(written, [](const auto& s) { return s.record.beginNs; });
    const auto stored =
        readSpans(reader, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {});
    QCOMPARE(stored.size(), spans.size());
    for (std::size_t i = 0; i < spans.size(); ++i) {
        QCOMPARE(stored[i].first, spans[i].rank);
        QVERIFY(stored[i].second == spans[i].record);
    }
    QCOMPARE(reader.spanCount(), std::uint64_t(spans.size()));
    QVERIFY(sameList(reader.expertLoads(),
                     expected<wire::ExpertLoadRecord>(written, [](const auto& r) { return r.record.step; })));
    QVERIFY(sameList(reader.stepMetrics(), expected<wire::StepMetricsRecord>(written, [](const auto& r) {
                         return std::pair(r.record.step, r.rank);
                     })));
    QVERIFY(sameList(reader.memorySamples(),
                     expected<wire::MemorySampleRecord>(written, [](const auto& r) { return r.record.timeNs; })));
    QVERIFY(sameList(reader.nodeSamples(),
                     expected<wire::NodeSampleRecord>(written, [](const auto& r) { return r.record.timeNs; })));
    QVERIFY(sameList(reader.logs(), expected<wire::LogRecord>(written, [](const auto& r) { return r.record.timeNs; })));
    QVERIFY(sameList(reader.heartbeats(),
                     expected<wire::HeartbeatRecord>(written, [](const auto& r) { return r.record.timeNs; })));
    QVERIFY(sameList(reader.clockOffsets(),
                     expected<wire::ClockOffsetRecord>(written, [](const auto& r) { return r.record.timeNs; })));

    // Spans of batch b begin at 5e9 - b * 1e6 and last 1500 ns.
    const std::pair<std::int64_t, std::int64_t> range{5'000'000'000 - 5'000'000, 5'000'001'500};
    QCOMPARE(reader.timeRange(), range);
    const store::SessionSummary summary = reader.summary();
    QCOMPARE(summary.path, path);
    QCOMPARE(summary.name, header.name);
    QCOMPARE(summary.createdNs, header.createdNs);
    QCOMPARE(summary.layout, header.layout);
    QCOMPARE(summary.outcome, outcome);
    QCOMPARE(summary.steps, 6);
    QCOMPARE(summary.finalLoss, std::optional<double>(2.718281828459045));
}

// A session of format 1 (before clock offsets) opens, with none, and replays whole.
void TestSessionStore::formatOneReadsWithoutClockOffsets()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("format1.meshbench").toStdString();
    writeSpanSession(path, 10);
    execSql(path, "DROP TABLE clock_offsets; PRAGMA user_version = 1");
    const store::SessionReader reader(path);
    QVERIFY(reader.clockOffsets().empty());
    QCOMPARE(reader.spanCount(), std::uint64_t(10));
    int replayed = 0;
    reader.forEachRecord([&](std::uint32_t, const wire::Record&) { ++replayed; });
    QCOMPARE(replayed, 10);
}

// The writer's and the reader's statements name each table's columns from the field lists
// (wire/record_fields.h) in schema::Table's order; the tables come from kCreateTables. They must
// agree: the same columns in the same order, each field's column of the SQL type its value needs.
void TestSessionStore::tablesHoldTheFieldLists()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("columns.meshbench").toStdString();
    writeSpanSession(path, 1);
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    int tables = 0;
    wire::forEachRecordType([&](auto type) {
        using R = typename decltype(type)::type;
        using Columns = store::schema::TableColumns<R>;
        const std::string table(store::schema::kTable<R>.name);
        std::vector<std::pair<std::string, std::string>> actual;  // name, type
        sqlite3_stmt* info = nullptr;
        QCOMPARE(sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &info, nullptr), SQLITE_OK);
        while (sqlite3_step(info) == SQLITE_ROW)
            actual.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(info, 1)),
                                reinterpret_cast<const char*>(sqlite3_column_text(info, 2)));
        sqlite3_finalize(info);
        std::vector<std::pair<std::string, std::string>> wanted;
        const R sample{};
        Columns::forEach(
            sample,
            [&](auto column, const auto&, const auto& value) {
                using T = std::decay_t<decltype(value)>;
                const char* sqlType = std::is_floating_point_v<T>      ? "REAL"
                                      : std::is_same_v<T, std::string> ? "TEXT"
                                                                       : "INTEGER";
                wanted.emplace_back(Columns::names[column], sqlType);
            },
            [&](auto column) { wanted.emplace_back(Columns::names[column], "INTEGER"); });
        QCOMPARE(actual, wanted);
        ++tables;
    });
    sqlite3_close(db);
    QCOMPARE(tables, int(std::variant_size_v<wire::Record>));
}

void TestSessionStore::extremeValuesRoundTrip()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("extreme.meshbench").toStdString();
    constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
    constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
    const wire::SpanRecord span{std::numeric_limits<std::int32_t>::min(),
                                -32768,
                                32767,
                                -1,
                                wire::SpanKind::Idle,
                                std::numeric_limits<std::int32_t>::max(),
                                kMin,
                                kMax,
                                std::uint64_t(1) << 63};
    wire::StepMetricsRecord metrics{7,        kMin,      kMax,   std::nan(""),           -0.0,
                                    INFINITY, -INFINITY, 5e-324, 1.7976931348623157e308, kMin};
    const wire::LogRecord log{0, wire::LogLevel::Error, std::string("nul \0 inside", 12)};
    {
        store::SessionWriter writer(path, samples::header(1));
        writer.append({std::numeric_limits<std::uint32_t>::max(), 0, {span, metrics, log}});
    }
    const store::SessionReader reader(path);
    const auto spans = readSpans(reader, kMin, kMax, {});
    QCOMPARE(spans.size(), std::size_t(1));
    QCOMPARE(spans[0].first, std::numeric_limits<std::uint32_t>::max());
    QVERIFY(spans[0].second == span);
    // The longest possible span is found by a window at its very end.
    QCOMPARE(readSpans(reader, kMax, kMax, {}).size(), std::size_t(1));
    const auto steps = reader.stepMetrics();
    QCOMPARE(steps.size(), std::size_t(1));
    QVERIFY(std::isnan(steps[0].record.loss));  // SQLite keeps no NaN: stored as NULL, read back as NaN
    wire::StepMetricsRecord readBack = steps[0].record;
    readBack.loss = metrics.loss = 0;  // NaN equals nothing, so the other fields are compared without it
    QVERIFY(readBack == metrics);
    QCOMPARE(reader.logs().at(0).record.text.size(), std::size_t(12));
    QVERIFY(reader.logs().at(0).record == log);
}

void TestSessionStore::spansWindowAndRankFilters()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("spans.meshbench").toStdString();
    std::mt19937_64 random(42);
    std::vector<Written> written;
    constexpr int kRanks = 6;
    {
        store::SessionWriter writer(path, samples::header(kRanks));
        std::vector<std::int64_t> clock(kRanks, 1'000'000);
        for (int round = 0; round < 40; ++round) {
            for (std::uint32_t rank = 0; rank < kRanks; ++rank) {
                std::vector<wire::Record> batch;
                for (int i = 0; i < 100; ++i) {
                    const std::int64_t begin = clock[rank];
                    std::int64_t length = std::int64_t(random() % 5000);
                    if (random() % 50 == 0)
                        length = 400'000;  // a long span (idle, optimizer) that windows far later still hit
                    if (random() % 200 == 0)
                        length = -300;  // a malformed span that ends before it begins
                    const auto kind = wire::SpanKind(random() % wire::kSpanKinds);
                    batch.push_back(wire::SpanRecord{round, std::int16_t(rank % 2), 0, i, kind, -1, begin,
                                                     begin + length, std::uint64_t(i)});
                    // Zero steps give equal begins within a rank, and the common start across ranks:
                    // both test the arrival tie-break.
                    clock[rank] += random() % 3 == 0 ? 0 : std::int64_t(random() % 3000);
                }
                append(writer, written, rank, std::move(batch));
            }
        }
    }
    const store::SessionReader reader(path);
    const auto all = expected<wire::SpanRecord>(written, [](const auto& s) { return s.record.beginNs; });
    const auto bruteForce = [&](std::int64_t t0, std::int64_t t1, const std::vector<std::uint32_t>& ranks) {
        std::vector<std::pair<std::uint32_t, wire::SpanRecord>> hits;
        for (const auto& s : all)
            if ((ranks.empty() || std::count(ranks.begin(), ranks.end(), s.rank) > 0) && s.record.beginNs <= t1 &&
                s.record.endNs >= t0)
                hits.emplace_back(s.rank, s.record);
        return hits;
    };
    const auto [first, last] = reader.timeRange();
    QCOMPARE(first, all.front().record.beginNs);
    std::int64_t lastEnd = 0;
    for (const auto& s : all)
        lastEnd = std::max(lastEnd, s.record.endNs);
    QCOMPARE(last, lastEnd);
    QCOMPARE(reader.spanCount(), std::uint64_t(all.size()));
    QVERIFY(readSpans(reader, first, last, {}) == bruteForce(first, last, {}));
    QVERIFY(readSpans(reader, last, first, {}).empty());  // t1 < t0
    for (int query = 0; query < 300; ++query) {
        const std::int64_t t0 = first - 10'000 + std::int64_t(random() % std::uint64_t(last - first + 20'000));
        const std::int64_t t1 = t0 + std::int64_t(random() % 3 == 0 ? 0 : random() % 200'000);
        std::vector<std::uint32_t> ranks;
        for (int r = 0; r < kRanks + 1; ++r)  // rank kRanks has no spans
            if (random() % 3 == 0)
                ranks.push_back(std::uint32_t(r));
        if (!ranks.empty() && random() % 2 == 0)
            ranks.push_back(ranks.front());  // a rank asked for twice is read once
        const auto hits = readSpans(reader, t0, t1, ranks);
        QVERIFY2(hits == bruteForce(t0, t1, ranks), qPrintable(QString("window %1..%2").arg(t0).arg(t1)));
    }
}

void TestSessionStore::expertLoadsOfOneStep()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("experts.meshbench").toStdString();
    std::vector<Written> written;
    std::mt19937 random(7);
    {
        store::SessionWriter writer(path, samples::header(4));
        for (int step = 0; step < 10; ++step)
            for (std::uint32_t rank = 0; rank < 4; ++rank) {
                std::vector<wire::Record> batch;
                for (int layer = 1; layer < 4; layer += 2) {
                    wire::ExpertLoadRecord load{step, layer, {}, {}};
                    for (int e = 0; e < 64; ++e) {
                        load.routed.push_back(std::uint32_t(random() % 1000));
                        load.dropped.push_back(std::uint32_t(random() % 10));
                    }
                    batch.push_back(load);
                }
                append(writer, written, rank, std::move(batch));
            }
    }
    const store::SessionReader reader(path);
    const auto all = expected<wire::ExpertLoadRecord>(written, [](const auto& r) { return r.record.step; });
    QCOMPARE(all.size(), std::size_t(80));
    QVERIFY(sameList(reader.expertLoads(), all));
    for (int step : {0, 3, 9}) {
        std::vector<store::FromRank<wire::ExpertLoadRecord>> ofStep;
        std::copy_if(all.begin(), all.end(), std::back_inserter(ofStep),
                     [&](const auto& r) { return r.record.step == step; });
        QCOMPARE(ofStep.size(), std::size_t(8));
        QVERIFY(sameList(reader.expertLoads(step), ofStep));
    }
    QVERIFY(reader.expertLoads(10).empty());
}

void TestSessionStore::forEachRecordInTimeOrder()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("replay.meshbench").toStdString();
    std::vector<Written> written;
    {
        store::SessionWriter writer(path, samples::header(3));
        // Batches of three ranks whose times interleave and collide (rank 2 repeats rank 0's times).
        for (int b = 0; b < 9; ++b) {
            const auto rank = std::uint32_t(b % 3);
            const std::int64_t t = 1'000'000 + std::int64_t(b / 3) * 700 + (rank == 1 ? 333 : 0);
            append(writer, written, rank, samples::everyRecordType(t, b, rank));
        }
        // An expert load from a rank that has sent nothing else: its time is 0.
        append(writer, written, 7, {wire::ExpertLoadRecord{1, 2, {5}, {0}}});
    }
    // The documented time of each record; an expert load takes the latest time its rank sent before.
    std::map<std::uint32_t, std::int64_t> latest;
    std::vector<std::pair<std::int64_t, Written>> timed;
    std::vector<std::int64_t> reaches;  // per written record: a span's end, else its time
    for (const Written& w : written) {
        std::int64_t& last = latest[w.rank];
        std::int64_t time = 0;
        std::int64_t seen = 0;
        std::visit(
            [&](const auto& r) {
                using R = std::decay_t<decltype(r)>;
                if constexpr (std::is_same_v<R, wire::SpanRecord>) {
                    time = r.beginNs;
                    seen = r.endNs;
                } else if constexpr (std::is_same_v<R, wire::StepMetricsRecord>) {
                    time = seen = r.endNs;
                } else if constexpr (std::is_same_v<R, wire::ExpertLoadRecord>) {
                    time = seen = last;
                } else {
                    time = seen = r.timeNs;
                }
            },
            w.record);
        last = std::max(last, seen);
        timed.emplace_back(time, w);
        reaches.push_back(seen);
    }
    std::vector<std::size_t> order(timed.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return timed[a].first < timed[b].first; });
    std::vector<Written> replayed;
    store::SessionReader(path).forEachRecord([&](std::uint32_t rank, const wire::Record& record) {
        replayed.push_back({rank, record});
    });
    QCOMPARE(replayed.size(), timed.size());
    for (std::size_t i = 0; i < timed.size(); ++i) {
        QCOMPARE(replayed[i].rank, timed[order[i]].second.rank);
        QVERIFY2(replayed[i].record == timed[order[i]].second.record, qPrintable(QString("record %1").arg(i)));
    }
    // From a time on (a seek): the same order, without what ended before it.
    for (const std::int64_t from : {std::int64_t(0), std::int64_t(1'000'500), std::int64_t(1'000'700),
                                    std::int64_t(1'001'400), std::int64_t(1'001'401), std::int64_t(9'000'000)}) {
        std::vector<Written> expected;
        for (const std::size_t i : order)
            if (reaches[i] >= from)
                expected.push_back(timed[i].second);
        std::vector<Written> fromOn;
        store::SessionReader(path).forEachRecord(
            [&](std::uint32_t rank, const wire::Record& record) {
                fromOn.push_back({rank, record});
            },
            from);
        QCOMPARE(fromOn.size(), expected.size());
        for (std::size_t i = 0; i < expected.size(); ++i) {
            QCOMPARE(fromOn[i].rank, expected[i].rank);
            QVERIFY2(fromOn[i].record == expected[i].record,
                     qPrintable(QString("from %1, record %2").arg(from).arg(i)));
        }
    }
}

void TestSessionStore::secondWriterIsRefused()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("one.meshbench").toStdString();
    {
        store::SessionWriter first(path, samples::header(1));
        const std::string message = failureOf([&] { store::SessionWriter second(path, samples::header(1)); });
        QVERIFY(mentions(message, {path, "another engine is writing it"}));
        // The refused writer left the first one and its file alone.
        first.append({0, 0, samples::everyRecordType(100, 0, 0)});
        first.flush();
        QCOMPARE(store::SessionReader(path).spanCount(), std::uint64_t(1));
    }
    const std::string message = failureOf([&] { store::SessionWriter again(path, samples::header(1)); });
    QVERIFY(mentions(message, {path, "already exists"}));
    QCOMPARE(store::SessionReader(path).spanCount(), std::uint64_t(1));
}

void TestSessionStore::writerInAnotherProcessIsRefused()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("shared.meshbench").toStdString();
    int ready[2], release[2];
    QVERIFY(pipe(ready) == 0 && pipe(release) == 0);
    const pid_t child = fork();
    if (child == 0) {
        close(ready[0]);
        close(release[1]);
        store::SessionWriter writer(path, samples::header(1));
        char byte = 1;
        (void)!write(ready[1], &byte, 1);
        (void)!read(release[0], &byte, 1);  // until the parent closes its end
        _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    char byte = 0;
    QCOMPARE(read(ready[0], &byte, 1), ssize_t(1));
    const std::string message = failureOf([&] { store::SessionWriter second(path, samples::header(1)); });
    close(release[1]);
    int status = 0;
    waitpid(child, &status, 0);
    close(ready[0]);
    QVERIFY(mentions(message, {path, "another engine is writing it"}));
    QVERIFY(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    QVERIFY(
        mentions(failureOf([&] { store::SessionWriter late(path, samples::header(1)); }), {path, "already exists"}));
}

void TestSessionStore::existingFileIsRefused()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("notes.meshbench").toStdString();
    writeFile(path, "my notes");
    QVERIFY(mentions(failureOf([&] { store::SessionWriter writer(path, samples::header(1)); }),
                     {path, "already exists", "never overwritten"}));
    QCOMPARE(readFile(path), std::string("my notes"));
}

void TestSessionStore::badFilesAreRefused()
{
    QTemporaryDir dir;
    const auto file = [&](const char* name) { return dir.filePath(name).toStdString(); };
    const auto refusal = [](const std::string& path) { return failureOf([&] { store::SessionReader reader(path); }); };

    QVERIFY(mentions(refusal(file("missing.meshbench")), {file("missing.meshbench"), "does not exist"}));
    QVERIFY(mentions(refusal(dir.path().toStdString()), {"is not a session file"}));
    // Engines killed before their first commit: nothing written, or only the switch to WAL.
    writeFile(file("empty.meshbench"), "");
    QVERIFY(mentions(refusal(file("empty.meshbench")), {file("empty.meshbench"), "holds no session"}));
    execSql(file("started.meshbench"), "PRAGMA journal_mode=WAL");
    QVERIFY(mentions(refusal(file("started.meshbench")), {file("started.meshbench"), "holds no session"}));

    std::mt19937 random(3);
    std::string garbage(8192, '\0');
    for (char& c : garbage)
        c = char(random());
    writeFile(file("garbage.meshbench"), garbage);
    QVERIFY(mentions(refusal(file("garbage.meshbench")), {file("garbage.meshbench"), "not an SQLite database"}));
    writeFile(file("short.meshbench"), "hello");
    QVERIFY(mentions(refusal(file("short.meshbench")), {file("short.meshbench"), "not an SQLite database"}));

    execSql(file("foreign.db"), "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    QVERIFY(mentions(refusal(file("foreign.db")),
                     {file("foreign.db"), "is an SQLite database but not a Meshbench session"}));

    writeSpanSession(file("future.meshbench"), 100);
    execSql(file("future.meshbench"), ("PRAGMA user_version = " + std::to_string(store::kSchemaVersion + 1)).c_str());
    QVERIFY(mentions(refusal(file("future.meshbench")),
                     {file("future.meshbench"), "was written by a newer Meshbench (session format 4, this build reads "
                                                "up to 3); upgrade"}));

    writeSpanSession(file("whole.meshbench"), 20000);
    const std::string whole = readFile(file("whole.meshbench"));
    QVERIFY(whole.size() > 100'000);
    writeFile(file("half.meshbench"), whole.substr(0, whole.size() / 2));
    QVERIFY(mentions(refusal(file("half.meshbench")), {file("half.meshbench"), "is truncated"}));
    QCOMPARE(store::SessionReader(file("whole.meshbench")).spanCount(), std::uint64_t(20000));
}

void TestSessionStore::corruptPagesGiveErrorsNotCrashes()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("damaged.meshbench").toStdString();
    writeSpanSession(path, 20000);
    std::string bytes = readFile(path);
    // Four whole pages in the middle (span B-tree pages) overwritten: invalid page types and cells.
    const std::size_t page = 4096;
    const std::size_t middle = bytes.size() / 2 / page * page;
    std::fill(bytes.begin() + std::ptrdiff_t(middle), bytes.begin() + std::ptrdiff_t(middle + 4 * page), '\xA5');
    writeFile(path, bytes);
    const std::string message = failureOf([&] {
        const store::SessionReader reader(path);
        readEverything(reader);
    });
    QVERIFY(mentions(message, {path, "corrupt"}));
}

void TestSessionStore::sessionInReadOnlyFolderOpens()
{
    // Root ignores folder modes (and CI runs as root), so as root the reader runs as an unprivileged
    // user who owns the folder and the file, as a user reading their own session in a folder they
    // made read-only; otherwise it runs as the test's own user.
    std::optional<OtherUser> user;
    if (geteuid() == 0) {
        std::string why;
        user = otherTestUser(&why);
        if (!user)
            QFAIL(qPrintable("running as root, the reader must run as another user: " + QString::fromStdString(why)));
    }
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    if (user)  // QTemporaryDir makes a 0700 folder of root's: let the user reach the folder inside
        QVERIFY(chmod(dir.path().toLocal8Bit().constData(), 0711) == 0);
    const std::string folder = dir.filePath("read-only").toStdString();
    QVERIFY(QDir().mkpath(QString::fromStdString(folder)));
    const std::string path = folder + "/copy #1?.meshbench";  // URI characters in the name
    writeSpanSession(path, 100);
    if (user) {
        QVERIFY(chown(folder.c_str(), user->uid, user->gid) == 0);
        QVERIFY(chown(path.c_str(), user->uid, user->gid) == 0);
    }
    QVERIFY(chmod(folder.c_str(), 0555) == 0);
    const auto readSession = [&](std::string& message) {
        if (access(folder.c_str(), W_OK) == 0) {
            message = "the folder is writable by uid " + std::to_string(getuid()) + ": nothing would be tested";
            return 2;
        }
        try {
            const std::uint64_t spans = store::SessionReader(path).spanCount();
            if (spans != 100) {
                message = "read " + std::to_string(spans) + " spans, wrote 100";
                return 3;
            }
        } catch (const StoreError& error) {
            message = error.what();
            return 1;
        }
        return 0;
    };
    std::string message;
    const int status = user ? runAsOtherUser(*user, readSession, message) : readSession(message);
    chmod(folder.c_str(), 0755);
    QVERIFY2(status == 0, qPrintable(QString("status %1: %2").arg(status).arg(QString::fromStdString(message))));
}

void TestSessionStore::killedWriterLeavesCompleteBatches()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("killed.meshbench").toStdString();
    int ready[2];
    QVERIFY(pipe(ready) == 0);
    const pid_t child = fork();
    if (child == 0) {
        close(ready[0]);
        try {
            store::SessionWriter writer(path, samples::header(1));
            for (int tag = 0; tag < 1'000'000; ++tag) {
                writer.append({0, 0, taggedBatch(tag)});
                if (tag % 64 == 63)
                    writer.flush();  // keeps the queue bounded
                if (tag == 200) {
                    writer.flush();
                    char byte = 1;
                    (void)!write(ready[1], &byte, 1);
                }
            }
        } catch (...) {
        }
        _exit(1);
    }
    close(ready[1]);
    char byte = 0;
    QCOMPARE(read(ready[0], &byte, 1), ssize_t(1));
    close(ready[0]);
    usleep(useconds_t(std::random_device()() % 150'000));  // somewhere in the middle of a transaction
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    QVERIFY(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    QCOMPARE(integrityCheck(path), std::string("ok"));
    const store::SessionReader reader(path);
    QCOMPARE(reader.outcome().outcome, store::Outcome::Running);
    // Count each batch's records by tag: every batch is all there or not there at all, and the ones
    // there are the first ones (the queue commits in order).
    std::map<int, std::map<int, int>> byTag;  // tag -> record type -> count
    reader.forEachRecord([&](std::uint32_t, const wire::Record& record) {
        std::visit(
            [&](const auto& r) {
                using R = std::decay_t<decltype(r)>;
                int tag = 0;
                if constexpr (std::is_same_v<R, wire::LogRecord>)
                    tag = std::stoi(r.text.substr(5));
                else if constexpr (std::is_same_v<R, wire::NodeSampleRecord>)
                    tag = int((r.timeNs - 20 - 1'000'000'000) / 100'000);
                else if constexpr (std::is_same_v<R, wire::ClockOffsetRecord>)
                    tag = int((r.timeNs - 50 - 1'000'000'000) / 100'000);
                else
                    tag = r.step;
                ++byTag[tag][int(record.index())];
            },
            record);
    });
    QVERIFY2(byTag.size() > 200, qPrintable(QString("%1 batches").arg(byTag.size())));
    const std::map<int, int> complete{{0, kTaggedSpans}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}, {7, 1}};
    int next = 0;
    for (const auto& [tag, counts] : byTag) {
        QCOMPARE(tag, next++);
        QVERIFY2(counts == complete, qPrintable(QString("batch %1 is incomplete").arg(tag)));
    }
    QCOMPARE(reader.spanCount(), std::uint64_t(byTag.size()) * kTaggedSpans);
}

void TestSessionStore::writerKilledEarlyKeepsItsHeader()
{
    // Killed before the first checkpoint: everything, the header included, lives only in the WAL.
    QTemporaryDir dir;
    const std::string path = dir.filePath("early.meshbench").toStdString();
    const pid_t child = fork();
    if (child == 0) {
        store::SessionWriter writer(path, samples::header(2));
        writer.append({1, 0, samples::everyRecordType(100, 0, 1)});
        writer.flush();
        raise(SIGKILL);
    }
    int status = 0;
    waitpid(child, &status, 0);
    QVERIFY(WIFSIGNALED(status));
    QCOMPARE(integrityCheck(path), std::string("ok"));
    const store::SessionReader reader(path);
    QCOMPARE(reader.header(), samples::header(2));
    QCOMPARE(reader.spanCount(), std::uint64_t(1));
    QCOMPARE(reader.logs().size(), std::size_t(1));
}

void TestSessionStore::writerFailureIsReported()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("full.meshbench").toStdString();
    int report[2];
    QVERIFY(pipe(report) == 0);
    const pid_t child = fork();
    if (child == 0) {
        close(report[0]);
        alarm(60);  // a hang fails the test instead of blocking it
        // A 3 MiB file size limit plays a full disk; SIGXFSZ ignored makes the write fail with EFBIG.
        signal(SIGXFSZ, SIG_IGN);
        const rlimit limit{3 << 20, 3 << 20};
        setrlimit(RLIMIT_FSIZE, &limit);
        std::string lines;
        {
            store::SessionWriter writer(path, samples::header(1));
            int tag = 0;
            lines += failureOf([&] {
                for (; tag < 100'000; ++tag) {
                    writer.append({0, 0, taggedBatch(tag)});
                    if (tag % 8 == 7)
                        writer.flush();
                }
            });
            lines += "\n" + failureOf([&] { writer.append({0, 0, taggedBatch(tag)}); });
            lines += "\n" + failureOf([&] { writer.flush(); });
            lines += "\n" + failureOf([&] { writer.setOutcome({store::Outcome::Completed, "", -1, 1}); });
        }  // the destructor of a failed writer neither throws nor hangs
        (void)!write(report[1], lines.data(), lines.size());
        _exit(0);
    }
    close(report[1]);
    std::string lines;
    char buffer[4096];
    for (ssize_t n; (n = read(report[0], buffer, sizeof buffer)) > 0;)
        lines.append(buffer, std::size_t(n));
    close(report[0]);
    int status = 0;
    waitpid(child, &status, 0);
    QVERIFY(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const QStringList messages = QString::fromStdString(lines).split('\n');
    QCOMPARE(messages.size(), 4);
    for (const QString& message : messages)
        QVERIFY(mentions(message.toStdString(), {path, "failed", "the session holds everything committed before"}));
    // What was committed before the failure is intact and readable.
    QCOMPARE(integrityCheck(path), std::string("ok"));
    const store::SessionReader reader(path);
    QVERIFY(reader.spanCount() >= 8 * kTaggedSpans);
    QCOMPARE(reader.spanCount() % kTaggedSpans, std::uint64_t(0));
    QCOMPARE(reader.header(), samples::header(1));
}

void TestSessionStore::listSessionsNewestFirst()
{
    QTemporaryDir dir;
    const auto file = [&](const char* name) { return dir.filePath(name).toStdString(); };
    const std::pair<const char*, std::int64_t> sessions[] = {
        {"a.meshbench", 100}, {"b.meshbench", 300}, {"c.meshbench", 200}};
    for (const auto& [name, created] : sessions) {
        store::SessionWriter writer(file(name), samples::header(2, created));
        for (int step = 0; step < 3; ++step) {
            wire::StepMetricsRecord metrics;
            metrics.step = step;
            metrics.loss = double(created) + step;
            writer.append({0, 0, {metrics}});
            writer.append({1, 0, {metrics}});
        }
        writer.setOutcome({store::Outcome::Completed, "", -1, created + 50});
    }
    writeFile(file("broken.meshbench"), "not a session");
    writeFile(file("notes.txt"), "ignored");
    const store::SessionListing listing = store::listSessions(dir.path().toStdString());
    QCOMPARE(listing.sessions.size(), std::size_t(3));
    const char* order[] = {"b.meshbench", "c.meshbench", "a.meshbench"};
    for (std::size_t i = 0; i < 3; ++i) {
        const store::SessionSummary& s = listing.sessions[i];
        QCOMPARE(s.path, file(order[i]));
        QCOMPARE(s.steps, 3);
        QCOMPARE(s.finalLoss, std::optional<double>(double(s.createdNs) + 2));
        QCOMPARE(s.outcome.outcome, store::Outcome::Completed);
        QCOMPARE(s.layout, samples::header(1).layout);
    }
    QCOMPARE(listing.unreadable.size(), std::size_t(1));
    QCOMPARE(listing.unreadable[0].first, file("broken.meshbench"));
    QVERIFY(mentions(listing.unreadable[0].second, {"not an SQLite database"}));
    QVERIFY(mentions(failureOf([&] { store::listSessions(file("nowhere")); }), {file("nowhere"), "does not exist"}));
}

void TestSessionStore::queuedRecordsCountWhatIsNotCommitted()
{
    QTemporaryDir dir;
    store::SessionWriter writer(dir.filePath("queue.meshbench").toStdString(), samples::header(1));
    QCOMPARE(writer.queuedRecords(), std::size_t(0));
    std::size_t appended = 0;
    for (int b = 0; b < 50; ++b) {
        std::vector<wire::Record> records = samples::everyRecordType(1'000'000 + b * 10'000, b, 0);
        appended += records.size();
        writer.append(wire::Batch{0, std::uint64_t(b), std::move(records)});
        // Never more than what was appended; the writer thread may already have taken some.
        QVERIFY(writer.queuedRecords() <= appended);
    }
    writer.flush();
    QCOMPARE(writer.queuedRecords(), std::size_t(0));
}

QTEST_APPLESS_MAIN(TestSessionStore)
#include "tst_session_store.moc"
