#pragma once
// The timeline's visible time range and how it moves, without painting (the part Qt Creator's
// tracing library calls the zoom control; the history is Hotspot's zoom stack):
// - moves: set a range, pan, zoom about a point (the time there stays there), fit the data;
// - clamping: a range is 16 ns to 2^61 ns wide and keeps at least half of itself over the data, or all
//   of the data when it is more than twice as wide, so a pan never loses the data;
// - follow-live: the range slides to the newest data as it arrives, until the user moves it;
// - history: each move by the user is a step that back() undoes and forward() redoes; a move after
//   going back drops the steps ahead. The moves of one gesture (a drag, a run of wheel events) are one
//   step: a gesture lasts from its first move until endGesture() or a move of any other kind.

#include <QObject>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace meshbench::app {

using TimeRange = std::pair<std::int64_t, std::int64_t>;

// Times to pixels over a plot `pixels` wide: t0 at 0, t1 at `pixels`.
struct TimeScale {
    std::int64_t t0 = 0;
    std::int64_t t1 = 1;
    int pixels = 1;

    double nsPerPixel() const { return double(t1 - t0) / pixels; }
    double x(std::int64_t ns) const { return double(ns - t0) * pixels / double(t1 - t0); }
    std::int64_t time(double x) const;  // to the nearest ns
};

class TimelineZoom : public QObject {
    Q_OBJECT
public:
    static constexpr std::int64_t kMinRange = 16;
    static constexpr std::int64_t kMaxRange = std::int64_t(1) << 61;
    static constexpr std::size_t kHistoryDepth = 100;  // steps kept back
    enum class Gesture { None, Wheel, Drag };          // None: a step of its own

    explicit TimelineZoom(QObject* parent = nullptr);

    TimeRange range() const { return {m_t0, m_t1}; }
    TimeScale scale(int pixels) const { return {m_t0, m_t1, pixels}; }

    // The user's moves; each turns follow-live off.
    void setRange(std::int64_t t0, std::int64_t t1, Gesture gesture = Gesture::None);
    void pan(std::int64_t dt, Gesture gesture = Gesture::None);
    // factor < 1 zooms in; the time at x (pixels from the left of a plot `pixels` wide) stays at x.
    void zoomAt(double factor, double x, int pixels, Gesture gesture = Gesture::None);
    // The data's range; new data then refits until the next move.
    void fit();
    void endGesture() { m_gesture = Gesture::None; }

    bool canGoBack() const { return !m_back.empty(); }
    bool canGoForward() const { return !m_forward.empty(); }
    // Return to the range before the last step / redo it; false when there is none.
    bool back();
    bool forward();

    // The data's extent changed, [first span begin, last span end] (nullopt without spans): follows
    // it, or refits when the user has chosen no range.
    void setDataRange(std::optional<TimeRange> data);
    // Other data altogether: forgets the history and the user's range, and fits it.
    void resetData(std::optional<TimeRange> data);

    // Follow-live keeps the width the user last chose; without one, the newest liveWindow ns
    // (0: everything so far).
    bool followLive() const { return m_followLive; }
    void setFollowLive(bool on);
    void setLiveWindow(std::int64_t ns);
    std::int64_t liveWindow() const { return m_liveWindow; }

signals:
    void rangeChanged(std::int64_t t0, std::int64_t t1);
    void followLiveChanged(bool on);

private:
    TimeRange clamped(TimeRange range) const;
    std::optional<TimeRange> followRange() const;
    void userMove(TimeRange range, Gesture gesture);
    void step(TimeRange range, Gesture gesture);  // a move the history records
    bool travel(std::vector<TimeRange>& from, std::vector<TimeRange>& to);
    void apply(TimeRange range);

    std::int64_t m_t0 = 0;
    std::int64_t m_t1 = 1'000'000;
    std::optional<TimeRange> m_data;
    bool m_userRange = false;  // the user chose the range: new data no longer refits
    bool m_followLive = false;
    std::int64_t m_liveWindow = 0;
    Gesture m_gesture = Gesture::None;         // the gesture under way, once it has moved the range
    std::vector<TimeRange> m_back, m_forward;  // nearest last
};

}  // namespace meshbench::app
