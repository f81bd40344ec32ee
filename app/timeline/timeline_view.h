#pragma once
// The timeline widget: one row per rank grouped by pipeline stage (collapsible: a collapsed stage is
// one summary row), spans coloured by kind, a time ruler, zoom/pan/zoom-to-selection, hover
// tooltips, follow-live, and an optional predicted timeline (the planner's) drawn as a thin band at
// the top of each row.
//
// Painting reads only what is on screen and makes at most one mark per pixel column per row: a
// span at least a pixel wide is a block; where spans are narrower, the column takes the colour of
// the kind that is busiest in it (from the rows' level-of-detail buckets), its opacity the busy
// fraction.
//
// Input: wheel or ctrl+wheel zooms around the cursor (pinch too), shift/alt+wheel scrolls rows,
// drag pans, shift+drag zooms to the selected range, +/- zoom, left/right pan, up/down scroll,
// Home fits all, End follows live. Clicking a stage header collapses or expands it.

#include "timeline/timeline_data.h"

#include <QImage>
#include <QPointer>
#include <QStaticText>
#include <QWidget>

#include <optional>
#include <utility>
#include <vector>

class QScrollBar;

namespace meshbench::app {

class TimelineView : public QWidget {
    Q_OBJECT
public:
    explicit TimelineView(QWidget* parent = nullptr);

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
    void setVisibleRange(std::int64_t t0, std::int64_t t1);   // turns follow-live off
    std::pair<std::int64_t, std::int64_t> visibleRange() const { return {m_t0, m_t1}; }
    void fitAll();                                            // turns follow-live off
    // factor < 1 zooms in; the time at pixel x stays at x. Turns follow-live off.
    void zoomAt(double factor, double x);

    // Follow-live slides the view to the newest data as it arrives, until the user pans or zooms.
    // It keeps the width the user last chose; without one, it shows the newest `liveWindow` ns
    // (the last few steps; 0, the default: everything so far).
    bool followLive() const { return m_followLive; }
    void setFollowLive(bool on);
    void setLiveWindow(std::int64_t ns);
    std::int64_t liveWindow() const { return m_liveWindow; }

    void setStageCollapsed(int stage, bool collapsed);
    bool isStageCollapsed(int stage) const;
    void setRowHeight(int pixels);
    int rowHeight() const { return m_rowHeight; }

    // Every field of the span under `pos` (within 2 px), in lines "name: value"; empty when none.
    QString toolTipTextAt(QPoint pos) const;

    // 1, 2 or 5 x 10^k ns: the smallest such step at least minPixels apart.
    static std::int64_t niceTickStep(double nsPerPixel, double minPixels);
    // A ruler label for a time (relative to the data's begin) on a ruler of the given step: "1.5 ms".
    static QString formatTick(std::int64_t ns, std::int64_t step);
    // A duration at its natural unit with up to 6 significant decimals: "1.234567 ms", "250 ns".
    static QString formatDuration(std::int64_t ns);
    // Fixed categorical colours that read on light and dark backgrounds.
    static QColor kindColor(wire::SpanKind kind);
    // A block of model chunk `chunk` (0 = kindColor), and the border around an F&B pair's blocks.
    static QColor chunkColor(wire::SpanKind kind, int chunk);
    static QColor pairBorderColor();
    static QColor classColor(KindClass cls);
    // Data-parallel reductions are hatched: a light fill of their colour with a dark pixel on
    // every fourth diagonal, so they read as communication next to solid compute.
    struct Hatch {
        QRgb light, dark;
        QRgb at(int x, int y) const { return ((x + y) & 3) == 0 ? dark : light; }
    };
    static Hatch hatchOf(const QColor& color) { return {color.lighter(130).rgb(), color.darker(160).rgb()}; }

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
    struct Line {
        int stage = 0;
        int row = -1;      // index into the store's rows; -1 for a stage header
        int top = 0;       // in content coordinates
        int height = 0;
        int firstRow = 0;  // header: the stage's rows [firstRow, firstRow + rowCount)
        int rowCount = 0;
    };
    struct Hit {
        const TimelineRow* row = nullptr;
        std::size_t index = 0;
        bool predicted = false;
    };

    void onDataChanged();
    void onDataReset();
    void relayout();
    void applyRange(std::int64_t t0, std::int64_t t1);
    void fitAllInternal();
    void userRange(std::int64_t t0, std::int64_t t1);
    const Line* lineAt(int y) const;
    const TimelineRow* overlayRowFor(const TimelineRow& row) const;
    std::optional<Hit> hitAt(QPoint pos) const;
    int overlayBandHeight() const;
    void paintRuler(QPainter& painter, const QRect& plot) const;
    void paintLabels(QPainter& painter, const QRect& plot) const;
    const QStaticText* numberText(int number) const;

    QPointer<const TimelineData> m_data;
    QPointer<const TimelineData> m_overlay;
    std::int64_t m_overlayOffset = 0;
    std::int64_t m_t0 = 0;
    std::int64_t m_t1 = 1'000'000;
    bool m_userRange = false;    // the user chose a range: new data no longer refits
    bool m_followLive = false;
    std::int64_t m_liveWindow = 0;
    int m_rowHeight = 18;
    std::vector<int> m_collapsed;   // stages
    std::vector<Line> m_lines;
    int m_contentHeight = 0;
    QScrollBar* m_scroll = nullptr;

    enum class Drag { None, Pan, Select };
    Drag m_drag = Drag::None;
    QPoint m_pressPos;
    std::pair<std::int64_t, std::int64_t> m_pressRange;
    int m_selectX = 0;

    mutable std::vector<QStaticText> m_numbers;   // micro-batch labels, made on first use
    QImage m_frame;   // the rows' pixels, kept between paints to spare the allocation
};

}  // namespace meshbench::app
