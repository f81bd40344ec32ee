// The main window opening files as a user would: a job goes to the Designer, a session to the
// Monitor, and a corrupt session shows one error dialog and leaves the window alive and usable.

#include "mainwindow/main_window.h"
#include "mainwindow/monitor_page.h"
#include "monitor/run_state.h"
#include "timeline/span_kind_legend.h"

#include <QtTest>

#include <QApplication>
#include <QMessageBox>
#include <QTabWidget>

#include <algorithm>
#include <fstream>
#include <string_view>

using namespace meshbench;
using namespace meshbench::app;
using namespace std::string_view_literals;

namespace {

// A session of the demo's 8 ranks with `schedule` (its other settings kept), one step long.
QString writeDemoSession(const QTemporaryDir& dir, const std::string& schedule)
{
    std::ifstream in(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    std::string spec((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string from = "\"schedule\": \"1f1b\"";
    spec.replace(spec.find(from), from.size(), "\"schedule\": " + schedule);
    const std::string name = schedule.substr(1, schedule.find('"', 1) - 1);  // the schedule's name
    QString path = dir.filePath(QString::fromStdString("demo-" + name + ".meshbench"));
    store::SessionHeader header;
    header.name = "demo";
    header.jobSpec = spec;
    for (int r = 0; r < 8; ++r)
        header.ranks.push_back(store::RankInfo{r, 0, r / 4, 0, 0, 0, r, "host", 1 + r});
    store::SessionWriter writer(path.toStdString(), header);
    wire::Batch batch{0, 0, {}};
    batch.records.emplace_back(wire::StepMetricsRecord{1, 0, 1'000'000'000, 4.5, 0.02, 1, 1e-3, 1024, 0, 1024});
    writer.append(std::move(batch));
    writer.setOutcome({store::Outcome::Completed, "", -1, 2});
    return path;
}

int marks(const SpanKindLegend& legend, SpanKindLegend::Mark mark)
{
    return int(std::count_if(legend.entries().begin(), legend.entries().end(),
                             [mark](const SpanKindLegend::Entry& e) { return e.mark == mark; }));
}

}  // namespace

class TestMainWindowOpen : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { QStandardPaths::setTestModeEnabled(true); }

    void aCorruptSessionShowsOneErrorAndTheWindowLives()
    {
        QTemporaryDir dir;
        const QString corrupt = dir.filePath("broken.meshbench");
        std::ofstream(corrupt.toStdString()) << "SQLite format 3\0 but not really a database"sv;
        MainWindow window(nullptr);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));

        // The dialog is modal: a timer reads and closes it, counting how many there were.
        int dialogs = 0;
        QString dialogText;
        QTimer closer;
        connect(&closer, &QTimer::timeout, this, [&] {
            if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
                ++dialogs;
                dialogText = box->text();
                box->done(QMessageBox::Ok);
            }
        });
        closer.start(20);
        QVERIFY(!window.openFile(corrupt));
        QTest::qWait(100);
        closer.stop();
        QCOMPARE(dialogs, 1);
        QVERIFY2(dialogText.contains(corrupt), qPrintable(dialogText));
        QVERIFY2(window.statusMessage().contains("cannot open"), qPrintable(window.statusMessage()));

        // Still usable: a job opens in the Designer.
        QVERIFY(window.openFile(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json")));
        QCOMPARE(window.findChild<QTabWidget*>()->currentIndex(), int(MainWindow::Area::Designer));
    }

    void aSessionOpensInTheMonitor()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("tiny.meshbench");
        {
            std::ifstream in(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
            std::string spec((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            store::SessionHeader header;
            header.name = "tiny";
            header.jobSpec = spec;
            header.ranks.push_back(store::RankInfo{0, 0, 0, 0, 0, 0, 0, "host", 1});  // a --one-device run
            store::SessionWriter writer(path.toStdString(), header);
            wire::Batch batch{0, 0, {}};
            batch.records.emplace_back(wire::StepMetricsRecord{1, 0, 1'000'000'000, 4.5, 0.02, 1, 1e-3, 1024, 0, 1024});
            writer.append(std::move(batch));
            writer.setOutcome({store::Outcome::Completed, "", -1, 2});
        }
        MainWindow window(nullptr);
        QVERIFY(window.openFile(path));
        QCOMPARE(window.findChild<QTabWidget*>()->currentIndex(), int(MainWindow::Area::Monitor));
        const RunState* state = window.monitor()->runState();
        QCOMPARE(state->steps().size(), 1u);
        QCOMPARE(*state->steps().front().loss, 4.5);
        QCOMPARE(state->phase(), RunPhase::Completed);
    }

    // The timeline's key names the marks of the schedule shown: DualPipeV's chunk shades and F&B
    // pair borders, then none for 1F1B.
    void theLegendNamesTheSchedulesMarks()
    {
        QTemporaryDir dir;
        MainWindow window(nullptr);
        const SpanKindLegend& legend = *window.monitor()->legend();
        QVERIFY(window.openFile(writeDemoSession(dir, "\"dualpipev\", \"virtual_stages\": 2")));
        QCOMPARE(marks(legend, SpanKindLegend::Mark::LaterChunk), 1);
        QCOMPARE(marks(legend, SpanKindLegend::Mark::OverlappedPair), 1);
        QVERIFY(window.openFile(writeDemoSession(dir, "\"interleaved\", \"virtual_stages\": 2")));
        QCOMPARE(marks(legend, SpanKindLegend::Mark::LaterChunk), 1);
        QCOMPARE(marks(legend, SpanKindLegend::Mark::OverlappedPair), 0);
        QVERIFY(window.openFile(writeDemoSession(dir, "\"1f1b\"")));
        QCOMPARE(marks(legend, SpanKindLegend::Mark::LaterChunk), 0);
        QCOMPARE(marks(legend, SpanKindLegend::Mark::OverlappedPair), 0);
    }
};

QTEST_MAIN(TestMainWindowOpen)
#include "tst_mainwindow_open.moc"
