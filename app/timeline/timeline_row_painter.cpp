#include "timeline/timeline_row_painter.h"

#include "timeline/timeline_style.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace meshbench::app {

namespace {

constexpr std::size_t kDirectScanLimit = 64;  // spans read for one column below level 0

bool thinKind(KindClass cls) { return cls == KindClass::PointToPoint; }

}  // namespace

TimelineRowPainter::TimelineRowPainter(QImage& frame, int columns, std::int64_t t0, std::int64_t t1, QColor base)
    : m_frame(frame), m_columns(columns), m_t0(t0), m_nsPerPx(double(t1 - t0) / std::max(1, columns)),
      m_base(base.rgb()), m_pixelShift(int(std::floor(std::log2(std::max(1.0, m_nsPerPx)))))
{
    // Summary colours over the background, per class and busy level: opaque pixels to copy.
    for (int c = 0; c < kKindClasses; ++c)
        for (int level = 0; level <= kLevels; ++level)
            m_summaryColor[std::size_t(c)][std::size_t(level)] =
                busyColor(TimelineStyle::classColor(KindClass(c)), double(level) / kLevels);
}

void TimelineRowPainter::clear(int origin, int height)
{
    m_origin = origin;
    m_height = height;
    m_pixels = reinterpret_cast<QRgb*>(m_frame.bits());  // detaches once, not per line
    m_stride = int(m_frame.bytesPerLine() / qsizetype(sizeof(QRgb)));
    for (int y = 0; y < height; ++y)
        std::fill_n(line(y), m_columns, m_base);
}

