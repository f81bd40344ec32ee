#pragma once
// Thin ownership over the SQLite C API for the session store. Every failure becomes a StoreError
// that names the session file, says what was being done and, for the common causes (corrupt
// file, full disk), what to do.

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

struct sqlite3;
struct sqlite3_stmt;

namespace meshbench::store::detail {

class Connection {
public:
    // Opens `path`, or the URI `openAs` when given (messages still name `path`). Throws StoreError.
    Connection(const std::string& path, int openFlags, const std::string& openAs = {});
    ~Connection();
    // Only before any Statement refers to the connection.
    Connection(Connection&& other) noexcept;
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    Connection& operator=(Connection&&) = delete;

    sqlite3* handle() const { return m_db; }
    const std::string& path() const { return m_path; }
    int errorCode() const;  // the primary result code of the last failed call
    // Runs one or more statements that return no rows the caller needs.
    void exec(std::string_view sql, std::string_view context) const;
    // Throws the connection's last error as a StoreError.
    [[noreturn]] void fail(std::string_view context) const;
    // A file-level StoreError: "'path' <what>".
    [[noreturn]] void fileError(const std::string& what) const;

private:
    std::string m_path;
    sqlite3* m_db = nullptr;
};

class Statement {
public:
    // `persistent` tells SQLite the statement is kept and reused many times.
    Statement(const Connection& db, std::string_view sql, std::string_view context, bool persistent = false);
    ~Statement();
    Statement(Statement&& other) noexcept;
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;
    Statement& operator=(Statement&&) = delete;

    void bindInt(int index, std::int64_t value);
    void bindBits(int index, std::uint64_t value) { bindInt(index, static_cast<std::int64_t>(value)); }
    void bindReal(int index, double value);  // NaN is stored as NULL: SQLite keeps no NaN
    void bindText(int index, std::string_view text);

    // True while a row is ready; false when done. Throws on error.
    bool step();
    // Runs a statement that returns no rows and resets it for the next use.
    void run();
    void reset();

    std::int64_t int64(int column) const;
    std::uint64_t bits(int column) const { return static_cast<std::uint64_t>(int64(column)); }
    double real(int column) const;  // NULL (a stored NaN) reads back as NaN
    std::string text(int column) const;
    // An integer column that must fit T; anything else means the file is corrupt.
    template <std::integral T>
    T integer(int column) const
    {
        const std::int64_t value = int64(column);
        if (!std::in_range<T>(value))
            badValue(column, value);
        return static_cast<T>(value);
    }
    // An enumeration stored as its value in [0, count).
    template <typename E>
    E enumerator(int column, int count) const
    {
        const std::int64_t value = int64(column);
        if (value < 0 || value >= count)
            badValue(column, value);
        return static_cast<E>(value);
    }

private:
    [[noreturn]] void badValue(int column, std::int64_t value) const;

    const Connection* m_db;
    sqlite3_stmt* m_stmt = nullptr;
    std::string m_context;
};

}  // namespace meshbench::store::detail
