// The timeline's zoom control: the time-to-pixel scale, zoom about a point, clamping to the data,
// the history (back, forward, gestures as one step), follow-live and fitting new data. Every range
// below is worked by hand.
#include "timeline/timeline_zoom.h"

#include <QSignalSpy>
#include <QTest>

using namespace meshbench::app;

namespace {

using Range = TimeRange;
using Gesture = TimelineZoom::Gesture;

}  // namespace

class TestTimelineZoom : public QObject {
    Q_OBJECT
private slots:
    void scaleMapsTimesToPixels();
    void zoomAtKeepsTheTimeUnderTheCursor();
    void clampsToTheData();
    void historyRestoresExactRanges();
    void aMoveAfterGoingBackDropsTheForwardSteps();
    void aGestureIsOneStep();
    void followLiveSlidesWithTheData();
    void newDataRefitsUntilTheUserMoves();
};

void TestTimelineZoom::scaleMapsTimesToPixels()
{
    const TimeScale scale{1000, 3000, 200};  // 10 ns per pixel
    QCOMPARE(scale.nsPerPixel(), 10.0);
    QCOMPARE(scale.x(1000), 0.0);
    QCOMPARE(scale.x(2000), 100.0);
    QCOMPARE(scale.x(3000), 200.0);
    QCOMPARE(scale.x(500), -50.0);
    QCOMPARE(scale.time(50), std::int64_t(1500));
    QCOMPARE(scale.time(100.5), std::int64_t(2005));
    QCOMPARE(scale.time(-10), std::int64_t(900));
}

void TestTimelineZoom::zoomAtKeepsTheTimeUnderTheCursor()
{
    TimelineZoom zoom;
    zoom.setRange(1000, 3000);
    // 200 px at 10 ns/px: x = 50 is t = 1500, a quarter across. Half the width (1000) with 1500 still a
    // quarter across: [1500 - 250, 1500 + 750].
    zoom.zoomAt(0.5, 50, 200);
    QCOMPARE(zoom.range(), Range(1250, 2250));
    QCOMPARE(zoom.scale(200).time(50), std::int64_t(1500));
    // Out by 2 at x = 150 (t = 1250 + 150 * 5 = 2000, three quarters across): [2000 - 1500, 2000 + 500].
    zoom.zoomAt(2.0, 150, 200);
    QCOMPARE(zoom.range(), Range(500, 2500));
    QCOMPARE(zoom.scale(200).time(150), std::int64_t(2000));
    // In by 0.8 at x = 30 (t = 800, 0.15 across): width 1600, t0 = 800 - 240.
    zoom.zoomAt(0.8, 30, 200);
    QCOMPARE(zoom.range(), Range(560, 2160));
    QCOMPARE(zoom.scale(200).time(30), std::int64_t(800));
    // No narrower than 16 ns: about t = 50 in the middle, [42, 58].
    zoom.setRange(0, 100);
    zoom.zoomAt(0.01, 100, 200);
    QCOMPARE(zoom.range(), Range(42, 58));
}

void TestTimelineZoom::clampsToTheData()
{
    TimelineZoom zoom;
    // Without data only the width is clamped.
    zoom.setRange(5000, 8000);
    QCOMPARE(zoom.range(), Range(5000, 8000));
    zoom.setRange(0, std::int64_t(1) << 62);
    QCOMPARE(zoom.range(), Range(0, TimelineZoom::kMaxRange));

    zoom.resetData(Range(0, 1000));
    QCOMPARE(zoom.range(), Range(0, 1000));
    // 400 wide: at least 200 of it over the data, so it begins by 800 at the latest.
    zoom.setRange(900, 1300);
    QCOMPARE(zoom.range(), Range(800, 1200));
    // 1000 wide, far before the data: it ends at 500 at the earliest.
    zoom.setRange(-5000, -4000);
    QCOMPARE(zoom.range(), Range(-500, 500));
    // 3000 wide, more than twice the data: all of the data in view, so it begins at 0 at the latest.
    zoom.setRange(5000, 8000);
    QCOMPARE(zoom.range(), Range(0, 3000));
    zoom.setRange(-10'000, 10'000);  // already shows all of it
    QCOMPARE(zoom.range(), Range(-10'000, 10'000));
    // A pan past the end stops with half the range over the data: [5000, 6000] becomes [500, 1500].
    zoom.setRange(0, 1000);
    zoom.pan(5000);
    QCOMPARE(zoom.range(), Range(500, 1500));
    // 5 ns wide: 16 about its middle (502).
    zoom.setRange(500, 505);
    QCOMPARE(zoom.range(), Range(494, 510));
}

void TestTimelineZoom::historyRestoresExactRanges()
{
    TimelineZoom zoom;
    zoom.resetData(Range(0, 1000));
    QVERIFY(!zoom.canGoBack());
    zoom.setRange(100, 300);
    zoom.zoomAt(0.5, 50, 100);  // t = 200 in the middle, 100 wide
    QCOMPARE(zoom.range(), Range(150, 250));
    zoom.pan(-30);
    QCOMPARE(zoom.range(), Range(120, 220));

    QVERIFY(zoom.back());
    QCOMPARE(zoom.range(), Range(150, 250));
    QVERIFY(zoom.back());
    QCOMPARE(zoom.range(), Range(100, 300));
    QVERIFY(zoom.back());
    QCOMPARE(zoom.range(), Range(0, 1000));
    QVERIFY(!zoom.canGoBack());
    QVERIFY(!zoom.back());
    QCOMPARE(zoom.range(), Range(0, 1000));

    QVERIFY(zoom.forward());
    QCOMPARE(zoom.range(), Range(100, 300));
    QVERIFY(zoom.forward());
    QCOMPARE(zoom.range(), Range(150, 250));
    QVERIFY(zoom.forward());
    QCOMPARE(zoom.range(), Range(120, 220));
    QVERIFY(!zoom.forward());
    QCOMPARE(zoom.range(), Range(120, 220));
}

