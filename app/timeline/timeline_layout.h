#pragma once
// Where the timeline's rows lie: a header line per pipeline stage, then the stage's rows unless it is
// collapsed (its header then shows the stage's summary), each row followed by its kernel lane when the
// data has kernels (an imported session), top to bottom in content coordinates (y = 0
// at the top of the first line, before scrolling); and what lies under a point: the line at a y, the
// span at an x of the zoom's time scale. The stores are passed in, not kept: they may go away.

#include "timeline/timeline_store.h"
#include "timeline/timeline_zoom.h"

#include <optional>
#include <utility>
#include <vector>

namespace meshbench::app {

class TimelineLayout {
public:
    static constexpr int kHeaderHeight = 18;
    static constexpr double kHoverTolerancePx = 2.0;

    struct Line {
        int stage = 0;
        int row = -1;          // index into the store's rows; -1 for a stage header
        bool kernels = false;  // the kernel lane under row `row`, not its spans
        int top = 0;           // in content coordinates
        int height = 0;
        int firstRow = 0;  // header: the stage's rows [firstRow, firstRow + rowCount)
        int rowCount = 0;
    };
    struct Hit {
        const TimelineRow* row = nullptr;  // the measured row, or the overlay's row in its band
        std::size_t index = 0;
        bool predicted = false;  // in the overlay band
    };

    // These take effect at the next build().
    void setRowHeight(int pixels);  // 4 to 200
    int rowHeight() const { return m_rowHeight; }
    void setStageCollapsed(int stage, bool collapsed);
    bool isStageCollapsed(int stage) const;

    // Lays out the rows of `store` (nullptr: none), with a kernel lane as tall as a row under each.
    void build(const TimelineStore* store, bool kernelLanes = false);
    const std::vector<Line>& lines() const { return m_lines; }
    int contentHeight() const { return m_contentHeight; }
    // The line at content y, nullptr between or past the lines; the line of a store row, nullptr
    // when its stage is collapsed; the kernel lane of a store row, nullptr without one.
    const Line* lineAt(int y) const;
    const Line* lineOfRow(int row) const;
    const Line* kernelLineOfRow(int row) const;
    // A kernel lane of height h holds `count` stream lanes, one above the other in its lines
    // [1, h - 1): lines [first, second) of stream lane `index`.
    static std::pair<int, int> streamLane(int height, int index, int count);

    // A row line of height h holds the overlay's band in its lines [1, 1 + band) and the measured
    // spans in [spanTop(band), h - 1). The band is 0 without overlay spans.
    int bandHeight(const TimelineStore* overlay) const;
    static int spanTop(int band) { return band > 0 ? band + 2 : 1; }
    // The overlay row drawn in a row's band: the same rank's, else the first of the same stage.
    static const TimelineRow* overlayRowFor(const TimelineRow& row, const TimelineStore* overlay);

    // The span at content y and plot x (pixels from the plot's left on `scale`), within
    // kHoverTolerancePx; overlay time t is drawn at t + overlayOffset. None in a kernel lane.
    std::optional<Hit> hitAt(int y, double x, const TimeScale& scale, const TimelineStore& data,
                             const TimelineStore* overlay, std::int64_t overlayOffset) const;
    // The span containing t (of two, the later; idle only where nothing else is), else the nearest
    // within `tolerance` ns.
    static std::optional<std::size_t> spanNear(const TimelineRow& row, std::int64_t t, std::int64_t tolerance);

private:
    int m_rowHeight = 18;
    std::vector<int> m_collapsed;  // stages
    std::vector<Line> m_lines;
    int m_contentHeight = 0;
};

}  // namespace meshbench::app
