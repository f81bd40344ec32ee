#pragma once
// The timeline's data as the GUI holds it: a TimelineStore plus change notification. Live batches
// are appended as they arrive; changed() is emitted once per notify interval, not per span, so a
// view repaints at most that often however fast the feed is.

#include "timeline/timeline_loaders.h"
#include "timeline/timeline_store.h"

#include <QObject>
#include <QTimer>

namespace meshbench::app {

class TimelineData : public QObject {
    Q_OBJECT
public:
    explicit TimelineData(QObject* parent = nullptr);

    const TimelineStore& store() const { return m_store; }

    // Replaces everything (a session or plan built elsewhere, e.g. on a worker thread with
    // loadSessionTimeline). Emits reset() and changed() at once.
    void setStore(TimelineStore store);
    void clear();
    // Labels and stages of rows before their spans arrive (see rowsForRanks, rowsForMesh).
    void setRows(const std::vector<RowInfo>& rows);

    // Live feed: the spans of a decoded batch (other records are ignored).
    void appendBatch(const wire::Batch& batch);
    void appendSpans(int rank, std::span<const TimelineSpan> spans);

    // Blocking conveniences over the loaders (a session of millions of spans takes seconds: load
    // those on a worker thread and call setStore). loadSession throws store::StoreError.
    void loadSession(const store::SessionReader& reader,
                     std::optional<std::pair<std::int64_t, std::int64_t>> window = std::nullopt);
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
    void scheduleChanged();

    TimelineStore m_store;
    QTimer m_notify;
};

}  // namespace meshbench::app
