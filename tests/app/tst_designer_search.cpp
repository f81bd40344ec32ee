// SearchResultsModel under QAbstractItemModelTester (alone and behind its proxy), numeric sorting,
// filtering, and applying a row to the document.
#include "designer/search_results_model.h"
#include "designer/search_panel.h"

#include <QAbstractItemModelTester>
#include <QLineEdit>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTest>

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
            QVERIFY(proxy.index(r - 1, SearchResultsModel::TokensPerSecond).data(SearchResultsModel::SortRole).toDouble() >=
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
        QVERIFY2(memory.right() < table->viewport()->width(),
                 qPrintable(QStringLiteral("memory ends at %1 of %2").arg(memory.right()).arg(table->viewport()->width())));
    }
};

QTEST_MAIN(TestDesignerSearch)
#include "tst_designer_search.moc"
