// File > Import Traces as a user runs it: the dialog filled in and accepted, the import run on its
// worker thread, and the session it writes opened in the Monitor, here the eight torch.profiler traces
// of a pp 2 x tp 2 x dp 2 1F1B job (tests/import/make_gpu_traces.py). Cancel in the progress dialog
// leaves no session; a failed import shows its message and opens nothing.
// MESHBENCH_SCREENSHOT_DIR=dir saves the Monitor showing the imported session as
// monitor-imported-trace.png there.

#include "mainwindow/main_window.h"
#include "mainwindow/monitor_page.h"
#include "monitor/run_state.h"
#include "sessions/sessions_view.h"
#include "sessions/trace_import_dialog.h"
#include "sessions/trace_import_job.h"
#include "timeline/timeline_data.h"
#include "timeline/timeline_view.h"

#include "plan/mesh.h"

#include <QtTest>

#include <QApplication>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QProcess>
#include <QProgressDialog>
#include <QPushButton>
#include <QTabWidget>

#include <set>

using namespace meshbench;
using namespace meshbench::app;

namespace {

constexpr int kImportTimeoutMs = 120'000;  // eight gzip'd traces on two shared cores

QAction* menuAction(QMainWindow& window, const QString& menu, const QString& text)
{
    for (QAction* top : window.menuBar()->actions())
        if (top->text().remove(QLatin1Char('&')) == menu)
            for (QAction* action : top->menu()->actions())
                if (action->text().remove(QLatin1Char('&')) == text)
                    return action;
    return nullptr;
}

// Closes message boxes as they appear, keeping what they said.
struct MessageBoxCloser {
    QStringList texts;
    QTimer timer;
    MessageBoxCloser()
    {
        QObject::connect(&timer, &QTimer::timeout, [this] {
            for (QWidget* top : QApplication::topLevelWidgets())
                if (auto* box = qobject_cast<QMessageBox*>(top); box && box->isVisible()) {
                    texts << box->text() + QLatin1Char('\n') + box->informativeText();
                    box->done(QMessageBox::Ok);
                }
        });
        timer.start(20);
    }
};

}  // namespace

class TestMainWindowImport : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QStringList m_traces;

    QString traces() const { return m_dir.filePath(QStringLiteral("traces")); }
    QString job() const { return m_dir.filePath(QStringLiteral("traces/job.json")); }
    QString sessions() const { return m_dir.filePath(QStringLiteral("sessions")); }

