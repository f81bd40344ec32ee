#include "sqlite_util.h"

#include "session_file.h"
#include "session_store.h"

#include <sqlite3.h>

#include <limits>

namespace meshbench::store::detail {

namespace {

std::string advice(int code)
{
    switch (code & 0xff) {
    case SQLITE_CORRUPT:
        return " (the session file is corrupt)";
    case SQLITE_NOTADB:
        return " (it is not a Meshbench session)";
    case SQLITE_FULL:
        return " (the disk is full)";
    case SQLITE_IOERR:
        return " (an I/O error: was the file removed or its disk unmounted?)";
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
        return " (check the file's and its folder's permissions)";
    default:
        return {};
    }
}

}  // namespace

Connection::Connection(const std::string& path, int openFlags, const std::string& openAs) : m_path(path)
{
    const int rc = sqlite3_open_v2(openAs.empty() ? path.c_str() : openAs.c_str(), &m_db, openFlags, nullptr);
    if (rc != SQLITE_OK) {
        const std::string why = m_db ? sqlite3_errmsg(m_db) : sqlite3_errstr(rc);
        sqlite3_close_v2(m_db);
        throw StoreError("cannot open session " + quoted(path) + ": " + why + advice(rc));
    }
}

Connection::~Connection() { sqlite3_close_v2(m_db); }

Connection::Connection(Connection&& other) noexcept
    : m_path(std::move(other.m_path)), m_db(std::exchange(other.m_db, nullptr))
{
}

int Connection::errorCode() const { return sqlite3_errcode(m_db) & 0xff; }

void Connection::exec(std::string_view sql, std::string_view context) const
{
    if (sqlite3_exec(m_db, std::string(sql).c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
        fail(context);
}

void Connection::fail(std::string_view context) const
{
    const int code = sqlite3_errcode(m_db);
    throw StoreError(quoted(m_path) + ": " + std::string(context) + " failed: " + sqlite3_errmsg(m_db) + advice(code));
}

void Connection::fileError(const std::string& what) const { throw StoreError(quoted(m_path) + " " + what); }

Statement::Statement(const Connection& db, std::string_view sql, std::string_view context, bool persistent)
    : m_db(&db), m_context(context)
{
    if (sqlite3_prepare_v3(db.handle(), sql.data(), static_cast<int>(sql.size()),
                           persistent ? SQLITE_PREPARE_PERSISTENT : 0, &m_stmt, nullptr) != SQLITE_OK)
        db.fail(m_context);
}

Statement::~Statement() { sqlite3_finalize(m_stmt); }

Statement::Statement(Statement&& other) noexcept
    : m_db(other.m_db), m_stmt(std::exchange(other.m_stmt, nullptr)), m_context(std::move(other.m_context))
{
}

void Statement::bindInt(int index, std::int64_t value) { sqlite3_bind_int64(m_stmt, index, value); }

void Statement::bindReal(int index, double value) { sqlite3_bind_double(m_stmt, index, value); }

void Statement::bindText(int index, std::string_view text)
{
    // SQLITE_STATIC: the text outlives the step that reads it.
    sqlite3_bind_text64(m_stmt, index, text.data(), text.size(), SQLITE_STATIC, SQLITE_UTF8);
}

bool Statement::step()
{
    const int rc = sqlite3_step(m_stmt);
    if (rc == SQLITE_ROW)
        return true;
    if (rc == SQLITE_DONE)
        return false;
    m_db->fail(m_context);
}

void Statement::run()
{
    step();
    reset();
}

void Statement::reset() { sqlite3_reset(m_stmt); }

std::int64_t Statement::int64(int column) const { return sqlite3_column_int64(m_stmt, column); }

double Statement::real(int column) const
{
    if (sqlite3_column_type(m_stmt, column) == SQLITE_NULL)
        return std::numeric_limits<double>::quiet_NaN();
    return sqlite3_column_double(m_stmt, column);
}

std::string Statement::text(int column) const
{
    // The text pointer first, then its length (the order sqlite3_column_bytes documents).
    const auto* chars = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt, column));
    const int bytes = sqlite3_column_bytes(m_stmt, column);
    return chars ? std::string(chars, static_cast<std::size_t>(bytes)) : std::string();
}

void Statement::badValue(int column, std::int64_t value) const
{
    const char* name = sqlite3_column_name(m_stmt, column);
    m_db->fileError("is corrupt: " + m_context + " found " + std::to_string(value) + " in column " +
                    (name ? name : "?") + ", which no Meshbench writes");
}

}  // namespace meshbench::store::detail