void TimelineRowPainter::paintRow(const TimelineRow& row, std::int64_t offset, int top, int height,
                                  const std::vector<QStaticText>* numbers)
{
    m_top = top;
    m_bottom = std::min(m_height, top + height);
    const std::int64_t rt0 = m_t0 - offset;  // the visible range in the row's own time
    if (summaryLevel(row) < 0) {
        walk(row, rt0, 0, m_columns, numbers);
        return;
    }
    // Columns whose buckets hold no span a pixel wide are painted from the buckets alone, without
    // reading a span (at this zoom the spans are millions, far out of cache); the others, in runs, by
    // walking their spans.
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

void TimelineRowPainter::paintSummary(const std::vector<const TimelineRow*>& rows, int top, int height)
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

void TimelineRowPainter::paintKernels(const KernelLane& lane, int top, int height)
{
    m_top = top;
    m_bottom = std::min(m_height, top + height);
    const std::vector<store::KernelRow>& kernels = lane.kernels;
    const std::int64_t stop = columnBegin(m_t0, m_columns);
    int nextFree = 0;  // columns before it have their mark
    std::size_t i = lane.scanStart(m_t0);
    while (i < kernels.size() && kernels[i].beginNs < stop) {
        const store::KernelRow& k = kernels[i];
        const double xb = double(k.beginNs - m_t0) / m_nsPerPx;
        const double xe = double(k.endNs - m_t0) / m_nsPerPx;
        if (xe <= nextFree) {
            ++i;
            continue;
        }
        if (xe - xb >= 1.0) {
            const int left = std::max(nextFree, int(std::lround(xb)));
            const int right = std::min(m_columns, int(std::lround(xe)));
            if (right > left && k.deviceClass != store::DeviceClass::Idle) {
                const QColor color = TimelineStyle::deviceClassColor(k.deviceClass);
                fill(left, right, m_top, m_bottom, color.rgb());
                if (xe - xb >= 4)  // a darker left edge tells back-to-back kernels of one class apart
                    fill(left, left + 1, m_top, m_bottom, color.darker(150).rgb());
            }
            nextFree = std::max(nextFree, right);
            ++i;
            continue;
        }
        // Narrower than a pixel: one mark for the column, the class busiest in it, then on to the first
        // kernel that begins after it (or the last one in it, when that one runs on).
        const int col = std::max(nextFree, int(std::floor(xb)));
        if (col >= m_columns)
            break;
        const std::int64_t c0 = columnBegin(m_t0, col), c1 = columnBegin(m_t0, col + 1);
        std::array<std::int64_t, store::kDeviceClasses> busy{};
        std::size_t next = i;
        for (; next < kernels.size() && kernels[next].beginNs < c1; ++next) {
            const std::int64_t overlap = std::min(kernels[next].endNs, c1) - std::max(kernels[next].beginNs, c0);
            if (overlap > 0 && kernels[next].deviceClass != store::DeviceClass::Idle)
                busy[std::size_t(kernels[next].deviceClass)] += overlap;
        }
        const auto busiest = std::max_element(busy.begin(), busy.end());
        if (*busiest > 0) {
            const std::int64_t total = std::accumulate(busy.begin(), busy.end(), std::int64_t(0));
            const QColor color = TimelineStyle::deviceClassColor(store::DeviceClass(busiest - busy.begin()));
            fill(col, col + 1, m_top, m_bottom, busyColor(color, std::min(1.0, double(total) / double(c1 - c0))));
        }
        nextFree = col + 1;
        i = kernels[next - 1].endNs > c1 ? next - 1 : next;
    }
}

std::int64_t TimelineRowPainter::columnBegin(std::int64_t rt0, int col) const
{
    return rt0 + std::int64_t(std::floor(col * m_nsPerPx));
}

// The spans in columns [first, last): blocks for spans a pixel wide or more, one mark per column where
// they are narrower.
void TimelineRowPainter::walk(const TimelineRow& row, std::int64_t rt0, int first, int last,
                              const std::vector<QStaticText>* numbers)
{
    const std::int64_t stop = columnBegin(rt0, last);
    int nextFree = first;  // columns before it have their mark
    std::size_t i = row.scanStart(columnBegin(rt0, first));
    const std::size_t n = row.size();
    while (i < n) {
        const std::int64_t b = row.begin(i);
        if (b >= stop)
            break;
        const std::int64_t e = row.end(i);
        const double xb = double(b - rt0) / m_nsPerPx;
        const double xe = double(e - rt0) / m_nsPerPx;
        if (xe <= nextFree) {  // ended before the first unmarked column
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
        // Narrower than a pixel: one mark for the column, from the summaries, then on to the first
        // span that begins after it (or the last one in it, when that one runs on).
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

int TimelineRowPainter::summaryLevel(const TimelineRow& row) const
{
    return std::min(row.levels() - 1, m_pixelShift - row.baseShift());
}

QRgb TimelineRowPainter::blend(QRgb color, int alpha) const
{
    const auto mix = [&](int c, int b) { return (c * alpha + b * (255 - alpha)) / 255; };
    return qRgb(mix(qRed(color), qRed(m_base)), mix(qGreen(color), qGreen(m_base)), mix(qBlue(color), qBlue(m_base)));
}

// Busy time per class in [c0, c1): from the coarsest buckets no wider than a pixel, or, below the
// finest level, from the few spans themselves (starting at index `from`). `next`, when given and the
// spans were read, receives the index of the first span at or after c1.
TimelineRowPainter::Summary TimelineRowPainter::columnSummary(const TimelineRow& row, std::size_t from, std::int64_t c0,
                                                              std::int64_t c1, std::optional<std::size_t>* next) const
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

// A column busy for `fraction` of its time: the colour over the background, more opaque the busier
// (in kLevels steps, from a faint 95/255 so that a little work still shows).
QRgb TimelineRowPainter::busyColor(const QColor& color, double fraction) const
{
    const int level = int(std::lround(std::clamp(fraction, 0.0, 1.0) * kLevels));
    return blend(color.rgb(), 95 + 160 * level / kLevels);
}

void TimelineRowPainter::markColumn(int col, const Summary& s)
{
    const auto cls = s.busy.dominant();
    if (!cls || s.covered <= 0)
        return;
    const double fraction = std::min(1.0, double(s.busy.total()) / double(s.covered));
    const auto [y0, y1] = verticalExtent(*cls);
    fill(col, col + 1, y0, y1, m_summaryColor[std::size_t(*cls)][std::size_t(std::lround(fraction * kLevels))]);
}

void TimelineRowPainter::fill(int x0, int x1, int y0, int y1, QRgb color)
{
    x0 = std::max(x0, 0);
    x1 = std::min(x1, m_columns);
    for (int y = std::max(y0, 0); y < y1 && x1 > x0; ++y)
        std::fill(line(y) + x0, line(y) + x1, color);
}

std::pair<int, int> TimelineRowPainter::verticalExtent(KindClass cls) const
{
    const int height = m_bottom - m_top;
    if (thinKind(cls) && height >= 6)
        return {m_top + height / 3, m_bottom - height / 3};
    return {m_top, m_bottom};
}

void TimelineRowPainter::paintBlock(wire::SpanKind kind, int left, int right, double width, std::int32_t microbatch,
                                    const std::vector<QStaticText>* numbers, int chunk, bool overlapped)
{
    const KindClass cls = *kindClassOf(kind);
    const QColor color = TimelineStyle::chunkColor(kind, chunk);
    const auto [y0, y1] = verticalExtent(cls);
    if (cls == KindClass::DataParallelReduce) {
        const TimelineStyle::Hatch hatch = TimelineStyle::hatchOf(color);
        for (int y = std::max(y0, 0); y < y1; ++y)
            for (int x = std::max(left, 0); x < std::min(right, m_columns); ++x)
                line(y)[x] = hatch.at(x, y);
    } else {
        fill(left, right, y0, y1, color.rgb());
    }
    if (width >= 4)  // a darker left edge tells neighbouring blocks of one kind apart
        fill(left, left + 1, y0, y1, color.darker(150).rgb());
    if (overlapped) {
        // An F&B pair shares one border (DualPipe's figure): the F opens it, the W closes it.
        const QRgb border = TimelineStyle::pairBorderColor().rgb();
        fill(left, right, y0, y0 + 1, border);
        fill(left, right, y1 - 1, y1, border);
        if (kind == wire::SpanKind::Forward)
            fill(left, left + 1, y0, y1, border);
        if (kind == wire::SpanKind::WeightGrad)
            fill(right - 1, right, y0, y1, border);
    }
    if (!numbers || microbatch < 0 || std::size_t(microbatch) >= numbers->size() || cls == KindClass::PointToPoint)
        return;
    const QStaticText& text = (*numbers)[std::size_t(microbatch)];
    const QSizeF size = text.size();
    const int visibleLeft = std::max(left, 0), visibleRight = std::min(right, m_columns);
    if (size.width() + 4 <= visibleRight - visibleLeft && size.height() <= y1 - y0 + 2)
        m_labels.push_back(
            {QPointF((visibleLeft + visibleRight - size.width()) / 2, m_origin + y0 + (y1 - y0 - size.height()) / 2),
             &text, qGray(color.rgb()) > 140 ? Qt::black : Qt::white});
}

}  // namespace meshbench::app
