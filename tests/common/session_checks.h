#pragma once
// Checks on a session file from the outside, for the tests that run the engine: SQLite's own
// integrity check, and the steps stored so far while a run goes on. The test links SQLite.

#include "store/session_store.h"

#include <QElapsedTimer>
#include <QString>
#include <QThread>

#include <sqlite3.h>

#include <string>

namespace meshbench::testing {

// PRAGMA integrity_check's first row ("ok" for a sound file), or what stopped it.
inline std::string integrityCheck(const std::string& path)
{
    sqlite3* db = nullptr;
    std::string result = "cannot open";
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* check = nullptr;
        if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &check, nullptr) == SQLITE_OK &&
            sqlite3_step(check) == SQLITE_ROW)
            result = reinterpret_cast<const char*>(sqlite3_column_text(check, 0));
        else
            result = sqlite3_errmsg(db);
        sqlite3_finalize(check);
    }
    sqlite3_close(db);
    return result;
}

// Steps with metrics in a session that may still be written; 0 while it does not exist yet.
inline int storedSteps(const QString& session)
{
    try {
        return int(store::SessionReader(session.toStdString()).stepMetrics().size());
    } catch (const store::StoreError&) {
        return 0;
    }
}

// Polls the session (it is written by another process) until it holds `steps` steps.
inline bool waitForSteps(const QString& session, int steps, int timeoutMs = 120000)
{
    QElapsedTimer timer;
    timer.start();
    while (timer.elapsed() < timeoutMs) {
        if (storedSteps(session) >= steps)
            return true;
        QThread::msleep(100);
    }
    return false;
}

}  // namespace meshbench::testing
