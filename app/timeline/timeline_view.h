#pragma once
// The timeline widget: one row per rank grouped by pipeline stage (collapsible: a collapsed stage is
// one summary row), spans coloured by kind, a time ruler, zoom/pan/zoom-to-selection with a history,
// hover tooltips, follow-live, and an optional predicted timeline (the planner's) drawn as a thin band
// at the top of each row. An imported session's device kernels get a lane under each row, split by
// stream and coloured by device class, filled only where the view is zoomed in far enough
// (kernel_window.h): zoomed out nothing about kernels is read or drawn, and the lane's label says
// to zoom in.
//
// The view handles input and wires three parts together: TimelineZoom (the visible range, its
// clamping, history and follow-live), TimelineLayout (rows, their y offsets, hit tests) and the
// render passes of timeline_passes.h, which it runs in order on every paint. Painting reads only what
// is on screen and makes at most one mark per pixel column per row (see timeline_row_painter.h).
//
// Input: wheel or ctrl+wheel zooms around the cursor (pinch too), shift/alt+wheel scrolls rows,
// drag pans, shift+drag zooms to the selected range, +/- zoom, left/right pan, up/down scroll,
// Home fits all, End follows live; Backspace or alt+left (or the mouse's back button) returns to the
// previous range, alt+right (forward button) goes forward again. Clicking a stage header collapses
// or expands it.

#include "timeline/timeline_data.h"
#include "timeline/timeline_layout.h"
#include "timeline/timeline_style.h"
#include "timeline/timeline_zoom.h"

#include <QPointer>
#include <QWidget>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

class QScrollBar;

namespace meshbench::app {

class TimelinePass;

// A TimelineStyle, so that callers name the timeline's colours and formats through the view.
class TimelineView : public QWidget, public TimelineStyle {
    Q_OBJECT
public:
    explicit TimelineView(QWidget* parent = nullptr);
    ~TimelineView() override;

    // The measured (or any) timeline; not owned. nullptr shows nothing.
    void setData(const TimelineData* data);
    const TimelineData* data() const { return m_data; }

    // A second timeline drawn as a band in each row: the row of the same rank, else the first row of
    // the same stage (so a per-stage plan overlays every rank of its stage). Its times are shifted by
    // the overlay offset: overlay time t is drawn at t + offset.
    void setOverlay(const TimelineData* overlay);
    const TimelineData* overlay() const { return m_overlay; }
    void setOverlayOffset(std::int64_t ns);
    std::int64_t overlayOffset() const { return m_overlayOffset; }
    // Puts the overlay's first span at the begin of `step` in the data; false when the data has no
    // span of that step (the offset is then unchanged).
    bool alignOverlayToStep(int step);

    // Pixel mapping: the plot area spans the visible range [t0, t1] from its left to its right edge.
    double xForTime(std::int64_t ns) const;
    std::int64_t timeForX(double x) const;
    QRect plotArea() const;
    // Where the store's row `row` is drawn (its plot part, in widget coordinates); empty when its
    // stage is collapsed or there is no such row.
    QRect rowRect(int row) const;
    // Where the kernel lane under row `row` is drawn; empty without kernels or when collapsed.
    QRect kernelLaneRect(int row) const;
    // The range moves below are steps in the zoom history (see TimelineZoom) and turn follow-live off.
    void setVisibleRange(std::int64_t t0, std::int64_t t1);
    std::pair<std::int64_t, std::int64_t> visibleRange() const { return m_zoom.range(); }
    void fitAll();
    // factor < 1 zooms in; the time at pixel x stays at x.
    void zoomAt(double factor, double x);

    // Follow-live slides the view to the newest data as it arrives, until the user pans or zooms.
    // It keeps the width the user last chose; without one, it shows the newest `liveWindow` ns
    // (the last few steps; 0, the default: everything so far).
    bool followLive() const { return m_zoom.followLive(); }
    void setFollowLive(bool on) { m_zoom.setFollowLive(on); }
    void setLiveWindow(std::int64_t ns) { m_zoom.setLiveWindow(ns); }
    std::int64_t liveWindow() const { return m_zoom.liveWindow(); }

    void setStageCollapsed(int stage, bool collapsed);
    bool isStageCollapsed(int stage) const { return m_layout.isStageCollapsed(stage); }
    void setRowHeight(int pixels);
    int rowHeight() const { return m_layout.rowHeight(); }

    // Every field of the span or kernel under `pos` (within 2 px), in lines "name: value"; empty when
    // none. Over a kernel lane's label: when kernels show.
    QString toolTipTextAt(QPoint pos) const;

signals:
    void followLiveChanged(bool on);
    void visibleRangeChanged(std::int64_t t0, std::int64_t t1);

protected:
    bool event(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;

private:
    std::optional<TimeRange> dataRange() const;
    void onDataChanged();
    void onDataReset();
    void relayout();
    void zoomAround(double factor, double x, TimelineZoom::Gesture gesture);
    const TimelineLayout::Line* lineAt(int y) const;
    std::optional<TimelineLayout::Hit> hitAt(QPoint pos) const;
    QRect lineRect(const TimelineLayout::Line* line) const;
    void showKernels();
    const store::KernelRow* kernelAt(QPoint pos, int* rank) const;
    QString kernelToolTip(const store::KernelRow& kernel, int rank) const;
    QString formatTime(std::int64_t ns) const;

    QPointer<const TimelineData> m_data;
    QPointer<const TimelineData> m_overlay;
    QPointer<TimelineKernels> m_kernels;  // the data's, connected
    std::int64_t m_overlayOffset = 0;
    TimelineZoom m_zoom;
    TimelineLayout m_layout;
    std::vector<std::unique_ptr<TimelinePass>> m_passes;  // painted in order
    QScrollBar* m_scroll = nullptr;

    enum class Drag { None, Pan, Select };
    Drag m_drag = Drag::None;
    QPoint m_pressPos;
    TimeRange m_pressRange;
    int m_selectX = 0;
};

}  // namespace meshbench::app
