#include "timeline/timeline_layout.h"

#include <algorithm>
#include <cmath>

namespace meshbench::app {

void TimelineLayout::setRowHeight(int pixels) { m_rowHeight = std::clamp(pixels, 4, 200); }

void TimelineLayout::setStageCollapsed(int stage, bool collapsed)
{
    const auto it = std::find(m_collapsed.begin(), m_collapsed.end(), stage);
    if (collapsed && it == m_collapsed.end())
        m_collapsed.push_back(stage);
    else if (!collapsed && it != m_collapsed.end())
        m_collapsed.erase(it);
}

bool TimelineLayout::isStageCollapsed(int stage) const
{
    return std::find(m_collapsed.begin(), m_collapsed.end(), stage) != m_collapsed.end();
}

void TimelineLayout::build(const TimelineStore* store, bool kernelLanes)
{
    m_lines.clear();
    int y = 0;
    for (std::size_t r = 0; store && r < store->rowCount();) {
        Line header;
        header.stage = store->row(r).info().stage;
        header.firstRow = int(r);
        while (r < store->rowCount() && store->row(r).info().stage == header.stage)
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
            if (kernelLanes) {
                line.kernels = true;
                line.top = y;
                y += line.height;
                m_lines.push_back(line);
            }
        }
    }
    m_contentHeight = y;
}

const TimelineLayout::Line* TimelineLayout::lineAt(int y) const
{
    const auto it =
        std::upper_bound(m_lines.begin(), m_lines.end(), y, [](int v, const Line& line) { return v < line.top; });
    if (it == m_lines.begin())
        return nullptr;
    const Line& line = *(it - 1);
    return y < line.top + line.height ? &line : nullptr;
}

const TimelineLayout::Line* TimelineLayout::lineOfRow(int row) const
{
    const auto it = std::find_if(m_lines.begin(), m_lines.end(),
                                 [row](const Line& line) { return line.row == row && !line.kernels; });
    return row < 0 || it == m_lines.end() ? nullptr : &*it;
}

const TimelineLayout::Line* TimelineLayout::kernelLineOfRow(int row) const
{
    const auto it = std::find_if(m_lines.begin(), m_lines.end(),
                                 [row](const Line& line) { return line.row == row && line.kernels; });
    return row < 0 || it == m_lines.end() ? nullptr : &*it;
}

std::pair<int, int> TimelineLayout::streamLane(int height, int index, int count)
{
    const int inner = std::max(1, height - 2);
    count = std::max(1, count);
    return {1 + inner * index / count, 1 + inner * (index + 1) / count};
}

int TimelineLayout::bandHeight(const TimelineStore* overlay) const
{
    return overlay && !overlay->empty() ? std::max(2, m_rowHeight / 4) : 0;
}

const TimelineRow* TimelineLayout::overlayRowFor(const TimelineRow& row, const TimelineStore* overlay)
{
    if (!overlay)
        return nullptr;
    const int byRank = overlay->rowOfRank(row.info().rank);
    if (byRank >= 0 && overlay->row(std::size_t(byRank)).info().stage == row.info().stage)
        return &overlay->row(std::size_t(byRank));
    for (std::size_t r = 0; r < overlay->rowCount(); ++r)
        if (overlay->row(r).info().stage == row.info().stage)
            return &overlay->row(r);
    return nullptr;
}

std::optional<TimelineLayout::Hit> TimelineLayout::hitAt(int y, double x, const TimeScale& scale,
                                                         const TimelineStore& data, const TimelineStore* overlay,
                                                         std::int64_t overlayOffset) const
{
    const Line* line = lineAt(y);
    if (!line || line->row < 0 || line->kernels)
        return std::nullopt;
    const TimelineRow& measured = data.row(std::size_t(line->row));
    const int band = bandHeight(overlay);
    Hit hit;
    hit.predicted = band > 0 && y <= line->top + band;
    hit.row = hit.predicted ? overlayRowFor(measured, overlay) : &measured;
    if (!hit.row)
        return std::nullopt;
    const std::int64_t t = scale.time(x) - (hit.predicted ? overlayOffset : 0);
    const auto index = spanNear(*hit.row, t, std::llround(kHoverTolerancePx * scale.nsPerPixel()));
    if (!index)
        return std::nullopt;
    hit.index = *index;
    return hit;
}

std::optional<std::size_t> TimelineLayout::spanNear(const TimelineRow& row, std::int64_t t, std::int64_t tolerance)
{
    // A bounded look around t.
    std::optional<std::size_t> best;
    std::int64_t bestDistance = tolerance + 1;
    const std::size_t stop = row.lowerBound(t + tolerance + 1);
    for (std::size_t i = std::max(row.scanStart(t - tolerance), stop > 256 ? stop - 256 : 0); i < stop; ++i) {
        const std::int64_t b = row.begin(i), e = row.end(i);
        const std::int64_t distance = t < b ? b - t : t >= e ? t - e : 0;
        const bool idle = row.kind(i) == wire::SpanKind::Idle;
        if (distance < bestDistance || (distance == bestDistance && distance == 0 && !idle)) {
            best = i;
            bestDistance = distance;
        }
    }
    return best;
}

}  // namespace meshbench::app
