#pragma once
// The timeline's painting as passes over one frame (after Qt Creator's timeline render passes): the
// view fills a TimelineFrame and runs its passes in order, each drawing its layer over the ones before.
//   TimelineBackgroundPass  around the rows: the ruler strip, the label column, the space below the
//                           rows; the placeholder text when there are no spans
//   TimelineSpansPass       the rows' spans, the overlay's bands, the collapsed stages' summaries,
//                           micro-batch numbers; the kernel lanes' kernels where they are legible
//   TimelineSelectionPass   the shade over a range being selected
//   TimelineAxisPass        the ruler's ticks and labels, its grid lines over the rows
//   TimelineLabelsPass      the row labels and stage headers in the label column, the kernel lanes'
//                           state (zoom in, reading, their streams)
// Only the background pass draws without spans.

#include "timeline/timeline_kernels.h"
#include "timeline/timeline_layout.h"
#include "timeline/timeline_zoom.h"

#include <QCoreApplication>
#include <QFont>
#include <QImage>
#include <QPalette>
#include <QRect>
#include <QStaticText>

#include <optional>
#include <utility>
#include <vector>

class QPainter;

namespace meshbench::app {

class TimelineRowPainter;

struct TimelineFrame {
    QRect widget;     // the whole view
    QRect plot;       // the time axis: the ruler above it, the label column to its left
    int scroll = 0;   // the content y at the plot's top
    TimeScale scale;  // across plot.width()
    const TimelineLayout* layout = nullptr;
    const TimelineStore* data = nullptr;  // nullptr when there are no spans
    const TimelineStore* overlay = nullptr;
    std::int64_t overlayOffset = 0;
    const TimelineKernels* kernels = nullptr;      // an imported session's; the layout then has kernel lanes
    QString placeholder;                           // shown without spans
    std::optional<std::pair<int, int>> selection;  // [x0, x1) being selected
    QPalette palette;
    QFont font;

    // Where a line of the layout begins, in widget coordinates.
    int top(const TimelineLayout::Line& line) const { return plot.top() + line.top - scroll; }
    // The kernels to draw at this zoom: nullptr where they are not legible or none were read yet.
    const KernelWindow* legibleKernels() const;
};

class TimelinePass {
public:
    virtual ~TimelinePass() = default;
    virtual void paint(QPainter& painter, const TimelineFrame& frame) = 0;
};

class TimelineBackgroundPass : public TimelinePass {
public:
    void paint(QPainter& painter, const TimelineFrame& frame) override;
};

class TimelineSpansPass : public TimelinePass {
public:
    void paint(QPainter& painter, const TimelineFrame& frame) override;

private:
    static void paintKernelLane(TimelineRowPainter& rows, const TimelineFrame& frame, const TimelineLayout::Line& line);

    QImage m_frame;                      // the rows' pixels, kept between paints to spare the allocation
    std::vector<QStaticText> m_numbers;  // micro-batch labels, made on first use
};

class TimelineSelectionPass : public TimelinePass {
public:
    void paint(QPainter& painter, const TimelineFrame& frame) override;
};

class TimelineAxisPass : public TimelinePass {
public:
    void paint(QPainter& painter, const TimelineFrame& frame) override;
};

class TimelineLabelsPass : public TimelinePass {
    Q_DECLARE_TR_FUNCTIONS(TimelineLabelsPass)
public:
    void paint(QPainter& painter, const TimelineFrame& frame) override;

private:
    static QString kernelLaneLabel(const TimelineFrame& frame, int rank);
};

}  // namespace meshbench::app
