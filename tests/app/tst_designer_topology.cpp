// TopologyView: the device under a point, the rank placed on it, stage colours in the drawing, TP
// groups leaving their NVLink domain, and the aggregated drawing of large clusters.
#include "designer/topology_view.h"

#include <QApplication>
#include <QHelpEvent>
#include <QImage>
#include <QTest>
#include <QToolTip>

#include <cmath>

using namespace meshbench::app;

namespace {

const QString kJobs = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/");

std::optional<meshbench::plan::JobSpec> specOf(const QString& file, const nlohmann::json& patch = {})
{
    JobDocument doc;
    if (!doc.loadFile(kJobs + file))
        return std::nullopt;
    if (!patch.is_null())
        doc.merge(patch);
    return doc.spec();
}

QImage renderOf(TopologyView& view)
{
    QImage image(view.size(), QImage::Format_ARGB32);
    image.fill(Qt::transparent);
    view.render(&image);
    return image;
}

// A point inside the cell away from its centred label and its outline.
QPoint fillPoint(const QRectF& cell)
{
    return (cell.topLeft() + QPointF(cell.width() * 0.2, cell.height() * 0.8)).toPoint();
}

}  // namespace

class TestDesignerTopology : public QObject {
    Q_OBJECT
private slots:
    void mapsPointsToDevicesAndRanks()
    {
        TopologyView view;
        view.resize(640, 420);
        view.setSpec(specOf("demo.json"));  // 1 node x 8 devices; tp 2, dp 2, pp 2
        QVERIFY(!view.isAggregated());
        for (int d = 0; d < 8; ++d) {
            const QRectF cell = view.deviceRect(d);
            QVERIFY(!cell.isEmpty());
            QCOMPARE(view.deviceAt(cell.center()), d);
            QCOMPARE(view.rankOnDevice(d), d);  // by-slot placement on one node
        }
        QCOMPARE(view.deviceAt(QPointF(1, 1)), -1);
        // Rank 5 = tp 1 + 2 * (dp 0) + 4 * (pp 1).
        const QString tip = view.toolTipTextAt(view.deviceRect(5).center());
        QVERIFY2(tip.contains("rank 5: dp 0, pp 1, tp 1, ep 0"), qPrintable(tip));
        QVERIFY(!view.tensorGroupCrossesDomain(5));
    }

    void smallClustersAreDrawnLargeAndCentred()
    {
        TopologyView view;
        view.setSpec(specOf("demo.json"));
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        // At 1000 x 700 a row of 8 cells of the largest size fits; at 360 x 240 none does.
        for (const auto& [size, largest] : {std::pair{QSize(1000, 700), true}, std::pair{QSize(360, 240), false}}) {
            view.resize(size);
            QTRY_COMPARE(view.size(), size);
            QRectF bounds;
            for (int d = 0; d < 8; ++d) {
                const QRectF cell = view.deviceRect(d);
                QCOMPARE(cell.width(), cell.height());
                QCOMPARE(cell.width() == TopologyView::kMaxCell, largest);
                QVERIFY(view.rect().contains(cell.toAlignedRect()));
                bounds = bounds.united(cell);
            }
            QVERIFY2(std::abs(bounds.center().x() - size.width() / 2.0) <= 1,
                     qPrintable(QString::number(bounds.center().x())));
            // Hovering the centre of device k shows rank k (by-slot placement on one node) and its
            // coordinates: tp fastest, then dp, then pp; ep is the position of dp in its EP group (ep 2).
            for (int k = 0; k < 8; ++k) {
                const QPoint centre = view.deviceRect(k).center().toPoint();
                QTest::mouseMove(&view, centre);
                QHelpEvent hover(QEvent::ToolTip, centre, view.mapToGlobal(centre));
                QApplication::sendEvent(&view, &hover);
                const int tp = k % 2, dp = k / 2 % 2, pp = k / 4, ep = dp % 2;
                const QString expected =
                    QString("rank %1: dp %2, pp %3, tp %4, ep %5").arg(k).arg(dp).arg(pp).arg(tp).arg(ep);
                QVERIFY2(QToolTip::text().contains(expected), qPrintable(QToolTip::text() + " != " + expected));
            }
        }
    }

