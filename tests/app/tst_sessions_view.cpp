// The Sessions view through its widgets (selection, Open, Compare, exports with inline results)
// and the replay bar, alone (the requests it emits) and against a real engine replaying a demo run.

#include "client/engine_client.h"
#include "sessions/replay_controls.h"
#include "sessions/session_comparison.h"
#include "sessions/session_list_model.h"
#include "sessions/sessions_view.h"

#include "tst_sessions_samples.h"

#include <QComboBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSlider>
#include <QTableView>
#include <QTableWidget>
#include <QToolButton>
#include <QtTest>

#include <fstream>

using namespace meshbench;
using namespace meshbench::app;
namespace samples = sessions_samples;

namespace {

void selectRows(QTableView& table, const QStringList& names)
{
    table.clearSelection();
    const QAbstractItemModel& model = *table.model();
    for (int r = 0; r < model.rowCount(); ++r)
        if (names.contains(model.index(r, SessionListModel::Name).data().toString()))
            table.selectionModel()->select(model.index(r, 0), QItemSelectionModel::Select | QItemSelectionModel::Rows);
}

QPushButton* button(QWidget& parent, const QString& text)
{
    for (QPushButton* b : parent.findChildren<QPushButton*>())
        if (b->text().remove(QLatin1Char('&')).startsWith(text))
            return b;
    return nullptr;
}

}  // namespace

class TestSessionsView : public QObject {
    Q_OBJECT

private slots:
    void selectionSurvivesARereadAndSelectSessionFindsAFile()
    {
        QTemporaryDir dir;
        const QString a = dir.filePath(QStringLiteral("a.meshbench")), b = dir.filePath(QStringLiteral("b.meshbench"));
        samples::write(a, "alpha", "dp1 pp2 tp1 ep1 1f1b", 1'000'000'000, store::Outcome::Completed,
                       {{1, 0, 1, 3.0, 0.5, 100}});
        samples::write(b, "beta", "dp1 pp2 tp1 ep1 1f1b", 2'000'000'000, store::Outcome::Completed,
                       {{1, 0, 1, 3.0, 0.5, 100}});
        SessionsView view;
        view.setDirectory(dir.path());
        QCOMPARE(view.model()->rowCount(), 2);
        selectRows(*view.table(), {QStringLiteral("beta")});
        QCOMPARE(view.selectedPaths(), QStringList{b});
        // A third session appears (a run ended): the folder is re-read, beta stays selected and Open stays enabled.
        const QString c = dir.filePath(QStringLiteral("c.meshbench"));
        samples::write(c, "gamma", "dp2 pp1 tp1 ep1 1f1b", 3'000'000'000, store::Outcome::Completed,
                       {{1, 0, 1, 3.0, 0.5, 100}});
        view.model()->refresh();
        QCOMPARE(view.model()->rowCount(), 3);
        QCOMPARE(view.selectedPaths(), QStringList{b});
        QVERIFY(button(view, QStringLiteral("Open"))->isEnabled());
        // selectSession finds a file even behind a filter that hides it, and selects it alone.
        view.filterEdit()->setText(QStringLiteral("alpha"));
        QVERIFY(view.selectSession(c));
        QVERIFY(view.filterEdit()->text().isEmpty());
        QCOMPARE(view.selectedPaths(), QStringList{c});
        QVERIFY(!view.selectSession(dir.filePath(QStringLiteral("missing.meshbench"))));
        QVERIFY(view.selectedPaths().isEmpty());
    }

