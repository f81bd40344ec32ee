#include "timeline/timeline_view.h"

#include "timeline/timeline_passes.h"

#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QNativeGestureEvent>
#include <QPainter>
#include <QScrollBar>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <cmath>

namespace meshbench::app {

namespace {

constexpr int kLabelWidth = 160;
constexpr int kRulerHeight = 22;

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent), m_scroll(new QScrollBar(Qt::Vertical, this))
{
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setMinimumSize(kLabelWidth + 120, kRulerHeight + 60);
    m_scroll->hide();
    connect(m_scroll, &QScrollBar::valueChanged, this, qOverload<>(&QWidget::update));
    connect(&m_zoom, &TimelineZoom::rangeChanged, this, [this](std::int64_t t0, std::int64_t t1) {
        showKernels();
        update();
        emit visibleRangeChanged(t0, t1);
    });
    connect(&m_zoom, &TimelineZoom::followLiveChanged, this, &TimelineView::followLiveChanged);
    m_passes.push_back(std::make_unique<TimelineBackgroundPass>());
    m_passes.push_back(std::make_unique<TimelineSpansPass>());
    m_passes.push_back(std::make_unique<TimelineSelectionPass>());
    m_passes.push_back(std::make_unique<TimelineAxisPass>());  // after the rows: its grid lines lie over them
    m_passes.push_back(std::make_unique<TimelineLabelsPass>());
}

TimelineView::~TimelineView() = default;

void TimelineView::setData(const TimelineData* data)
{
    if (m_data)
        disconnect(m_data, nullptr, this, nullptr);
    m_data = data;
    if (m_data) {
        connect(m_data, &TimelineData::changed, this, &TimelineView::onDataChanged);
        connect(m_data, &TimelineData::reset, this, &TimelineView::onDataReset);
    }
    onDataReset();
}

void TimelineView::setOverlay(const TimelineData* overlay)
{
    if (m_overlay)
        disconnect(m_overlay, nullptr, this, nullptr);
    m_overlay = overlay;
    if (m_overlay)
        connect(m_overlay, &TimelineData::changed, this, qOverload<>(&QWidget::update));
    relayout();
}

void TimelineView::setOverlayOffset(std::int64_t ns)
{
    m_overlayOffset = ns;
    update();
}

bool TimelineView::alignOverlayToStep(int step)
{
    if (!m_data || !m_overlay || m_overlay->store().empty())
        return false;
    const auto begin = m_data->store().stepBegin(step);
    if (!begin)
        return false;
    setOverlayOffset(*begin - m_overlay->store().beginTime());
    return true;
}

QRect TimelineView::plotArea() const
{
    // isHidden, not isVisible: the layout must not depend on whether the window is on screen.
    const int right = width() - (m_scroll->isHidden() ? 0 : m_scroll->sizeHint().width());
    return QRect(kLabelWidth, kRulerHeight, std::max(1, right - kLabelWidth), std::max(1, height() - kRulerHeight));
}

QRect TimelineView::rowRect(int row) const { return lineRect(m_layout.lineOfRow(row)); }

QRect TimelineView::kernelLaneRect(int row) const { return lineRect(m_layout.kernelLineOfRow(row)); }

QRect TimelineView::lineRect(const TimelineLayout::Line* line) const
{
    if (!line)
        return {};
    const QRect plot = plotArea();
    return QRect(plot.left(), plot.top() + line->top - m_scroll->value(), plot.width(), line->height);
}

double TimelineView::xForTime(std::int64_t ns) const
{
    const QRect plot = plotArea();
    return plot.left() + m_zoom.scale(plot.width()).x(ns);
}

std::int64_t TimelineView::timeForX(double x) const
{
    const QRect plot = plotArea();
    return m_zoom.scale(plot.width()).time(x - plot.left());
}

void TimelineView::setVisibleRange(std::int64_t t0, std::int64_t t1) { m_zoom.setRange(t0, t1); }

void TimelineView::fitAll() { m_zoom.fit(); }

void TimelineView::zoomAt(double factor, double x) { zoomAround(factor, x, TimelineZoom::Gesture::None); }

void TimelineView::zoomAround(double factor, double x, TimelineZoom::Gesture gesture)
{
    const QRect plot = plotArea();
    m_zoom.zoomAt(factor, x - plot.left(), plot.width(), gesture);
}

std::optional<TimeRange> TimelineView::dataRange() const
{
    if (!m_data || m_data->store().empty())
        return std::nullopt;
    return TimeRange{m_data->store().beginTime(), m_data->store().endTime()};
}

void TimelineView::onDataChanged()
{
    relayout();
    m_zoom.setDataRange(dataRange());
}

void TimelineView::onDataReset()
{
    TimelineKernels* kernels = m_data ? m_data->kernels() : nullptr;
    if (m_kernels != kernels) {
        if (m_kernels)
            disconnect(m_kernels, nullptr, this, nullptr);
        m_kernels = kernels;
        if (m_kernels)
            connect(m_kernels, &TimelineKernels::loaded, this, qOverload<>(&QWidget::update));
    }
    relayout();
    m_zoom.resetData(dataRange());
    showKernels();
}

void TimelineView::showKernels()
{
    if (!m_kernels)
        return;
    const auto [t0, t1] = m_zoom.range();
    m_kernels->show(t0, t1, plotArea().width());
}

void TimelineView::setStageCollapsed(int stage, bool collapsed)
{
    m_layout.setStageCollapsed(stage, collapsed);
    relayout();
}

void TimelineView::setRowHeight(int pixels)
{
    m_layout.setRowHeight(pixels);
    relayout();
}

void TimelineView::relayout()
{
    m_layout.build(m_data ? &m_data->store() : nullptr, m_kernels != nullptr);
    const int viewport = height() - kRulerHeight;
    const int extra = m_layout.contentHeight() - viewport;
    m_scroll->setVisible(extra > 0);
    m_scroll->setRange(0, std::max(0, extra));
    m_scroll->setPageStep(std::max(1, viewport));
    m_scroll->setSingleStep(m_layout.rowHeight());
    update();
}

void TimelineView::resizeEvent(QResizeEvent*)
{
    const int w = m_scroll->sizeHint().width();
    m_scroll->setGeometry(width() - w, kRulerHeight, w, height() - kRulerHeight);
    relayout();
    showKernels();  // the same range over other widths may cross the kernels' threshold
}

void TimelineView::paintEvent(QPaintEvent*)
{
    QPainter painter(this);
    TimelineFrame frame;
    frame.widget = rect();
    frame.plot = plotArea();
    frame.scroll = m_scroll->value();
    frame.scale = m_zoom.scale(frame.plot.width());
    frame.layout = &m_layout;
    frame.data = m_data && !m_data->store().empty() ? &m_data->store() : nullptr;
    frame.overlay = m_overlay ? &m_overlay->store() : nullptr;
    frame.overlayOffset = m_overlayOffset;
    frame.kernels = m_kernels;
    frame.placeholder = m_data ? tr("No spans yet") : tr("No timeline");
    if (m_drag == Drag::Select)
        frame.selection = std::pair(std::min(m_pressPos.x(), m_selectX), std::max(m_pressPos.x(), m_selectX));
    frame.palette = palette();
    frame.font = font();
    for (const std::unique_ptr<TimelinePass>& pass : m_passes)
        pass->paint(painter, frame);
}

// -------------------------------------------------------------------------------------------------
// Hover

const TimelineLayout::Line* TimelineView::lineAt(int y) const
{
    return y < kRulerHeight ? nullptr : m_layout.lineAt(y - kRulerHeight + m_scroll->value());
}

std::optional<TimelineLayout::Hit> TimelineView::hitAt(QPoint pos) const
{
    const QRect plot = plotArea();
    if (!m_data || !plot.contains(pos))
        return std::nullopt;
    return m_layout.hitAt(pos.y() - plot.top() + m_scroll->value(), pos.x() - plot.left(), m_zoom.scale(plot.width()),
                          m_data->store(), m_overlay ? &m_overlay->store() : nullptr, m_overlayOffset);
}

QString TimelineView::formatTime(std::int64_t ns) const
{
    return QStringLiteral("%1 (%2 ns)").arg(formatDuration(ns - m_data->store().beginTime())).arg(ns);
}

QString TimelineView::toolTipTextAt(QPoint pos) const
{
    if (const TimelineLayout::Line* line = lineAt(pos.y()); line && line->kernels && pos.x() < kLabelWidth)
        return tr("Kernels are read and drawn at %1 per pixel or closer; now %2 per pixel.")
            .arg(formatDuration(std::llround(kKernelMaxNsPerPixel)),
                 formatDuration(std::llround(m_zoom.scale(plotArea().width()).nsPerPixel())));
    int rank = 0;
    if (const store::KernelRow* kernel = kernelAt(pos, &rank))
        return kernelToolTip(*kernel, rank);
    const auto hit = hitAt(pos);
    if (!hit)
        return {};
    const TimelineSpan s = hit->row->span(hit->index);
    const std::int64_t offset = hit->predicted ? m_overlayOffset : 0;
    const auto time = [&](std::int64_t t) { return formatTime(t + offset); };
    QStringList lines;
    if (hit->predicted)
        lines << tr("predicted by the planner");
    lines << QString::fromStdString(hit->row->info().label);
    lines << QStringLiteral("rank: %1").arg(hit->row->info().rank);
    lines << QStringLiteral("kind: %1").arg(QString::fromUtf8(wire::spanKindName(s.kind)));
    lines << QStringLiteral("step: %1").arg(s.step);
    lines << QStringLiteral("stage: %1").arg(s.stage);
    lines << QStringLiteral("chunk: %1").arg(s.chunk);
    lines << QStringLiteral("micro-batch: %1").arg(s.microbatch >= 0 ? QString::number(s.microbatch) : tr("none"));
    lines << QStringLiteral("begin: %1").arg(time(s.beginNs));
    lines << QStringLiteral("end: %1").arg(time(s.endNs));
    lines << QStringLiteral("duration: %1").arg(formatDuration(s.endNs - s.beginNs));
    lines << QStringLiteral("bytes: %1").arg(s.bytes);
    lines << QStringLiteral("peer: %1").arg(s.peer >= 0 ? QString::number(s.peer) : tr("none"));
    if (s.overlapped)
        lines << tr("half of an overlapped F&B pair (dualpipev)");
    return lines.join(QLatin1Char('\n'));
}

// The kernel drawn under `pos` (within kHoverTolerancePx), and its rank.
const store::KernelRow* TimelineView::kernelAt(QPoint pos, int* rank) const
{
    const QRect plot = plotArea();
    const TimelineLayout::Line* line = lineAt(pos.y());
    if (!m_kernels || !line || !line->kernels || !plot.contains(pos))
        return nullptr;
    const TimeScale scale = m_zoom.scale(plot.width());
    const KernelWindow* window = m_kernels->window();
    if (!window || !kernelsLegible(scale.t0, scale.t1, scale.pixels))
        return nullptr;
    *rank = m_data->store().row(std::size_t(line->row)).info().rank;
    const int y = pos.y() - plot.top() + m_scroll->value() - line->top;
    const int count = int(m_kernels->streams(*rank).size());
    for (const KernelLane& lane : window->lanes(*rank)) {
        const auto [top, bottom] =
            TimelineLayout::streamLane(line->height, m_kernels->laneOf(*rank, lane.stream), count);
        if (y >= top && y < bottom)
            return lane.near(scale.time(pos.x() - plot.left()),
                             std::llround(TimelineLayout::kHoverTolerancePx * scale.nsPerPixel()));
    }
    return nullptr;
}

QString TimelineView::kernelToolTip(const store::KernelRow& kernel, int rank) const
{
    QStringList lines;
    lines << QStringLiteral("kernel: %1").arg(m_kernels->name(kernel.nameId));
    lines << QStringLiteral("rank: %1").arg(rank);
    lines << QStringLiteral("class: %1").arg(QString::fromUtf8(store::deviceClassName(kernel.deviceClass)));
    lines << QStringLiteral("stream: %1").arg(kernel.stream);
    lines << QStringLiteral("device: %1").arg(kernel.device);
    lines << QStringLiteral("step: %1").arg(kernel.step >= 0 ? QString::number(kernel.step) : tr("none"));
    lines << QStringLiteral("begin: %1").arg(formatTime(kernel.beginNs));
    lines << QStringLiteral("end: %1").arg(formatTime(kernel.endNs));
    lines << QStringLiteral("duration: %1").arg(formatDuration(kernel.endNs - kernel.beginNs));
    return lines.join(QLatin1Char('\n'));
}

// -------------------------------------------------------------------------------------------------
// Input

bool TimelineView::event(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        const auto* help = static_cast<QHelpEvent*>(event);
        const QString text = toolTipTextAt(help->pos());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), text, this);
        return true;
    }
    if (event->type() == QEvent::NativeGesture) {
        const auto* gesture = static_cast<QNativeGestureEvent*>(event);
        if (gesture->gestureType() == Qt::ZoomNativeGesture) {
            zoomAround(1.0 / std::max(0.1, 1.0 + gesture->value()), gesture->position().x(),
                       TimelineZoom::Gesture::Wheel);
            return true;
        }
    }
    return QWidget::event(event);
}