    void coloursDevicesByStage()
    {
        TopologyView view;
        view.resize(640, 420);
        view.setSpec(specOf("demo.json"));
        const QImage image = renderOf(view);
        for (int d = 0; d < 8; ++d) {
            const int stage = d / 4;
            QCOMPARE(image.pixelColor(fillPoint(view.deviceRect(d))), TopologyView::stageColor(stage));
        }
        QVERIFY(TopologyView::stageColor(0) != TopologyView::stageColor(1));
    }

    void clickSelectsAllGroups()
    {
        TopologyView view;
        view.resize(640, 420);
        view.setSpec(specOf("demo.json"));
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QTest::mouseClick(&view, Qt::LeftButton, {}, view.deviceRect(5).center().toPoint());
        QCOMPARE(view.selectedDevice(), 5);
        QTest::mouseClick(&view, Qt::LeftButton, {}, QPoint(1, 1));
        QCOMPARE(view.selectedDevice(), -1);
    }

    void warnsWhenTensorGroupsCrossNodes()
    {
        // 2 nodes x 4 devices, NVLink domain = node, tp 8: every TP group spans both nodes.
        const nlohmann::json patch = {{"model", {{"heads", 8}, {"kv_heads", 8}}},
                                      {"parallel", {{"tp", 8}, {"dp", 1}, {"pp", 1}, {"ep", 1}}},
                                      {"cluster", {{"nodes", 2}, {"devices_per_node", 4}, {"nvlink_domain", 4}}}};
        TopologyView view;
        view.resize(640, 420);
        view.setSpec(specOf("demo.json", patch));
        for (int d = 0; d < 8; ++d)
            QVERIFY(view.tensorGroupCrossesDomain(d));
        // The red marker in the cell's top-right corner.
        const QImage image = renderOf(view);
        const QRectF cell = view.deviceRect(0);
        QCOMPARE(image.pixelColor((cell.topRight() + QPointF(-3, 3)).toPoint()), QColor(0xd6, 0x27, 0x28));

        // The header names the engine's first placement warning; too long for a narrow view, it is
        // elided there and whole in the header's tooltip.
        const auto spec = specOf("demo.json", patch);
        const auto warnings = meshbench::plan::placementWarnings(meshbench::plan::Mesh(spec->parallel), spec->cluster);
        QVERIFY(!warnings.empty());
        view.resize(240, 200);
        QCOMPARE(view.toolTipTextAt(QPointF(20, 16)), QStringLiteral("⚠ ") + QString::fromStdString(warnings.front()));
        QVERIFY(view.fontMetrics().horizontalAdvance(view.toolTipTextAt(QPointF(20, 16))) > view.width());
    }

    void aggregatesLargeClusters()
    {
        // GPT-3 on 128 DGX H100 nodes: tp 8, dp 8, pp 16 -> stage s holds nodes 8s .. 8s+7.
        TopologyView view;
        view.resize(800, 500);
        view.setSpec(specOf("gpt3-175b.json"));
        QVERIFY(view.isAggregated());
        const QImage image = renderOf(view);
        for (int node : {0, 9, 64, 127}) {
            const QRectF cell = view.deviceRect(node * 8);
            QCOMPARE(view.deviceAt(cell.center()), node * 8);
            QCOMPARE(image.pixelColor(cell.topLeft().toPoint() + QPoint(1, cell.height() > 6 ? 4 : 0)),
                     TopologyView::stageColor(node / 8));
        }
        QVERIFY(view.toolTipTextAt(view.deviceRect(9 * 8).center()).contains("node 9"));
    }

    void drawsSixteenThousandDevices()
    {
        // 2048 nodes x 8 = 16,384 devices.
        const nlohmann::json patch = {{"cluster", {{"preset", "dgx-h100x2048"}}},
                                      {"parallel", {{"dp", 128}, {"pp", 16}, {"tp", 8}}}};
        TopologyView view;
        view.resize(900, 600);
        view.setSpec(specOf("gpt3-175b.json", patch));
        const QImage image = renderOf(view);  // bench_designer times it
        QVERIFY(view.isAggregated());
        QCOMPARE(view.rankOnDevice(16383), 16383);
        const QRectF last = view.deviceRect(16383);
        QCOMPARE(view.deviceAt(last.center()), 2047 * 8);
        QCOMPARE(image.pixelColor(last.topLeft().toPoint()), TopologyView::stageColor(15));
    }
};

QTEST_MAIN(TestDesignerTopology)
#include "tst_designer_topology.moc"
