#include "timeline/timeline_view.h"

#include "plan/report.h"

#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QNativeGestureEvent>
#include <QPainter>
#include <QScrollBar>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

namespace meshbench::app {

namespace {

constexpr int kLabelWidth = 160;
constexpr int kRulerHeight = 22;
constexpr int kHeaderHeight = 18;
constexpr std::int64_t kMinRange = 16;                         // ns across the plot at most zoom
constexpr std::int64_t kMaxRange = std::int64_t(1) << 61;
constexpr std::size_t kDirectScanLimit = 64;                   // spans read for one column below level 0
constexpr double kHoverTolerancePx = 2.0;

bool thinKind(KindClass cls)
{
    return cls == KindClass::PointToPoint;
}

// Paints the spans of one row (or one stage's rows, summed) into its band of a frame image as wide as
// the plot: pixels are written directly (a frame touches each pixel a few times at most), and the
// view then copies the whole frame onto the widget in one drawImage (one blit rather than one per
// row: Qt hands large blits to its thread pool, whose wake-ups cost more than the copy).
// Texts are collected for the view to draw over the frame.
class RowPainter {
public:
    struct Label {
        QPointF pos;   // in frame coordinates
        const QStaticText* text;
        QColor pen;
    };

    RowPainter(QImage& frame, int columns, std::int64_t t0, std::int64_t t1, QColor base)
        : m_frame(frame), m_columns(columns), m_t0(t0), m_nsPerPx(double(t1 - t0) / std::max(1, columns)),
          m_base(base.rgb()), m_pixelShift(int(std::floor(std::log2(std::max(1.0, m_nsPerPx)))))
    {
        // Summary colours over the background, per class and busy level: opaque pixels to copy.
        for (int c = 0; c < kKindClasses; ++c)
            for (int level = 0; level <= kLevels; ++level)
                m_summaryColor[std::size_t(c)][std::size_t(level)] =
                    blend(TimelineView::classColor(KindClass(c)).rgb(), 95 + 160 * level / kLevels);
    }

    // Starts a band of `height` lines of background at line `origin` of the frame; the band's own
    // coordinates start at 0.
    void clear(int origin, int height)
    {
        m_origin = origin;
        m_height = height;
        m_pixels = reinterpret_cast<QRgb*>(m_frame.bits());   // detaches once, not per line
        m_stride = int(m_frame.bytesPerLine() / qsizetype(sizeof(QRgb)));
        for (int y = 0; y < height; ++y)
            std::fill_n(line(y), m_columns, m_base);
    }
    // Every label of the bands painted so far.
    const std::vector<Label>& labels() const { return m_labels; }

    // The spans of `row`, whose time t is drawn at t + offset, in band lines [top, top + height).
    // `numbers` gives the micro-batch texts (nullptr: no text, as in a band).
    template <typename Numbers>
    void paintRow(const TimelineRow& row, std::int64_t offset, int top, int height, const Numbers& numbers)
    {
        m_top = top;
        m_bottom = std::min(m_height, top + height);
        const std::int64_t rt0 = m_t0 - offset;   // the visible range in the row's own time
        if (summaryLevel(row) < 0) {
            walk(row, rt0, 0, m_columns, numbers);
            return;
        }
        // Columns whose buckets hold no span a pixel wide are painted from the buckets alone, without
        // reading a span (at this zoom the spans are millions, far out of cache); the others, in runs,
        // by walking their spans.
        for (int col = 0; col < m_columns;) {
            Summary s = columnSummary(row, 0, columnBegin(rt0, col), columnBegin(rt0, col + 1));
            if (double(s.busy.longest) < m_nsPerPx) {
                markColumn(col++, s);
                continue;
            }
            const int first = col;
            while (++col < m_columns) {
                s = columnSummary(row, 0, columnBegin(rt0, col), columnBegin(rt0, col + 1));
                if (double(s.busy.longest) < m_nsPerPx)
                    break;
            }
            walk(row, rt0, first, col, numbers);
        }
    }

    // One strip summing several rows: every column from the summaries (a collapsed stage).
    void paintSummary(const std::vector<const TimelineRow*>& rows, int top, int height)
    {
        m_top = top;
        m_bottom = std::min(m_height, top + height);
        for (int col = 0; col < m_columns; ++col) {
            const std::int64_t c0 = m_t0 + std::int64_t(std::floor(col * m_nsPerPx));
            const std::int64_t c1 = m_t0 + std::int64_t(std::floor((col + 1) * m_nsPerPx));
            Summary sum;
            for (const TimelineRow* row : rows) {
                const Summary one = columnSummary(*row, row->scanStart(c0), c0, c1);
                sum.busy += one.busy;
                sum.covered += one.covered;
            }
            markColumn(col, sum);
        }
    }

private:
    static constexpr int kLevels = 8;   // busy fraction in eighths
    struct Summary {
        BucketSummary busy;
        std::int64_t covered = 0;   // ns the summed buckets (or the column) span
    };