private slots:
    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);
        QProcess generator;
        generator.start(QStringLiteral("python3"),
                        {QStringLiteral(MESHBENCH_SOURCE_DIR "/tests/import/make_gpu_traces.py"), traces(),
                         QStringLiteral("--case"), QStringLiteral("1f1b")});
        QVERIFY(generator.waitForFinished(120'000));
        QVERIFY2(generator.exitCode() == 0, generator.readAllStandardError().constData());
        // The Kineto traces only: the folder also holds the same timeline as nsys exports.
        for (int r = 0; r < 8; ++r)
            m_traces << QStringLiteral("%1/rank%2_trace.json.gz").arg(traces()).arg(r);
        for (const QString& trace : m_traces)
            QVERIFY2(QFileInfo::exists(trace), qPrintable(trace));
    }

    void anImportedTraceOpensInTheMonitor()
    {
        MainWindow window(nullptr);
        window.sessions()->setDirectory(sessions());
        window.resize(1440, 900);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QSignalSpy finished(&window, &MainWindow::importFinished);

        // File > Import Traces: the dialog filled in as a user would, then Import.
        QAction* import = menuAction(window, QStringLiteral("File"), QStringLiteral("Import Traces..."));
        QVERIFY(import);
        QString defaultSession;
        bool filled = false;
        QTimer::singleShot(0, this, [&] {
            auto* dialog = qobject_cast<TraceImportDialog*>(QApplication::activeModalWidget());
            QVERIFY(dialog);
            QVERIFY(!dialog->importButton()->isEnabled());  // nothing to import yet
            dialog->setPaths(m_traces);
            dialog->jobEdit()->setText(job());
            defaultSession = dialog->sessionEdit()->text();
            QVERIFY(dialog->importButton()->isEnabled());
            filled = true;
            QTest::mouseClick(dialog->importButton(), Qt::LeftButton);
        });
        MessageBoxCloser summaries;
        import->trigger();
        QVERIFY(filled);
        // The default: the sessions folder the workbench lists, named after the traces' folder.
        QCOMPARE(defaultSession, QDir(sessions()).filePath(QStringLiteral("traces.meshbench")));
        QVERIFY(window.runningImport());
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, kImportTimeoutMs));
        const QList<QVariant> result = finished.takeFirst();
        const QStringList lines = result.at(2).toStringList();
        QVERIFY2(result.at(0).toBool(), qPrintable(lines.join(u'\n')));
        QCOMPARE(result.at(1).toString(), defaultSession);
        QVERIFY(QFileInfo::exists(defaultSession));
        QVERIFY(!window.runningImport());

        // The summary is shown: what was read, each rank's clock, the bubble.
        QVERIFY(QTest::qWaitFor([&] { return !summaries.texts.isEmpty(); }, 5000));
        QVERIFY2(lines.value(0).contains(QStringLiteral("8 of 8 ranks")), qPrintable(lines.value(0)));
        QVERIFY2(summaries.texts.front().contains(lines.value(0)), qPrintable(summaries.texts.front()));
        QVERIFY2(window.statusMessage().contains(QStringLiteral("imported")), qPrintable(window.statusMessage()));

        // Open in the Monitor as File > Open opens a session: the job's eight ranks, one row each,
        // and spans on the rows of both pipeline stages.
        QCOMPARE(window.findChild<QTabWidget*>()->currentIndex(), int(MainWindow::Area::Monitor));
        const RunState* state = window.monitor()->runState();
        QVERIFY(state->spec());
        QCOMPARE(state->spec()->parallel.pp, 2);
        QCOMPARE(plan::Mesh(state->spec()->parallel).worldSize(), 8);
        QCOMPARE(state->phase(), RunPhase::Completed);
        QVERIFY(!state->steps().empty());
        const TimelineStore& timeline = window.monitor()->timeline()->data()->store();
        QCOMPARE(int(timeline.rowCount()), 8);
        std::set<int> ranks;
        std::map<int, int> forwardsOfStage;
        for (std::size_t i = 0; i < timeline.rowCount(); ++i) {
            const TimelineRow& row = timeline.row(i);
            ranks.insert(row.info().rank);
            QVERIFY2(!row.empty(), qPrintable(QString::fromStdString(row.info().label)));
            for (std::size_t s = 0; s < row.size(); ++s)
                if (row.kind(s) == wire::SpanKind::Forward)
                    ++forwardsOfStage[row.info().stage];
        }
        QCOMPARE(ranks, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));
        QCOMPARE(int(forwardsOfStage.size()), 2);
        QVERIFY(forwardsOfStage[0] > 0 && forwardsOfStage[1] > 0);
        QCOMPARE(forwardsOfStage[0], forwardsOfStage[1]);  // every micro-batch passes both stages

        // Listed in Sessions, selected.
        QVERIFY(
            QTest::qWaitFor([&] { return window.sessions()->selectedPaths() == QStringList{defaultSession}; }, 5000));

        if (const QString dir = qEnvironmentVariable("MESHBENCH_SCREENSHOT_DIR"); !dir.isEmpty()) {
            QString error;
            QVERIFY2(
                window.grabArea(MainWindow::Area::Monitor, QDir(dir).filePath("monitor-imported-trace.png"), &error),
                qPrintable(error));
        }
    }

    void aCancelledImportLeavesNoSession()
    {
        MainWindow window(nullptr);
        window.sessions()->setDirectory(sessions());
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QSignalSpy finished(&window, &MainWindow::importFinished);
        MessageBoxCloser messages;
        const QString session = QDir(sessions()).filePath(QStringLiteral("cancelled.meshbench"));
        QVERIFY(window.importTraces({m_traces, job(), {}, {}, session}));
        QVERIFY(!window.importTraces({m_traces, job(), {}, {}, session}));  // one at a time

        // The progress dialog's Cancel.
        auto* progress = window.findChild<QProgressDialog*>();
        QVERIFY(progress && progress->isVisible());
        QPushButton* cancel = progress->findChild<QPushButton*>();
        QVERIFY(cancel);
        QCOMPARE(cancel->text(), QStringLiteral("Cancel"));
        QTest::mouseClick(cancel, Qt::LeftButton);
        QVERIFY(window.runningImport() && window.runningImport()->isCancelled());

        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, kImportTimeoutMs));
        const QList<QVariant> result = finished.takeFirst();
        QVERIFY(!result.at(0).toBool());
        QVERIFY2(result.at(2).toStringList().value(0).contains(QStringLiteral("cancelled")),
                 qPrintable(result.at(2).toStringList().join(u'\n')));
        QVERIFY(!QFileInfo::exists(session));
        QVERIFY(!QFileInfo::exists(session + QStringLiteral(".importing")));
        QVERIFY(QDir(sessions()).entryList({QStringLiteral("cancelled*")}, QDir::Files).isEmpty());
        // Nothing opened, and no dialog to say what the user did.
        QVERIFY(window.monitor()->timeline()->data()->store().empty());
        QVERIFY2(messages.texts.isEmpty(), qPrintable(messages.texts.join(u'\n')));
        QVERIFY2(window.statusMessage().contains(QStringLiteral("cancelled")), qPrintable(window.statusMessage()));
        QVERIFY(window.findChild<QTabWidget*>()->currentIndex() != int(MainWindow::Area::Monitor));
        QVERIFY(QTest::qWaitFor([&] { return window.findChild<QProgressDialog*>() == nullptr; }, 5000));
    }

    void aFailedImportShowsItsMessageAndOpensNothing()
    {
        MainWindow window(nullptr);
        window.sessions()->setDirectory(sessions());
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QSignalSpy finished(&window, &MainWindow::importFinished);
        MessageBoxCloser messages;
        // Rank 0 twice: the importer refuses, naming both files.
        const QString session = QDir(sessions()).filePath(QStringLiteral("refused.meshbench"));
        QVERIFY(window.importTraces({{m_traces[0], m_traces[0]}, {}, {}, {}, session}));
        QVERIFY(QTest::qWaitFor([&] { return finished.count() == 1; }, kImportTimeoutMs));
        const QList<QVariant> result = finished.takeFirst();
        QVERIFY(!result.at(0).toBool());
        const QString why = result.at(2).toStringList().join(u'\n');
        QVERIFY2(why.contains(QStringLiteral("rank 0 is in two files")), qPrintable(why));
        QVERIFY(QTest::qWaitFor([&] { return messages.texts.size() == 1; }, 5000));
        QVERIFY2(messages.texts.front().contains(QStringLiteral("rank 0 is in two files")),
                 qPrintable(messages.texts.front()));
        QVERIFY2(window.statusMessage().contains(QStringLiteral("import failed")), qPrintable(window.statusMessage()));
        QVERIFY(!QFileInfo::exists(session));
        QVERIFY(window.monitor()->timeline()->data()->store().empty());
    }
};

QTEST_MAIN(TestMainWindowImport)
#include "tst_mainwindow_import.moc"
