// The timeline's row layout on a hand-built store: where the lines lie (headers, rows, a collapsed
// stage), y to line, x to span with the hover tolerance, and the overlay's band and row choice.
// Every position below is worked by hand.
#include "timeline/timeline_layout.h"

#include <QTest>

using namespace meshbench;
using namespace meshbench::app;

namespace {

TimelineSpan span(std::int64_t begin, std::int64_t end, wire::SpanKind kind)
{
    TimelineSpan s;
    s.beginNs = begin;
    s.endNs = end;
    s.kind = kind;
    return s;
}

// Ranks 0 and 1 on stage 0, rank 2 on stage 1. Rank 0: F [100, 500), B [600, 900), idle [900, 1300),
// W [1200, 1300) (indices 0 to 3, by begin); rank 1: nothing; rank 2: F [0, 2000).
TimelineStore handBuilt()
{
    TimelineStore store;
    store.setRows({{0, 0, "rank 0"}, {1, 0, "rank 1"}, {2, 1, "rank 2"}});
    const std::vector<TimelineSpan> rank0{
        span(100, 500, wire::SpanKind::Forward), span(600, 900, wire::SpanKind::Backward),
        span(900, 1300, wire::SpanKind::Idle), span(1200, 1300, wire::SpanKind::WeightGrad)};
    store.append(0, rank0);
    const TimelineSpan whole = span(0, 2000, wire::SpanKind::Forward);
    store.append(2, std::span(&whole, 1));
    return store;
}

}  // namespace

class TestTimelineLayout : public QObject {
    Q_OBJECT
private slots:
    void linesStackHeadersAndRows();
    void collapsedStageIsItsHeader();
    void yFindsTheLine();
    void xFindsTheSpan();
    void overlayBandAndRows();
};

void TestTimelineLayout::linesStackHeadersAndRows()
{
    const TimelineStore store = handBuilt();
    TimelineLayout layout;
    layout.setRowHeight(20);
    layout.build(&store);
    // Header 0 [0, 18), rank 0 [18, 38), rank 1 [38, 58), header 1 [58, 76), rank 2 [76, 96).
    const std::vector<TimelineLayout::Line>& lines = layout.lines();
    QCOMPARE(lines.size(), std::size_t(5));
    const int tops[] = {0, 18, 38, 58, 76};
    const int rows[] = {-1, 0, 1, -1, 2};
    const int stages[] = {0, 0, 0, 1, 1};
    for (std::size_t i = 0; i < lines.size(); ++i) {
        QCOMPARE(lines[i].top, tops[i]);
        QCOMPARE(lines[i].row, rows[i]);
        QCOMPARE(lines[i].stage, stages[i]);
        QCOMPARE(lines[i].height, rows[i] < 0 ? TimelineLayout::kHeaderHeight : 20);
    }
    QCOMPARE(lines[0].firstRow, 0);
    QCOMPARE(lines[0].rowCount, 2);
    QCOMPARE(lines[3].firstRow, 2);
    QCOMPARE(lines[3].rowCount, 1);
    QCOMPARE(layout.contentHeight(), 96);
    QCOMPARE(layout.lineOfRow(2)->top, 76);
    QVERIFY(!layout.lineOfRow(3));
    QVERIFY(!layout.lineOfRow(-1));

    layout.build(nullptr);
    QVERIFY(layout.lines().empty());
    QCOMPARE(layout.contentHeight(), 0);
}

void TestTimelineLayout::collapsedStageIsItsHeader()
{
    const TimelineStore store = handBuilt();
    TimelineLayout layout;
    layout.setRowHeight(20);
    layout.setStageCollapsed(0, true);
    QVERIFY(layout.isStageCollapsed(0));
    QVERIFY(!layout.isStageCollapsed(1));
    layout.build(&store);
    // Header 0 [0, 18), header 1 [18, 36), rank 2 [36, 56).
    QCOMPARE(layout.lines().size(), std::size_t(3));
    QCOMPARE(layout.contentHeight(), 56);
    QVERIFY(!layout.lineOfRow(0));
    QVERIFY(!layout.lineOfRow(1));
    QCOMPARE(layout.lineOfRow(2)->top, 36);
    QCOMPARE(layout.lineAt(20)->stage, 1);
    QCOMPARE(layout.lineAt(20)->row, -1);
    layout.setStageCollapsed(0, false);
    layout.build(&store);
    QCOMPARE(layout.contentHeight(), 96);
}

void TestTimelineLayout::yFindsTheLine()
{
    const TimelineStore store = handBuilt();
    TimelineLayout layout;
    layout.setRowHeight(20);
    layout.build(&store);
    const std::pair<int, int> expected[] = {{0, -1}, {17, -1}, {18, 0}, {37, 0}, {38, 1}, {57, 1}, {58, -1}, {95, 2}};
    for (const auto& [y, row] : expected) {
        const TimelineLayout::Line* line = layout.lineAt(y);
        QVERIFY2(line, qPrintable(QString::number(y)));
        QCOMPARE(line->row, row);
    }
    QCOMPARE(layout.lineAt(58)->stage, 1);
    QVERIFY(!layout.lineAt(-1));
    QVERIFY(!layout.lineAt(96));
}

