// SearchResultsModel under QAbstractItemModelTester (alone and behind its proxy), numeric sorting,
// filtering, and applying a row to the document.
#include "designer/search_panel.h"
#include "designer/search_results_model.h"
#include "designer/search_scatter.h"
#include "plan/report.h"

#include <qcustomplot.h>

#include <QAbstractItemModelTester>
#include <QLineEdit>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <set>

using namespace meshbench::app;
using meshbench::plan::SearchOptions;

namespace {
const QString kJobs = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/");
}

class TestDesignerSearch : public QObject {
    Q_OBJECT
private slots:
    void modelAndProxyPassTheTester()
    {
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "gpt3-175b.json"));
        SearchResultsModel model;
        QSortFilterProxyModel proxy;
        proxy.setSourceModel(&model);
        proxy.setSortRole(SearchResultsModel::SortRole);
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QAbstractItemModelTester proxyTester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
        SearchOptions options;
        options.top = 15;
        auto result = meshbench::plan::searchLayouts(*doc.spec(), options);
        QVERIFY(result.errors.empty());
        const auto best = result.best;
        QVERIFY(best.size() >= 2);
        model.setResult(std::move(result));
        QCOMPARE(model.rowCount(), int(best.size()));
        QCOMPARE(model.columnCount(), int(SearchResultsModel::ColumnCount));
        QCOMPARE(model.data(model.index(0, SearchResultsModel::Tp)).toInt(), best[0].parallel.tp);
        QCOMPARE(model.data(model.index(0, SearchResultsModel::StepTime), SearchResultsModel::SortRole).toDouble(),
                 best[0].stepTime);
        QCOMPARE(model.headerData(SearchResultsModel::Schedule, Qt::Horizontal).toString(), QString("schedule"));

        // Numeric sort: tokens/s descending, whatever the display strings would sort as.
        proxy.sort(SearchResultsModel::TokensPerSecond, Qt::DescendingOrder);
        for (int r = 1; r < proxy.rowCount(); ++r)
            QVERIFY(
                proxy.index(r - 1, SearchResultsModel::TokensPerSecond).data(SearchResultsModel::SortRole).toDouble() >=
                proxy.index(r, SearchResultsModel::TokensPerSecond).data(SearchResultsModel::SortRole).toDouble());
        model.setResult({});
        QCOMPARE(proxy.rowCount(), 0);
    }

    void panelSearchesFiltersAndApplies()
    {
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "gpt3-175b.json"));
        SearchPanel panel(&doc);
        QSignalSpy finished(&panel, &SearchPanel::searchFinished);
        panel.runSearch();
        QVERIFY(panel.isRunning());
        QVERIFY(finished.wait(20000));
        QVERIFY(!panel.isRunning());
        QVERIFY(panel.model()->rowCount() > 0);
        QSortFilterProxyModel* proxy = panel.proxy();

        // The filter line keeps matching rows only.
        const QString schedule = proxy->index(0, SearchResultsModel::Schedule).data().toString();
        QTest::keyClicks(panel.filterEdit(), schedule);
        QVERIFY(proxy->rowCount() > 0);
        for (int r = 0; r < proxy->rowCount(); ++r) {
            bool matches = false;
            for (int c = 0; c < proxy->columnCount(); ++c)
                matches = matches || proxy->index(r, c).data().toString().contains(schedule, Qt::CaseInsensitive);
            QVERIFY(matches);
        }
        panel.filterEdit()->clear();
        QCOMPARE(proxy->rowCount(), panel.model()->rowCount());

        // Apply the last row (sorted by step time, the slowest listed) and check the document's layout.
        const int row = proxy->rowCount() - 1;
        const int sourceRow = proxy->mapToSource(proxy->index(row, 0)).row();
        const auto chosen = panel.model()->candidate(sourceRow).parallel;
        QSignalSpy plans(&doc, &JobDocument::planChanged);
        panel.applyRow(row);
        QCOMPARE(plans.count(), 1);
        QVERIFY(doc.plan());
        const auto& p = doc.plan()->spec.parallel;
        QCOMPARE(p.tp, chosen.tp);
        QCOMPARE(p.pp, chosen.pp);
        QCOMPARE(p.dp, chosen.dp);
        QCOMPARE(p.virtualStages, chosen.virtualStages);
        QCOMPARE(p.microbatches, chosen.microbatches);
        QCOMPARE(p.microBatchSize, chosen.microBatchSize);
        QCOMPARE(p.schedule, chosen.schedule);
        QCOMPARE(p.zero, chosen.zero);
        QCOMPARE(p.sequenceParallel, chosen.sequenceParallel);
        QCOMPARE(p.recompute, chosen.recompute);
        // Same global batch, so the plan's step time is the search's.
        QCOMPARE(doc.plan()->step.total, panel.model()->candidate(sourceRow).stepTime);

        // Double-clicking a row applies it too.
        const int first = proxy->mapToSource(proxy->index(0, 0)).row();
        QTableView* table = panel.table();
        panel.resize(900, 500);
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        const QRect cell = table->visualRect(proxy->index(0, SearchResultsModel::Tp));
        // The view reacts to a double click only on the index the press went to, as with a real mouse.
        QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, cell.center());
        QTest::mouseDClick(table->viewport(), Qt::LeftButton, {}, cell.center());
        QCOMPARE(doc.plan()->spec.parallel.tp, panel.model()->candidate(first).parallel.tp);
        QCOMPARE(doc.plan()->step.total, panel.model()->candidate(first).stepTime);

        // The figures a user ranks by lead, and stay in view even when the table is narrow.
        const QStringList leading{"step", "tokens/s", "MFU", "bubble", "memory"};
        for (int c = 0; c < leading.size(); ++c)
            QCOMPARE(panel.model()->headerData(c, Qt::Horizontal).toString(), leading[c]);
        panel.resize(480, 500);
        QCoreApplication::processEvents();
        const QRect memory = table->visualRect(proxy->index(0, SearchResultsModel::Memory));
        QVERIFY2(
            memory.right() < table->viewport()->width(),
            qPrintable(QStringLiteral("memory ends at %1 of %2").arg(memory.right()).arg(table->viewport()->width())));
    }

    void appliesMegatronOverlapsWithTheLayout()
    {
        // A document planning Megatron-LM's overlaps searches planned only; the row's overlaps
        // show as letters and travel with the layout it applies, so the plan is the row's.
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "gpt3-175b.json"));
        doc.merge({{"parallel", {{"overlap_param_gather", true}, {"tp_comm_overlap", true}}}});
        SearchPanel panel(&doc);
        QSignalSpy finished(&panel, &SearchPanel::searchFinished);
        panel.runSearch();
        QVERIFY(finished.wait(20000));
        QVERIFY(panel.model()->rowCount() > 0);
        const int row = panel.proxy()->mapToSource(panel.proxy()->index(0, 0)).row();
        const auto chosen = panel.model()->candidate(row).parallel;
        QVERIFY(chosen.tpCommOverlap || chosen.overlapParamGather);
        QCOMPARE(panel.model()->data(panel.model()->index(row, SearchResultsModel::Overlap)).toString(),
                 QString::fromStdString(meshbench::plan::overlapLetters(chosen)));
        doc.merge(
            {{"parallel",
              {{"overlap_param_gather", !chosen.overlapParamGather}, {"tp_comm_overlap", !chosen.tpCommOverlap}}}});
        panel.applyRow(0);
        const auto& p = doc.plan()->spec.parallel;
        QCOMPARE(p.overlapGradReduce, chosen.overlapGradReduce);
        QCOMPARE(p.overlapParamGather, chosen.overlapParamGather);
        QCOMPARE(p.tpCommOverlap, chosen.tpCommOverlap);
        QCOMPARE(doc.plan()->step.total, panel.model()->candidate(row).stepTime);
    }

    void scatterShowsTheSearchAndSelectsByClick()
    {
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "gpt3-175b.json"));
        SearchPanel panel(&doc);
        QSignalSpy finished(&panel, &SearchPanel::searchFinished);
        panel.runSearch();
        QVERIFY(finished.wait(20000));
        const std::vector<meshbench::plan::SearchCandidate>& best = panel.model()->result().best;
        QVERIFY(best.size() >= 5);
        SearchScatter* scatter = panel.scatter();

        // Its points are the search's layouts: (memory per GPU in GB, tokens/s), each once, in the
        // graph of its schedule.
        std::multiset<std::pair<double, double>> plotted, searched;
        for (QCPGraph* graph : scatter->scheduleGraphs())
            for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it)
                plotted.insert({it->key, it->value});
        for (const auto& c : best)
            searched.insert({c.memoryBytes / 1e9, c.tokensPerSecond});
        QCOMPARE(plotted, searched);
        for (QCPGraph* graph : scatter->scheduleGraphs())
            for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
                const bool ofItsSchedule = std::any_of(best.begin(), best.end(), [&](const auto& c) {
                    return c.memoryBytes / 1e9 == it->key && c.tokensPerSecond == it->value &&
                           graph->name() ==
                               QString::fromUtf8(meshbench::plan::scheduleName(c.parallel.schedule).data());
                });
                QVERIFY2(ofItsSchedule, qPrintable(graph->name()));
            }
        // The frontier, against a brute force: the layouts no other is both no larger and faster than.
        std::set<std::pair<double, double>> frontier, undominated;
        for (int i : scatter->frontier())
            frontier.insert({best[std::size_t(i)].memoryBytes, best[std::size_t(i)].tokensPerSecond});
        for (const auto& c : best) {
            const bool dominated = std::any_of(best.begin(), best.end(), [&](const auto& o) {
                return o.memoryBytes <= c.memoryBytes && o.tokensPerSecond > c.tokensPerSecond;
            });
            if (!dominated)
                undominated.insert({c.memoryBytes, c.tokensPerSecond});
        }
        QVERIFY(!frontier.empty());
        QCOMPARE(frontier, undominated);
        // The designed layout is marked at its own plan's point.
        QCOMPARE(scatter->designedGraph()->dataCount(), 1);
        QCOMPARE(scatter->designedGraph()->data()->at(0)->key, doc.plan()->mostLoaded().total() / 1e9);
        QCOMPARE(scatter->designedGraph()->data()->at(0)->value, doc.plan()->tokensPerSecond);

        // A click on a point selects its row in the table; a double click applies its layout.
        panel.resize(1000, 700);
        panel.show();
        panel.views()->setCurrentWidget(scatter);
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        scatter->plot()->replot(QCustomPlot::rpImmediateRefresh);
        int chosen = -1;
        for (std::size_t i = best.size(); i-- > 0 && chosen < 0;)
            if (scatter->candidateAt(scatter->pixelOf(int(i))) == int(i))
                chosen = int(i);  // a point no other lies on
        QVERIFY(chosen >= 0);
        const QPoint at = scatter->plot()->mapFrom(scatter, scatter->pixelOf(chosen));
        QTest::mouseClick(scatter->plot(), Qt::LeftButton, {}, at);
        QCOMPARE(scatter->selected(), chosen);
        const QModelIndexList rows = panel.table()->selectionModel()->selectedRows();
        QCOMPARE(rows.size(), 1);
        QCOMPARE(panel.proxy()->mapToSource(rows.first()).row(), chosen);
        QTest::mouseDClick(scatter->plot(), Qt::LeftButton, {}, at);
        QCOMPARE(doc.plan()->spec.parallel.tp, best[std::size_t(chosen)].parallel.tp);
        QCOMPARE(doc.plan()->spec.parallel.schedule, best[std::size_t(chosen)].parallel.schedule);
        QCOMPARE(doc.plan()->step.total, best[std::size_t(chosen)].stepTime);
        // Exported like the other charts.
        QTemporaryDir dir;
        QString error;
        QVERIFY2(scatter->exportImage(dir.filePath("scatter.png"), {}, &error), qPrintable(error));
        QVERIFY(QImage(dir.filePath("scatter.png")).width() > 0);
        if (const QString shots = qEnvironmentVariable("MESHBENCH_SCREENSHOT_DIR"); !shots.isEmpty())
            QVERIFY(panel.grab().save(shots + "/search-scatter.png"));
    }
};

QTEST_MAIN(TestDesignerSearch)
#include "tst_designer_search.moc"