    void openCompareAndExport()
    {
        QTemporaryDir dir;
        const QString a = dir.filePath(QStringLiteral("a.meshbench")), b = dir.filePath(QStringLiteral("b.meshbench"));
        samples::write(a, "alpha", "dp1 pp2 tp1 ep1 1f1b", 1'000'000'000, store::Outcome::Completed,
                       {{1, 0, 1, 3.0, 0.5, 100}, {2, 1, 2, 2.0, 0.2, 100}});
        samples::write(b, "beta", "dp1 pp2 tp1 ep1 interleaved", 2'000'000'000, store::Outcome::Completed,
                       {{1, 0, 1, 3.0, 0.5, 100}, {2, 1, 3, 1.0, 0.1, 100}});
        QFile garbage(dir.filePath(QStringLiteral("junk.meshbench")));
        QVERIFY(garbage.open(QIODevice::WriteOnly));
        garbage.write("junk");
        garbage.close();

        SessionsView view;
        view.resize(900, 600);
        view.show();
        view.setDirectory(dir.path());
        QCOMPARE(view.table()->model()->rowCount(), 3);
        QSignalSpy opened(&view, &SessionsView::openRequested);
        QSignalSpy compared(&view, &SessionsView::compareRequested);
        QPushButton* open = button(view, QStringLiteral("Open"));
        QPushButton* compare = button(view, QStringLiteral("Compare"));
        QVERIFY(open && compare);

        selectRows(*view.table(), {QStringLiteral("alpha")});
        QVERIFY(open->isEnabled() && !compare->isEnabled());
        QTest::mouseClick(open, Qt::LeftButton);
        QCOMPARE(opened.count(), 1);
        QCOMPARE(opened.first().at(0).toString(), a);

        // The unreadable row cannot be opened: nothing is emitted and the status says why.
        selectRows(*view.table(), {QStringLiteral("junk")});
        QVERIFY(!open->isEnabled());
        view.openSelected();
        QCOMPARE(opened.count(), 1);
        QVERIFY(!view.statusText().isEmpty());

        selectRows(*view.table(), {QStringLiteral("alpha"), QStringLiteral("beta")});
        QVERIFY(compare->isEnabled() && !open->isEnabled());
        QSignalSpy shown(view.comparison(), &SessionComparison::compared);
        QTest::mouseClick(compare, Qt::LeftButton);
        QCOMPARE(compared.count(), 1);
        QVERIFY(shown.wait(30'000));  // read off the GUI thread
        const QStringList comparedPaths = compared.first().at(0).toStringList();
        QCOMPARE(QSet<QString>(comparedPaths.begin(), comparedPaths.end()), QSet<QString>({a, b}));
        QVERIFY(view.comparison()->table()->rowCount() >= 5);
        QVERIFY(view.comparison()->errorText().isEmpty());

        // Filtering through the line edit.
        QTest::keyClicks(view.filterEdit(), QStringLiteral("interleaved"));
        QCOMPARE(view.table()->model()->rowCount(), 1);
        view.filterEdit()->clear();
        QCOMPARE(view.table()->model()->rowCount(), 3);

        // Exports run in the background and report inline, failures included.
        QSignalSpy exported(&view, &SessionsView::exportFinished);
        const QString csvDir = dir.filePath(QStringLiteral("csv"));
        QVERIFY(QDir().mkpath(csvDir));
        view.exportCsvTo(a, csvDir);
        QTRY_COMPARE(exported.count(), 1);
        QCOMPARE(exported.last().at(0).toBool(), true);
        QFile steps(csvDir + QStringLiteral("/steps.csv"));
        QVERIFY(steps.open(QIODevice::ReadOnly));
        QCOMPARE(steps.readAll().count('\n'), 3);  // header + 2 steps
        view.exportChromeTraceTo(a, dir.filePath(QStringLiteral("no/such/folder/trace.json")));
        QTRY_COMPARE(exported.count(), 2);
        QCOMPARE(exported.last().at(0).toBool(), false);
        QVERIFY2(view.statusText().startsWith(QStringLiteral("export failed")), qPrintable(view.statusText()));
        view.exportChromeTraceTo(a, dir.filePath(QStringLiteral("trace.json")));
        QTRY_COMPARE(exported.count(), 3);
        QCOMPARE(exported.last().at(0).toBool(), true);
        QVERIFY(QFileInfo(dir.filePath(QStringLiteral("trace.json"))).size() > 100);
    }

    void replayBarEmitsRequests()
    {
        ReplayControls bar;
        bar.show();
        QVERIFY(!bar.playButton()->isEnabled());
        QSignalSpy pause(&bar, &ReplayControls::pauseRequested), resume(&bar, &ReplayControls::resumeRequested),
            speed(&bar, &ReplayControls::speedRequested), seek(&bar, &ReplayControls::seekRequested);
        bar.setReplay(QStringLiteral("replay-4"), 20);
        QVERIFY(bar.isPlaying());
        QCOMPARE(bar.slider()->maximum(), 20);

        QTest::mouseClick(bar.playButton(), Qt::LeftButton);
        QCOMPARE(pause.count(), 1);
        QCOMPARE(pause.first().at(0).toString(), QStringLiteral("replay-4"));
        QTest::mouseClick(bar.playButton(), Qt::LeftButton);
        QCOMPARE(resume.count(), 1);

        const int tenX = bar.speedBox()->findData(10.0);
        QVERIFY(tenX >= 0);
        bar.speedBox()->setCurrentIndex(tenX);
        emit bar.speedBox()->activated(tenX);
        QCOMPARE(speed.count(), 1);
        QCOMPARE(speed.first().at(1).toDouble(), 10.0);

        bar.slider()->setFocus();
        QTest::keyClick(bar.slider(), Qt::Key_End);
        QCOMPARE(seek.count(), 1);
        QCOMPARE(seek.first().at(1).toInt(), 20);
        // The feed moves the slider without asking for a seek.
        bar.setPosition(7);
        QCOMPARE(bar.position(), 7);
        QCOMPARE(seek.count(), 1);
    }

    void replayADemoRunThroughTheEngine()
    {
        QTemporaryDir dir;
        EngineClient client;
        client.startLocalEngine(QStringLiteral("ipc://") + dir.filePath(QStringLiteral("control")),
                                QStringLiteral("ipc://") + dir.filePath(QStringLiteral("live")), dir.path());
        QVERIFY(QTest::qWaitFor([&] { return client.state() == ConnectionState::Connected; }, 15000));
        QVERIFY(client.ownsEngine());
        std::ifstream in(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
        std::optional<nlohmann::json> submitted;
        client.request({{"op", "submit"}, {"job", nlohmann::json::parse(in)}, {"steps", 3}, {"one_device", true}},
                       [&](const nlohmann::json& reply) { submitted = reply; });
        QTRY_VERIFY(submitted.has_value());
        QVERIFY2(submitted->value("ok", false), submitted->dump().c_str());
        const QString session = QString::fromStdString((*submitted)["session"]);
        QString state;
        connect(&client, &EngineClient::jobChanged, this, [&](const QString& source, const nlohmann::json& status) {
            if (source == QString::fromStdString((*submitted)["job"]))
                state = QString::fromStdString(status.value("state", ""));
        });
        QVERIFY(QTest::qWaitFor([&] { return state == QStringLiteral("completed"); }, 180000));

        ReplayControls bar;
        bar.setClient(&client);
        QSignalSpy started(&bar, &ReplayControls::replayStarted);
        bar.speedBox()->setCurrentIndex(bar.speedBox()->findData(100.0));
        bar.openSession(session);
        QTRY_COMPARE(started.count(), 1);
        QVERIFY(bar.source().startsWith(QStringLiteral("replay-")));
        QCOMPARE(started.first().at(1).toString(), session);
        QCOMPARE(bar.steps(), 3);
        QTRY_COMPARE_WITH_TIMEOUT(bar.position(), 3, 30000);
        QTRY_VERIFY_WITH_TIMEOUT(!bar.isPlaying(), 30000);  // ended
        // Play again: the ended replay is sought back to the start and plays to the end once more.
        QSignalSpy steps(&client, &EngineClient::stepArrived);
        QTest::mouseClick(bar.playButton(), Qt::LeftButton);
        QTRY_VERIFY_WITH_TIMEOUT(steps.count() >= 3, 30000);
        QVERIFY2(!bar.statusText().startsWith(QStringLiteral("seek")), qPrintable(bar.statusText()));  // not refused

        // A corrupt file is refused inline, before asking the engine.
        const QString junk = dir.filePath(QStringLiteral("junk.meshbench"));
        QFile file(junk);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("junk");
        file.close();
        bar.openSession(junk);
        QVERIFY2(bar.statusText().contains(QStringLiteral("junk.meshbench")), qPrintable(bar.statusText()));
        QCOMPARE(started.count(), 1);
    }
};

QTEST_MAIN(TestSessionsView)
#include "tst_sessions_view.moc"