void TestTimelineLayout::xFindsTheSpan()
{
    const TimelineStore store = handBuilt();
    TimelineLayout layout;
    layout.setRowHeight(20);
    layout.build(&store);
    const TimeScale scale{0, 2000, 200};  // 10 ns per pixel: a tolerance of 2 px is 20 ns
    // The index of the span at (y, x), -1 for none.
    const auto indexAt = [&](int y, double x) {
        const auto hit = layout.hitAt(y, x, scale, store, nullptr, 0);
        return hit ? int(hit->index) : -1;
    };
    const int rank0 = 28;               // the middle of rank 0's line
    QCOMPARE(indexAt(rank0, 30), 0);    // t = 300, inside F
    QCOMPARE(indexAt(rank0, 51.5), 0);  // t = 515, 15 ns after F
    QCOMPARE(indexAt(rank0, 55), -1);   // t = 550, 50 ns from F and from B
    QCOMPARE(indexAt(rank0, 58.5), 1);  // t = 585, 15 ns before B
    QCOMPARE(indexAt(rank0, 100), 2);   // t = 1000, idle alone
    QCOMPARE(indexAt(rank0, 125), 3);   // t = 1250, W over the idle
    QCOMPARE(indexAt(rank0, 140), -1);  // t = 1400, 100 ns after W
    QCOMPARE(indexAt(48, 30), -1);      // rank 1: no spans
    QCOMPARE(indexAt(10, 30), -1);      // a header
    QCOMPARE(indexAt(86, 199), 0);      // rank 2's F
    const auto hit = layout.hitAt(86, 199, scale, store, nullptr, 0);
    QCOMPARE(hit->row, &store.row(2));
    QVERIFY(!hit->predicted);

    QCOMPARE(TimelineLayout::spanNear(store.row(0), 499, 0).value_or(99), std::size_t(0));
    QCOMPARE(TimelineLayout::spanNear(store.row(0), 500, 0).value_or(99), std::size_t(0));  // at F's end
    QVERIFY(!TimelineLayout::spanNear(store.row(0), 501, 0));
    QCOMPARE(TimelineLayout::spanNear(store.row(0), 520, 20).value_or(99), std::size_t(0));
    QVERIFY(!TimelineLayout::spanNear(store.row(0), 521, 20));
}

void TestTimelineLayout::overlayBandAndRows()
{
    const TimelineStore store = handBuilt();
    // Stage 0: rank 0 W, rank 1 B, rank 2 F, all [0, 300); stage 1: rank 7 optimizer [0, 300).
    TimelineStore overlay;
    overlay.setRows({{0, 0, "p0"}, {1, 0, "p1"}, {2, 0, "p2"}, {7, 1, "p7"}});
    const wire::SpanKind kinds[] = {wire::SpanKind::WeightGrad, wire::SpanKind::Backward, wire::SpanKind::Forward,
                                    wire::SpanKind::Optimizer};
    const int ranks[] = {0, 1, 2, 7};
    for (int k = 0; k < 4; ++k) {
        const TimelineSpan s = span(0, 300, kinds[k]);
        overlay.append(ranks[k], std::span(&s, 1));
    }
    // The same rank's row where it is of the same stage, else the stage's first.
    QCOMPARE(TimelineLayout::overlayRowFor(store.row(0), &overlay)->info().rank, 0);
    QCOMPARE(TimelineLayout::overlayRowFor(store.row(1), &overlay)->info().rank, 1);
    QCOMPARE(TimelineLayout::overlayRowFor(store.row(2), &overlay)->info().rank, 7);
    QVERIFY(!TimelineLayout::overlayRowFor(store.row(0), nullptr));

    TimelineLayout layout;
    layout.setRowHeight(20);
    layout.build(&store);
    QCOMPARE(layout.bandHeight(&overlay), 5);  // a quarter of the row
    QCOMPARE(layout.bandHeight(nullptr), 0);
    const TimelineStore empty;
    QCOMPARE(layout.bandHeight(&empty), 0);
    QCOMPARE(TimelineLayout::spanTop(5), 7);
    QCOMPARE(TimelineLayout::spanTop(0), 1);

    // Rank 1's line is [38, 58): its band reaches y = 43. Overlay time t is drawn at t + 1000, so
    // x = 110 (t = 1100) is the overlay's t = 100, inside rank 1's B.
    const TimeScale scale{0, 2000, 200};
    const auto band = layout.hitAt(41, 110, scale, store, &overlay, 1000);
    QVERIFY(band);
    QVERIFY(band->predicted);
    QCOMPARE(band->row->info().rank, 1);
    QCOMPARE(band->row->kind(band->index), wire::SpanKind::Backward);
    QVERIFY(layout.hitAt(43, 110, scale, store, &overlay, 1000)->predicted);
    QVERIFY(!layout.hitAt(44, 110, scale, store, &overlay, 1000));  // below the band: rank 1 has no spans
    QVERIFY(!layout.hitAt(41, 140, scale, store, &overlay, 1000));  // overlay t = 400, 100 ns after its B
    // Rank 0's band at x = 110 is its W; below the band, at t = 1100, rank 0's own idle span.
    const auto band0 = layout.hitAt(20, 110, scale, store, &overlay, 1000);
    QVERIFY(band0->predicted);
    QCOMPARE(band0->row->kind(band0->index), wire::SpanKind::WeightGrad);
    const auto measured = layout.hitAt(30, 110, scale, store, &overlay, 1000);
    QVERIFY(!measured->predicted);
    QCOMPARE(measured->index, std::size_t(2));
}

QTEST_MAIN(TestTimelineLayout)
#include "tst_timeline_layout.moc"
