#pragma once
// The kernels the timeline shows of an imported session: told the visible range, it reads the window
// around it (kernel_window.h) on a worker thread where kernels are legible, one read at a time, and
// keeps the latest window read. Zoomed out it reads nothing and shows nothing.
//
// Each rank's kernel lane is split into one lane per stream; a stream keeps its place once seen, so
// lanes do not swap as the user pans.

#include "timeline/kernel_window.h"

#include <QObject>
#include <QString>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

class QThread;

namespace meshbench::app {

class TimelineKernels : public QObject {
    Q_OBJECT
public:
    // Opens a reader of its own on the session (the caller's may go away before a read ends);
    // `names` are the session's kernel names, `ranks` those whose kernels to read. Throws
    // store::StoreError when the file cannot be opened.
    TimelineKernels(const std::string& session, std::vector<std::string> names, std::vector<std::uint32_t> ranks,
                    QObject* parent = nullptr);
    ~TimelineKernels() override;  // waits for a read under way

    // The visible range across a plot `pixels` wide: starts reading the window around it where
    // kernels are legible and the window held does not cover it.
    void show(std::int64_t t0, std::int64_t t1, int pixels);
    // Whether the range last shown is zoomed in far enough for kernels.
    bool legible() const { return m_legible; }
    bool reading() const { return m_thread != nullptr; }
    // The latest window read, nullptr before the first.
    const KernelWindow* window() const { return m_window.get(); }
    // Windows read so far.
    int reads() const { return m_reads; }
    // Why the last read failed (the session turned out corrupt), empty when it did not.
    const QString& error() const { return m_error; }

    QString name(std::int32_t nameId) const;
    // Every stream of a rank seen so far, in lane order, and where `stream` lies among them (-1: not seen).
    std::span<const std::int32_t> streams(int rank) const;
    int laneOf(int rank, std::int32_t stream) const;

signals:
    // A window was read (or failed: see error()).
    void loaded();

private:
    struct Read;
    void startRead(std::pair<std::int64_t, std::int64_t> range);
    void onReadFinished();

    std::shared_ptr<const store::SessionReader> m_reader;
    std::vector<std::string> m_names;
    std::vector<std::uint32_t> m_ranks;
    std::map<int, std::vector<std::int32_t>> m_streams;  // per rank, every stream seen, in lane order
    std::unique_ptr<KernelWindow> m_window;
    QThread* m_thread = nullptr;
    std::shared_ptr<Read> m_read;  // the read under way; the thread writes it, we read it after it ends
    std::int64_t m_wantedT0 = 0, m_wantedT1 = -1;
    bool m_legible = false;
    int m_reads = 0;
    QString m_error;
};

}  // namespace meshbench::app
