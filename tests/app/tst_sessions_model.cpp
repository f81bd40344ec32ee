// The sessions list model and its filter proxy over real session files (plus a garbage one), and
// the side-by-side comparison against hand-computed figures, including a corrupt file.

#include "sessions/session_comparison.h"
#include "sessions/session_list_model.h"

#include "tst_sessions_samples.h"

#include <QAbstractItemModelTester>
#include <QTableWidget>
#include <QtTest>

using namespace meshbench;
using namespace meshbench::app;
namespace samples = sessions_samples;

namespace {

constexpr std::int64_t kCreated = 1'700'000'000'000'000'000;
using Category = wire::MemoryCategory;

// A: steps 1..3. Step 1 is left out of the means: step time (1 s + 2 s) / 2 = 1.5 s, tokens/s 2000 / 3 s. Peak memory:
// rank 0 max(100 + 50, 100 + 300) = 400; rank 1 10 + max(20, 40) = 50 (two activation samples in one step: the larger
// counts).
const std::vector<samples::Step> kStepsA = {
    {1, 0, 2, 6.0, 0.9, 1000}, {2, 2, 3, 3.0, 0.2, 1000}, {3, 3, 5, 2.5, 0.3, 1000}};
const std::vector<samples::Memory> kMemoryA = {{0, 2, Category::Params, 100},    {0, 2, Category::Grads, 50},
                                               {0, 3, Category::Params, 100},    {0, 3, Category::Activations, 300},
                                               {1, 2, Category::Params, 10},     {1, 2, Category::Activations, 20},
                                               {1, 2, Category::Activations, 40}};
// B: step 0.5 s, 2000 tokens/s, final loss 1.25, rank 0 peaks at 200, rank 1 has no samples.
const std::vector<samples::Step> kStepsB = {{1, 9, 10, 5.0, 0.8, 1000}, {2, 10, 10.5, 1.25, 0.1, 1000}};
const std::vector<samples::Memory> kMemoryB = {{0, 2, Category::Params, 200}};

struct Folder {
    QTemporaryDir dir;
    QString a = dir.filePath(QStringLiteral("a.meshbench"));
    QString b = dir.filePath(QStringLiteral("b.meshbench"));
    QString c = dir.filePath(QStringLiteral("c.meshbench"));
    QString garbage = dir.filePath(QStringLiteral("broken.meshbench"));