    std::int64_t columnBegin(std::int64_t rt0, int col) const { return rt0 + std::int64_t(std::floor(col * m_nsPerPx)); }

    // The spans in columns [first, last): blocks for spans a pixel wide or more, one mark per column
    // where they are narrower.
    template <typename Numbers>
    void walk(const TimelineRow& row, std::int64_t rt0, int first, int last, const Numbers& numbers)
    {
        const std::int64_t stop = columnBegin(rt0, last);
        int nextFree = first;   // columns before it have their mark
        std::size_t i = row.scanStart(columnBegin(rt0, first));
        const std::size_t n = row.size();
        while (i < n) {
            const std::int64_t b = row.begin(i);
            if (b >= stop)
                break;
            const std::int64_t e = row.end(i);
            const double xb = double(b - rt0) / m_nsPerPx;
            const double xe = double(e - rt0) / m_nsPerPx;
            if (xe <= nextFree) {   // ended before the first unmarked column
                ++i;
                continue;
            }
            if (xe - xb >= 1.0) {
                const int left = std::max(nextFree, int(std::lround(xb)));
                const int right = std::min(last, int(std::lround(xe)));
                if (right > left && kindClassOf(row.kind(i)))
                    paintBlock(row.kind(i), left, right, xe - xb, row.microbatch(i), numbers, row.chunk(i),
                               row.overlapped(i));
                nextFree = std::max(nextFree, right);
                ++i;
                continue;
            }
            // Narrower than a pixel: one mark for the column, from the summaries, then on to the
            // first span that begins after it (or the last one in it, when that one runs on).
            const int col = std::max(nextFree, int(std::floor(xb)));
            if (col >= last)
                break;
            const std::int64_t c0 = columnBegin(rt0, col), c1 = columnBegin(rt0, col + 1);
            std::optional<std::size_t> scanned;
            markColumn(col, columnSummary(row, i, c0, c1, &scanned));
            nextFree = col + 1;
            const std::size_t next = scanned ? *scanned : row.lowerBound(c1, i);
            i = (next > i + 1 && row.end(next - 1) > c1 + std::int64_t(m_nsPerPx)) ? next - 1 : std::max(next, i + 1);
        }
    }

    int summaryLevel(const TimelineRow& row) const { return std::min(row.levels() - 1, m_pixelShift - row.baseShift()); }

    QRgb blend(QRgb color, int alpha) const
    {
        const auto mix = [&](int c, int b) { return (c * alpha + b * (255 - alpha)) / 255; };
        return qRgb(mix(qRed(color), qRed(m_base)), mix(qGreen(color), qGreen(m_base)), mix(qBlue(color), qBlue(m_base)));
    }

    // Busy time per class in [c0, c1): from the coarsest buckets no wider than a pixel, or, below
    // the finest level, from the few spans themselves (starting at index `from`).
    // `next`, when given and the spans were read, receives the index of the first span at or after c1.
    Summary columnSummary(const TimelineRow& row, std::size_t from, std::int64_t c0, std::int64_t c1,
                          std::optional<std::size_t>* next = nullptr) const
    {
        Summary s;
        if (row.levels() == 0)
            return s;
        if (const int level = summaryLevel(row); level >= 0) {
            s.busy = row.summary(level, c0, c1, &s.covered);
            return s;
        }
        s.covered = c1 - c0;
        std::size_t i = from;
        for (; i < row.size() && row.begin(i) < c1 && i - from < kDirectScanLimit; ++i) {
            const auto cls = kindClassOf(row.kind(i));
            const std::int64_t overlap = std::min(row.end(i), c1) - std::max(row.begin(i), c0);
            if (cls && overlap > 0) {
                s.busy.busy[std::size_t(*cls)] += overlap;
                s.busy.longest = std::max(s.busy.longest, row.end(i) - row.begin(i));
            }
        }
        if (next && (i == row.size() || row.begin(i) >= c1))
            *next = i;
        return s;
    }

    void markColumn(int col, const Summary& s)
    {
        const auto cls = s.busy.dominant();
        if (!cls || s.covered <= 0)
            return;
        const double fraction = std::min(1.0, double(s.busy.total()) / double(s.covered));
        const auto [y0, y1] = verticalExtent(*cls);
        fill(col, col + 1, y0, y1, m_summaryColor[std::size_t(*cls)][std::size_t(std::lround(fraction * kLevels))]);
    }

