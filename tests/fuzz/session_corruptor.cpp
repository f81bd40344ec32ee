// Session corruptor (issue 11, hardening): one real session, made at test time by a three-step run
// of the demo on one device, then a few hundred deterministic corrupted copies of it: bits and
// bytes changed in the header, the b-tree pages and the end, truncations, zeroed and shuffled
// pages, foreign files, and damage done through SQLite itself (ill-formed UTF-8 in text columns,
// times moved 58 hours ahead or below zero, rows deleted, NULLs, huge and negative steps, a garbage
// job spec). Each copy goes through export (Chrome trace and CSV), sessions --json (beside a
// healthy session) and replay at 1,000,000x, and every answer is held to the contract: exit status
// 0, or 1 for a session that cannot be read (never 3, 5 or a signal), in time, error messages that
// name the file, sessions --json one valid JSON document that lists the healthy session and either
// lists the copy or names it under "unreadable" with a reason, and export and replay refusing every
// copy whose structure SQLite's quick_check finds damaged. Every failing copy is reported and saved.
//
// Usage: session_corruptor ARTIFACT_DIR   (failing copies and what was wrong land there)

#include "common/process_run.h"
#include "fuzz_support.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

using fuzz::Rng;

namespace {

constexpr int kTimeoutMs = 20000;
constexpr int kWorkers = 2;
constexpr int kPrintedFailures = 25;
constexpr int kRandomByteCases = 200;
constexpr long long kHours58Ns = 58LL * 3600 * 1'000'000'000;
const std::string kHealthyName = "healthy.meshbench";

struct Case {
    std::string family;
    std::string detail;
    // The copy starts as these bytes (empty: an empty file), or as the healthy session when unset.
    std::optional<std::string> bytes;
    // Then each batch of SQL runs on its own connection to the copy (a batch that edits the schema
    // takes effect for the batches after it).
    std::vector<std::string> sql;
    bool directory = false;  // the "session" is a folder of that name
};

// The healthy session's shape, for damage that has to land on real pages and rows.
struct Shape {
    std::string bytes;
    std::size_t pageSize = 4096;
    std::map<std::string, long long> rows;  // per table
};

const std::vector<std::string> kTables = {"meta",         "job",          "outcome",      "ranks",
                                          "traffic",      "spans",        "expert_loads", "memory_samples",
                                          "step_metrics", "node_samples", "logs",         "heartbeats"};
// Text columns per table (engine/store/schema.h).
const std::vector<std::pair<std::string, std::string>> kTextColumns = {
    {"meta", "engine_version"}, {"meta", "name"},     {"meta", "layout"},    {"job", "spec"},
    {"job", "plan_json"},       {"outcome", "state"}, {"outcome", "cause"},  {"ranks", "host"},
    {"node_samples", "host"},   {"logs", "text"},     {"heartbeats", "host"}};
// Integer columns that hold times, steps, enumerations and counts.
const std::vector<std::pair<std::string, std::string>> kIntegerColumns = {{"meta", "created_ns"},
                                                                          {"meta", "max_span_ns"},
                                                                          {"meta", "span_count"},
                                                                          {"meta", "schema_version"},
                                                                          {"outcome", "failed_rank"},
                                                                          {"outcome", "ended_ns"},
                                                                          {"ranks", "dp"},
                                                                          {"ranks", "pp"},
                                                                          {"ranks", "pid"},
                                                                          {"traffic", "received"},
                                                                          {"spans", "end_ns"},
                                                                          {"spans", "step"},
                                                                          {"spans", "stage"},
                                                                          {"spans", "chunk"},
                                                                          {"spans", "microbatch"},
                                                                          {"spans", "kind"},
                                                                          {"spans", "peer"},
                                                                          {"spans", "bytes"},
                                                                          {"expert_loads", "step"},
                                                                          {"expert_loads", "layer"},
                                                                          {"expert_loads", "expert"},
                                                                          {"expert_loads", "routed"},
                                                                          {"memory_samples", "time_ns"},
                                                                          {"memory_samples", "step"},
                                                                          {"memory_samples", "category"},
                                                                          {"memory_samples", "current_bytes"},
                                                                          {"step_metrics", "step"},
                                                                          {"step_metrics", "begin_ns"},
                                                                          {"step_metrics", "end_ns"},
                                                                          {"step_metrics", "tokens"},
                                                                          {"node_samples", "time_ns"},
                                                                          {"node_samples", "device"},
                                                                          {"logs", "time_ns"},
                                                                          {"logs", "level"},
                                                                          {"heartbeats", "time_ns"},
                                                                          {"heartbeats", "state"},
                                                                          {"heartbeats", "step"}};
// Ill-formed UTF-8, as SQL blob literals: bad leads, lone continuations, overlong forms,
// surrogates, beyond U+10FFFF, cut short.
const std::vector<std::string> kBadUtf8 = {"FF", "80", "C0AF", "E080AF", "EDA080", "F4908080", "C3", "E282", "41FE42"};
const std::vector<std::string> kOddNumbers = {"-1",
                                              "0",
                                              "2147483648",
                                              "-2147483649",
                                              "4294967295",
                                              "4294967296",
                                              "9223372036854775807",
                                              "-9223372036854775808",
                                              "1.5",
                                              "'seven'",
                                              "X'00'"};

// A row of `table` picked by its position in the table's natural order.
std::string oneRow(const std::string& table, long long offset)
{
    // meta, job and outcome hold one row; spans has no rowid.
    const std::string key = table == "spans" ? "seq" : "rowid";
    return key + " = (SELECT " + key + " FROM " + table + " ORDER BY " + key + " LIMIT 1 OFFSET " +
           std::to_string(offset) + ")";
}

// Lifts a table's NOT NULL constraints (the schema text is edited in place; SQLite reads it again
// on the next connection), so that NULLs can be stored where the writer never puts them.
std::string withoutNotNull(const std::string& table)
{
    return "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, 'NOT NULL', '') WHERE name = '" +
           table + "'; PRAGMA writable_schema = OFF;";
}

class Generator {
public:
    explicit Generator(const Shape& shape) : m_shape(shape) {}

