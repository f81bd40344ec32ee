#include "timeline/span_kind_legend.h"

#include "timeline/timeline_store.h"
#include "timeline/timeline_style.h"

#include <QImage>
#include <QPainter>

#include <algorithm>

namespace meshbench::app {

namespace {

constexpr int kSwatchWidth = 14;
constexpr int kSwatchHeight = 10;  // at least 6: thin kinds are then drawn thin, as in a row
constexpr int kTextGap = 4;        // swatch to name
constexpr int kEntryGap = 14;      // name to the next swatch
constexpr int kMargin = 4;

QString kindLabel(wire::SpanKind kind)
{
    switch (kind) {
    case wire::SpanKind::Forward:
        return SpanKindLegend::tr("forward (F)");
    case wire::SpanKind::Backward:
        return SpanKindLegend::tr("backward (B)");
    case wire::SpanKind::WeightGrad:
        return SpanKindLegend::tr("weight grad (W)");
    case wire::SpanKind::SendActivation:
    case wire::SpanKind::RecvActivation:
        return SpanKindLegend::tr("send/recv activations");
    case wire::SpanKind::SendGradient:
    case wire::SpanKind::RecvGradient:
        return SpanKindLegend::tr("send/recv gradients");
    case wire::SpanKind::Optimizer:
        return SpanKindLegend::tr("optimizer");
    case wire::SpanKind::DataParallelReduce:
        return SpanKindLegend::tr("DP all-reduce");
    case wire::SpanKind::Idle:
        break;
    }
    return SpanKindLegend::tr("idle");
}

}  // namespace

SpanKindLegend::SpanKindLegend(QWidget* parent) : QWidget(parent)
{
    // One entry per look: kinds of one class in one colour are told apart by nothing in the view.
    for (int k = 0; k < wire::kSpanKinds; ++k) {
        const auto kind = wire::SpanKind(k);
        const std::optional<KindClass> cls = kindClassOf(kind);
        if (!cls)
            continue;  // idle: the gap entry, last
        const auto same = std::find_if(m_entries.begin(), m_entries.end(), [&](const Entry& entry) {
            return kindClassOf(entry.kinds.front()) == cls &&
                   TimelineStyle::kindColor(entry.kinds.front()) == TimelineStyle::kindColor(kind);
        });
        if (same != m_entries.end())
            same->kinds.push_back(kind);
        else
            m_entries.push_back({{kind}, kindLabel(kind)});
    }
    m_entries.push_back({{wire::SpanKind::Idle}, kindLabel(wire::SpanKind::Idle)});
    setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);
}

void SpanKindLegend::setScheduleMarks(bool laterChunks, bool overlappedPairs)
{
    m_entries.erase(
        std::remove_if(m_entries.begin(), m_entries.end(), [](const Entry& entry) { return entry.mark != Mark::None; }),
        m_entries.end());
    if (laterChunks)
        m_entries.push_back({{wire::SpanKind::Forward}, tr("later chunk (lighter)"), Mark::LaterChunk});
    if (overlappedPairs)
        m_entries.push_back(
            {{wire::SpanKind::Forward, wire::SpanKind::Backward}, tr("F&B pair (dark border)"), Mark::OverlappedPair});
    updateGeometry();
    update();
}

int SpanKindLegend::lineHeight() const { return std::max(fontMetrics().height(), kSwatchHeight) + 4; }

int SpanKindLegend::entryWidth(const Entry& entry) const
{
    return kSwatchWidth + kTextGap + fontMetrics().horizontalAdvance(entry.name);
}

std::vector<QRect> SpanKindLegend::layoutFor(int width) const
{
    std::vector<QRect> swatches;
    int x = kMargin, top = 0;
    for (const Entry& entry : m_entries) {
        const int w = entryWidth(entry);
        if (x > kMargin && x + w > width - kMargin) {
            x = kMargin;
            top += lineHeight();
        }
        swatches.emplace_back(x, top + (lineHeight() - kSwatchHeight) / 2, kSwatchWidth, kSwatchHeight);
        x += w + kEntryGap;
    }
    return swatches;
}