void TimelineView::wheelEvent(QWheelEvent* event)
{
    const QPoint angle = event->angleDelta();
    if (event->modifiers() & (Qt::ShiftModifier | Qt::AltModifier)) {
        // Qt turns alt+wheel into a horizontal delta.
        const int delta = angle.y() != 0 ? angle.y() : angle.x();
        m_scroll->setValue(m_scroll->value() - delta * m_layout.rowHeight() / 40);
    } else if (angle.y() == 0 && angle.x() != 0) {  // a touchpad's sideways swipe pans
        const auto [t0, t1] = m_zoom.range();
        m_zoom.pan(std::llround(-angle.x() / 8.0 * double(t1 - t0) / plotArea().width()), TimelineZoom::Gesture::Wheel);
    } else if (angle.y() != 0) {
        zoomAround(std::pow(2.0, -angle.y() / 480.0), event->position().x(), TimelineZoom::Gesture::Wheel);
    }
    event->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* event)
{
    m_zoom.endGesture();
    if (event->button() == Qt::BackButton) {
        m_zoom.back();
        return;
    }
    if (event->button() == Qt::ForwardButton) {
        m_zoom.forward();
        return;
    }
    if (event->button() != Qt::LeftButton)
        return QWidget::mousePressEvent(event);
    const QPoint pos = event->position().toPoint();
    if (pos.x() < kLabelWidth) {
        if (const TimelineLayout::Line* line = lineAt(pos.y()); line && line->row < 0)
            setStageCollapsed(line->stage, !isStageCollapsed(line->stage));
        return;
    }
    m_pressPos = pos;
    m_pressRange = m_zoom.range();
    m_selectX = pos.x();
    m_drag = (event->modifiers() & Qt::ShiftModifier) ? Drag::Select : Drag::Pan;
    if (m_drag == Drag::Pan)
        setCursor(Qt::ClosedHandCursor);
}