    std::vector<Case> make()
    {
        std::vector<Case> cases;
        addSqlDamage(cases);
        addTimeDamage(cases);
        addFormatDamage(cases);
        addPageDamage(cases);
        addTruncations(cases);
        addForeignFiles(cases);
        for (int i = 0; i < kRandomByteCases; ++i)
            cases.push_back(randomBytes());
        return cases;
    }

private:
    long long rows(const std::string& table) const
    {
        const auto it = m_shape.rows.find(table);
        return it == m_shape.rows.end() ? 0 : it->second;
    }
    long long anyRow(const std::string& table)
    {
        return static_cast<long long>(m_rng.below(std::size_t(std::max(1LL, rows(table)))));
    }
    std::size_t pages() const { return m_shape.bytes.size() / m_shape.pageSize; }

    void sqlCase(std::vector<Case>& cases, std::string family, std::string detail, std::vector<std::string> sql)
    {
        cases.push_back({std::move(family), std::move(detail), std::nullopt, std::move(sql), false});
    }
    void bytesCase(std::vector<Case>& cases, std::string family, std::string detail, std::string bytes)
    {
        cases.push_back({std::move(family), std::move(detail), std::move(bytes), {}, false});
    }

    void addSqlDamage(std::vector<Case>& cases)
    {
        for (const auto& [table, column] : kTextColumns) {
            const std::string row = oneRow(table, anyRow(table));
            const std::string bad = m_rng.pick(kBadUtf8);
            sqlCase(cases, "ill-formed UTF-8 text", table + "." + column + " = X'" + bad + "' as text",
                    {"UPDATE " + table + " SET " + column + " = CAST(X'" + bad + "' AS TEXT) WHERE " + row});
            sqlCase(cases, "ill-formed UTF-8 text", table + "." + column + " with X'" + bad + "' appended, every row",
                    {"UPDATE " + table + " SET " + column + " = " + column + " || CAST(X'" + bad + "' AS TEXT)"});
            sqlCase(cases, "blob in a text column", table + "." + column + " = X'" + bad + "00' as a blob",
                    {"UPDATE " + table + " SET " + column + " = X'" + bad + "00' WHERE " + row});
            sqlCase(cases, "NULL in a NOT NULL column", table + "." + column + " = NULL",
                    {withoutNotNull(table), "UPDATE " + table + " SET " + column + " = NULL WHERE " + row});
        }
        for (const auto& [table, column] : kIntegerColumns) {
            const std::string value = m_rng.pick(kOddNumbers);
            const bool everyRow = m_rng.chance(30);
            const std::string where = everyRow ? "" : " WHERE " + oneRow(table, anyRow(table));
            sqlCase(cases, "odd number", table + "." + column + " = " + value + (everyRow ? ", every row" : ""),
                    {"UPDATE " + table + " SET " + column + " = " + value + where});
            if (m_rng.chance(40))
                sqlCase(cases, "NULL in a NOT NULL column", table + "." + column + " = NULL",
                        {withoutNotNull(table), "UPDATE " + table + " SET " + column + " = NULL" + where});
        }
        for (const char* table : {"step_metrics", "spans", "expert_loads", "memory_samples", "heartbeats"})
            for (const char* step : {"2147483647", "2147483648", "9223372036854775807", "-1", "-2147483649"})
                sqlCase(cases, "huge or negative step", std::string(table) + ".step = " + step + " for one row",
                        {"UPDATE " + std::string(table) + " SET step = " + step + " WHERE " +
                         oneRow(table, anyRow(table))});
        for (const std::string& table : kTables) {
            sqlCase(cases, "rows deleted", "every row of " + table, {"DELETE FROM " + table});
            if (rows(table) > 1)
                sqlCase(cases, "rows deleted", "one row of " + table,
                        {"DELETE FROM " + table + " WHERE " + oneRow(table, anyRow(table))});
        }
        sqlCase(cases, "rows deleted", "every other expert load", {"DELETE FROM expert_loads WHERE seq % 2 = 0"});
        sqlCase(cases, "rows deleted", "rank 0 of ranks", {"DELETE FROM ranks WHERE rank = 0"});
        for (const char* table : {"spans", "logs", "expert_loads", "heartbeats", "meta"})
            sqlCase(cases, "table dropped", table, {"DROP TABLE " + std::string(table)});
        sqlCase(cases, "table dropped", "spans renamed", {"ALTER TABLE spans RENAME TO spans_old"});
        sqlCase(cases, "table dropped", "index on step_metrics dropped", {"DROP INDEX step_metrics_by_end"});
        sqlCase(
            cases, "odd number", "expert index gap",
            {"UPDATE expert_loads SET expert = expert + 7 WHERE " + oneRow("expert_loads", anyRow("expert_loads"))});
        sqlCase(cases, "odd number", "spans from a rank not in the job",
                {"UPDATE spans SET rank = 7 WHERE " + oneRow("spans", 0)});
        sqlCase(cases, "odd number", "a rank numbered as the engine",
                {"UPDATE ranks SET rank = 4294967295", "UPDATE spans SET rank = 4294967295"});
        sqlCase(cases, "odd number", "outcome 'exploded'", {"UPDATE outcome SET state = 'exploded'"});
        const std::vector<std::pair<std::string, std::string>> specs = {
            {"not JSON", "'not json {'"},
            {"empty", "''"},
            {"an array", "'[]'"},
            {"null", "'null'"},
            {"{}", "'{}'"},
            {"a spec of another layout", "'{\"model\": {\"layers\": 96, \"hidden\": 12288, \"heads\": 96, \"vocab\": "
                                         "51200, \"seq_len\": 2048}, \"parallel\": {\"dp\": 8, \"pp\": 16, \"tp\": 8}, "
                                         "\"cluster\": {\"preset\": \"dgx-h100x128\"}}'"},
            {"100,000 open brackets", "'" + std::string(100000, '[') + "'"},
            {"ill-formed UTF-8", "CAST(X'7B226E616D65223A2022FF227D' AS TEXT)"},
            {"a blob", "X'00010203'"}};
        for (const auto& [what, value] : specs) {
            sqlCase(cases, "garbage job spec", "job.spec = " + what, {"UPDATE job SET spec = " + value});
            sqlCase(cases, "garbage job spec", "job.plan_json = " + what, {"UPDATE job SET plan_json = " + value});
        }
    }