    void fill(int x0, int x1, int y0, int y1, QRgb color)
    {
        x0 = std::max(x0, 0);
        x1 = std::min(x1, m_columns);
        for (int y = std::max(y0, 0); y < y1 && x1 > x0; ++y)
            std::fill(line(y) + x0, line(y) + x1, color);
    }

    std::pair<int, int> verticalExtent(KindClass cls) const
    {
        const int height = m_bottom - m_top;
        if (thinKind(cls) && height >= 6)
            return {m_top + height / 3, m_bottom - height / 3};
        return {m_top, m_bottom};
    }

    template <typename Numbers>
    void paintBlock(wire::SpanKind kind, int left, int right, double width, std::int32_t microbatch, const Numbers& numbers,
                    int chunk, bool overlapped)
    {
        const KindClass cls = *kindClassOf(kind);
        const QColor color = TimelineView::chunkColor(kind, chunk);
        const auto [y0, y1] = verticalExtent(cls);
        if (cls == KindClass::DataParallelReduce) {
            const TimelineView::Hatch hatch = TimelineView::hatchOf(color);
            for (int y = std::max(y0, 0); y < y1; ++y)
                for (int x = std::max(left, 0); x < std::min(right, m_columns); ++x)
                    line(y)[x] = hatch.at(x, y);
        } else {
            fill(left, right, y0, y1, color.rgb());
        }
        if (width >= 4)   // a darker left edge tells neighbouring blocks of one kind apart
            fill(left, left + 1, y0, y1, color.darker(150).rgb());
        if (overlapped) {
            // An F&B pair shares one border (DualPipe's figure): the F opens it, the W closes it.
            const QRgb border = TimelineView::pairBorderColor().rgb();
            fill(left, right, y0, y0 + 1, border);
            fill(left, right, y1 - 1, y1, border);
            if (kind == wire::SpanKind::Forward)
                fill(left, left + 1, y0, y1, border);
            if (kind == wire::SpanKind::WeightGrad)
                fill(right - 1, right, y0, y1, border);
        }
        if constexpr (!std::is_same_v<Numbers, std::nullptr_t>) {
            if (microbatch < 0 || cls == KindClass::PointToPoint)
                return;
            const QStaticText* text = numbers(microbatch);
            if (!text)
                return;
            const QSizeF size = text->size();
            const int visibleLeft = std::max(left, 0), visibleRight = std::min(right, m_columns);
            if (size.width() + 4 <= visibleRight - visibleLeft && size.height() <= y1 - y0 + 2)
                m_labels.push_back({QPointF((visibleLeft + visibleRight - size.width()) / 2, m_origin + y0 + (y1 - y0 - size.height()) / 2),
                                    text, qGray(color.rgb()) > 140 ? Qt::black : Qt::white});
        }
    }

    QRgb* line(int y) const { return m_pixels + std::ptrdiff_t(m_origin + y) * m_stride; }

