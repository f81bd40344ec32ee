#include "timeline/timeline_passes.h"

#include "timeline/timeline_row_painter.h"
#include "timeline/timeline_style.h"

#include <QPainter>

#include <algorithm>
#include <cmath>

namespace meshbench::app {

const KernelWindow* TimelineFrame::legibleKernels() const
{
    if (!kernels || !kernelsLegible(scale.t0, scale.t1, scale.pixels))
        return nullptr;
    return kernels->window();
}

void TimelineBackgroundPass::paint(QPainter& painter, const TimelineFrame& frame)
{
    // The row strips cover their part of the plot with their own background: fill only the rest.
    const QRect& plot = frame.plot;
    painter.fillRect(QRect(0, 0, frame.widget.width(), plot.top()), frame.palette.window());
    painter.fillRect(QRect(0, plot.top(), plot.left(), plot.height()), frame.palette.window());
    const int contentBottom = plot.top() + frame.layout->contentHeight() - frame.scroll;
    painter.fillRect(QRect(plot.left(), contentBottom, plot.width(), plot.bottom() + 1 - contentBottom),
                     frame.palette.base());
    if (frame.data)
        return;
    painter.fillRect(plot, frame.palette.base());
    painter.setPen(frame.palette.color(QPalette::PlaceholderText));
    painter.drawText(plot, Qt::AlignCenter, frame.placeholder);
}

void TimelineSpansPass::paint(QPainter& painter, const TimelineFrame& frame)
{
    if (!frame.data)
        return;
    const QRect& plot = frame.plot;
    const std::vector<TimelineLayout::Line>& lines = frame.layout->lines();
    const int band = frame.layout->bandHeight(frame.overlay);
    // The frame holds the visible lines, from the top of the first (partly scrolled off) one.
    std::size_t first = 0;
    while (first < lines.size() && frame.top(lines[first]) + lines[first].height <= plot.top())
        ++first;
    const int frameTop = first < lines.size() ? frame.top(lines[first]) : plot.top();
    int tallest = 1;
    for (const TimelineLayout::Line& line : lines)
        tallest = std::max(tallest, line.height);
    const QSize frameSize(plot.width(), plot.bottom() + 1 - frameTop + tallest);
    if (m_frame.width() != frameSize.width() || m_frame.height() < frameSize.height())
        m_frame = QImage(frameSize, QImage::Format_RGB32);
    if (m_numbers.empty()) {
        m_numbers.resize(1024);
        for (std::size_t k = 0; k < m_numbers.size(); ++k) {
            m_numbers[k].setText(QString::number(k));
            m_numbers[k].prepare(QTransform(), frame.font);
        }
    }
    TimelineRowPainter rows(m_frame, plot.width(), frame.scale.t0, frame.scale.t1, frame.palette.color(QPalette::Base));
    TimelineRowPainter headers(m_frame, plot.width(), frame.scale.t0, frame.scale.t1,
                               frame.palette.color(QPalette::AlternateBase));
    int frameBottom = 0;
    for (std::size_t i = first; i < lines.size(); ++i) {
        const TimelineLayout::Line& line = lines[i];
        const int origin = frame.top(line) - frameTop;
        if (frameTop + origin > plot.bottom())
            break;
        frameBottom = origin + line.height;
        if (line.row < 0) {
            headers.clear(origin, line.height);
            if (frame.layout->isStageCollapsed(line.stage)) {
                std::vector<const TimelineRow*> group;
                for (int r = line.firstRow; r < line.firstRow + line.rowCount; ++r)
                    group.push_back(&frame.data->row(std::size_t(r)));
                headers.paintSummary(group, 2, line.height - 4);
            }
            continue;
        }
        rows.clear(origin, line.height);
        if (line.kernels) {
            paintKernelLane(rows, frame, line);
            continue;
        }
        const TimelineRow& row = frame.data->row(std::size_t(line.row));
        if (band > 0)
            if (const TimelineRow* predicted = TimelineLayout::overlayRowFor(row, frame.overlay))
                rows.paintRow(*predicted, frame.overlayOffset, 1, band, nullptr);
        const int spanTop = TimelineLayout::spanTop(band);
        rows.paintRow(row, 0, spanTop, line.height - 1 - spanTop, &m_numbers);
    }
    painter.save();
    painter.setClipRect(plot);
    painter.drawImage(QPoint(plot.left(), frameTop), m_frame, QRect(0, 0, plot.width(), frameBottom));
    for (const TimelineRowPainter::Label& label : rows.labels()) {
        painter.setPen(label.pen);
        painter.drawStaticText(QPointF(plot.left(), frameTop) + label.pos, *label.text);
    }
    painter.restore();
}

void TimelineSpansPass::paintKernelLane(TimelineRowPainter& rows, const TimelineFrame& frame,
                                        const TimelineLayout::Line& line)
{
    const KernelWindow* window = frame.legibleKernels();
    if (!window)
        return;
    const int rank = frame.data->row(std::size_t(line.row)).info().rank;
    const int count = int(frame.kernels->streams(rank).size());
    for (const KernelLane& lane : window->lanes(rank)) {
        const auto [top, bottom] =
            TimelineLayout::streamLane(line.height, frame.kernels->laneOf(rank, lane.stream), count);
        rows.paintKernels(lane, top, bottom - top);
    }
}

void TimelineSelectionPass::paint(QPainter& painter, const TimelineFrame& frame)
{
    if (!frame.data || !frame.selection)
        return;
    const auto [x0, x1] = *frame.selection;
    QColor shade = frame.palette.color(QPalette::Highlight);
    shade.setAlpha(60);
    painter.save();
    painter.setClipRect(frame.plot);
    painter.fillRect(QRect(x0, frame.plot.top(), x1 - x0, frame.plot.height()), shade);
    painter.restore();
}

void TimelineAxisPass::paint(QPainter& painter, const TimelineFrame& frame)
{
    if (!frame.data)
        return;
    const QRect& plot = frame.plot;
    const std::int64_t step = TimelineStyle::niceTickStep(frame.scale.nsPerPixel(), 90);
    const std::int64_t origin = frame.data->beginTime();
    // First tick: the first multiple of step (counted from the data's begin) at or after t0.
    const std::int64_t rel0 = frame.scale.t0 - origin;
    std::int64_t tick = (rel0 >= 0 ? (rel0 + step - 1) / step : rel0 / step) * step;
    const QColor text = frame.palette.color(QPalette::WindowText);
    QColor grid = frame.palette.color(QPalette::Text);
    grid.setAlpha(28);
    painter.setPen(text);
    for (; origin + tick <= frame.scale.t1; tick += step) {
        const int x = int(std::lround(plot.left() + frame.scale.x(origin + tick)));
        painter.fillRect(QRect(x, plot.top() - 6, 1, 6), text);
        painter.fillRect(QRect(x, plot.top(), 1, plot.height()), grid);
        painter.drawText(QRect(x + 3, 0, 200, plot.top() - 4), Qt::AlignLeft | Qt::AlignVCenter,
                         TimelineStyle::formatTick(tick, step));
    }
}

void TimelineLabelsPass::paint(QPainter& painter, const TimelineFrame& frame)
{
    if (!frame.data)
        return;
    const QRect& plot = frame.plot;
    painter.setClipRect(QRect(0, plot.top(), plot.left(), plot.height()));
    for (const TimelineLayout::Line& line : frame.layout->lines()) {
        const int top = frame.top(line);
        if (top + line.height <= plot.top())
            continue;
        if (top >= frame.widget.height())
            break;
        const QRect box(6, top, plot.left() - 10, line.height);
        QString text;
        if (line.row < 0) {
            painter.fillRect(QRect(0, top, plot.left(), line.height), frame.palette.button());
            painter.setPen(frame.palette.color(QPalette::ButtonText));
            text = QStringLiteral("%1 stage %2 \u00b7 %3 %4")
                       .arg(frame.layout->isStageCollapsed(line.stage) ? QStringLiteral("\u25b8")
                                                                       : QStringLiteral("\u25be"))
                       .arg(line.stage)
                       .arg(line.rowCount)
                       .arg(line.rowCount == 1 ? tr("row") : tr("rows"));
        } else if (line.kernels) {
            painter.setPen(frame.palette.color(QPalette::PlaceholderText));
            text = kernelLaneLabel(frame, frame.data->row(std::size_t(line.row)).info().rank);
        } else {
            painter.setPen(frame.palette.color(QPalette::WindowText));
            text = QString::fromStdString(frame.data->row(std::size_t(line.row)).info().label);
        }
        painter.drawText(box, Qt::AlignLeft | Qt::AlignVCenter,
                         painter.fontMetrics().elidedText(text, Qt::ElideRight, box.width()));
    }
    painter.setClipping(false);
}

// What a kernel lane shows, or why it shows nothing.
QString TimelineLabelsPass::kernelLaneLabel(const TimelineFrame& frame, int rank)
{
    const TimelineKernels& kernels = *frame.kernels;
    if (!kernelsLegible(frame.scale.t0, frame.scale.t1, frame.scale.pixels))
        return tr("kernels \u00b7 zoom in");
    if (!kernels.error().isEmpty())
        return tr("kernels \u00b7 unreadable");
    if (!kernels.window())
        return tr("kernels \u00b7 reading");
    const std::span<const std::int32_t> streams = kernels.streams(rank);
    if (streams.empty())
        return tr("kernels \u00b7 none yet");
    if (streams.size() > 3)
        return tr("kernels \u00b7 %1 streams").arg(streams.size());
    QStringList ids;
    for (const std::int32_t stream : streams)
        ids << QString::number(stream);
    return (streams.size() == 1 ? tr("kernels \u00b7 stream %1") : tr("kernels \u00b7 streams %1"))
        .arg(ids.join(QStringLiteral(", ")));
}

}  // namespace meshbench::app
