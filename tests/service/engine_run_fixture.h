#pragma once
// The engine running the demo job end to end, for the tests that run it and interrupt it: where the
// session stands, which agent processes it started, and whether they are gone.

#include "store/session_store.h"

#include <QtTest>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

inline const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
inline const QString kDemo = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");

inline std::string readFile(const QString& path)
{
    std::ifstream in(path.toStdString(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// Steps with metrics in a session that may still be written; 0 while it does not exist yet.
inline int storedSteps(const QString& session)
{
    try {
        return int(meshbench::store::SessionReader(session.toStdString()).stepMetrics().size());
    } catch (const meshbench::store::StoreError&) {
        return 0;
    }
}

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

// Every agent process the session heard of: rank -> pid, from the heartbeats.
inline std::map<std::uint32_t, int> agentPids(const QString& session)
{
    std::map<std::uint32_t, int> pids;
    for (const auto& h : meshbench::store::SessionReader(session.toStdString()).heartbeats())
        pids[h.rank] = h.record.pid;
    return pids;
}

inline bool alive(int pid)
{
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!std::getline(stat, text))
        return false;
    const std::size_t close = text.rfind(')');
    return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

// Waits up to `timeoutMs` for every pid to be gone; returns the survivors.
inline std::vector<int> survivors(const std::map<std::uint32_t, int>& pids, int timeoutMs)
{
    QElapsedTimer timer;
    timer.start();
    std::vector<int> left;
    do {
        left.clear();
        for (const auto& [rank, pid] : pids)
            if (alive(pid))
                left.push_back(pid);
        if (left.empty())
            break;
        QThread::msleep(100);
    } while (timer.elapsed() < timeoutMs);
    return left;
}

inline std::string integrityCheck(const QString& path)
{
    sqlite3* db = nullptr;
    std::string result = "cannot open";
    if (sqlite3_open_v2(path.toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* statement = nullptr;
        if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &statement, nullptr) == SQLITE_OK &&
            sqlite3_step(statement) == SQLITE_ROW)
            result = reinterpret_cast<const char*>(sqlite3_column_text(statement, 0));
        sqlite3_finalize(statement);
    }
    sqlite3_close(db);
    return result;
}

// The demo job, made long enough to be interrupted.
inline QString longDemo(const QString& dir, int steps)
{
    nlohmann::json doc = nlohmann::json::parse(readFile(kDemo));
    doc["train"]["steps"] = steps;
    doc["train"]["decay_steps"] = steps;
    const QString path = dir + "/long-demo.json";
    std::ofstream(path.toStdString()) << doc.dump();
    return path;
}

// The engine running the long demo into `session`, once `steps` steps are stored; with the pids
// of its agents.
struct RunningDemo {
    QProcess engine;
    std::map<std::uint32_t, int> pids;

    bool start(const QTemporaryDir& dir, const QString& session, int steps)
    {
        engine.start(kEngine, {"run", longDemo(dir.path(), 2000), "--session", session});
        if (!waitForSteps(session, steps))
            return false;
        pids = agentPids(session);
        return true;
    }
};

