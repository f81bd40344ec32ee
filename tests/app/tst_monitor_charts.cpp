// The Monitor's charts fed through a RunState: the plotted values are the aggregates' own, the
// heat map's cells are the routed tokens, the memory bars stack to the rank's total, and every
// chart exports as PNG and PDF.
#include "monitor/bubble_chart.h"
#include "monitor/expert_load_view.h"
#include "monitor/memory_chart.h"
#include "monitor/monitor_charts.h"
#include "monitor/training_chart.h"

#include <qcustomplot.h>

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>

using namespace meshbench;
using app::RunState;

namespace {

// Memory is shown in decimal units, as device datasheets state capacities.
constexpr double kGB = 1e9;
constexpr double kMB = 1e6;

// dp 2 x pp 2 x tp 1 (4 ranks) on h100s; 4 layers, MoE layers 0 and 2 of 8 experts.
plan::JobSpec chartSpec()
{
    const plan::LoadResult loaded = plan::loadJobSpec(nlohmann::json::parse(R"({
      "name": "monitor charts test",
      "model": { "layers": 4, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 1024, "seq_len": 128,
                 "moe": { "experts": 8, "top_k": 2, "every_n_layers": 2 } },
      "parallel": { "dp": 2, "pp": 2, "tp": 1, "ep": 2, "schedule": "1f1b", "microbatches": 4 },
      "cluster": { "nodes": 1, "devices_per_node": 4, "device": "h100-sxm" }
    })"));
    if (!loaded.valid())
        qFatal("test spec is invalid: %s", loaded.errors.front().message.c_str());
    return *loaded.spec;
}

std::uint32_t routedTokens(int step, int layer, int expert)
{
    return std::uint32_t(100 + 10 * step + 3 * expert + layer + (expert == 5 ? 400 : 0));
}

live::StepAggregate stepAt(int step)
{
    live::StepAggregate s;
    s.step = step;
    s.bubble = 0.1 * (step + 1);
    s.plannedBubble = 0.999;  // the feed's figure; the chart must prefer the plan's own
    s.stages = {{0, 0.05 * (step + 1), std::nullopt, 2}, {1, 0.15 * (step + 1), std::nullopt, 2}};
    s.loss = 5.0 - 0.25 * step;
    s.auxLoss = 0.01 + 0.001 * step;
    s.tokensPerSecond = 1000.0 + step;
    s.mfu = 0.3 + 0.01 * step;
    for (int layer : {0, 2}) {
        live::ExpertLayerStats stats;
        stats.layer = layer;
        double max = 0, sum = 0;
        for (int e = 0; e < 8; ++e) {
            stats.routed.push_back(routedTokens(step, layer, e));
            stats.dropped.push_back(e == 5 ? 50u : 0u);
            max = std::max(max, double(stats.routed.back()));
            sum += stats.routed.back();
        }
        stats.imbalance = max / (sum / 8);
        stats.hottestExpert = 5;
        s.expertLayers.push_back(stats);
    }
    s.imbalanceP95 = s.expertLayers[0].imbalance;
    s.droppedFraction = 0.02;
    return s;
}

live::RankMemory memoryOf(std::uint32_t rank, std::int64_t timeNs, std::int64_t scale)
{
    live::RankMemory m;
    m.rank = rank;
    m.stage = int(rank / 2);
    m.timeNs = timeNs;
    m.current = {3 * scale, 2 * scale, 5 * scale, 7 * scale, scale};
    m.peak = {3 * scale, 2 * scale, 5 * scale, 9 * scale, 2 * scale};
    return m;
}

double valueAt(QCPGraph* graph, double key)
{
    const auto it = graph->data()->findBegin(key, false);
    return it != graph->data()->constEnd() && it->key == key ? it->value : qQNaN();
}

double barAt(QCPBars* bars, double key)
{
    const auto it = bars->data()->findBegin(key, false);
    return it != bars->data()->constEnd() && it->key == key ? it->value : qQNaN();
}

double cellAt(QCPColorMap* map, double key, double value)
{
    int k = 0, v = 0;
    map->data()->coordToCell(key, value, &k, &v);
    return map->data()->cell(k, v);
}

}  // namespace