    // Times moved far ahead, below zero, or out of order: replay paces itself by them.
    void addTimeDamage(std::vector<Case>& cases)
    {
        const std::string ahead = std::to_string(kHours58Ns);
        const std::string span = oneRow("spans", anyRow("spans"));
        const std::vector<std::pair<std::string, std::string>> damage = {
            {"one span 58 h ahead",
             "UPDATE spans SET begin_ns = begin_ns + " + ahead + ", end_ns = end_ns + " + ahead + " WHERE " + span},
            {"the last span 58 h ahead", "UPDATE spans SET begin_ns = begin_ns + " + ahead + ", end_ns = end_ns + " +
                                             ahead + " WHERE " + oneRow("spans", std::max(0LL, rows("spans") - 1))},
            {"rank 0's spans 58 h ahead",
             "UPDATE spans SET begin_ns = begin_ns + " + ahead + ", end_ns = end_ns + " + ahead + " WHERE rank = 0"},
            {"one span ends 58 h later", "UPDATE spans SET end_ns = end_ns + " + ahead + " WHERE " + span},
            {"one span begins below zero", "UPDATE spans SET begin_ns = -begin_ns WHERE " + span},
            {"every span below zero", "UPDATE spans SET begin_ns = -begin_ns, end_ns = -end_ns"},
            {"one span ends before it begins", "UPDATE spans SET end_ns = begin_ns - 1000000 WHERE " + span},
            {"one span from int64 min to max",
             "UPDATE spans SET begin_ns = -9223372036854775808, end_ns = 9223372036854775807 WHERE " + span},
            {"a step's metrics 58 h ahead", "UPDATE step_metrics SET begin_ns = begin_ns + " + ahead +
                                                ", end_ns = end_ns + " + ahead + " WHERE " +
                                                oneRow("step_metrics", anyRow("step_metrics"))},
            {"a step ends before it begins",
             "UPDATE step_metrics SET end_ns = begin_ns - 1 WHERE " + oneRow("step_metrics", 0)},
            {"a memory sample 58 h ahead", "UPDATE memory_samples SET time_ns = time_ns + " + ahead + " WHERE " +
                                               oneRow("memory_samples", anyRow("memory_samples"))},
            {"a log line 58 h ahead",
             "UPDATE logs SET time_ns = time_ns + " + ahead + " WHERE " + oneRow("logs", anyRow("logs"))},
            {"a heartbeat at int64 min",
             "UPDATE heartbeats SET time_ns = -9223372036854775808 WHERE " + oneRow("heartbeats", 0)},
            {"a node sample 58 h ahead", "UPDATE node_samples SET time_ns = time_ns + " + ahead},
            {"created 58 h ahead", "UPDATE meta SET created_ns = created_ns + " + ahead},
            {"created at int64 min", "UPDATE meta SET created_ns = -9223372036854775808"},
            {"ended before the first span", "UPDATE outcome SET ended_ns = 1"}};
        for (const auto& [what, sql] : damage)
            sqlCase(cases, "times moved", what, {sql});
    }

