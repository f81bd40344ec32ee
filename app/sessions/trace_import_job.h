#pragma once
// One run of engine/import (File > Import Traces) on a worker thread: other stacks' per-rank traces
// into a session file. The reader reports bytes and events as it goes; the GUI thread samples them
// (progress()) and can cancel, which leaves no session behind.

#include <QObject>
#include <QStringList>

#include <cstdint>
#include <memory>

class QThread;
class QTimer;

namespace meshbench::app {

// What to import, as File > Import Traces asks for it; empty strings mean "not given".
struct TraceImportSettings {
    QStringList paths;  // trace files, or folders of them
    QString jobPath;    // the traced run's job spec; without it the layout is inferred
    QString rankFrom;   // a regular expression over the file name whose first group is the rank
    QString stepMarker;
    QString sessionPath;  // the session to write (must not exist)
};

class TraceImportJob : public QObject {
    Q_OBJECT
public:
    explicit TraceImportJob(TraceImportSettings settings, QObject* parent = nullptr);
    // Cancels a running import and waits for its thread.
    ~TraceImportJob() override;

    const TraceImportSettings& settings() const { return m_settings; }
    // The bytes of the input files, for a progress bar; a folder counts every file in it, so the
    // bytes read may end short of it.
    std::uint64_t totalBytes() const { return m_totalBytes; }
    std::uint64_t bytesRead() const;
    std::uint64_t eventsRead() const;
    bool isRunning() const { return m_thread != nullptr; }
    bool isCancelled() const;

    void start();
    // Asks the reader to stop; finished() follows with ok false. An import that completes anyway
    // (the cancel came while the session was being written) has its session removed.
    void cancel();

signals:
    // Now and then while running, on the GUI thread.
    void progress(quint64 bytes, quint64 events);
    // ok: `sessionPath` was written and `lines` is the import's summary; otherwise `lines` holds
    // the reason (the importer's message, naming the file and the fix), or says it was cancelled.
    void finished(bool ok, const QString& sessionPath, const QStringList& lines);

private:
    struct Shared;
    void onThreadFinished();

    TraceImportSettings m_settings;
    std::shared_ptr<Shared> m_shared;
    std::uint64_t m_totalBytes = 0;
    QThread* m_thread = nullptr;
    QTimer* m_sampler;
};

}  // namespace meshbench::app