class TestMonitorCharts : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void bubbleChartPlotsEveryStepAndThePlan()
    {
        RunState state;
        state.setSpec(chartSpec());
        app::BubbleChart chart;
        chart.setRunState(&state);
        QCOMPARE(chart.stageGraphCount(), 2);
        QCPGraph* overall = chart.overallGraph();
        for (int step = 0; step < 5; ++step)
            state.addStep(stepAt(step));
        QCOMPARE(chart.overallGraph(), overall);  // appended to, not rebuilt
        QCOMPARE(overall->dataCount(), 5);
        QCOMPARE(chart.stageGraph(1)->dataCount(), 5);
        for (int step = 0; step < 5; ++step) {
            QCOMPARE(valueAt(overall, step), 0.1 * (step + 1));
            QCOMPARE(valueAt(chart.stageGraph(0), step), 0.05 * (step + 1));
            QCOMPARE(valueAt(chart.stageGraph(1), step), 0.15 * (step + 1));
        }
        const double planned = state.plan()->simulation.overallBubbleRatio;
        QVERIFY(planned > 0 && planned < 0.9);
        QVERIFY(chart.plannedLine()->visible());
        QCOMPARE(chart.plannedLine()->point1->coords().y(), planned);
        QCOMPARE(chart.plannedLine()->point2->coords().y(), planned);
        QVERIFY(chart.plot()->yAxis->range().contains(0.5));

        // Without a plan, the feed's planned figure is the reference.
        RunState feedOnly;
        app::BubbleChart other;
        other.setRunState(&feedOnly);
        QVERIFY(!other.plannedLine()->visible());
        feedOnly.addStep(stepAt(0));
        QVERIFY(other.plannedLine()->visible());
        QCOMPARE(other.plannedLine()->point1->coords().y(), 0.999);

        // A seek drops the later steps: the chart follows.
        state.applyJobStatus({{"state", "seeking"}, {"step", 2}});
        QCOMPARE(chart.overallGraph()->dataCount(), 2);
    }

    void expertHeatmapCellsAreTheRoutedTokens()
    {
        RunState state;
        state.setSpec(chartSpec());
        app::ExpertLoadView view;
        view.setRunState(&state);
        // More steps than the map's first allocation, so that it grows.
        const int steps = 70;
        for (int step = 0; step < steps; ++step)
            state.addStep(stepAt(step));
        view.setLayer(2);
        QCOMPARE(view.layer(), 2);
        QCPColorMap* map = view.heatmap();
        for (int step : {0, 1, 33, 64, 69})
            for (int expert = 0; expert < 8; ++expert)
                QCOMPARE(cellAt(map, step, expert), double(routedTokens(step, 2, expert)));
        QCOMPARE(view.imbalanceGraph()->dataCount(), steps);
        // Step 3's worst layer is layer 0: routed 130 + 3e, expert 5 +400; max 545 / mean 1524 / 8.
        QCOMPARE(valueAt(view.imbalanceGraph(), 3), 545.0 / (1524.0 / 8));
        QCOMPARE(valueAt(view.droppedGraph(), 3), 0.02);
        QVERIFY2(view.hottestText().contains(QStringLiteral("layer 0 expert 5")), qPrintable(view.hottestText()));
        QVERIFY(view.hottestText().contains(QStringLiteral("step 69")));

        // Incremental: one more step adds one column of the chosen layer.
        state.addStep(stepAt(steps));
        QCOMPARE(cellAt(map, steps, 5), double(routedTokens(steps, 2, 5)));

        // Layers x experts of one step: rows are the MoE layers in order (0, 2).
        view.setMode(app::ExpertLoadView::Mode::LayersByExperts);
        view.setStep(7);
        for (int expert = 0; expert < 8; ++expert) {
            QCOMPARE(cellAt(view.heatmap(), expert, 0), double(routedTokens(7, 0, expert)));
            QCOMPARE(cellAt(view.heatmap(), expert, 1), double(routedTokens(7, 2, expert)));
        }
        view.setStep(-1);  // latest
        QCOMPARE(cellAt(view.heatmap(), 4, 1), double(routedTokens(steps, 2, 4)));
    }

    void memoryBarsStackToTheRankTotal()
    {
        RunState state;
        state.setSpec(chartSpec());
        app::MemoryChart chart;
        chart.setRunState(&state);
        for (std::uint32_t rank = 0; rank < 4; ++rank)
            state.updateMemory(memoryOf(rank, 1'000'000'000, (rank + 1) * 1'000'000'000LL));
        state.updateMemory(memoryOf(1, 3'000'000'000, 4'000'000'000LL));
        QCoreApplication::processEvents();  // memory updates are coalesced
        for (std::uint32_t rank = 0; rank < 4; ++rank) {
            const live::RankMemory& latest = state.memory().at(rank).latest;
            double sum = 0;
            for (int c = 0; c < wire::kMemoryCategories; ++c)
                sum += barAt(chart.categoryBars(wire::MemoryCategory(c)), rank);
            QVERIFY(qFuzzyCompare(sum * kGB, double(latest.currentTotal())));
            std::int64_t peak = 0;
            for (std::int64_t bytes : latest.peak)
                peak += bytes;
            QVERIFY(qFuzzyCompare(valueAt(chart.peakGraph(), rank) * kGB, double(peak)));
        }
        QVERIFY(chart.capacityLine()->visible());
        QCOMPARE(chart.capacityLine()->point1->coords().y(), state.deviceMemoryBytes() / kGB);

        chart.setHistoryRank(1);
        QCOMPARE(chart.historyGraph()->dataCount(), 2);
        QCOMPARE(valueAt(chart.historyGraph(), 2.0), 18.0 * 4'000'000'000 / kGB);
        state.updateMemory(memoryOf(1, 4'000'000'000, 1'000'000'000LL));
        QCoreApplication::processEvents();
        QCOMPARE(chart.historyGraph()->dataCount(), 3);
        QCOMPARE(valueAt(chart.historyGraph(), 3.0), 18.0 * 1'000'000'000 / kGB);
    }

    // A CPU-sized run against an 80 GB device: the axis follows the data, the capacity is a note;
    // once a rank holds more than 5% of the device, the axis reaches the capacity line again.
    void memoryAxisScalesToTheDataWhenFarBelowCapacity()
    {
        RunState state;
        state.setSpec(chartSpec());  // h100-sxm: 80e9 bytes
        QCOMPARE(state.deviceMemoryBytes(), 80e9);
        app::MemoryChart chart;
        chart.setRunState(&state);
        for (std::uint32_t rank = 0; rank < 4; ++rank)
            state.updateMemory(memoryOf(rank, 1'000'000'000, (rank + 1) * 100'000LL));
        QCoreApplication::processEvents();
        // Rank 3 peaks at 21 x 400,000 bytes = 8.4 MB, 1.25 x that = 10.5e6 bytes: MB, not GB.
        QCOMPARE(chart.unitBytes(), kMB);
        QCOMPARE(chart.plot()->yAxis->range().lower, 0.0);
        QCOMPARE(chart.plot()->yAxis->range().upper, 21 * 400'000 * 1.25 / kMB);
        QCOMPARE(chart.plot()->yAxis->label(), QStringLiteral("memory (MB)"));
        QCOMPARE(valueAt(chart.peakGraph(), 3), 21 * 400'000 / kMB);
        QCOMPARE(barAt(chart.categoryBars(wire::MemoryCategory::Activations), 3), 7 * 400'000 / kMB);
        QVERIFY(!chart.capacityLine()->visible());
        QVERIFY(chart.capacityNote()->visible());
        QCOMPARE(chart.capacityNote()->text(), QStringLiteral("capacity 80.00 GB off scale ↑"));
        chart.setHistoryRank(2);
        QCOMPARE(valueAt(chart.historyGraph(), 0.0), 18 * 300'000 / kMB);
        QCOMPARE(chart.historyGraph()->valueAxis()->label(), QStringLiteral("total (MB)"));
        if (const QString dir = qEnvironmentVariable("MESHBENCH_SCREENSHOT_DIR"); !dir.isEmpty()) {
            chart.resize(500, 300);
            QVERIFY(chart.grab().save(dir + QStringLiteral("/memory-off-scale.png")));
        }

        // 21 x 1.6e8 = 3.36 GB is 4.2% of 80 GB: still off scale.
        state.updateMemory(memoryOf(2, 2'000'000'000, 160'000'000LL));
        QCoreApplication::processEvents();
        QVERIFY(chart.capacityNote()->visible());
        QCOMPARE(chart.unitBytes(), kGB);
        QCOMPARE(chart.plot()->yAxis->range().upper, 21 * 160e6 * 1.25 / kGB);

        // 21 x 2e8 = 4.2 GB is 5.25%: the axis reaches 1.1 x the capacity, the line is back, and the
        // history is redrawn in GB.
        state.updateMemory(memoryOf(2, 3'000'000'000, 200'000'000LL));
        QCoreApplication::processEvents();
        QCOMPARE(chart.unitBytes(), kGB);
        QCOMPARE(chart.plot()->yAxis->range().upper, 80e9 * 1.1 / kGB);
        QCOMPARE(chart.plot()->yAxis->label(), QStringLiteral("memory (GB)"));
        QVERIFY(chart.capacityLine()->visible());
        QCOMPARE(chart.capacityLine()->point1->coords().y(), 80e9 / kGB);
        QVERIFY(!chart.capacityNote()->visible());
        QCOMPARE(chart.historyGraph()->dataCount(), 3);
        QCOMPARE(valueAt(chart.historyGraph(), 0.0), 18 * 300'000 / kGB);
        QCOMPARE(valueAt(chart.historyGraph(), 2.0), 18 * 200e6 / kGB);
        QCOMPARE(chart.historyGraph()->valueAxis()->label(), QStringLiteral("total (GB)"));
    }

    void trainingChartPlotsTheFigures()
    {
        RunState state;
        app::TrainingChart chart;
        chart.setRunState(&state);
        for (int step = 0; step < 5; ++step)
            state.addStep(stepAt(step));
        live::StepAggregate diverged = stepAt(5);
        diverged.loss = qQNaN();
        state.addStep(diverged);
        QCOMPARE(chart.lossGraph()->dataCount(), 5);
        QCOMPARE(chart.auxLossGraph()->dataCount(), 6);
        QCOMPARE(valueAt(chart.lossGraph(), 4), 4.0);
        QCOMPARE(valueAt(chart.tokensGraph(), 2), 1002.0);
        QCOMPARE(valueAt(chart.mfuGraph(), 3), 0.33);
        QVERIFY(chart.lossGraph()->valueAxis()->range().contains(5.0));
    }

    void chartsExportAsPngAndPdf()
    {
        RunState state;
        state.setSpec(chartSpec());
        for (int step = 0; step < 5; ++step)
            state.addStep(stepAt(step));
        state.updateMemory(memoryOf(0, 1'000'000'000, 1'000'000'000LL));
        app::MonitorCharts charts;
        charts.setRunState(&state);
        charts.resize(1000, 700);
        charts.show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        QTemporaryDir dir;
        // The Monitor's four: bubble, expert load, memory and training.
        const std::vector<app::RunChart*> all = charts.charts();
        QCOMPARE(int(all.size()), 4);
        QVERIFY(std::find(all.begin(), all.end(), charts.bubbleChart()) != all.end());
        int index = 0;
        for (app::RunChart* chart : all) {
            for (const char* suffix : {"png", "pdf"}) {
                const QString path = dir.filePath(QStringLiteral("chart%1.%2").arg(index).arg(suffix));
                QString error;
                QVERIFY2(chart->exportImage(path, {}, &error), qPrintable(error));
                QFile file(path);
                QVERIFY(file.open(QIODevice::ReadOnly));
                const QByteArray head = file.read(8);
                QVERIFY(file.size() > 1000);
                QVERIFY(head.startsWith(qstrcmp(suffix, "png") == 0 ? QByteArray("\x89PNG") : QByteArray("%PDF")));
            }
            ++index;
        }
        QString error;
        QVERIFY(!charts.bubbleChart()->exportImage(dir.filePath(QStringLiteral("chart.bmp")), {}, &error));
        QVERIFY(error.contains(QStringLiteral(".png")));
    }

    // The Monitor gives its charts about 1000 x 500 px in a 1280 x 800 window: every panel keeps a
    // plot area worth reading, and no legend sits on a panel. MESHBENCH_SCREENSHOT_DIR=dir saves
    // monitor-charts-WxH.png there at this size and at 1600 x 900.
    void compactLayoutKeepsEveryPanelReadable()
    {
        RunState state;
        state.setSpec(chartSpec());
        for (int step = 0; step < 40; ++step) {
            live::StepAggregate s = stepAt(step);
            // Bubbles of a real run (stepAt's grow past 100%) and a falling loss.
            s.bubble = 0.3 + 0.02 * (step % 5);
            s.stages[0].measured = 0.25 + 0.02 * (step % 3);
            s.stages[1].measured = 0.35 + 0.02 * (step % 4);
            s.loss = 5.0 / (1 + 0.1 * step);
            state.addStep(s);
        }
        for (std::uint32_t rank = 0; rank < 4; ++rank)
            for (std::int64_t t = 1; t <= 20; ++t)
                state.updateMemory(memoryOf(rank, t * 100'000'000, (rank + 1) * (5 + t % 4) * 100'000'000LL));
        app::MonitorCharts charts;
        charts.setRunState(&state);
        const QString dir = qEnvironmentVariable("MESHBENCH_SCREENSHOT_DIR");
        for (const QSize size : {QSize(1600, 900), QSize(1000, 500)}) {
            charts.resize(size);
            charts.show();
            QVERIFY(QTest::qWaitForWindowExposed(&charts));
            QCoreApplication::processEvents();
            for (app::RunChart* chart : charts.charts())
                chart->plot()->replot(QCustomPlot::rpImmediateRefresh);
            if (!dir.isEmpty())
                QVERIFY(charts.grab().save(
                    QStringLiteral("%1/monitor-charts-%2x%3.png").arg(dir).arg(size.width()).arg(size.height())));
        }
        QCOMPARE(charts.size(), QSize(1000, 500));
        for (app::RunChart* chart : charts.charts()) {
            const QString name = QString::fromLatin1(chart->metaObject()->className());
            const auto fail = [&name](const QString& what) { return qPrintable(name + QStringLiteral(": ") + what); };
            QCustomPlot* plot = chart->plot();
            QVERIFY2(chart->width() >= 300 && chart->height() >= 160, fail(QStringLiteral("chart squeezed")));
            QList<QCPLegend*> legends;
            for (QCPLayoutElement* element : plot->plotLayout()->elements(true))
                if (auto* legend = qobject_cast<QCPLegend*>(element); legend && legend->visible())
                    legends << legend;
            for (QCPLegend* legend : legends)
                QVERIFY2(plot->viewport().contains(legend->outerRect()), fail(QStringLiteral("legend cut off")));
            for (QCPAxisRect* rect : plot->axisRects()) {
                QVERIFY2(rect->height() >= 50, fail(QStringLiteral("%1 px high").arg(rect->height())));
                QVERIFY2(rect->width() >= 300, fail(QStringLiteral("%1 px wide").arg(rect->width())));
                for (QCPLegend* legend : legends)
                    QVERIFY2(!legend->outerRect().intersects(rect->rect()),
                             fail(QStringLiteral("legend over a panel")));
                // Neighbouring tick labels never touch: stacked ones a line apart, side-by-side ones
                // further apart than the wider of the two.
                for (QCPAxis* axis : rect->axes()) {
                    if (!axis->visible() || !axis->tickLabels())
                        continue;
                    const QFontMetrics metrics(axis->tickLabelFont());
                    const QVector<double> ticks = axis->tickVector();
                    const QVector<QString> labels = axis->tickVectorLabels();
                    QVERIFY2(ticks.size() >= 2,
                             fail(QStringLiteral("%1 ticks on %2").arg(ticks.size()).arg(axis->label())));
                    for (qsizetype i = 1; i < ticks.size(); ++i) {
                        const double gap = std::abs(axis->coordToPixel(ticks[i]) - axis->coordToPixel(ticks[i - 1]));
                        const int extent = axis->orientation() == Qt::Vertical
                                               ? metrics.height()
                                               : std::max(metrics.horizontalAdvance(labels[i]),
                                                          metrics.horizontalAdvance(labels[i - 1]));
                        QVERIFY2(gap > extent, fail(QStringLiteral("labels %1 and %2 of %3 overlap")
                                                        .arg(labels[i - 1], labels[i], axis->label())));
                    }
                }
            }
        }
    }

    // Nine entries (overall + 8 stages) do not fit one line of a 320 px chart: the legend wraps onto
    // more lines, each entry as wide as its text, instead of clipping every name; widened, it is one
    // line again.
    void legendWrapsWhenNarrow()
    {
        RunState state;
        live::StepAggregate step = stepAt(0);
        step.stages.clear();
        for (int stage = 0; stage < 8; ++stage)
            step.stages.push_back({stage, 0.3, std::nullopt, 2});
        state.addStep(step);
        app::BubbleChart chart;
        chart.setRunState(&state);
        QCOMPARE(chart.stageGraphCount(), 8);
        QCPLegend* legend = chart.plot()->legend;
        const auto layOut = [&](int width) {
            chart.resize(width, 240);
            chart.show();
            QVERIFY(QTest::qWaitForWindowExposed(&chart));
            chart.plot()->replot(QCustomPlot::rpImmediateRefresh);
            int entries = 0;
            for (int i = 0; i < legend->itemCount(); ++i) {
                QCPAbstractLegendItem* item = legend->item(i);
                if (!item)
                    continue;
                ++entries;
                QVERIFY(chart.plot()->viewport().contains(item->outerRect()));
                QVERIFY2(item->outerRect().width() >= item->minimumOuterSizeHint().width(),
                         qPrintable(QStringLiteral("entry %1 clipped at %2 px").arg(i).arg(width)));
            }
            QCOMPARE(entries, 9);
        };
        layOut(320);
        QVERIFY2(legend->rowCount() >= 3, qPrintable(QString::number(legend->rowCount())));
        // A theme change restyles the wrapped legend, whose last line leaves cells empty (9 entries
        // in 4 columns here).
        QPalette palette = chart.palette();
        palette.setColor(QPalette::Text, QColor(1, 2, 3));
        chart.setPalette(palette);
        for (int i = 0; i < legend->itemCount(); ++i)
            if (QCPAbstractLegendItem* item = legend->item(i))
                QCOMPARE(item->textColor(), QColor(1, 2, 3));
        layOut(1400);
        QCOMPARE(legend->rowCount(), 1);
    }

    // The right-click menu exports through the path chooser (a file dialog in the app): a PNG that
    // loads back at the chart's size, a PDF, the suffix added when the choice lacks it, nothing on
    // cancel, and an error for a folder that does not exist.
    void contextMenuExportsAsPngAndPdf()
    {
        RunState state;
        state.setSpec(chartSpec());
        for (int step = 0; step < 5; ++step)
            state.addStep(stepAt(step));
        app::TrainingChart chart;
        chart.setRunState(&state);
        chart.resize(640, 420);
        chart.show();
        QVERIFY(QTest::qWaitForWindowExposed(&chart));

        QVERIFY(!chart.contextMenu()->isVisible());
        QContextMenuEvent click(QContextMenuEvent::Mouse, QPoint(100, 100),
                                chart.plot()->mapToGlobal(QPoint(100, 100)));
        QApplication::sendEvent(chart.plot(), &click);
        QVERIFY(chart.contextMenu()->isVisible());
        chart.contextMenu()->hide();
        const QList<QAction*> actions = chart.contextMenu()->actions();
        QCOMPARE(actions.size(), 2);
        QCOMPARE(actions[0]->text(), QStringLiteral("Export as PNG…"));
        QCOMPARE(actions[1]->text(), QStringLiteral("Export as PDF…"));

        QTemporaryDir dir;
        QString chosen;
        QStringList asked;
        chart.setPathChooser([&](const QString& suggested, const QString& filter) {
            asked << suggested + QLatin1Char('|') + filter;
            return chosen;
        });
        QSignalSpy finished(&chart, &app::ChartWidget::exportFinished);

        chosen = dir.filePath(QStringLiteral("training"));  // no suffix: .png is added
        actions[0]->trigger();
        QCOMPARE(asked.last(), QStringLiteral("training-chart.png|PNG images (*.png)"));
        QCOMPARE(finished.size(), 1);
        QCOMPARE(finished[0][0].toString(), chosen + QStringLiteral(".png"));
        QCOMPARE(finished[0][1].toString(), QString());
        const QImage image(chosen + QStringLiteral(".png"));
        QVERIFY(!image.isNull());
        QCOMPARE(image.size(), chart.plot()->size());

        chosen = dir.filePath(QStringLiteral("training.pdf"));
        actions[1]->trigger();
        QCOMPARE(asked.last(), QStringLiteral("training-chart.pdf|PDF documents (*.pdf)"));
        QCOMPARE(finished.size(), 2);
        QFile pdf(chosen);
        QVERIFY(pdf.open(QIODevice::ReadOnly));
        QVERIFY(pdf.read(5) == "%PDF-");

        chosen.clear();  // cancelled
        actions[0]->trigger();
        QCOMPARE(asked.size(), 3);
        QCOMPARE(finished.size(), 2);

        chosen = dir.filePath(QStringLiteral("missing/chart.png"));
        actions[0]->trigger();
        QCOMPARE(finished.size(), 3);
        QVERIFY(finished[2][1].toString().contains(QStringLiteral("missing/chart.png")));
        QVERIFY(!QFile::exists(chosen));
    }

    void axesFollowThePalette()
    {
        app::BubbleChart chart;
        QPalette dark;
        dark.setColor(QPalette::Window, QColor(30, 30, 30));
        dark.setColor(QPalette::WindowText, QColor(230, 230, 230));
        dark.setColor(QPalette::Base, QColor(20, 20, 20));
        chart.setPalette(dark);
        QCOMPARE(chart.plot()->xAxis->labelColor(), QColor(230, 230, 230));
        QCOMPARE(chart.plot()->yAxis->tickLabelColor(), QColor(230, 230, 230));
        QCOMPARE(chart.plot()->axisRect()->backgroundBrush().color(), QColor(20, 20, 20));
    }
};

QTEST_MAIN(TestMonitorCharts)
#include "tst_monitor_charts.moc"