    Folder()
    {
        samples::write(a, "alpha", "dp1 pp2 tp1 ep1 1f1b", kCreated, store::Outcome::Completed, kStepsA, kMemoryA);
        samples::write(b, "beta", "dp1 pp2 tp1 ep1 interleaved", kCreated + 1'000'000'000, store::Outcome::Failed,
                       kStepsB, kMemoryB);
        // Final loss 10: a text sort would put "10.0000" before "2.5000".
        samples::write(c, "gamma", "dp2 pp1 tp1 ep1 1f1b", kCreated + 2'000'000'000, store::Outcome::Running,
                       {{1, 0, 1, 10.0, 0.0, 1000}});
        QFile file(garbage);
        file.open(QIODevice::WriteOnly);
        file.write("this is not a session, just some bytes that end in .meshbench\n");
    }
};

int rowNamed(const QAbstractItemModel& model, const QString& name)
{
    for (int r = 0; r < model.rowCount(); ++r)
        if (model.index(r, SessionListModel::Name).data().toString() == name)
            return r;
    return -1;
}

QStringList namesInOrder(const QAbstractItemModel& model)
{
    QStringList names;
    for (int r = 0; r < model.rowCount(); ++r)
        names << model.index(r, SessionListModel::Name).data().toString();
    return names;
}

// Compares and waits for the table to show the sessions.
bool compareAndWait(SessionComparison& comparison, const QString& a, const QString& b)
{
    QSignalSpy compared(&comparison, &SessionComparison::compared);
    comparison.compare(a, b);
    return compared.wait(30'000);
}

int rowOfMetric(const QTableWidget& table, const QString& metric)
{
    for (int r = 0; r < table.rowCount(); ++r)
        if (table.item(r, 0)->text() == metric)
            return r;
    return -1;
}

}  // namespace

class TestSessionsModel : public QObject {
    Q_OBJECT

private slots:
    void rowsColumnsAndTheUnreadableFile()
    {
        Folder folder;
        SessionListModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setDirectory(folder.dir.path());
        QCOMPARE(model.rowCount(), 4);
        QCOMPARE(model.columnCount(), int(SessionListModel::ColumnCount));
        QCOMPARE(model.headerData(SessionListModel::FinalLoss, Qt::Horizontal).toString(),
                 QStringLiteral("Final loss"));
        QVERIFY(model.error().isEmpty());

        const int beta = rowNamed(model, QStringLiteral("beta"));
        QVERIFY(beta >= 0);
        QCOMPARE(model.index(beta, SessionListModel::Layout).data().toString(),
                 QStringLiteral("dp1 pp2 tp1 ep1 interleaved"));
        QCOMPARE(model.index(beta, SessionListModel::Outcome).data().toString(), QStringLiteral("failed"));
        QCOMPARE(model.index(beta, SessionListModel::Outcome).data(Qt::ToolTipRole).toString(),
                 QStringLiteral("rank 1 exited with status 3"));
        QCOMPARE(model.index(beta, SessionListModel::Steps).data().toInt(), 2);
        QCOMPARE(model.index(beta, SessionListModel::FinalLoss).data().toString(), QStringLiteral("1.2500"));
        QCOMPARE(model.index(beta, SessionListModel::FinalLoss).data(SessionListModel::SortRole).toDouble(), 1.25);
        QCOMPARE(model.index(beta, SessionListModel::Date).data(SessionListModel::SortRole).toDateTime(),
                 QDateTime::fromMSecsSinceEpoch((kCreated + 1'000'000'000) / 1'000'000));
        QCOMPARE(model.index(beta, SessionListModel::Path).data().toString(), folder.b);

        // The garbage file is a row of its own, with why it cannot be read.
        const int broken = rowNamed(model, QStringLiteral("broken"));
        QVERIFY(broken >= 0);
        QCOMPARE(model.index(broken, SessionListModel::Outcome).data().toString(), QStringLiteral("unreadable"));
        QCOMPARE(model.index(broken, SessionListModel::Path).data(SessionListModel::ReadableRole).toBool(), false);
        const QString why = model.index(broken, SessionListModel::Outcome).data(Qt::ToolTipRole).toString();
        QVERIFY2(why.contains(QStringLiteral("broken.meshbench")), qPrintable(why));
        QVERIFY(model.index(broken, SessionListModel::FinalLoss).data().toString().isEmpty());

        // A folder that does not exist lists nothing and is no error; a file in its place is one.
        model.setDirectory(folder.dir.filePath(QStringLiteral("not-yet")));
        QCOMPARE(model.rowCount(), 0);
        QVERIFY(model.error().isEmpty());
    }

    void theFolderIsWatched()
    {
        Folder folder;
        SessionListModel model;
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        model.setDirectory(folder.dir.path());
        QSignalSpy refreshed(&model, &SessionListModel::refreshed);
        samples::write(folder.dir.filePath(QStringLiteral("d.meshbench")), "delta", "dp1 pp1 tp1 ep1 1f1b",
                       kCreated + 3'000'000'000, store::Outcome::Completed, {{1, 0, 1, 4.0, 0.0, 1000}});
        QTRY_COMPARE(model.rowCount(), 5);
        QVERIFY(rowNamed(model, QStringLiteral("delta")) >= 0);
        QVERIFY(QFile::remove(folder.garbage));
        QTRY_COMPARE(model.rowCount(), 4);
        QCOMPARE(rowNamed(model, QStringLiteral("broken")), -1);
        // Debounced: a burst of changes (several files, WAL and journal) is a few refreshes, not one per event.
        QVERIFY2(refreshed.count() <= 4, qPrintable(QString::number(refreshed.count())));
    }

    void proxySortsNumericallyAndFilters()
    {
        Folder folder;
        SessionListModel model;
        model.setDirectory(folder.dir.path());
        SessionFilterModel proxy;
        QAbstractItemModelTester tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
        proxy.setSourceModel(&model);

        proxy.sort(SessionListModel::FinalLoss, Qt::AscendingOrder);
        QCOMPARE(namesInOrder(proxy), (QStringList{"beta", "alpha", "gamma", "broken"}));
        proxy.sort(SessionListModel::FinalLoss, Qt::DescendingOrder);
        QCOMPARE(namesInOrder(proxy), (QStringList{"broken", "gamma", "alpha", "beta"}));
        proxy.sort(SessionListModel::Date, Qt::DescendingOrder);
        QCOMPARE(namesInOrder(proxy).mid(0, 3), (QStringList{"gamma", "beta", "alpha"}));

        proxy.sort(SessionListModel::Name, Qt::AscendingOrder);
        proxy.setFilterText(QStringLiteral("INTERLEAVED"));
        QCOMPARE(namesInOrder(proxy), QStringList{"beta"});
        proxy.setFilterText(QStringLiteral("1f1b"));
        QCOMPARE(namesInOrder(proxy), (QStringList{"alpha", "gamma"}));
        proxy.setFilterText(QStringLiteral("unread"));
        QCOMPARE(namesInOrder(proxy), QStringList{"broken"});
        proxy.setFilterText(QStringLiteral("running"));
        QCOMPARE(namesInOrder(proxy), QStringList{"gamma"});
        proxy.setFilterText(QStringLiteral("no such thing"));
        QCOMPARE(proxy.rowCount(), 0);
        proxy.setFilterText(QString());
        QCOMPARE(proxy.rowCount(), 4);
    }

    void figuresOfASession()
    {
        Folder folder;
        const SessionFigures a = sessionFigures(store::SessionReader(folder.a.toStdString()));
        QCOMPARE(a.name, QStringLiteral("alpha"));
        QCOMPARE(int(a.steps.size()), 3);
        QCOMPARE(*a.meanStepSeconds, 1.5);
        QCOMPARE(*a.tokensPerSecond, 2000.0 / 3.0);
        QCOMPARE(*a.finalLoss, 2.5);
        QCOMPARE(a.peakMemoryBytes.size(), std::size_t(2));
        QCOMPARE(*a.peakMemoryBytes[0], std::int64_t(400));
        QCOMPARE(*a.peakMemoryBytes[1], std::int64_t(50));

        // One step only: nothing to leave out.
        const SessionFigures c = sessionFigures(store::SessionReader(folder.c.toStdString()));
        QCOMPARE(*c.meanStepSeconds, 1.0);
        QCOMPARE(*c.tokensPerSecond, 1000.0);
        QVERIFY(!c.peakMemoryBytes[0]);
    }

    void comparisonTable()
    {
        Folder folder;
        SessionComparison comparison;
        QVERIFY(compareAndWait(comparison, folder.a, folder.b));
        QVERIFY(comparison.errorText().isEmpty());
        const QTableWidget& table = *comparison.table();
        auto value = [&](const QString& metric, int column) {
            const int row = rowOfMetric(table, metric);
            return row < 0 ? qQNaN() : table.item(row, column)->data(Qt::UserRole).toDouble();
        };
        // The measured bubble comes from the spans (tst_sessions_compare), which these sessions lack:
        // the agents' own bubble_ratio in their step metrics is not shown in its place.
        const int bubble = rowOfMetric(table, QStringLiteral("Mean bubble (measured)"));
        QVERIFY(bubble >= 0);
        for (int column = 1; column <= 3; ++column)
            QCOMPARE(table.item(bubble, column)->text(), QStringLiteral("—"));
        QCOMPARE(value(QStringLiteral("Mean step time"), 3), (0.5 - 1.5) / 1.5 * 100);
        QCOMPARE(value(QStringLiteral("Tokens/s"), 3), 200.0);
        QCOMPARE(value(QStringLiteral("Final loss"), 3), -50.0);
        QCOMPARE(value(QStringLiteral("Peak memory, rank 0"), 3), -50.0);
        // Bytes in the decimal units the planner and the Monitor use.
        QCOMPARE(table.item(rowOfMetric(table, QStringLiteral("Peak memory, rank 0")), 1)->text(),
                 QStringLiteral("400 B"));
        const int rank1 = rowOfMetric(table, QStringLiteral("Peak memory, rank 1"));
        QCOMPARE(table.item(rank1, 1)->data(Qt::UserRole).toDouble(), 50.0);
        QCOMPARE(table.item(rank1, 2)->text(), QStringLiteral("—"));  // B has no samples for rank 1
        QCOMPARE(table.item(rank1, 3)->text(), QStringLiteral("—"));
        QCOMPARE(table.item(rowOfMetric(table, QStringLiteral("Mean step time")), 3)->text(),
                 QStringLiteral("-66.7 %"));
    }

    // Sessions are read off the GUI thread: a second Compare before the first is shown wins, and the
    // widget can go while a read is under way.
    void aNewerCompareSupersedesOneUnderWay()
    {
        Folder folder;
        SessionComparison comparison;
        QSignalSpy compared(&comparison, &SessionComparison::compared);
        comparison.compare(folder.a, folder.garbage);
        comparison.compare(folder.a, folder.b);
        QVERIFY(compared.wait(30'000));
        QCOMPARE(compared.count(), 1);
        QVERIFY2(comparison.errorText().isEmpty(), qPrintable(comparison.errorText()));  // not the first's
        const QTableWidget& table = *comparison.table();
        QCOMPARE(table.item(rowOfMetric(table, QStringLiteral("Final loss")), 2)->data(Qt::UserRole).toDouble(), 1.25);

        auto* going = new SessionComparison;
        going->compare(folder.a, folder.b);
        delete going;  // waits for its reader, which then reports to no one
    }

    void aCorruptSessionIsAnInlineError()
    {
        Folder folder;
        SessionComparison comparison;
        comparison.show();
        QVERIFY(compareAndWait(comparison, folder.a, folder.garbage));
        const QString error = comparison.errorText();
        QVERIFY2(error.startsWith(QStringLiteral("B: ")) && error.contains(QStringLiteral("broken.meshbench")),
                 qPrintable(error));
        // A's side is still shown, B's is empty.
        const QTableWidget& table = *comparison.table();
        const int loss = rowOfMetric(table, QStringLiteral("Final loss"));
        QCOMPARE(table.item(loss, 1)->data(Qt::UserRole).toDouble(), 2.5);
        QCOMPARE(table.item(loss, 2)->text(), QStringLiteral("—"));
        // And it stays usable.
        QVERIFY(compareAndWait(comparison, folder.a, folder.b));
        QVERIFY(comparison.errorText().isEmpty());
        QCOMPARE(table.item(rowOfMetric(table, QStringLiteral("Final loss")), 2)->data(Qt::UserRole).toDouble(), 1.25);
        QVERIFY(compareAndWait(comparison, folder.dir.filePath(QStringLiteral("missing.meshbench")), folder.garbage));
        QVERIFY(comparison.errorText().startsWith(QStringLiteral("A: ")));
        QVERIFY(comparison.errorText().contains(QStringLiteral("\nB: ")));
    }
};

QTEST_MAIN(TestSessionsModel)
#include "tst_sessions_model.moc"
