#include "trace_import_job.h"

#include "import/trace_import.h"

#include <QDirIterator>
#include <QFile>
#include <QFileInfo>
#include <QThread>
#include <QTimer>

#include <atomic>

namespace meshbench::app {

namespace {

constexpr int kSampleMs = 100;

std::uint64_t bytesUnder(const QStringList& paths)
{
    std::uint64_t total = 0;
    for (const QString& path : paths) {
        const QFileInfo info(path);
        if (info.isFile()) {
            total += std::uint64_t(info.size());
            continue;
        }
        QDirIterator files(path, QDir::Files, QDirIterator::Subdirectories);
        while (files.hasNext()) {
            files.next();
            total += std::uint64_t(files.fileInfo().size());
        }
    }
    return total;
}

}  // namespace

// What the worker thread and the GUI thread share: the job may be destroyed (and wait) while the
// thread still finishes, so neither owns it alone.
struct TraceImportJob::Shared {
    std::atomic<bool> cancel{false};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint64_t> events{0};
    // Written by the thread, read after QThread::finished.
    bool ok = false;
    QString sessionPath;
    QStringList lines;
};

TraceImportJob::TraceImportJob(TraceImportSettings settings, QObject* parent)
    : QObject(parent), m_settings(std::move(settings)), m_shared(std::make_shared<Shared>()),
      m_sampler(new QTimer(this))
{
    m_sampler->setInterval(kSampleMs);
    connect(m_sampler, &QTimer::timeout, this, [this] { emit progress(bytesRead(), eventsRead()); });
}

TraceImportJob::~TraceImportJob()
{
    if (!m_thread)
        return;
    m_shared->cancel = true;
    m_thread->wait();
    delete m_thread;
    // Cancelled before its end: a session it completed regardless is not left behind.
    if (m_shared->ok)
        for (const char* suffix : {"", "-wal", "-shm"})
            QFile::remove(m_shared->sessionPath + QLatin1String(suffix));
}

std::uint64_t TraceImportJob::bytesRead() const { return m_shared->bytes.load(std::memory_order_relaxed); }

std::uint64_t TraceImportJob::eventsRead() const { return m_shared->events.load(std::memory_order_relaxed); }

bool TraceImportJob::isCancelled() const { return m_shared->cancel.load(); }

void TraceImportJob::cancel() { m_shared->cancel = true; }

void TraceImportJob::start()
{
    if (m_thread)
        return;
    m_totalBytes = bytesUnder(m_settings.paths);
    import::ImportRequest request;
    for (const QString& path : m_settings.paths)
        request.paths.push_back(path.toStdString());
    if (!m_settings.jobPath.isEmpty())
        request.jobPath = m_settings.jobPath.toStdString();
    request.sessionPath = m_settings.sessionPath.toStdString();
    request.rankFrom = m_settings.rankFrom.toStdString();
    request.read.steps = import::StepMarker(m_settings.stepMarker.toStdString());
    Shared* shared = m_shared.get();
    request.read.cancel = &shared->cancel;
    request.read.progress = [shared](std::uint64_t bytes, std::uint64_t events) {
        shared->bytes.store(bytes, std::memory_order_relaxed);
        shared->events.store(events, std::memory_order_relaxed);
    };
    // The thread keeps the shared state alive by its own reference.
    m_thread = QThread::create([request = std::move(request), state = m_shared] {
        try {
            const import::ImportResult result = import::importTraces(request);
            state->sessionPath = QString::fromStdString(result.sessionPath);
            for (const std::string& line : result.summary)
                state->lines << QString::fromStdString(line);
            state->ok = true;
        } catch (const std::exception& e) {
            // import::ImportError names the file and the fix; anything else (memory, the file
            // system) is still the user's to read.
            state->lines = {QString::fromUtf8(e.what())};
        }
    });
    connect(m_thread, &QThread::finished, this, &TraceImportJob::onThreadFinished);
    m_sampler->start();
    m_thread->start();
}

void TraceImportJob::onThreadFinished()
{
    m_sampler->stop();
    m_thread->deleteLater();
    m_thread = nullptr;
    emit progress(bytesRead(), eventsRead());
    Shared& s = *m_shared;
    if (s.cancel) {
        // The readers stop at the cancel; one that came while the session was written is honoured here.
        if (s.ok)
            for (const char* suffix : {"", "-wal", "-shm"})
                QFile::remove(s.sessionPath + QLatin1String(suffix));
        emit finished(false, QString(), {tr("the import was cancelled; no session was written")});
        return;
    }
    emit finished(s.ok, s.sessionPath, s.lines);
}

}  // namespace meshbench::app
