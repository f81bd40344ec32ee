#pragma once
// The timeline's data as the GUI holds it: a TimelineStore plus change notification. Live batches
// are appended as they arrive; changed() is emitted once per notify interval, not per span, so a
// view repaints at most that often however fast the feed is.

#include "timeline/timeline_kernels.h"
#include "timeline/timeline_loaders.h"
#include "timeline/timeline_store.h"

#include <QObject>
#include <QTimer>

#include <memory>

namespace meshbench::app {

class TimelineData : public QObject {
    Q_OBJECT
public:
    explicit TimelineData(QObject* parent = nullptr);

    const TimelineStore& store() const { return m_store; }
    // The device kernels of an imported session, read as the view zooms in; nullptr for everything
    // else (a plan, a live run, a session of our own agent), which then looks as it always did.
    // The view asks it for windows, hence not const.
    TimelineKernels* kernels() const { return m_kernels.get(); }

    // Replaces everything (a session or plan built elsewhere, e.g. on a worker thread with
    // loadSessionTimeline), kernels included. Emits reset() and changed() at once.
    void setStore(TimelineStore store);
    void clear();
    // Labels and stages of rows before their spans arrive (see rowsForRanks, rowsForMesh).
    void setRows(const std::vector<RowInfo>& rows);

    // Live feed: the spans of a decoded batch (other records are ignored).
    void appendBatch(const wire::Batch& batch);
    void appendSpans(int rank, std::span<const TimelineSpan> spans);

    // Blocking conveniences over the loaders (a session of millions of spans takes seconds: load
    // those on a worker thread and call setStore). loadSession throws store::StoreError.
    // loadSession also shows the session's kernels (showKernelsOf).
    void loadSession(const store::SessionReader& reader,
                     std::optional<std::pair<std::int64_t, std::int64_t>> window = std::nullopt);
    // Shows the kernels of `reader`'s session under the rows (for a session whose spans arrive
    // otherwise, e.g. replayed); nothing for a session without kernels. Reads only the kernel names
    // now, the kernels themselves as the view zooms in. Emits reset(). Throws store::StoreError.
    void showKernelsOf(const store::SessionReader& reader);
    void loadPlan(const plan::Plan& plan, PlanRows rows = PlanRows::PerStage, double nsPerUnit = 0);

    // Marks the spans a schedule runs as overlapped F&B pairs, those here and those to come
    // (until the store is replaced).
    void setOverlappedOps(TimelineStore::OverlappedOps ops);

    // How long appends are collected before changed() (default 50 ms); 0 = next event loop pass.
    void setNotifyInterval(int ms);

signals:
    // The spans changed (appended, or everything replaced).
    void changed();
    // Everything was replaced: views fit the new data.
    void reset();

private:
    static std::unique_ptr<TimelineKernels> kernelsOf(const store::SessionReader& reader);
    void replace(TimelineStore store, std::unique_ptr<TimelineKernels> kernels);
    void scheduleChanged();

    TimelineStore m_store;
    std::unique_ptr<TimelineKernels> m_kernels;
    QTimer m_notify;
};

}  // namespace meshbench::app