void TimelineView::mouseMoveEvent(QMouseEvent* event)
{
    const QPoint pos = event->position().toPoint();
    if (m_drag == Drag::Pan) {
        const auto [t0, t1] = m_pressRange;
        const std::int64_t dt = std::llround(-(pos.x() - m_pressPos.x()) * double(t1 - t0) / plotArea().width());
        m_zoom.setRange(t0 + dt, t1 + dt, TimelineZoom::Gesture::Drag);
    } else if (m_drag == Drag::Select) {
        m_selectX = std::clamp(pos.x(), plotArea().left(), plotArea().right() + 1);
        update();
    } else {
        m_zoom.endGesture();  // wheel events after the pointer moved are a step of their own
    }
}

void TimelineView::mouseReleaseEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton || m_drag == Drag::None)
        return QWidget::mouseReleaseEvent(event);
    if (m_drag == Drag::Select && std::abs(m_selectX - m_pressPos.x()) >= 3) {
        const int x0 = std::min(m_selectX, m_pressPos.x()), x1 = std::max(m_selectX, m_pressPos.x());
        m_zoom.setRange(timeForX(x0), timeForX(x1));
    }
    m_zoom.endGesture();
    m_drag = Drag::None;
    unsetCursor();
    update();
}

void TimelineView::keyPressEvent(QKeyEvent* event)
{
    const QRect plot = plotArea();
    const double center = plot.left() + plot.width() / 2.0;
    const auto [t0, t1] = m_zoom.range();
    const std::int64_t step = (t1 - t0) / 10;
    const bool alt = event->modifiers() & Qt::AltModifier;
    switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal:
        zoomAt(0.8, center);
        break;
    case Qt::Key_Minus:
        zoomAt(1.25, center);
        break;
    case Qt::Key_Backspace:
        m_zoom.back();
        break;
    case Qt::Key_Left:
        if (alt)
            m_zoom.back();
        else
            m_zoom.pan(-step);
        break;
    case Qt::Key_Right:
        if (alt)
            m_zoom.forward();
        else
            m_zoom.pan(step);
        break;
    case Qt::Key_Up:
        m_scroll->setValue(m_scroll->value() - m_layout.rowHeight());
        break;
    case Qt::Key_Down:
        m_scroll->setValue(m_scroll->value() + m_layout.rowHeight());
        break;
    case Qt::Key_Home:
        fitAll();
        break;
    case Qt::Key_End:
        setFollowLive(true);
        break;
    default:
        return QWidget::keyPressEvent(event);
    }
    event->accept();
}

}  // namespace meshbench::app
