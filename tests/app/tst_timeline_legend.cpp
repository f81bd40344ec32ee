// The span-kind legend: every kind the timeline paints is in exactly one entry, whose swatch shows
// the timeline's own colour the way the timeline draws it (thin for transfers, hatched for
// data-parallel reductions); the legend is one short line at 1000 px and wraps when narrow; its
// text follows the palette.
#include "timeline/span_kind_legend.h"
#include "timeline/timeline_store.h"
#include "timeline/timeline_style.h"
#include "timeline/timeline_view.h"

#include <QtTest>

#include <set>

using namespace meshbench;
using app::SpanKindLegend;
using app::TimelineView;

namespace {

QImage render(SpanKindLegend& legend, int width)
{
    legend.resize(width, legend.heightForWidth(width));
    return legend.grab().toImage().convertToFormat(QImage::Format_RGB32);
}

std::set<QRgb> colorsIn(const QImage& image, const QRect& rect)
{
    std::set<QRgb> colors;
    for (int y = rect.top(); y <= rect.bottom(); ++y)
        for (int x = rect.left(); x <= rect.right(); ++x)
            colors.insert(image.pixel(x, y) & 0xffffff);
    return colors;
}

QRgb rgb(const QColor& color) { return color.rgb() & 0xffffff; }

}  // namespace