QRect SpanKindLegend::swatchRect(std::size_t index) const { return layoutFor(width())[index]; }

QSize SpanKindLegend::sizeHint() const
{
    int width = 2 * kMargin - kEntryGap;
    for (const Entry& entry : m_entries)
        width += entryWidth(entry) + kEntryGap;
    return {width, lineHeight()};
}

QSize SpanKindLegend::minimumSizeHint() const
{
    int widest = 0;
    for (const Entry& entry : m_entries)
        widest = std::max(widest, entryWidth(entry));
    return {widest + 2 * kMargin, lineHeight()};
}

int SpanKindLegend::heightForWidth(int width) const
{
    return (layoutFor(width).back().top() / lineHeight() + 1) * lineHeight();
}

void SpanKindLegend::paintSwatch(QPainter& painter, const Entry& entry, const QRect& rect) const
{
    const wire::SpanKind kind = entry.kinds.front();
    const QRect left(rect.left(), rect.top(), rect.width() / 2, rect.height());
    const QRect right(left.right() + 1, rect.top(), rect.width() - left.width(), rect.height());
    switch (entry.mark) {
    case Mark::LaterChunk:
        // Chunk 0 then chunk 1 of the same kind, as the view shades them.
        painter.fillRect(left, TimelineStyle::chunkColor(kind, 0));
        painter.fillRect(right, TimelineStyle::chunkColor(kind, 1));
        return;
    case Mark::OverlappedPair:
        // The pair's forward and backward halves inside the one border the view draws round them.
        painter.fillRect(left, TimelineStyle::kindColor(entry.kinds[0]));
        painter.fillRect(right, TimelineStyle::kindColor(entry.kinds[1]));
        painter.setPen(TimelineStyle::pairBorderColor());
        painter.drawRect(rect.adjusted(0, 0, -1, -1));
        return;
    case Mark::None:
        break;
    }
    const std::optional<KindClass> cls = kindClassOf(kind);
    if (!cls) {
        // The timeline shows idle time as the row's background.
        painter.fillRect(rect, palette().color(QPalette::Base));
        painter.setPen(palette().color(QPalette::Mid));
        painter.drawRect(rect.adjusted(0, 0, -1, -1));
        return;
    }
    const QColor color = TimelineStyle::kindColor(kind);
    switch (*cls) {
    case KindClass::PointToPoint: {
        // Transfers are the middle third of a row.
        const int third = rect.height() / 3;
        painter.fillRect(rect.adjusted(0, third, 0, -third), color);
        break;
    }
    case KindClass::DataParallelReduce: {
        // The row painter's hatching, as a repeating tile.
        const TimelineStyle::Hatch hatch = TimelineStyle::hatchOf(color);
        QImage tile(4, 4, QImage::Format_RGB32);
        for (int y = 0; y < 4; ++y)
            for (int x = 0; x < 4; ++x)
                tile.setPixel(x, y, hatch.at(x, y));
        painter.setBrushOrigin(rect.topLeft());
        painter.fillRect(rect, QBrush(tile));
        break;
    }
    case KindClass::Forward:
    case KindClass::Backward:
    case KindClass::WeightGrad:
    case KindClass::Optimizer:
        painter.fillRect(rect, color);
        break;
    }
}

void SpanKindLegend::paintEvent(QPaintEvent*)
{
    QPainter painter(this);
    const std::vector<QRect> swatches = layoutFor(width());
    const int ascentOffset = (lineHeight() - fontMetrics().height()) / 2;
    for (std::size_t i = 0; i < m_entries.size(); ++i) {
        const QRect& swatch = swatches[i];
        paintSwatch(painter, m_entries[i], swatch);
        const int lineTop = swatch.top() - (lineHeight() - kSwatchHeight) / 2;
        painter.setPen(palette().color(QPalette::WindowText));
        painter.drawText(QPoint(swatch.right() + 1 + kTextGap, lineTop + ascentOffset + fontMetrics().ascent()),
                         m_entries[i].name);
    }
}

}  // namespace meshbench::app
