#pragma once
// Paints the spans of one row (or one stage's rows, summed) into its band of a frame image as wide as
// the plot: pixels are written directly (a frame touches each pixel a few times at most), and the spans
// pass then copies the whole frame onto the widget in one drawImage (one blit rather than one per row:
// Qt hands large blits to its thread pool, whose wake-ups cost more than the copy). Texts are collected
// for the pass to draw over the frame.
//
// At most one mark per pixel column per row: a span at least a pixel wide is a block (a darker left
// edge, an overlapped F&B pair's border, its micro-batch number); where spans are narrower, the column
// takes the colour of the kind that is busiest in it (from the row's level-of-detail buckets), its
// opacity the busy fraction. A stream's kernels (an imported session's) are painted the same way,
// coloured by device class.

#include "timeline/kernel_window.h"
#include "timeline/timeline_store.h"

#include <QColor>
#include <QImage>
#include <QPointF>
#include <QStaticText>

#include <array>
#include <optional>
#include <vector>

namespace meshbench::app {

class TimelineRowPainter {
public:
    struct Label {
        QPointF pos;  // in frame coordinates
        const QStaticText* text;
        QColor pen;
    };

    // Maps [t0, t1] across `columns` pixels; `base` is the background.
    TimelineRowPainter(QImage& frame, int columns, std::int64_t t0, std::int64_t t1, QColor base);

    // Starts a band of `height` lines of background at line `origin` of the frame; the band's own
    // coordinates start at 0.
    void clear(int origin, int height);
    // Every label of the bands painted so far.
    const std::vector<Label>& labels() const { return m_labels; }

    // The spans of `row`, whose time t is drawn at t + offset, in band lines [top, top + height).
    // `numbers[k]` is the text of micro-batch k (nullptr: no texts, as in a band).
    void paintRow(const TimelineRow& row, std::int64_t offset, int top, int height,
                  const std::vector<QStaticText>* numbers);
    // One strip summing several rows: every column from the summaries (a collapsed stage).
    void paintSummary(const std::vector<const TimelineRow*>& rows, int top, int height);
    // The kernels of one stream, on the painter's own time (kernels carry no offset).
    void paintKernels(const KernelLane& lane, int top, int height);

private:
    static constexpr int kLevels = 8;  // busy fraction in eighths
    struct Summary {
        BucketSummary busy;
        std::int64_t covered = 0;  // ns the summed buckets (or the column) span
    };

    std::int64_t columnBegin(std::int64_t rt0, int col) const;
    void walk(const TimelineRow& row, std::int64_t rt0, int first, int last, const std::vector<QStaticText>* numbers);
    int summaryLevel(const TimelineRow& row) const;
    QRgb blend(QRgb color, int alpha) const;
    QRgb busyColor(const QColor& color, double fraction) const;
    Summary columnSummary(const TimelineRow& row, std::size_t from, std::int64_t c0, std::int64_t c1,
                          std::optional<std::size_t>* next = nullptr) const;
    void markColumn(int col, const Summary& s);
    void fill(int x0, int x1, int y0, int y1, QRgb color);
    std::pair<int, int> verticalExtent(KindClass cls) const;
    void paintBlock(wire::SpanKind kind, int left, int right, double width, std::int32_t microbatch,
                    const std::vector<QStaticText>* numbers, int chunk, bool overlapped);
    QRgb* line(int y) const { return m_pixels + std::ptrdiff_t(m_origin + y) * m_stride; }

    QImage& m_frame;
    QRgb* m_pixels = nullptr;
    int m_stride = 0;
    int m_columns;
    std::int64_t m_t0;
    double m_nsPerPx;
    QRgb m_base;
    int m_pixelShift;  // log2 of the ns a pixel spans, rounded down: picks the summary level
    int m_origin = 0;  // the band's first line in the frame
    int m_height = 0;
    int m_top = 0;
    int m_bottom = 0;
    std::array<std::array<QRgb, kLevels + 1>, kKindClasses> m_summaryColor{};
    std::vector<Label> m_labels;
};

}  // namespace meshbench::app