class TestTimelineLegend : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void everyPaintedKindHasOneEntryInTheTimelinesColour()
    {
        SpanKindLegend legend;
        const QImage image = render(legend, 1000);
        std::map<wire::SpanKind, int> seen;
        std::set<QRgb> entryColors;
        std::set<app::KindClass> classes;
        for (std::size_t i = 0; i < legend.entries().size(); ++i) {
            const SpanKindLegend::Entry& entry = legend.entries()[i];
            QVERIFY(!entry.kinds.empty());
            QVERIFY(!entry.name.isEmpty());
            const QRect swatch = legend.swatchRect(i);
            QVERIFY(image.rect().contains(swatch));
            const wire::SpanKind first = entry.kinds.front();
            for (wire::SpanKind kind : entry.kinds) {
                ++seen[kind];
                QCOMPARE(TimelineView::kindColor(kind), TimelineView::kindColor(first));  // painted alike
            }
            const std::optional<app::KindClass> cls = app::kindClassOf(first);
            if (!cls) {
                QCOMPARE(first, wire::SpanKind::Idle);
                continue;
            }
            classes.insert(*cls);
            const QColor color = TimelineView::kindColor(first);
            QVERIFY2(entryColors.insert(rgb(color)).second, qPrintable(entry.name));
            const std::set<QRgb> inSwatch = colorsIn(image, swatch);
            switch (*cls) {
            case app::KindClass::DataParallelReduce:
                // Hatched as the timeline hatches it: its light fill and its dark diagonal only.
                QCOMPARE(inSwatch, (std::set<QRgb>{rgb(color.lighter(130)), rgb(color.darker(160))}));
                break;
            case app::KindClass::PointToPoint:
                // A thin bar: the colour in the middle, the background above and below.
                QCOMPARE(image.pixel(swatch.center()) & 0xffffff, rgb(color));
                QCOMPARE(image.pixel(swatch.center().x(), swatch.top()) & 0xffffff,
                         rgb(legend.palette().color(QPalette::Window)));
                QCOMPARE(image.pixel(swatch.center().x(), swatch.bottom()) & 0xffffff,
                         rgb(legend.palette().color(QPalette::Window)));
                break;
            default:
                QCOMPARE(inSwatch, std::set<QRgb>{rgb(color)});
            }
        }
        // Every kind once: Idle as the gap entry, the others in a coloured one.
        QCOMPARE(int(seen.size()), wire::kSpanKinds);
        for (const auto& [kind, count] : seen)
            QVERIFY2(count == 1, wire::spanKindName(kind).data());
        QCOMPARE(int(classes.size()), app::kKindClasses);
        // Send and receive of a tensor share an entry; activations and gradients differ in colour.
        QCOMPARE(legend.entries().size(), std::size_t(8));
    }

    // A schedule's marks come after the kinds, drawn as the view draws them: chunk 0 then chunk 1 of
    // the forward colour, and the forward and backward halves of an F&B pair inside its border.
    void scheduleMarksAreDrawnAsTheViewDrawsThem()
    {
        using Mark = SpanKindLegend::Mark;
        SpanKindLegend legend;
        const std::size_t kinds = legend.entries().size();
        legend.setScheduleMarks(true, true);
        QCOMPARE(legend.entries().size(), kinds + 2);
        QCOMPARE(legend.entries()[kinds].mark, Mark::LaterChunk);
        QCOMPARE(legend.entries()[kinds + 1].mark, Mark::OverlappedPair);
        const QImage image = render(legend, 1200);
        const QRect chunk = legend.swatchRect(kinds);
        const int y = chunk.center().y();  // the marks may wrap onto a line of their own
        QCOMPARE(image.pixel(chunk.left() + 1, y) & 0xffffff,
                 rgb(app::TimelineStyle::chunkColor(wire::SpanKind::Forward, 0)));
        QCOMPARE(image.pixel(chunk.right() - 1, y) & 0xffffff,
                 rgb(app::TimelineStyle::chunkColor(wire::SpanKind::Forward, 1)));
        QVERIFY(app::TimelineStyle::chunkColor(wire::SpanKind::Forward, 1) !=
                app::TimelineStyle::kindColor(wire::SpanKind::Forward));
        const QRect pair = legend.swatchRect(kinds + 1);
        const QRgb border = rgb(app::TimelineStyle::pairBorderColor());
        for (const QPoint& edge : {pair.topLeft(), pair.bottomRight(), QPoint(pair.center().x(), pair.top())})
            QCOMPARE(image.pixel(edge) & 0xffffff, border);
        QCOMPARE(image.pixel(pair.left() + 2, pair.center().y()) & 0xffffff,
                 rgb(TimelineView::kindColor(wire::SpanKind::Forward)));
        QCOMPARE(image.pixel(pair.right() - 2, pair.center().y()) & 0xffffff,
                 rgb(TimelineView::kindColor(wire::SpanKind::Backward)));

        // Set again for another schedule: only what it has, never twice.
        legend.setScheduleMarks(false, true);
        QCOMPARE(legend.entries().size(), kinds + 1);
        QCOMPARE(legend.entries().back().mark, Mark::OverlappedPair);
        legend.setScheduleMarks(false, false);
        QCOMPARE(legend.entries().size(), kinds);
        for (const SpanKindLegend::Entry& entry : legend.entries())
            QCOMPARE(entry.mark, Mark::None);
    }

    void oneShortLineAtTheMonitorsWidth()
    {
        SpanKindLegend legend;
        QVERIFY2(legend.sizeHint().height() <= 22, qPrintable(QString::number(legend.sizeHint().height())));
        QVERIFY2(legend.sizeHint().width() <= 1000, qPrintable(QString::number(legend.sizeHint().width())));
        QCOMPARE(legend.heightForWidth(1000), legend.sizeHint().height());
        render(legend, 1000);
        const int top = legend.swatchRect(0).top();
        for (std::size_t i = 1; i < legend.entries().size(); ++i) {
            QCOMPARE(legend.swatchRect(i).top(), top);
            QVERIFY(legend.swatchRect(i).left() > legend.swatchRect(i - 1).right());
        }
        // Narrow: more lines, none wider than the widget.
        const int narrow = legend.minimumSizeHint().width();
        render(legend, narrow);
        QVERIFY(legend.heightForWidth(narrow) > 2 * legend.sizeHint().height());
        for (std::size_t i = 0; i < legend.entries().size(); ++i)
            QVERIFY(legend.swatchRect(i).right() < narrow);
    }

    // MESHBENCH_SCREENSHOT_DIR=dir saves span-kind-legend-light.png and -dark.png there.
    void textFollowsThePalette()
    {
        const QString dir = qEnvironmentVariable("MESHBENCH_SCREENSHOT_DIR");
        for (const auto& [window, text] : {std::pair(QColor(255, 255, 255), QColor(0, 0, 0)),
                                           std::pair(QColor(30, 30, 30), QColor(235, 235, 235))}) {
            SpanKindLegend legend;
            QPalette palette = legend.palette();
            palette.setColor(QPalette::Window, window);
            palette.setColor(QPalette::WindowText, text);
            legend.setPalette(palette);
            const QImage image = render(legend, 1000);
            if (!dir.isEmpty())
                QVERIFY(image.save(QStringLiteral("%1/span-kind-legend-%2.png")
                                       .arg(dir, window.lightness() > 128 ? "light" : "dark")));
            // The first name: between the first two swatches, in the text colour, on the window.
            const QRect name(legend.swatchRect(0).right() + 2, 0,
                             legend.swatchRect(1).left() - legend.swatchRect(0).right() - 4, image.height());
            const std::set<QRgb> colors = colorsIn(image, name);
            QVERIFY(colors.count(rgb(text)));
            QVERIFY(colors.count(rgb(window)));
        }
    }
};

QTEST_MAIN(TestTimelineLegend)
#include "tst_timeline_legend.moc"
