#include "timeline/timeline_zoom.h"

#include <algorithm>
#include <cmath>

namespace meshbench::app {

std::int64_t TimeScale::time(double x) const
{
    const double offset = x * double(t1 - t0) / pixels;
    const double limit = double(TimelineZoom::kMaxRange);
    return t0 + std::llround(std::clamp(offset, -limit, limit));
}

TimelineZoom::TimelineZoom(QObject* parent) : QObject(parent) {}

void TimelineZoom::setRange(std::int64_t t0, std::int64_t t1, Gesture gesture) { userMove({t0, t1}, gesture); }

void TimelineZoom::pan(std::int64_t dt, Gesture gesture) { userMove({m_t0 + dt, m_t1 + dt}, gesture); }

void TimelineZoom::zoomAt(double factor, double x, int pixels, Gesture gesture)
{
    const double fraction = std::clamp(x / pixels, 0.0, 1.0);
    const std::int64_t anchor = scale(pixels).time(x);
    const double width = std::clamp(double(m_t1 - m_t0) * factor, double(kMinRange), double(kMaxRange));
    const std::int64_t t0 = anchor - std::llround(fraction * width);
    userMove({t0, t0 + std::llround(width)}, gesture);
}

void TimelineZoom::fit()
{
    setFollowLive(false);
    m_userRange = false;
    if (m_data)
        step(*m_data, Gesture::None);
}

bool TimelineZoom::back() { return travel(m_back, m_forward); }

bool TimelineZoom::forward() { return travel(m_forward, m_back); }

void TimelineZoom::setDataRange(std::optional<TimeRange> data)
{
    m_data = data;
    if (!m_data)
        return;
    if (m_followLive)
        apply(*followRange());
    else if (!m_userRange)
        apply(*m_data);
}

void TimelineZoom::resetData(std::optional<TimeRange> data)
{
    m_userRange = false;
    m_gesture = Gesture::None;
    m_back.clear();
    m_forward.clear();
    m_data = data;
    if (m_data)
        apply(*m_data);
}

void TimelineZoom::setFollowLive(bool on)
{
    if (m_followLive == on)
        return;
    m_followLive = on;
    if (const auto range = followRange(); on && range)
        step(*range, Gesture::None);
    emit followLiveChanged(on);
}

void TimelineZoom::setLiveWindow(std::int64_t ns)
{
    m_liveWindow = std::max<std::int64_t>(ns, 0);
    if (const auto range = followRange(); m_followLive && range)
        apply(*range);
}

TimeRange TimelineZoom::clamped(TimeRange range) const
{
    auto [t0, t1] = range;
    if (t1 - t0 < kMinRange) {
        const std::int64_t mid = t0 + (t1 - t0) / 2;
        t0 = mid - kMinRange / 2;
        t1 = t0 + kMinRange;
    }
    if (t1 - t0 > kMaxRange)
        t1 = t0 + kMaxRange;
    if (m_data) {
        const auto [begin, end] = *m_data;
        const std::int64_t width = t1 - t0;
        const std::int64_t need = std::min(end - begin, width / 2);  // ns of the range over the data
        if (t0 > end - need) {
            t0 = end - need;
            t1 = t0 + width;
        } else if (t1 < begin + need) {
            t1 = begin + need;
            t0 = t1 - width;
        }
    }
    return {t0, t1};
}

std::optional<TimeRange> TimelineZoom::followRange() const
{
    if (!m_data)
        return std::nullopt;
    const auto [begin, end] = *m_data;
    const std::int64_t width = m_userRange ? m_t1 - m_t0 : m_liveWindow > 0 ? m_liveWindow : end - begin;
    return TimeRange{end - width, end};
}

void TimelineZoom::userMove(TimeRange range, Gesture gesture)
{
    m_userRange = true;
    setFollowLive(false);
    step(range, gesture);
}

void TimelineZoom::step(TimeRange range, Gesture gesture)
{
    if (gesture != m_gesture)
        m_gesture = Gesture::None;  // any other move ends the gesture under way
    const TimeRange target = clamped(range);
    if (target == this->range())
        return;
    if (gesture == Gesture::None || m_gesture == Gesture::None) {
        m_back.push_back(this->range());
        if (m_back.size() > kHistoryDepth)
            m_back.erase(m_back.begin());
        m_forward.clear();
    }
    m_gesture = gesture;
    apply(target);
}

bool TimelineZoom::travel(std::vector<TimeRange>& from, std::vector<TimeRange>& to)
{
    if (from.empty())
        return false;
    m_userRange = true;
    m_gesture = Gesture::None;
    setFollowLive(false);
    to.push_back(range());
    const TimeRange target = from.back();
    from.pop_back();
    apply(target);
    return true;
}

void TimelineZoom::apply(TimeRange range)
{
    const auto [t0, t1] = clamped(range);
    if (t0 == m_t0 && t1 == m_t1)
        return;
    m_t0 = t0;
    m_t1 = t1;
    emit rangeChanged(m_t0, m_t1);
}

}  // namespace meshbench::app