    void addFormatDamage(std::vector<Case>& cases)
    {
        for (const char* version : {"0", "2", "-1", "1000"})
            sqlCase(cases, "format marks", std::string("PRAGMA user_version = ") + version,
                    {std::string("PRAGMA user_version = ") + version});
        for (const char* id : {"0", "1", "1297303619"})  // the last is one off "MSHB" (0x4D534842 = 1297303618)
            sqlCase(cases, "format marks", std::string("PRAGMA application_id = ") + id,
                    {std::string("PRAGMA application_id = ") + id});
        sqlCase(cases, "format marks", "meta.schema_version = 99", {"UPDATE meta SET schema_version = 99"});
        sqlCase(cases, "format marks", "a table of a future format", {"CREATE TABLE future_records(x)"});
        sqlCase(cases, "format marks", "journal mode DELETE", {"PRAGMA journal_mode = DELETE"});
    }

    void addPageDamage(std::vector<Case>& cases)
    {
        const std::size_t size = m_shape.pageSize;
        for (std::size_t page = 0; page < pages(); ++page) {
            std::string bytes = m_shape.bytes;
            bytes.replace(page * size, size, size, '\0');
            bytesCase(cases, "zeroed page", "page " + std::to_string(page + 1) + " of " + std::to_string(pages()),
                      bytes);
        }
        for (int i = 0; i < 12; ++i) {
            const std::size_t a = m_rng.below(pages()), b = m_rng.below(pages());
            std::string bytes = m_shape.bytes;
            const bool swap = i % 2 == 0;
            if (swap) {
                const std::string first = bytes.substr(a * size, size);
                bytes.replace(a * size, size, bytes.substr(b * size, size));
                bytes.replace(b * size, size, first);
            } else {
                bytes.replace(b * size, size, m_shape.bytes.substr(a * size, size));
            }
            bytesCase(cases, swap ? "pages swapped" : "page copied",
                      "pages " + std::to_string(a + 1) + (swap ? " and " : " over ") + std::to_string(b + 1), bytes);
        }
    }

    void addTruncations(std::vector<Case>& cases)
    {
        const std::size_t size = m_shape.bytes.size(), page = m_shape.pageSize;
        std::vector<std::size_t> cuts = {0, 1, 15, 16, 99, 100, 101, 512, page - 1, page, page + 1, size - 1, size / 2};
        for (std::size_t p = 2; p < pages(); p += 2)
            cuts.push_back(p * page);
        for (int i = 0; i < 6; ++i)
            cuts.push_back(m_rng.below(size));
        for (const std::size_t cut : cuts)
            bytesCase(cases, "truncation", "cut to " + std::to_string(cut) + " of " + std::to_string(size) + " bytes",
                      m_shape.bytes.substr(0, cut));
    }

    void addForeignFiles(std::vector<Case>& cases)
    {
        cases.push_back(
            {"foreign file",
             "an SQLite database of another application",
             std::string(),
             {"CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes(text) VALUES ('hello')"},
             false});
        cases.push_back({"foreign file",
                         "an SQLite database with the session's application id and no tables",
                         std::string(),
                         {"PRAGMA application_id = 1297303618; PRAGMA user_version = 1"},
                         false});
        cases.push_back({"foreign file",
                         "an SQLite database with the session's marks and an empty schema",
                         std::string(),
                         {"PRAGMA application_id = 1297303618; PRAGMA user_version = 1; CREATE TABLE meta(id INTEGER)"},
                         false});
        bytesCase(cases, "foreign file", "a text file", "this is not a session\n");
        bytesCase(cases, "foreign file", "the SQLite magic alone", std::string("SQLite format 3\0", 16));
        bytesCase(cases, "foreign file", "a PNG header", std::string("\x89PNG\r\n\x1A\n\0\0\0\rIHDR", 16));
        bytesCase(cases, "foreign file", "an empty file", "");
        bytesCase(cases, "foreign file", "a page of 0xFF", std::string(m_shape.pageSize, '\xFF'));
        cases.push_back({"foreign file", "a folder named like a session", std::nullopt, {}, true});
    }