    QImage& m_frame;
    QRgb* m_pixels = nullptr;
    int m_stride = 0;
    int m_columns;
    std::int64_t m_t0;
    double m_nsPerPx;
    QRgb m_base;
    int m_pixelShift;   // log2 of the ns a pixel spans, rounded down: picks the summary level
    int m_origin = 0;   // the band's first line in the frame
    int m_height = 0;
    int m_top = 0;
    int m_bottom = 0;
    std::array<std::array<QRgb, kLevels + 1>, kKindClasses> m_summaryColor{};
    std::vector<Label> m_labels;
};

}  // namespace

// -------------------------------------------------------------------------------------------------

TimelineView::TimelineView(QWidget* parent) : QWidget(parent), m_scroll(new QScrollBar(Qt::Vertical, this))
{
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setMinimumSize(kLabelWidth + 120, kRulerHeight + 60);
    m_scroll->hide();
    connect(m_scroll, &QScrollBar::valueChanged, this, qOverload<>(&QWidget::update));
}

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

QRect TimelineView::rowRect(int row) const
{
    const auto it = std::find_if(m_lines.begin(), m_lines.end(), [row](const Line& line) { return line.row == row; });
    if (row < 0 || it == m_lines.end())
        return {};
    const QRect plot = plotArea();
    return QRect(plot.left(), kRulerHeight + it->top - m_scroll->value(), plot.width(), it->height);
}

double TimelineView::xForTime(std::int64_t ns) const
{
    const QRect plot = plotArea();
    return plot.left() + double(ns - m_t0) * plot.width() / double(m_t1 - m_t0);
}

std::int64_t TimelineView::timeForX(double x) const
{
    const QRect plot = plotArea();
    const double offset = (x - plot.left()) * double(m_t1 - m_t0) / plot.width();
    return m_t0 + std::llround(std::clamp(offset, -double(kMaxRange), double(kMaxRange)));
}

void TimelineView::applyRange(std::int64_t t0, std::int64_t t1)
{
    if (t1 - t0 < kMinRange) {
        const std::int64_t mid = t0 + (t1 - t0) / 2;
        t0 = mid - kMinRange / 2;
        t1 = t0 + kMinRange;
    }
    if (t1 - t0 > kMaxRange)
        t1 = t0 + kMaxRange;
    if (t0 == m_t0 && t1 == m_t1)
        return;
    m_t0 = t0;
    m_t1 = t1;
    update();
    emit visibleRangeChanged(m_t0, m_t1);
}

void TimelineView::userRange(std::int64_t t0, std::int64_t t1)
{
    m_userRange = true;
    setFollowLive(false);
    applyRange(t0, t1);
}

void TimelineView::setVisibleRange(std::int64_t t0, std::int64_t t1)
{
    userRange(t0, t1);
}

void TimelineView::fitAllInternal()
{
    if (m_data && !m_data->store().empty())
        applyRange(m_data->store().beginTime(), m_data->store().endTime());
}

void TimelineView::fitAll()
{
    setFollowLive(false);
    m_userRange = false;
    fitAllInternal();
}

void TimelineView::zoomAt(double factor, double x)
{
    const QRect plot = plotArea();
    const double fraction = std::clamp((x - plot.left()) / plot.width(), 0.0, 1.0);
    const std::int64_t anchor = timeForX(x);
    const double width = std::clamp(double(m_t1 - m_t0) * factor, double(kMinRange), double(kMaxRange));
    const std::int64_t t0 = anchor - std::llround(fraction * width);
    userRange(t0, t0 + std::llround(width));
}

void TimelineView::setFollowLive(bool on)
{
    if (m_followLive == on)
        return;
    m_followLive = on;
    if (on)
        onDataChanged();
    emit followLiveChanged(on);
}

void TimelineView::setLiveWindow(std::int64_t ns)
{
    m_liveWindow = std::max<std::int64_t>(ns, 0);
    if (m_followLive)
        onDataChanged();
}

void TimelineView::onDataChanged()
{
    relayout();
    if (!m_data || m_data->store().empty())
        return;
    if (m_followLive) {
        const TimelineStore& store = m_data->store();
        // A width the user chose is kept; otherwise the live window, or everything so far.
        const std::int64_t width = m_userRange ? m_t1 - m_t0 : m_liveWindow > 0 ? m_liveWindow : store.endTime() - store.beginTime();
        applyRange(store.endTime() - width, store.endTime());
    } else if (!m_userRange) {
        fitAllInternal();
    }
}

void TimelineView::onDataReset()
{
    m_userRange = false;
    relayout();
    fitAllInternal();
    update();
}

void TimelineView::setStageCollapsed(int stage, bool collapsed)
{
    const auto it = std::find(m_collapsed.begin(), m_collapsed.end(), stage);
    if (collapsed && it == m_collapsed.end())
        m_collapsed.push_back(stage);
    else if (!collapsed && it != m_collapsed.end())
        m_collapsed.erase(it);
    relayout();
}

bool TimelineView::isStageCollapsed(int stage) const
{
    return std::find(m_collapsed.begin(), m_collapsed.end(), stage) != m_collapsed.end();
}

void TimelineView::setRowHeight(int pixels)
{
    m_rowHeight = std::clamp(pixels, 4, 200);
    relayout();
}

int TimelineView::overlayBandHeight() const
{
    return m_overlay && !m_overlay->store().empty() ? std::max(2, m_rowHeight / 4) : 0;
}

void TimelineView::relayout()
{
    m_lines.clear();
    int y = 0;
    if (m_data) {
        const TimelineStore& store = m_data->store();
        for (std::size_t r = 0; r < store.rowCount();) {
            Line header;
            header.stage = store.row(r).info().stage;
            header.firstRow = int(r);
            while (r < store.rowCount() && store.row(r).info().stage == header.stage)
                ++r;
            header.rowCount = int(r) - header.firstRow;
            header.top = y;
            header.height = kHeaderHeight;
            y += header.height;
            m_lines.push_back(header);
            if (isStageCollapsed(header.stage))
                continue;
            for (int k = header.firstRow; k < int(r); ++k) {
                Line line;
                line.stage = header.stage;
                line.row = k;
                line.top = y;
                line.height = m_rowHeight;
                y += line.height;
                m_lines.push_back(line);
            }
        }
    }
    m_contentHeight = y;
    const int viewport = height() - kRulerHeight;
    const int extra = m_contentHeight - viewport;
    m_scroll->setVisible(extra > 0);
    m_scroll->setRange(0, std::max(0, extra));
    m_scroll->setPageStep(std::max(1, viewport));
    m_scroll->setSingleStep(m_rowHeight);
    update();
}

void TimelineView::resizeEvent(QResizeEvent*)
{
    const int w = m_scroll->sizeHint().width();
    m_scroll->setGeometry(width() - w, kRulerHeight, w, height() - kRulerHeight);
    relayout();
}

const TimelineView::Line* TimelineView::lineAt(int y) const
{
    const int content = y - kRulerHeight + m_scroll->value();
    if (y < kRulerHeight)
        return nullptr;
    const auto it = std::upper_bound(m_lines.begin(), m_lines.end(), content,
                                     [](int v, const Line& line) { return v < line.top; });
    if (it == m_lines.begin())
        return nullptr;
    const Line& line = *(it - 1);
    return content < line.top + line.height ? &line : nullptr;
}

const TimelineRow* TimelineView::overlayRowFor(const TimelineRow& row) const
{
    if (!m_overlay)
        return nullptr;
    const TimelineStore& overlay = m_overlay->store();
    const int byRank = overlay.rowOfRank(row.info().rank);
    if (byRank >= 0 && overlay.row(std::size_t(byRank)).info().stage == row.info().stage)
        return &overlay.row(std::size_t(byRank));
    for (std::size_t r = 0; r < overlay.rowCount(); ++r)
        if (overlay.row(r).info().stage == row.info().stage)
            return &overlay.row(r);
    return nullptr;
}

const QStaticText* TimelineView::numberText(int number) const
{
    constexpr int kCached = 1024;
    if (number < 0 || number >= kCached)
        return nullptr;
    if (m_numbers.empty()) {
        m_numbers.resize(kCached);
        for (int k = 0; k < kCached; ++k) {
            m_numbers[std::size_t(k)].setText(QString::number(k));
            m_numbers[std::size_t(k)].prepare(QTransform(), font());
        }
    }
    return &m_numbers[std::size_t(number)];
}

void TimelineView::paintEvent(QPaintEvent*)
{
    QPainter painter(this);
    const QRect plot = plotArea();
    // The row strips cover their part of the plot with their own background: fill only the rest.
    painter.fillRect(QRect(0, 0, width(), plot.top()), palette().window());
    painter.fillRect(QRect(0, plot.top(), plot.left(), plot.height()), palette().window());
    const int contentBottom = plot.top() + m_contentHeight - m_scroll->value();
    painter.fillRect(QRect(plot.left(), contentBottom, plot.width(), plot.bottom() + 1 - contentBottom), palette().base());

    if (!m_data || m_data->store().empty()) {
        painter.fillRect(plot, palette().base());
        painter.setPen(palette().color(QPalette::PlaceholderText));
        painter.drawText(plot, Qt::AlignCenter, m_data ? tr("No spans yet") : tr("No timeline"));
        return;
    }
    const TimelineStore& store = m_data->store();
    const int band = overlayBandHeight();
    const int scroll = m_scroll->value();
    painter.save();
    painter.setClipRect(plot);
    // The frame holds the visible lines, from the top of the first (partly scrolled off) one.
    int first = 0;
    while (first < int(m_lines.size()) && kRulerHeight + m_lines[std::size_t(first)].top - scroll + m_lines[std::size_t(first)].height <= plot.top())
        ++first;
    const int frameTop = first < int(m_lines.size()) ? kRulerHeight + m_lines[std::size_t(first)].top - scroll : plot.top();
    int tallest = 1;
    for (const Line& line : m_lines)
        tallest = std::max(tallest, line.height);
    const QSize frameSize(plot.width(), plot.bottom() + 1 - frameTop + tallest);
    if (m_frame.width() != frameSize.width() || m_frame.height() < frameSize.height())
        m_frame = QImage(frameSize, QImage::Format_RGB32);
    RowPainter rows(m_frame, plot.width(), m_t0, m_t1, palette().color(QPalette::Base));
    RowPainter headers(m_frame, plot.width(), m_t0, m_t1, palette().color(QPalette::AlternateBase));
    const auto numbers = [this](int number) { return numberText(number); };
    int frameBottom = 0;
    for (std::size_t i = std::size_t(first); i < m_lines.size(); ++i) {
        const Line& line = m_lines[i];
        const int origin = kRulerHeight + line.top - scroll - frameTop;
        if (frameTop + origin > plot.bottom())
            break;
        frameBottom = origin + line.height;
        if (line.row < 0) {
            headers.clear(origin, line.height);
            if (isStageCollapsed(line.stage)) {
                std::vector<const TimelineRow*> group;
                for (int r = line.firstRow; r < line.firstRow + line.rowCount; ++r)
                    group.push_back(&store.row(std::size_t(r)));
                headers.paintSummary(group, 2, line.height - 4);
            }
            continue;
        }
        const TimelineRow& row = store.row(std::size_t(line.row));
        rows.clear(origin, line.height);
        if (band > 0)
            if (const TimelineRow* predicted = overlayRowFor(row))
                rows.paintRow(*predicted, m_overlayOffset, 1, band, nullptr);
        const int spanTop = 1 + (band > 0 ? band + 1 : 0);
        rows.paintRow(row, 0, spanTop, line.height - 1 - spanTop, numbers);
    }
    painter.drawImage(QPoint(plot.left(), frameTop), m_frame, QRect(0, 0, plot.width(), frameBottom));
    for (const RowPainter::Label& label : rows.labels()) {
        painter.setPen(label.pen);
        painter.drawStaticText(QPointF(plot.left(), frameTop) + label.pos, *label.text);
    }
    if (m_drag == Drag::Select) {
        const int x0 = std::min(m_pressPos.x(), m_selectX), x1 = std::max(m_pressPos.x(), m_selectX);
        QColor shade = palette().color(QPalette::Highlight);
        shade.setAlpha(60);
        painter.fillRect(QRect(x0, plot.top(), x1 - x0, plot.height()), shade);
    }
    painter.restore();
    paintRuler(painter, plot);   // after the rows: its grid lines lie over them
    paintLabels(painter, plot);
}

void TimelineView::paintRuler(QPainter& painter, const QRect& plot) const
{
    const double nsPerPx = double(m_t1 - m_t0) / plot.width();
    const std::int64_t step = niceTickStep(nsPerPx, 90);
    const std::int64_t origin = m_data->store().beginTime();
    // First tick: the first multiple of step (counted from the data's begin) at or after t0.
    const std::int64_t rel0 = m_t0 - origin;
    std::int64_t tick = (rel0 >= 0 ? (rel0 + step - 1) / step : rel0 / step) * step;
    QColor grid = palette().color(QPalette::Text);
    grid.setAlpha(28);
    painter.setPen(palette().color(QPalette::WindowText));
    for (; origin + tick <= m_t1; tick += step) {
        const int x = int(std::lround(xForTime(origin + tick)));
        painter.fillRect(QRect(x, kRulerHeight - 6, 1, 6), palette().color(QPalette::WindowText));
        painter.fillRect(QRect(x, plot.top(), 1, plot.height()), grid);
        painter.drawText(QRect(x + 3, 0, 200, kRulerHeight - 4), Qt::AlignLeft | Qt::AlignVCenter, formatTick(tick, step));
    }
}

void TimelineView::paintLabels(QPainter& painter, const QRect& plot) const
{
    const int scroll = m_scroll->value();
    const TimelineStore& store = m_data->store();
    painter.setClipRect(QRect(0, kRulerHeight, kLabelWidth, plot.height()));
    for (const Line& line : m_lines) {
        const int top = kRulerHeight + line.top - scroll;
        if (top + line.height <= kRulerHeight)
            continue;
        if (top >= height())
            break;
        const QRect box(6, top, kLabelWidth - 10, line.height);
        QString text;
        if (line.row < 0) {
            painter.fillRect(QRect(0, top, kLabelWidth, line.height), palette().button());
            painter.setPen(palette().color(QPalette::ButtonText));
            text = QStringLiteral("%1 stage %2 \u00b7 %3 %4")
                       .arg(isStageCollapsed(line.stage) ? QStringLiteral("\u25b8") : QStringLiteral("\u25be"))
                       .arg(line.stage)
                       .arg(line.rowCount)
                       .arg(line.rowCount == 1 ? tr("row") : tr("rows"));
        } else {
            painter.setPen(palette().color(QPalette::WindowText));
            text = QString::fromStdString(store.row(std::size_t(line.row)).info().label);
        }
        painter.drawText(box, Qt::AlignLeft | Qt::AlignVCenter,
                         painter.fontMetrics().elidedText(text, Qt::ElideRight, box.width()));
    }
    painter.setClipping(false);
}

std::int64_t TimelineView::niceTickStep(double nsPerPixel, double minPixels)
{
    const double raw = std::max(1.0, nsPerPixel * minPixels);
    double decade = std::pow(10.0, std::floor(std::log10(raw)));
    for (;;) {
        for (const double m : {1.0, 2.0, 5.0})
            if (m * decade >= raw * (1 - 1e-12))
                return std::int64_t(std::llround(m * decade));
        decade *= 10;
    }
}

QString TimelineView::formatTick(std::int64_t ns, std::int64_t step)
{
    // The largest unit with at most one decimal at this step: 1.5 ms, 250 ns, 1230 us.
    const plan::TimeUnit unit = plan::timeUnitFor(10.0 * double(std::llabs(step)) * 1e-9);
    const double unitNs = unit.seconds * 1e9;
    const int decimals = std::max(0, int(std::ceil(std::log10(unitNs / double(step)) - 1e-9)));
    return QStringLiteral("%1 %2").arg(double(ns) / unitNs, 0, 'f', decimals).arg(QLatin1String(unit.name));
}

QString TimelineView::formatDuration(std::int64_t ns)
{
    const plan::TimeUnit unit = plan::timeUnitFor(double(ns) * 1e-9);
    if (unit.seconds < 1e-6)
        return QStringLiteral("%1 ns").arg(ns);
    // Full precision, trailing zeros dropped: 1.5 ms, 1.234567 ms.
    QString number = QString::number(double(ns) / (unit.seconds * 1e9), 'f', 6);
    while (number.endsWith(QLatin1Char('0')))
        number.chop(1);
    if (number.endsWith(QLatin1Char('.')))
        number.chop(1);
    return number + QLatin1Char(' ') + QLatin1String(unit.name);
}

QColor TimelineView::kindColor(wire::SpanKind kind)
{
    switch (kind) {
    case wire::SpanKind::Forward: return QColor(0x4E, 0x79, 0xA7);
    case wire::SpanKind::Backward: return QColor(0x59, 0xA1, 0x4F);
    case wire::SpanKind::WeightGrad: return QColor(0xB0, 0x7A, 0xA1);
    case wire::SpanKind::SendActivation:
    case wire::SpanKind::RecvActivation: return QColor(0xF2, 0x8E, 0x2B);
    case wire::SpanKind::SendGradient:
    case wire::SpanKind::RecvGradient: return QColor(0xED, 0xC9, 0x48);
    case wire::SpanKind::Optimizer: return QColor(0xE1, 0x57, 0x59);
    case wire::SpanKind::DataParallelReduce: return QColor(0x76, 0xB7, 0xB2);
    case wire::SpanKind::Idle: break;
    }
    return QColor(0xBA, 0xB0, 0xAC);
}

QColor TimelineView::chunkColor(wire::SpanKind kind, int chunk)
{
    // Later model chunks (interleaved, the V schedules) in lighter shades of the kind's colour, as
    // the zero-bubble paper's figures tell a V's two chunks apart.
    const QColor color = kindColor(kind);
    return chunk > 0 ? color.lighter(100 + 35 * std::min(chunk, 3)) : color;
}

QColor TimelineView::pairBorderColor() { return QColor(0x1F, 0x1F, 0x1F); }

QColor TimelineView::classColor(KindClass cls)
{
    switch (cls) {
    case KindClass::Forward: return kindColor(wire::SpanKind::Forward);
    case KindClass::Backward: return kindColor(wire::SpanKind::Backward);
    case KindClass::WeightGrad: return kindColor(wire::SpanKind::WeightGrad);
    case KindClass::PointToPoint: return kindColor(wire::SpanKind::SendActivation);
    case KindClass::DataParallelReduce: return kindColor(wire::SpanKind::DataParallelReduce);
    case KindClass::Optimizer: return kindColor(wire::SpanKind::Optimizer);
    }
    return kindColor(wire::SpanKind::Idle);
}

// -------------------------------------------------------------------------------------------------
// Hover

std::optional<TimelineView::Hit> TimelineView::hitAt(QPoint pos) const
{
    const Line* line = lineAt(pos.y());
    if (!m_data || !line || line->row < 0 || !plotArea().contains(pos))
        return std::nullopt;
    const TimelineRow& measured = m_data->store().row(std::size_t(line->row));
    const int band = overlayBandHeight();
    const int top = kRulerHeight + line->top - m_scroll->value();
    Hit hit;
    hit.predicted = band > 0 && pos.y() <= top + band;
    hit.row = hit.predicted ? overlayRowFor(measured) : &measured;
    if (!hit.row)
        return std::nullopt;
    const std::int64_t offset = hit.predicted ? m_overlayOffset : 0;
    const std::int64_t t = timeForX(pos.x()) - offset;
    const std::int64_t tolerance = std::llround(kHoverTolerancePx * double(m_t1 - m_t0) / plotArea().width());
    // The span containing t, else the nearest within the tolerance; a bounded look around t.
    std::optional<std::size_t> best;
    std::int64_t bestDistance = tolerance + 1;
    const std::size_t stop = hit.row->lowerBound(t + tolerance + 1);
    std::size_t i = std::max(hit.row->scanStart(t - tolerance), stop > 256 ? stop - 256 : 0);
    for (; i < stop; ++i) {
        const std::int64_t b = hit.row->begin(i), e = hit.row->end(i);
        const std::int64_t distance = t < b ? b - t : t >= e ? t - e : 0;
        // Inside two spans: the later (shorter, usually) one wins; idle only if nothing else is there.
        const bool idle = hit.row->kind(i) == wire::SpanKind::Idle;
        if (distance < bestDistance || (distance == bestDistance && distance == 0 && !idle)) {
            best = i;
            bestDistance = distance;
        }
    }
    if (!best)
        return std::nullopt;
    hit.index = *best;
    return hit;
}

QString TimelineView::toolTipTextAt(QPoint pos) const
{
    const auto hit = hitAt(pos);
    if (!hit)
        return {};
    const TimelineSpan s = hit->row->span(hit->index);
    const std::int64_t offset = hit->predicted ? m_overlayOffset : 0;
    const std::int64_t origin = m_data->store().beginTime();
    const auto time = [&](std::int64_t t) {
        return QStringLiteral("%1 (%2 ns)").arg(formatDuration(t + offset - origin)).arg(t + offset);
    };
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
            zoomAt(1.0 / std::max(0.1, 1.0 + gesture->value()), gesture->position().x());
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
        m_scroll->setValue(m_scroll->value() - delta * m_rowHeight / 40);
    } else if (angle.y() == 0 && angle.x() != 0) {   // a touchpad's sideways swipe pans
        const QRect plot = plotArea();
        const std::int64_t dt = std::llround(-angle.x() / 8.0 * double(m_t1 - m_t0) / plot.width());
        userRange(m_t0 + dt, m_t1 + dt);
    } else if (angle.y() != 0) {
        zoomAt(std::pow(2.0, -angle.y() / 480.0), event->position().x());
    }
    event->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton)
        return QWidget::mousePressEvent(event);
    const QPoint pos = event->position().toPoint();
    if (pos.x() < kLabelWidth) {
        if (const Line* line = lineAt(pos.y()); line && line->row < 0)
            setStageCollapsed(line->stage, !isStageCollapsed(line->stage));
        return;
    }
    m_pressPos = pos;
    m_pressRange = {m_t0, m_t1};
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
        userRange(t0 + dt, t1 + dt);
    } else if (m_drag == Drag::Select) {
        m_selectX = std::clamp(pos.x(), plotArea().left(), plotArea().right() + 1);
        update();
    }
}

