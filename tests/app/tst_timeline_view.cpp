// The timeline widget: pixel mapping at several zooms, wheel zoom around the cursor, drag pan,
// selection zoom, keys, the zoom history's keys and buttons, follow-live, tooltips, stage collapse,
// overlay alignment, and real pixels of a rendered frame.
#include "timeline/timeline_view.h"

#include "plan/op_span_kind.h"
#include "plan/planner.h"

#include <nlohmann/json.hpp>

#include <QApplication>
#include <QImage>
#include <QSignalSpy>
#include <QTest>
#include <QWheelEvent>

#include <map>
#include <random>

using namespace meshbench;
using namespace meshbench::app;

namespace {

using Range = std::pair<std::int64_t, std::int64_t>;

TimelineSpan span(std::int64_t begin, std::int64_t end, wire::SpanKind kind, int microbatch = -1)
{
    TimelineSpan s;
    s.beginNs = begin;
    s.endNs = end;
    s.kind = kind;
    s.microbatch = microbatch;
    return s;
}

// A view whose plot area is exactly `plotWidth` pixels wide.
void sizePlot(TimelineView& view, int plotWidth, int height = 200)
{
    view.resize(view.plotArea().left() + plotWidth, height);
    QCOMPARE(view.plotArea().width(), plotWidth);
}

// The view over `data`, its plot `plotWidth` pixels wide showing [0, end), as painted.
QImage rendered(TimelineView& view, TimelineData& data, int plotWidth, int height, std::int64_t end)
{
    view.setData(&data);
    sizePlot(view, plotWidth, height);
    view.setVisibleRange(0, end);
    QImage image(view.size(), QImage::Format_RGB32);
    view.render(&image);
    return image;
}

// Two ranks on stage 0: rank 0 has F [1000, 2000) then B [2500, 3000) and a run of tiny B spans
// [3200, 3600); rank 1 has one F [0, 4000).
void fillSmall(TimelineData& data)
{
    data.setRows({{0, 0, "rank 0 · dp0 pp0 tp0"}, {1, 0, "rank 1 · dp1 pp0 tp0"}});
    std::vector<TimelineSpan> spans{span(1000, 2000, wire::SpanKind::Forward),
                                    span(2500, 3000, wire::SpanKind::Backward)};
    for (std::int64_t t = 3200; t < 3600; t += 10)
        spans.push_back(span(t, t + 5, wire::SpanKind::Backward));
    data.appendSpans(0, spans);
    const TimelineSpan whole = span(0, 4000, wire::SpanKind::Forward);
    data.appendSpans(1, std::span(&whole, 1));
}

void sendWheel(QWidget& widget, QPoint pos, int angle, Qt::KeyboardModifiers modifiers = Qt::NoModifier)
{
    QWheelEvent event(pos, widget.mapToGlobal(pos), QPoint(), QPoint(0, angle), Qt::NoButton, modifiers,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(&widget, &event);
}

}  // namespace

class TestTimelineView : public QObject {
    Q_OBJECT
private slots:
    void mapsTimesToPixels();
    void niceTicksAndLabels();
    void wheelZoomKeepsTimeUnderCursor();
    void dragPans();
    void shiftDragZoomsToSelection();
    void keysAndHome();
    void historyKeysAndButtons();
    void followLive();
    void followLiveWindowWithoutAUserRange();
    void tooltipHasEveryField();
    void renderedPixels();
    void chunksAndPairsPaint();
    void scheduleFigures_data();
    void scheduleFigures();
    void collapsedStageIsOneSummaryRow();
    void overlayAlignsToStep();
    void scrolledRowsPaintWhereRowRectSays();
};

void TestTimelineView::followLiveWindowWithoutAUserRange()
{
    TimelineData data;
    data.setNotifyInterval(0);
    fillSmall(data);  // spans [0, 4000)
    TimelineView view;
    view.setData(&data);
    sizePlot(view, 200);
    view.setFollowLive(true);
    QCOMPARE(view.visibleRange(), Range(0, 4000));  // no window yet: everything so far
    view.setLiveWindow(1500);
    QCOMPARE(view.visibleRange(), Range(2500, 4000));
    QSignalSpy changed(&data, &TimelineData::changed);
    const TimelineSpan later = span(9000, 9500, wire::SpanKind::Optimizer);
    data.appendSpans(1, std::span(&later, 1));
    QVERIFY(changed.wait(1000));
    QCOMPARE(view.visibleRange(), Range(8000, 9500));
    // A zoom is the user's width: following again keeps it rather than the live window.
    view.zoomAt(0.5, view.plotArea().left() + 100);
    QVERIFY(!view.followLive());
    view.setFollowLive(true);
    QCOMPARE(view.visibleRange(), Range(8750, 9500));
}

void TestTimelineView::mapsTimesToPixels()
{
    TimelineView view;
    sizePlot(view, 200);
    const int left = view.plotArea().left();
    view.setVisibleRange(1000, 3000);
    QCOMPARE(view.visibleRange(), Range(1000, 3000));
    QCOMPARE(view.xForTime(2000), left + 100.0);
    QCOMPARE(view.xForTime(1000), double(left));
    QCOMPARE(view.xForTime(3000), left + 200.0);
    QCOMPARE(view.xForTime(500), left - 50.0);
    QCOMPARE(view.timeForX(left + 50), std::int64_t(1500));
    QCOMPARE(view.timeForX(left + 100.5), std::int64_t(2005));

    // A second zoom: a second over 200 px, 5 ms per pixel.
    view.setVisibleRange(0, 1'000'000'000);
    QCOMPARE(view.xForTime(250'000'000), left + 50.0);
    QCOMPARE(view.timeForX(left + 1), std::int64_t(5'000'000));
    // Wall-clock times (1.7e18 ns) at a microsecond across: no precision lost to doubles.
    const std::int64_t wall = 1'700'000'000'123'456'789;
    view.setVisibleRange(wall, wall + 2000);
    QCOMPARE(view.xForTime(wall + 10), left + 1.0);
    QCOMPARE(view.timeForX(left + 199), wall + 1990);

    // Round trips at several zooms.
    std::mt19937_64 rng(3);
    for (const std::int64_t width : {std::int64_t(200), std::int64_t(123'457), std::int64_t(9'876'543'211)}) {
        view.setVisibleRange(wall, wall + width);
        std::uniform_int_distribution<std::int64_t> pick(wall, wall + width);
        for (int k = 0; k < 100; ++k) {
            const std::int64_t t = pick(rng);
            QVERIFY(std::llabs(view.timeForX(view.xForTime(t)) - t) <= 1);
            const double x = left + (k * 1.7);
            QVERIFY(std::fabs(view.xForTime(view.timeForX(x)) - x) <= 200.0 / double(width) + 1e-6);
        }
    }
}

void TestTimelineView::niceTicksAndLabels()
{
    QCOMPARE(TimelineView::niceTickStep(10, 90), std::int64_t(1000));  // 900 ns -> 1 us
    QCOMPARE(TimelineView::niceTickStep(1, 90), std::int64_t(100));
    QCOMPARE(TimelineView::niceTickStep(30, 90), std::int64_t(5000));  // 2700 -> 5000
    QCOMPARE(TimelineView::niceTickStep(2e6, 90), std::int64_t(200'000'000));
    QCOMPARE(TimelineView::niceTickStep(0.001, 90), std::int64_t(1));
    QCOMPARE(TimelineView::formatTick(1'500'000, 500'000), QStringLiteral("1.5 ms"));
    QCOMPARE(TimelineView::formatTick(2000, 1000), QStringLiteral("2 us"));
    QCOMPARE(TimelineView::formatTick(3'000'000'000, 1'000'000'000), QStringLiteral("3 s"));
    QCOMPARE(TimelineView::formatTick(250, 50), QStringLiteral("250 ns"));
    QCOMPARE(TimelineView::formatTick(70, 10), QStringLiteral("70 ns"));
    QCOMPARE(TimelineView::formatTick(12'345'000, 5000), QStringLiteral("12345 us"));
    QCOMPARE(TimelineView::formatTick(1'230'000, 10'000), QStringLiteral("1230 us"));
    QCOMPARE(TimelineView::formatDuration(250), QStringLiteral("250 ns"));
    QCOMPARE(TimelineView::formatDuration(1'234'567), QStringLiteral("1.234567 ms"));
    QCOMPARE(TimelineView::formatDuration(1000), QStringLiteral("1 us"));
}

void TestTimelineView::wheelZoomKeepsTimeUnderCursor()
{
    TimelineView view;
    sizePlot(view, 400);
    const int left = view.plotArea().left();
    view.setVisibleRange(100'000, 500'000);
    const QPoint cursor(left + 60, 100);
    const std::int64_t under = view.timeForX(cursor.x());
    sendWheel(view, cursor, 120);  // one notch in
    auto [t0, t1] = view.visibleRange();
    QVERIFY(t1 - t0 < 400'000);
    QCOMPARE(t1 - t0, std::llround(400'000 * std::pow(2.0, -0.25)));
    QVERIFY(std::llabs(view.timeForX(cursor.x()) - under) <= 1);
    sendWheel(view, cursor, -240, Qt::ControlModifier);  // two notches out with ctrl
    std::tie(t0, t1) = view.visibleRange();
    QVERIFY(t1 - t0 > 400'000);
    QVERIFY(std::llabs(view.timeForX(cursor.x()) - under) <= 1);

    // Pinch.
    QNativeGestureEvent pinch(Qt::ZoomNativeGesture, QPointingDevice::primaryPointingDevice(), 2, cursor, cursor,
                              view.mapToGlobal(cursor), 1.0, QPointF(), 0);
    const std::int64_t before = t1 - t0;
    QApplication::sendEvent(&view, &pinch);
    std::tie(t0, t1) = view.visibleRange();
    QVERIFY(std::llabs((t1 - t0) - before / 2) <= 1);
    QVERIFY(std::llabs(view.timeForX(cursor.x()) - under) <= 1);
}

void TestTimelineView::dragPans()
{
    TimelineView view;
    sizePlot(view, 200);
    const int left = view.plotArea().left();
    view.setVisibleRange(1000, 3000);
    QTest::mousePress(&view, Qt::LeftButton, {}, QPoint(left + 100, 80));
    QTest::mouseMove(&view, QPoint(left + 150, 90));
    // 50 px right at 10 ns per pixel: the view looks 500 ns earlier.
    QCOMPARE(view.visibleRange(), Range(500, 2500));
    QTest::mouseMove(&view, QPoint(left + 80, 90));
    QTest::mouseRelease(&view, Qt::LeftButton, {}, QPoint(left + 80, 90));
    QCOMPARE(view.visibleRange(), Range(1200, 3200));
    // Moving without a button does nothing.
    QTest::mouseMove(&view, QPoint(left + 10, 90));
    QCOMPARE(view.visibleRange(), Range(1200, 3200));
}

void TestTimelineView::shiftDragZoomsToSelection()
{
    TimelineView view;
    sizePlot(view, 200);
    const int left = view.plotArea().left();
    view.setVisibleRange(1000, 3000);
    QTest::mousePress(&view, Qt::LeftButton, Qt::ShiftModifier, QPoint(left + 150, 80));
    QTest::mouseMove(&view, QPoint(left + 50, 80));
    QCOMPARE(view.visibleRange(), Range(1000, 3000));  // not until release
    QTest::mouseRelease(&view, Qt::LeftButton, Qt::ShiftModifier, QPoint(left + 50, 80));
    QCOMPARE(view.visibleRange(), Range(1500, 2500));
}

void TestTimelineView::keysAndHome()
{
    TimelineData data;
    fillSmall(data);
    TimelineView view;
    view.setData(&data);
    sizePlot(view, 200);
    // Fitted to the data on arrival.
    QCOMPARE(view.visibleRange(), Range(0, 4000));
    view.setVisibleRange(1000, 3000);
    QTest::keyClick(&view, Qt::Key_Plus);
    QCOMPARE(view.visibleRange(), Range(1200, 2800));
    QTest::keyClick(&view, Qt::Key_Minus);
    QCOMPARE(view.visibleRange(), Range(1000, 3000));
    QTest::keyClick(&view, Qt::Key_Right);
    QCOMPARE(view.visibleRange(), Range(1200, 3200));
    QTest::keyClick(&view, Qt::Key_Left);
    QTest::keyClick(&view, Qt::Key_Left);
    QCOMPARE(view.visibleRange(), Range(800, 2800));
    QTest::keyClick(&view, Qt::Key_Home);
    QCOMPARE(view.visibleRange(), Range(0, 4000));
}

void TestTimelineView::historyKeysAndButtons()
{
    TimelineData data;
    fillSmall(data);
    TimelineView view;
    view.setData(&data);
    sizePlot(view, 200);
    const int left = view.plotArea().left();
    QCOMPARE(view.visibleRange(), Range(0, 4000));
    view.setVisibleRange(1000, 3000);
    QTest::keyClick(&view, Qt::Key_Plus);   // 1600 wide about 2000
    QTest::keyClick(&view, Qt::Key_Right);  // a tenth: 160
    QCOMPARE(view.visibleRange(), Range(1360, 2960));
    QTest::keyClick(&view, Qt::Key_Backspace);
    QCOMPARE(view.visibleRange(), Range(1200, 2800));
    QTest::keyClick(&view, Qt::Key_Left, Qt::AltModifier);
    QCOMPARE(view.visibleRange(), Range(1000, 3000));
    QTest::keyClick(&view, Qt::Key_Backspace);
    QCOMPARE(view.visibleRange(), Range(0, 4000));
    QTest::keyClick(&view, Qt::Key_Backspace);  // nothing further back
    QCOMPARE(view.visibleRange(), Range(0, 4000));
    QTest::keyClick(&view, Qt::Key_Right, Qt::AltModifier);
    QTest::keyClick(&view, Qt::Key_Right, Qt::AltModifier);
    QCOMPARE(view.visibleRange(), Range(1200, 2800));
    // A drag is one step, and drops the steps ahead: 8 ns per pixel, 50 then 60 px right.
    QTest::mousePress(&view, Qt::LeftButton, {}, QPoint(left + 100, 80));
    QTest::mouseMove(&view, QPoint(left + 150, 80));
    QCOMPARE(view.visibleRange(), Range(800, 2400));
    QTest::mouseMove(&view, QPoint(left + 160, 80));
    QTest::mouseRelease(&view, Qt::LeftButton, {}, QPoint(left + 160, 80));
    QCOMPARE(view.visibleRange(), Range(720, 2320));
    QTest::keyClick(&view, Qt::Key_Right, Qt::AltModifier);
    QCOMPARE(view.visibleRange(), Range(720, 2320));
    // Two wheel notches in a row are one step too; the mouse's back and forward buttons walk it.
    sendWheel(view, QPoint(left + 100, 80), 120);
    sendWheel(view, QPoint(left + 100, 80), 120);
    const Range wheeled = view.visibleRange();
    QCOMPARE(wheeled.second - wheeled.first,
             std::llround(std::llround(1600 * std::pow(2.0, -0.25)) * std::pow(2.0, -0.25)));
    QTest::mouseClick(&view, Qt::BackButton, {}, QPoint(left + 100, 80));
    QCOMPARE(view.visibleRange(), Range(720, 2320));
    QTest::keyClick(&view, Qt::Key_Backspace);
    QCOMPARE(view.visibleRange(), Range(1200, 2800));
    QTest::mouseClick(&view, Qt::ForwardButton, {}, QPoint(left + 100, 80));
    QTest::mouseClick(&view, Qt::ForwardButton, {}, QPoint(left + 100, 80));
    QCOMPARE(view.visibleRange(), wheeled);
    QVERIFY(!view.followLive());
}

void TestTimelineView::followLive()
{
    TimelineData data;
    data.setNotifyInterval(0);
    fillSmall(data);
    TimelineView view;
    view.setData(&data);
    sizePlot(view, 200);
    QSignalSpy follow(&view, &TimelineView::followLiveChanged);
    QSignalSpy changed(&data, &TimelineData::changed);
    view.setVisibleRange(0, 1000);
    view.setFollowLive(true);
    QCOMPARE(follow.count(), 1);
    QCOMPARE(view.visibleRange(), Range(3000, 4000));  // width kept, end at the newest

    const TimelineSpan later = span(9000, 9500, wire::SpanKind::Optimizer);
    data.appendSpans(0, std::span(&later, 1));
    QVERIFY(changed.wait(1000));
    QCOMPARE(view.visibleRange(), Range(8500, 9500));

    // A pan turns it off; later data no longer moves the view.
    const int left = view.plotArea().left();
    QTest::mousePress(&view, Qt::LeftButton, {}, QPoint(left + 100, 80));
    QTest::mouseMove(&view, QPoint(left + 120, 80));
    QTest::mouseRelease(&view, Qt::LeftButton, {}, QPoint(left + 120, 80));
    QVERIFY(!view.followLive());
    QCOMPARE(follow.count(), 2);
    QCOMPARE(follow.last().at(0).toBool(), false);
    const auto panned = view.visibleRange();
    QCOMPARE(panned, (Range(8400, 9400)));
    const TimelineSpan evenLater = span(20'000, 20'500, wire::SpanKind::Forward);
    data.appendSpans(0, std::span(&evenLater, 1));
    QVERIFY(changed.wait(1000));
    QCOMPARE(view.visibleRange(), panned);
    // End turns it back on.
    QTest::keyClick(&view, Qt::Key_End);
    QVERIFY(view.followLive());
    QCOMPARE(view.visibleRange(), Range(19'500, 20'500));
}

void TestTimelineView::tooltipHasEveryField()
{
    TimelineData data;
    data.setRows({{5, 2, "rank 5 · dp1 pp2 tp1"}});
    TimelineSpan s = span(1000, 2000, wire::SpanKind::Forward, 3);
    s.step = 7;
    s.stage = 2;
    s.chunk = 1;
    s.bytes = 4096;
    s.peer = 9;
    const TimelineSpan gapEnd = span(3000, 4000, wire::SpanKind::Backward, 3);
    data.appendSpans(5, std::vector<TimelineSpan>{s, gapEnd});
    TimelineView view;
    view.setData(&data);
    sizePlot(view, 200);
    const QRect row = view.rowRect(0);
    QVERIFY(row.height() > 0);
    const int y = row.center().y();
    const QString text = view.toolTipTextAt(QPoint(int(view.xForTime(1500)), y));
    for (const char* field :
         {"rank 5 · dp1 pp2 tp1", "rank: 5", "kind: F", "step: 7", "stage: 2", "chunk: 1", "micro-batch: 3",
          "begin: 0 ns (1000 ns)", "end: 1 us (2000 ns)", "duration: 1 us", "bytes: 4096", "peer: 9"})
        QVERIFY2(text.contains(QString::fromUtf8(field)), qPrintable(text + " lacks " + field));
    // Fitted to [1000, 4000]: 15 ns per pixel. In the gap: nothing; 1 px after the end of F: still F.
    QCOMPARE(view.visibleRange(), (Range(1000, 4000)));
    QVERIFY(view.toolTipTextAt(QPoint(int(view.xForTime(2500)), y)).isEmpty());
    QVERIFY(view.toolTipTextAt(QPoint(int(view.xForTime(2015)), y)).contains(QStringLiteral("kind: F")));
    QVERIFY(view.toolTipTextAt(QPoint(int(view.xForTime(3500)), y)).contains(QStringLiteral("kind: B")));
    // Outside the rows.
    QVERIFY(view.toolTipTextAt(QPoint(int(view.xForTime(1500)), 2)).isEmpty());
}

void TestTimelineView::renderedPixels()
{
    TimelineData data;
    fillSmall(data);
    TimelineView view;
    const QImage image = rendered(view, data, 200, 200, 4000);  // 20 ns per pixel
    const QRect row = view.rowRect(0);
    const int y = row.top() + 4;
    const QRgb base = view.palette().color(QPalette::Base).rgb();
    const QRgb forward = TimelineView::kindColor(wire::SpanKind::Forward).rgb();
    const QRgb backward = TimelineView::kindColor(wire::SpanKind::Backward).rgb();
    // F [1000, 2000) covers x 50..99 of the plot, B [2500, 3000) covers 125..149.
    QCOMPARE(image.pixel(int(view.xForTime(1500)), y), forward);
    QCOMPARE(image.pixel(int(view.xForTime(1980)), y), forward);
    QCOMPARE(image.pixel(int(view.xForTime(2750)), y), backward);
    // The gaps are background.
    QCOMPARE(image.pixel(int(view.xForTime(2200)), y), base);
    QCOMPARE(image.pixel(int(view.xForTime(500)), y), base);
    // Tiny B spans (5 ns every 10 ns) at 20 ns per pixel: one half-busy B-coloured mark per column.
    const QRgb summary = image.pixel(int(view.xForTime(3400)), y);
    QVERIFY(summary != base && summary != backward);
    QVERIFY(qGreen(summary) > qRed(summary) && qGreen(summary) > qBlue(summary));
    QCOMPARE(image.pixel(int(view.xForTime(3700)), y), base);
    // Rank 1's F fills its whole row.
    QCOMPARE(image.pixel(int(view.xForTime(100)), view.rowRect(1).top() + 4), forward);
}

void TestTimelineView::chunksAndPairsPaint()
{
    // Chunk 1 in its lighter shade; an F&B pair (F [1000, 2000), B [2000, 2600), W [2600, 3000))
    // inside one border: along its top and bottom, at the F's left and the W's right, not between.
    TimelineData data;
    data.setRows({{0, 0, "stage 0"}});
    std::vector<TimelineSpan> spans{span(0, 800, wire::SpanKind::Forward), span(1000, 2000, wire::SpanKind::Forward),
                                    span(2000, 2600, wire::SpanKind::Backward),
                                    span(2600, 3000, wire::SpanKind::WeightGrad)};
    spans[0].chunk = 1;
    for (std::size_t i = 1; i < 4; ++i) {
        spans[i].overlapped = true;
        spans[i].chunk = std::int16_t(i == 1 ? 0 : 1);
    }
    data.appendSpans(0, spans);
    TimelineView view;
    const QImage image = rendered(view, data, 200, 200, 4000);  // 20 ns per pixel
    const QRect row = view.rowRect(0);
    const int y = row.top() + row.height() / 2;
    const QRgb border = TimelineView::pairBorderColor().rgb();
    QCOMPARE(image.pixel(int(view.xForTime(400)), y), TimelineView::chunkColor(wire::SpanKind::Forward, 1).rgb());
    QVERIFY(TimelineView::chunkColor(wire::SpanKind::Forward, 1) != TimelineView::kindColor(wire::SpanKind::Forward));
    QCOMPARE(image.pixel(int(view.xForTime(1500)), y), TimelineView::kindColor(wire::SpanKind::Forward).rgb());
    QCOMPARE(image.pixel(int(view.xForTime(2300)), y), TimelineView::chunkColor(wire::SpanKind::Backward, 1).rgb());
    // The border: F's first column, W's last, and the top line across the pair.
    QCOMPARE(image.pixel(int(view.xForTime(1000)), y), border);
    QCOMPARE(image.pixel(int(view.xForTime(3000)) - 1, y), border);
    int top = row.top();
    while (top < row.bottom() && image.pixel(int(view.xForTime(2300)), top) != border)
        ++top;
    QVERIFY2(top < y, "no top border over the pair's B");
    QCOMPARE(image.pixel(int(view.xForTime(1500)), top), border);
    QCOMPARE(image.pixel(int(view.xForTime(2800)), top), border);
    // The unpaired F has none.
    QVERIFY(image.pixel(int(view.xForTime(400)), top) != border);
}

void TestTimelineView::scheduleFigures_data()
{
    QTest::addColumn<QString>("schedule");
    QTest::addColumn<int>("chunks");
    for (const auto& [name, chunks] : {std::pair("gpipe", 1), std::pair("1f1b", 1), std::pair("interleaved", 2),
                                       std::pair("zb-h1", 1), std::pair("zb-v", 2), std::pair("dualpipev", 2)})
        QTest::newRow(name) << QString::fromLatin1(name) << chunks;
}

void TestTimelineView::scheduleFigures()
{
    // The Designer's picture of each schedule (docs/schedules.md): 4 stages, 8
    // micro-batches, unit costs. Every op of the simulation is painted on its stage's row in its
    // kind's colour and its chunk's shade, exactly where the simulation puts it.
    // MESHBENCH_SCREENSHOT_DIR=dir saves schedule-<name>.png there.
    QFETCH(QString, schedule);
    QFETCH(int, chunks);
    const plan::LoadResult loaded = plan::loadJobSpec(nlohmann::json{
        {"model", {{"layers", 8}, {"hidden", 64}, {"heads", 4}, {"vocab", 256}, {"seq_len", 32}}},
        {"parallel",
         {{"pp", 4}, {"microbatches", 8}, {"schedule", schedule.toStdString()}, {"virtual_stages", chunks}}},
        {"cluster", {{"nodes", 1}, {"devices_per_node", 4}, {"device", "cpu"}}}});
    QVERIFY2(loaded.valid(), loaded.errors.empty() ? "" : loaded.errors.front().message.c_str());
    const plan::Plan plan = plan::makePlan(*loaded.spec, plan::UnitCosts{1, 1, 1});
    QVERIFY(plan.simulation.completed);
    TimelineData data;
    data.loadPlan(plan);
    TimelineView view;
    const QImage image = rendered(view, data, 960, 130 + 4 * 24, data.store().endTime());
    int ops = 0;
    for (std::size_t s = 0; s < plan.simulation.timeline.size(); ++s) {
        const QRect row = view.rowRect(int(s));
        QVERIFY(image.rect().contains(row));
        for (const plan::TimedOp& op : plan.simulation.timeline[s]) {
            if (!plan::isCompute(op.op.kind))
                continue;
            // The block's commonest colour along a line above its centred micro-batch number, inside
            // its edges (a darker left edge, a pair's border) and across any grid line.
            const int left = int(view.xForTime(std::llround(op.begin * 1e6))) + 2;
            const int right = int(view.xForTime(std::llround(op.end * 1e6))) - 2;
            std::map<QRgb, int> counts;
            for (int x = left; x < right; ++x)
                ++counts[image.pixel(x, row.top() + 2)];
            QVERIFY(!counts.empty());
            const auto commonest = std::max_element(counts.begin(), counts.end(),
                                                    [](const auto& a, const auto& b) { return a.second < b.second; });
            const QRgb expected = TimelineView::chunkColor(plan::spanKindOf(op.op.kind), op.op.chunk).rgb() & 0xffffff;
            QVERIFY2((commonest->first & 0xffffff) == expected,
                     qPrintable(QStringLiteral("stage %1 %2 mb %3 chunk %4 at [%5, %6]: %7, not %8")
                                    .arg(s)
                                    .arg(QString::fromLatin1(plan::opKindName(op.op.kind).data()))
                                    .arg(op.op.microbatch)
                                    .arg(op.op.chunk)
                                    .arg(left)
                                    .arg(right)
                                    .arg(commonest->first & 0xffffff, 6, 16)
                                    .arg(expected, 6, 16)));
            ++ops;
        }
    }
    QCOMPARE(ops, 4 * 8 * chunks * (plan.schedule.splitBackward() ? 3 : 2));
    if (const QByteArray dir = qgetenv("MESHBENCH_SCREENSHOT_DIR"); !dir.isEmpty())
        QVERIFY(image.save(QStringLiteral("%1/schedule-%2.png").arg(QString::fromLocal8Bit(dir), schedule)));
}

void TestTimelineView::collapsedStageIsOneSummaryRow()
{
    TimelineData data;
    fillSmall(data);
    TimelineView view;
    view.setData(&data);
    sizePlot(view, 200);
    const QRect row0 = view.rowRect(0);
    // Clicking the stage header in the label column collapses it.
    QTest::mouseClick(&view, Qt::LeftButton, {}, QPoint(20, row0.top() - 5));
    QVERIFY(view.isStageCollapsed(0));
    QVERIFY(view.rowRect(0).isEmpty());
    QVERIFY(view.rowRect(1).isEmpty());
    QImage image(view.size(), QImage::Format_RGB32);
    view.render(&image);
    // The header row shows the stage's summed busy time: F dominates at t=100 (rank 1's F).
    const QRgb summary = image.pixel(int(view.xForTime(1500)), row0.top() - 9);
    const QRgb forward = TimelineView::kindColor(wire::SpanKind::Forward).rgb();
    QVERIFY(qBlue(summary) > qRed(summary));
    QVERIFY(summary != view.palette().color(QPalette::AlternateBase).rgb());
    QCOMPARE(summary, forward);  // both ranks busy with F there: fully opaque
    QTest::mouseClick(&view, Qt::LeftButton, {}, QPoint(20, row0.top() - 5));
    QVERIFY(!view.isStageCollapsed(0));
    QCOMPARE(view.rowRect(0), row0);
}

void TestTimelineView::overlayAlignsToStep()
{
    TimelineData measured;
    TimelineSpan a = span(10'000, 11'000, wire::SpanKind::Forward);
    a.step = 4;
    measured.appendSpans(0, std::span(&a, 1));
    TimelineData predicted;
    predicted.setRows({{0, 0, "stage 0"}});
    const TimelineSpan p = span(0, 500, wire::SpanKind::Backward);
    predicted.appendSpans(0, std::span(&p, 1));

    TimelineView view;
    view.setData(&measured);
    view.setOverlay(&predicted);
    sizePlot(view, 200);
    QVERIFY(!view.alignOverlayToStep(5));
    QVERIFY(view.alignOverlayToStep(4));
    QCOMPARE(view.overlayOffset(), std::int64_t(10'000));
    view.setVisibleRange(10'000, 12'000);  // 10 ns per pixel
    QImage image(view.size(), QImage::Format_RGB32);
    view.render(&image);
    const QRect row = view.rowRect(0);
    const int x = int(view.xForTime(10'250));
    // The predicted B is a band at the top of the row; the measured F lies below it.
    QCOMPARE(image.pixel(x, row.top() + 2), TimelineView::kindColor(wire::SpanKind::Backward).rgb());
    QCOMPARE(image.pixel(x, row.bottom() - 2), TimelineView::kindColor(wire::SpanKind::Forward).rgb());
    QCOMPARE(image.pixel(int(view.xForTime(10'750)), row.top() + 2), view.palette().color(QPalette::Base).rgb());
    QVERIFY(view.toolTipTextAt(QPoint(x, row.top() + 2)).startsWith(QStringLiteral("predicted")));
}

void TestTimelineView::scrolledRowsPaintWhereRowRectSays()
{
    // 30 ranks over 3 stages, more than fit in 200 px; rank r is busy with F over [100 r, 100 r + 100)
    // and idle elsewhere, so every row's pixels say which rank was drawn there.
    TimelineData data;
    std::vector<RowInfo> rows;
    rows.reserve(30);
    for (int r = 0; r < 30; ++r)
        rows.push_back({r, r / 10, "rank " + std::to_string(r)});
    data.setRows(rows);
    for (int r = 0; r < 30; ++r) {
        const TimelineSpan busy = span(100 * r, 100 * r + 100, wire::SpanKind::Forward);
        data.appendSpans(std::size_t(r), std::span(&busy, 1));
    }
    TimelineView view;
    view.setData(&data);
    view.resize(view.plotArea().left() + 300, 200);  // the vertical scroll bar takes its width from the plot
    view.setVisibleRange(0, 3000);
    const QRgb base = view.palette().color(QPalette::Base).rgb();
    const QRgb forward = TimelineView::kindColor(wire::SpanKind::Forward).rgb();
    const QRect plot = view.plotArea();
    // Scrolled by a part of a row, then far down: the first visible row is cut by the plot's top.
    for (int notches : {1, 7}) {
        sendWheel(view, plot.center(), -120 * notches, Qt::ShiftModifier);
        QImage image(view.size(), QImage::Format_RGB32);
        view.render(&image);
        int checked = 0;
        for (int r = 0; r < 30; ++r) {
            const QRect row = view.rowRect(r);
            const int y = row.top() + row.height() / 2;
            if (y <= plot.top() || y >= plot.bottom())
                continue;
            QCOMPARE(image.pixel(int(view.xForTime(100 * r + 50)), y), forward);
            QCOMPARE(image.pixel(int(view.xForTime((100 * r + 1550) % 3000)), y), base);
            ++checked;
        }
        QVERIFY2(checked >= 5, qPrintable(QString::number(checked)));
    }
    QVERIFY(view.rowRect(0).top() < plot.top());  // really scrolled
}

QTEST_MAIN(TestTimelineView)
#include "tst_timeline_view.moc"