void TestTimelineZoom::aMoveAfterGoingBackDropsTheForwardSteps()
{
    TimelineZoom zoom;
    zoom.resetData(Range(0, 1000));
    zoom.setRange(100, 300);
    zoom.setRange(200, 400);
    zoom.setRange(200, 400);  // no move, no step
    QVERIFY(zoom.back());
    QCOMPARE(zoom.range(), Range(100, 300));
    QVERIFY(zoom.canGoForward());
    zoom.pan(50);
    QCOMPARE(zoom.range(), Range(150, 350));
    QVERIFY(!zoom.canGoForward());
    QVERIFY(!zoom.forward());
    QCOMPARE(zoom.range(), Range(150, 350));
    QVERIFY(zoom.back());
    QCOMPARE(zoom.range(), Range(100, 300));
    QVERIFY(zoom.back());
    QCOMPARE(zoom.range(), Range(0, 1000));
    QVERIFY(!zoom.back());
}

void TestTimelineZoom::aGestureIsOneStep()
{
    TimelineZoom zoom;
    zoom.resetData(Range(0, 1000));
    // A run of wheel events at x = 50 of 100 px (the middle, t = 500): 500 wide, then 250.
    zoom.zoomAt(0.5, 50, 100, Gesture::Wheel);
    zoom.zoomAt(0.5, 50, 100, Gesture::Wheel);
    QCOMPARE(zoom.range(), Range(375, 625));
    zoom.endGesture();
    zoom.zoomAt(2.0, 50, 100, Gesture::Wheel);  // a second run
    QCOMPARE(zoom.range(), Range(250, 750));
    // One drag, then a key's pan, then the wheel again: each a step of its own.
    zoom.setRange(300, 800, Gesture::Drag);
    zoom.setRange(350, 850, Gesture::Drag);
    zoom.pan(10);
    zoom.pan(10, Gesture::Wheel);
    QCOMPARE(zoom.range(), Range(370, 870));

    const Range expected[] = {{360, 860}, {350, 850}, {250, 750}, {375, 625}, {0, 1000}};
    for (const Range& range : expected) {
        QVERIFY(zoom.back());
        QCOMPARE(zoom.range(), range);
    }
    QVERIFY(!zoom.back());
}

void TestTimelineZoom::followLiveSlidesWithTheData()
{
    TimelineZoom zoom;
    QSignalSpy follow(&zoom, &TimelineZoom::followLiveChanged);
    QSignalSpy changed(&zoom, &TimelineZoom::rangeChanged);
    zoom.resetData(Range(0, 4000));
    QCOMPARE(changed.count(), 1);
    zoom.setLiveWindow(1500);  // not following: nothing moves
    QCOMPARE(zoom.range(), Range(0, 4000));
    zoom.setFollowLive(true);  // no width chosen: the live window at the end
    QCOMPARE(follow.count(), 1);
    QCOMPARE(zoom.range(), Range(2500, 4000));
    zoom.setDataRange(Range(0, 9500));
    QCOMPARE(zoom.range(), Range(8000, 9500));
    QCOMPARE(changed.count(), 3);
    QCOMPARE(changed.last().at(0).toLongLong(), qlonglong(8000));
    QCOMPARE(changed.last().at(1).toLongLong(), qlonglong(9500));
    // A pan stops following; new data then leaves the range alone.
    zoom.pan(-100);
    QVERIFY(!zoom.followLive());
    QCOMPARE(follow.count(), 2);
    QCOMPARE(zoom.range(), Range(7900, 9400));
    zoom.setDataRange(Range(0, 20'000));
    QCOMPARE(zoom.range(), Range(7900, 9400));
    // Following again keeps the user's width (1500) at the newest data.
    zoom.setFollowLive(true);
    QCOMPARE(zoom.range(), Range(18'500, 20'000));
    // Going back is a move of the user's: following stops there.
    QVERIFY(zoom.back());
    QVERIFY(!zoom.followLive());
    QCOMPARE(zoom.range(), Range(7900, 9400));
}

void TestTimelineZoom::newDataRefitsUntilTheUserMoves()
{
    TimelineZoom zoom;
    zoom.resetData(Range(0, 1000));
    zoom.setDataRange(Range(0, 2000));  // not the user's move: refits, no step
    QCOMPARE(zoom.range(), Range(0, 2000));
    QVERIFY(!zoom.canGoBack());
    zoom.setRange(100, 200);
    zoom.setDataRange(Range(0, 3000));
    QCOMPARE(zoom.range(), Range(100, 200));
    zoom.fit();  // a step, and new data refits again
    QCOMPARE(zoom.range(), Range(0, 3000));
    zoom.setDataRange(Range(0, 4000));
    QCOMPARE(zoom.range(), Range(0, 4000));
    QVERIFY(zoom.back());
    QCOMPARE(zoom.range(), Range(100, 200));
    // Other data: fitted, the history gone.
    zoom.resetData(Range(10'000, 10'500));
    QCOMPARE(zoom.range(), Range(10'000, 10'500));
    QVERIFY(!zoom.canGoBack());
    QVERIFY(!zoom.canGoForward());
}

QTEST_MAIN(TestTimelineZoom)
#include "tst_timeline_zoom.moc"