    Case randomBytes()
    {
        std::string bytes = m_shape.bytes;
        const std::size_t size = bytes.size();
        Case c;
        switch (m_rng.below(4)) {
        case 0: {  // bits of the 100-byte database header
            c.family = "bit flips in the header";
            const std::size_t flips = 1 + m_rng.below(3);
            for (std::size_t i = 0; i < flips; ++i) {
                const std::size_t at = m_rng.below(100);
                const int bit = static_cast<int>(m_rng.below(8));
                bytes[at] = static_cast<char>(bytes[at] ^ (1 << bit));
                c.detail +=
                    (i ? ", " : "") + std::string("bit ") + std::to_string(bit) + " of byte " + std::to_string(at);
            }
            break;
        }
        case 1: {  // bits of a b-tree page, mostly its header and cell pointers
            c.family = "bit flips in a b-tree page";
            const std::size_t page = 1 + m_rng.below(pages() - 1);
            const std::size_t flips = 1 + m_rng.below(4);
            for (std::size_t i = 0; i < flips; ++i) {
                const std::size_t within = m_rng.chance(60) ? m_rng.below(64) : m_rng.below(m_shape.pageSize);
                const std::size_t at = page * m_shape.pageSize + within;
                const int bit = static_cast<int>(m_rng.below(8));
                bytes[at] = static_cast<char>(bytes[at] ^ (1 << bit));
                c.detail +=
                    (i ? ", " : "") + std::string("bit ") + std::to_string(bit) + " of byte " + std::to_string(at);
            }
            c.detail += " (page " + std::to_string(page + 1) + ")";
            break;
        }
        case 2: {  // a run of bytes overwritten anywhere
            c.family = "byte run";
            const std::size_t length = 4 + m_rng.below(253), at = m_rng.below(size - length);
            const int fill = static_cast<int>(m_rng.below(3));
            for (std::size_t i = 0; i < length; ++i)
                bytes[at + i] = fill == 0 ? '\0' : fill == 1 ? '\xFF' : static_cast<char>(m_rng.below(256));
            c.detail = std::to_string(length) +
                       (fill == 0   ? " zero"
                        : fill == 1 ? " 0xFF"
                                    : " random") +
                       " bytes at " + std::to_string(at);
            break;
        }
        default: {  // bytes in the last page, where the newest rows went
            c.family = "bit flips near the end";
            const std::size_t flips = 1 + m_rng.below(6);
            for (std::size_t i = 0; i < flips; ++i) {
                const std::size_t at = size - 1 - m_rng.below(m_shape.pageSize);
                bytes[at] = static_cast<char>(m_rng.below(256));
                c.detail += (i ? ", " : "") + std::string("byte ") + std::to_string(at);
            }
            break;
        }
        }
        c.bytes = std::move(bytes);
        return c;
    }