void TimelineView::mouseReleaseEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton || m_drag == Drag::None)
        return QWidget::mouseReleaseEvent(event);
    if (m_drag == Drag::Select && std::abs(m_selectX - m_pressPos.x()) >= 3) {
        const int x0 = std::min(m_selectX, m_pressPos.x()), x1 = std::max(m_selectX, m_pressPos.x());
        userRange(timeForX(x0), timeForX(x1));
    }
    m_drag = Drag::None;
    unsetCursor();
    update();
}

void TimelineView::keyPressEvent(QKeyEvent* event)
{
    const QRect plot = plotArea();
    const double center = plot.left() + plot.width() / 2.0;
    const std::int64_t step = (m_t1 - m_t0) / 10;
    switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal: zoomAt(0.8, center); break;
    case Qt::Key_Minus: zoomAt(1.25, center); break;
    case Qt::Key_Left: userRange(m_t0 - step, m_t1 - step); break;
    case Qt::Key_Right: userRange(m_t0 + step, m_t1 + step); break;
    case Qt::Key_Up: m_scroll->setValue(m_scroll->value() - m_rowHeight); break;
    case Qt::Key_Down: m_scroll->setValue(m_scroll->value() + m_rowHeight); break;
    case Qt::Key_Home: fitAll(); break;
    case Qt::Key_End: setFollowLive(true); break;
    default: return QWidget::keyPressEvent(event);
    }
    event->accept();
}

}  // namespace meshbench::app