    const Shape& m_shape;
    Rng m_rng{0x73657373'696F6E21ull};  // "session!": fixed, so every run tries the same copies
};

void runSql(const QString& path, const std::vector<std::string>& batches)
{
    for (const std::string& batch : batches) {
        sqlite3* db = nullptr;
        char* error = nullptr;
        const QByteArray file = path.toUtf8();
        if (sqlite3_open_v2(file.constData(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK ||
            sqlite3_exec(db, batch.c_str(), nullptr, nullptr, &error) != SQLITE_OK)
            qFatal("session_corruptor: cannot damage %s with '%.200s': %s", file.constData(), batch.c_str(),
                   error ? error : sqlite3_errmsg(db));
        sqlite3_close(db);
    }
}

bool writeFile(const QString& path, const std::string& bytes)
{
    QFile file(path);
    return file.open(QIODevice::WriteOnly | QIODevice::Truncate) &&
           file.write(bytes.data(), static_cast<qint64>(bytes.size())) == static_cast<qint64>(bytes.size());
}

std::optional<std::string> readFile(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        return std::nullopt;
    return file.readAll().toStdString();
}

// Reads the healthy session's size, page size and rows per table.
Shape shapeOf(const QString& path)
{
    Shape shape;
    shape.bytes = readFile(path).value_or(std::string());
    if (shape.bytes.size() < 100)
        qFatal("session_corruptor: %s is not a database", qPrintable(path));
    // https://sqlite.org/fileformat.html: big-endian page size at offset 16, 1 meaning 65536.
    const auto hi = static_cast<unsigned char>(shape.bytes[16]), lo = static_cast<unsigned char>(shape.bytes[17]);
    shape.pageSize = hi == 0 && lo == 1 ? 65536 : std::size_t(hi) << 8 | lo;
    sqlite3* db = nullptr;
    const QByteArray file = path.toUtf8();
    if (sqlite3_open_v2(file.constData(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
        qFatal("session_corruptor: cannot open %s", file.constData());
    for (const std::string& table : kTables) {
        sqlite3_stmt* count = nullptr;
        if (sqlite3_prepare_v2(db, ("SELECT count(*) FROM " + table).c_str(), -1, &count, nullptr) == SQLITE_OK &&
            sqlite3_step(count) == SQLITE_ROW)
            shape.rows[table] = sqlite3_column_int64(count, 0);
        sqlite3_finalize(count);
    }
    sqlite3_close(db);
    return shape;
}

struct Runs {
    ProcessBytes chrome, csv, sessions, replay;
    std::string trace;  // the Chrome trace export wrote
    std::map<std::string, std::string> csvFiles;
    bool structurallyDamaged = false;  // SQLite's quick_check finds the copy's b-trees damaged
};

// What SQLite's own quick_check says of a file: true when it finds damage (or cannot run at all).
bool quickCheckFails(const QString& path)
{
    sqlite3* db = nullptr;
    bool damaged = true;
    if (sqlite3_open_v2(path.toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* check = nullptr;
        if (sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &check, nullptr) == SQLITE_OK &&
            sqlite3_step(check) == SQLITE_ROW)
            damaged = std::string(reinterpret_cast<const char*>(sqlite3_column_text(check, 0))) != "ok";
        sqlite3_finalize(check);
    }
    sqlite3_close(db);
    return damaged;
}

using fuzz::Verdict;

// The contract every command keeps: in time, 0 or 1, and a 1 that names the file.
bool judgeExit(const char* command, const ProcessBytes& run, const std::string& fileName, Verdict& verdict)
{
    const std::string prefix = std::string(command) + ": ";
    if (run.timedOut) {
        verdict.add(prefix + "timed out", "no answer within " + std::to_string(kTimeoutMs / 1000) + " s");
        return false;
    }
    if (run.exitCode == -100) {
        verdict.add(prefix + "killed by a signal", fuzz::excerpt(run.err));
        return false;
    }
    if (run.exitCode != 0 && run.exitCode != 1) {
        verdict.add(prefix + "exit status " + std::to_string(run.exitCode), fuzz::excerpt(run.err));
        return false;
    }
    if (run.exitCode == 1 && !run.err.contains(QByteArray::fromStdString(fileName)) &&
        !run.out.contains(QByteArray::fromStdString(fileName)))
        verdict.add(prefix + "error does not name the file", fuzz::excerpt(run.err));
    return true;
}

// sessions --json: one document listing the healthy session, and the copy either as a session or
// under "unreadable" with a reason.
void judgeSessions(const ProcessBytes& run, const std::string& copyPath, const std::string& healthyPath,
                   Verdict& verdict)
{
    const std::string out = run.out.toStdString();
    std::optional<nlohmann::json> document = fuzz::jsonOutput(run.out, "sessions --json: ", verdict);
    if (!document)
        return;
    nlohmann::json listing = std::move(*document);
    if (!listing.is_object() || !listing.contains("sessions") || !listing["sessions"].is_array() ||
        !listing.contains("unreadable") || !listing["unreadable"].is_array()) {
        verdict.add("sessions --json: no sessions and unreadable lists", fuzz::excerpt(out));
        return;
    }
    int healthy = 0, listed = 0, unreadable = 0;
    for (const nlohmann::json& s : listing["sessions"]) {
        const std::string path =
            s.is_object() && s.contains("path") && s["path"].is_string() ? s["path"].get<std::string>() : "";
        healthy += path == healthyPath;
        listed += path == copyPath;
    }
    for (const nlohmann::json& u : listing["unreadable"]) {
        if (!u.is_object() || !u.contains("path") || !u["path"].is_string() || !u.contains("error") ||
            !u["error"].is_string() || u["error"].get<std::string>().empty()) {
            verdict.add("sessions --json: unreadable entry without path and reason", u.dump());
            continue;
        }
        unreadable += u["path"].get<std::string>() == copyPath;
    }
    if (healthy != 1)
        verdict.add("sessions --json: the healthy session is not listed once", fuzz::excerpt(out));
    if (listed + unreadable != 1)
        verdict.add("sessions --json: the copy is neither listed nor unreadable (or both)", fuzz::excerpt(out));
    if ((run.exitCode == 1) != !listing["unreadable"].empty())
        verdict.add("sessions --json: exit status disagrees with the unreadable list",
                    "exit " + std::to_string(run.exitCode) + ", " + std::to_string(listing["unreadable"].size()) +
                        " unreadable");
}

Verdict judge(const Runs& runs, const std::string& copyPath, const std::string& healthyPath)
{
    Verdict verdict;
    const std::string fileName = QFileInfo(QString::fromStdString(copyPath)).fileName().toStdString();
    const bool chromeOk = judgeExit("export --chrome-trace", runs.chrome, fileName, verdict);
    const bool csvOk = judgeExit("export --csv", runs.csv, fileName, verdict);
    const bool replayOk = judgeExit("replay", runs.replay, fileName, verdict);
    if (judgeExit("sessions --json", runs.sessions, fileName, verdict))
        judgeSessions(runs.sessions, copyPath, healthyPath, verdict);

    if (chromeOk && runs.chrome.exitCode == 0) {
        if (!fuzz::isValidUtf8(runs.trace))
            verdict.add("export --chrome-trace: the trace is not valid UTF-8", fuzz::excerpt(runs.trace, 200));
        else if (!nlohmann::json::accept(runs.trace))
            verdict.add("export --chrome-trace: the trace is not JSON", fuzz::excerpt(runs.trace, 200));
    }
    if (csvOk && runs.csv.exitCode == 0) {
        for (const auto& [name, text] : runs.csvFiles)
            if (!fuzz::isValidUtf8(text))
                verdict.add("export --csv: a table is not valid UTF-8", name);
    }
    // Export and replay check a whole file's structure before they write or play anything, so a copy
    // whose b-trees SQLite finds damaged fails both. Damage to values alone (a bogus step number, an
    // index entry) fails only the commands that read it: export and replay read different indexes,
    // and sessions reads a summary.
    const auto refuse = [&](const char* command, const ProcessBytes& run, bool ok) {
        if (ok && run.exitCode == 0)
            verdict.add(std::string(command) + ": exit 0 on a session SQLite's quick_check finds damaged",
                        fuzz::excerpt(run.out, 200));
    };
    if (runs.structurallyDamaged) {
        refuse("export --chrome-trace", runs.chrome, chromeOk);
        refuse("export --csv", runs.csv, csvOk);
        refuse("replay", runs.replay, replayOk);
    }
    return verdict;
}

Runs runCommands(const QDir& dir, const QString& copy)
{
    const QString engine = QStringLiteral(MESHBENCH_ENGINE);
    const QString out = dir.filePath("out");
    Runs runs;
    runs.structurallyDamaged = quickCheckFails(copy);
    runs.chrome = runProcessBytes(engine, {"export", copy, "--chrome-trace", out + "/trace.json"}, kTimeoutMs);
    runs.trace = readFile(out + "/trace.json").value_or(std::string());
    runs.csv = runProcessBytes(engine, {"export", copy, "--csv", out + "/csv"}, kTimeoutMs);
    for (const QString& name : QDir(out + "/csv").entryList({"*.csv"}, QDir::Files))
        runs.csvFiles[name.toStdString()] = readFile(out + "/csv/" + name).value_or(std::string());
    runs.sessions = runProcessBytes(engine, {"sessions", dir.path(), "--json"}, kTimeoutMs);
    // ipc endpoints in the case's own folder: no port to collide with the other worker or a real engine.
    runs.replay = runProcessBytes(engine,
                                  {"replay", copy, "--speed", "1000000", "--bind", "ipc://" + dir.filePath("control"),
                                   "--live", "ipc://" + dir.filePath("live")},
                                  kTimeoutMs);
    return runs;
}

// Makes the session every copy comes from: the demo, three steps, on one device (no mpirun).
bool makeHealthySession(const QString& path)
{
    const ProcessBytes run = runProcessBytes(QStringLiteral(MESHBENCH_ENGINE),
                                             {"run", QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"),
                                              "--one-device", "--steps", "3", "--session", path},
                                             120000);
    if (run.exitCode == 0 && QFile::exists(path))
        return true;
    std::fprintf(stderr, "session_corruptor: the healthy run failed (exit %d%s):\n%s\n%s\n", run.exitCode,
                 run.timedOut ? ", timed out" : "", fuzz::excerpt(run.out, 2000).c_str(),
                 fuzz::excerpt(run.err, 2000).c_str());
    return false;
}

}  // namespace

int main(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const std::optional<QDir> artifactDir = fuzz::artifactFolder(argc, argv, "session_corruptor");
    if (!artifactDir)
        return 2;
    const QDir& artifacts = *artifactDir;
    // Under /tmp, short: ipc endpoint paths must fit in a socket address (108 bytes).
    QTemporaryDir work(QStringLiteral("/tmp/corruptor-XXXXXX"));
    if (!work.isValid()) {
        std::fprintf(stderr, "session_corruptor: no temporary folder\n");
        return 2;
    }
    QElapsedTimer clock;
    clock.start();
    const QString healthy = work.filePath(QString::fromStdString(kHealthyName));
    if (!makeHealthySession(healthy))
        return 1;
    const Shape shape = shapeOf(healthy);
    const std::vector<Case> cases = Generator(shape).make();
    std::printf("session_corruptor: healthy session of %zu bytes (%zu pages, %lld spans) made in %.1f s; %zu copies\n",
                shape.bytes.size(), shape.bytes.size() / shape.pageSize, shape.rows.at("spans"),
                double(clock.elapsed()) / 1000, cases.size());
    std::fflush(stdout);

    std::vector<Verdict> verdicts(cases.size());
    std::vector<Runs> results(cases.size());
    clock.restart();
    fuzz::forEachConcurrently(static_cast<int>(cases.size()), kWorkers, [&](int i) {
        const Case& c = cases[std::size_t(i)];
        const QDir dir(work.filePath(QStringLiteral("c%1").arg(i)));
        if (!dir.mkpath(".") || !dir.mkpath("out") ||
            !QFile::copy(healthy, dir.filePath(QString::fromStdString(kHealthyName))))
            qFatal("session_corruptor: cannot prepare %s", qPrintable(dir.path()));
        const QString copy = dir.filePath(QStringLiteral("case-%1.meshbench").arg(i, 3, 10, QLatin1Char('0')));
        if (c.directory) {
            dir.mkpath(copy);
        } else {
            const bool written = c.bytes ? writeFile(copy, *c.bytes) : QFile::copy(healthy, copy);
            if (!written)
                qFatal("session_corruptor: cannot write %s", qPrintable(copy));
            runSql(copy, c.sql);
        }
        const QByteArray damaged = c.directory ? QByteArray() : QByteArray::fromStdString(readFile(copy).value_or(""));
        results[std::size_t(i)] = runCommands(dir, copy);
        verdicts[std::size_t(i)] = judge(results[std::size_t(i)], copy.toStdString(),
                                         dir.filePath(QString::fromStdString(kHealthyName)).toStdString());
        if (!verdicts[std::size_t(i)].problems.empty() && !c.directory)
            writeFile(artifacts.filePath(QFileInfo(copy).fileName()), damaged.toStdString());
        QDir(dir).removeRecursively();
    });
    const double seconds = double(clock.elapsed()) / 1000;

    fuzz::FailureTally tally;
    std::map<std::string, int> outcomes;
    int failed = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        const Runs& r = results[i];
        const auto code = [](const ProcessBytes& run) {
            return run.timedOut           ? std::string("timeout")
                   : run.exitCode == -100 ? std::string("signal")
                                          : std::to_string(run.exitCode);
        };
        ++outcomes["export " + code(r.chrome) + "/" + code(r.csv) + ", sessions " + code(r.sessions) + ", replay " +
                   code(r.replay)];
        const Verdict& verdict = verdicts[i];
        if (verdict.problems.empty())
            continue;
        const std::string name = QStringLiteral("case-%1").arg(int(i), 3, 10, QLatin1Char('0')).toStdString();
        std::string report = "case " + std::to_string(i) + ": " + c.family + " (" + c.detail + ")\n";
        for (const std::string& sql : c.sql)
            report += "  sql: " + fuzz::excerpt(sql, 300) + "\n";
        report += "  exit codes: export --chrome-trace " + code(r.chrome) + ", export --csv " + code(r.csv) +
                  ", sessions --json " + code(r.sessions) + ", replay " + code(r.replay) + " (" +
                  std::to_string(r.replay.elapsedMs) + " ms)\n";
        for (const auto& [failureClass, detail] : verdict.problems) {
            tally.add(failureClass + " [" + c.family + "]", int(i));
            report += "  - " + failureClass + ": " + detail + "\n";
        }
        writeFile(artifacts.filePath(QString::fromStdString(name + ".txt")), report);
        if (failed++ < kPrintedFailures)
            std::fputs(report.c_str(), stdout);
    }

    std::printf("\nsession_corruptor: %zu copies, 4 commands each, in %.1f s (%d at a time)\n  outcomes:\n",
                cases.size(), seconds, kWorkers);
    for (const auto& [outcome, count] : outcomes)
        std::printf("  %5d x %s\n", count, outcome.c_str());
    if (failed == 0) {
        std::printf("  every copy kept the contract\n");
        return 0;
    }
    std::printf("  %d copies failed (%d printed above); each is saved with what went wrong in %s\n", failed,
                std::min(failed, kPrintedFailures), qPrintable(artifacts.path()));
    tally.print(stdout);
    return 1;
}
