// The workbench against a real engine, driven as a user drives it: the demo job opened in the
// Designer, launched from the Run menu and watched to the end in the Monitor; its session, selected
// in Sessions, replayed with the Open button. The replay must bring the Monitor (its RunState and
// its bubble chart) to the aggregates the engine published live, step by step, and both must equal
// what the session aggregates to in-process. Then the screenshot tour, which walks the same path
// and saves a PNG of every screen.

#include "client/engine_client.h"
#include "designer/designer_view.h"
#include "designer/job_document.h"
#include "mainwindow/main_window.h"
#include "mainwindow/monitor_page.h"
#include "mainwindow/screenshot_tour.h"
#include "monitor/bubble_chart.h"
#include "monitor/monitor_charts.h"
#include "monitor/run_state.h"
#include "sessions/replay_controls.h"
#include "sessions/sessions_view.h"

#include "common/step_aggregates.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QMenuBar>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QStatusBar>
#include <QtTest>

#include <cerrno>
#include <csignal>

#include <unistd.h>

using namespace meshbench;
using namespace meshbench::app;

namespace {

constexpr int kSteps = 8;
constexpr int kRunTimeoutMs = 180'000;  // 8 ranks on 2 shared cores

// A window on an engine of its own: ipc endpoints and the sessions folder in a temporary folder.
struct Workbench {
    QTemporaryDir dir;
    EngineClient client;
    MainWindow window{&client};

    Workbench()
    {
        client.startLocalEngine(QStringLiteral("ipc://") + dir.filePath(QStringLiteral("control")),
                                QStringLiteral("ipc://") + dir.filePath(QStringLiteral("live")), sessions());
        window.sessions()->setDirectory(sessions());
        window.show();
    }
    QString sessions() const { return dir.filePath(QStringLiteral("sessions")); }

    // The demo job in the Designer, shortened to `steps`.
    bool openDemo(int steps)
    {
        if (!window.openFile(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json")))
            return false;
        JobDocument* job = window.designer()->document();
        job->merge({{"train", {{"steps", steps}, {"decay_steps", steps}, {"warmup_steps", 2}}}});
        return job->plan() != nullptr;
    }
};

QAction* menuAction(QMainWindow& window, const QString& menu, const QString& text)
{
    for (QAction* top : window.menuBar()->actions())
        if (top->text().remove(QLatin1Char('&')) == menu)
            for (QAction* action : top->menu()->actions())
                if (action->text().remove(QLatin1Char('&')) == text)
                    return action;
    return nullptr;
}

QPushButton* button(QWidget& parent, const QString& text)
{
    for (QPushButton* b : parent.findChildren<QPushButton*>())
        if (b->text().remove(QLatin1Char('&')) == text)
            return b;
    return nullptr;
}

}  // namespace

class TestMainWindowReplay : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);
        // CTest runs this suite offscreen and again under Xvfb (tst_mainwindow_replay_xcb): it is
        // on the platform it was asked for.
        if (qEnvironmentVariableIsSet("QT_QPA_PLATFORM"))
            QCOMPARE(QGuiApplication::platformName(), qEnvironmentVariable("QT_QPA_PLATFORM"));
    }

    void aReplayedSessionDrivesTheMonitorToTheLiveAggregates()
    {
        Workbench bench;
        QVERIFY(bench.openDemo(kSteps));
        QVERIFY(QTest::qWaitFor([&] { return bench.client.state() == ConnectionState::Connected; }, 30'000));

        // Run > Launch, watched to the end.
        QAction* launch = menuAction(bench.window, QStringLiteral("Run"), QStringLiteral("Launch Designed Job"));
        QVERIFY(launch);
        RunState* state = bench.window.monitor()->runState();
        // The status bar's progress, as each step arrives: steps done of the job's steps.
        auto* progress = bench.window.statusBar()->findChild<QProgressBar*>();
        QVERIFY(progress && !progress->isVisible());
        std::vector<std::pair<int, int>> shown;  // (value, maximum) while visible
        connect(state, &RunState::stepsChanged, this, [&] {
            if (progress->isVisible())
                shown.emplace_back(progress->value(), progress->maximum());
        });
        launch->trigger();
        QVERIFY2(
            QTest::qWaitFor([&] { return state->phase() == RunPhase::Completed || state->phase() == RunPhase::Failed; },
                            kRunTimeoutMs),
            qPrintable(bench.window.statusMessage()));
        QCOMPARE(runPhaseName(state->phase()), runPhaseName(RunPhase::Completed));
        QVERIFY(bench.window.monitor()->source().startsWith(QStringLiteral("job-")));
        // The last steps' aggregates may trail the "completed" job message by an event-loop pass.
        QVERIFY(QTest::qWaitFor([&] { return state->steps().size() == std::size_t(kSteps); }, 5000));
        const std::vector<live::StepAggregate> live = state->steps();
        QVERIFY(!shown.empty());
        for (std::size_t i = 0; i < shown.size(); ++i) {
            QCOMPARE(shown[i].second, kSteps);
            QVERIFY(shown[i].first >= 1 && shown[i].first <= kSteps);
            QVERIFY(i == 0 || shown[i].first >= shown[i - 1].first);
        }
        QVERIFY(!progress->isVisible());  // the job has ended
        std::map<std::uint32_t, live::RankMemory> liveMemory;
        for (const auto& [rank, track] : state->memory())
            liveMemory[rank] = track.latest;
        QCOMPARE(int(liveMemory.size()), 8);
        for (int i = 0; i < kSteps; ++i) {
            QCOMPARE(live[std::size_t(i)].step, i + 1);
            QVERIFY(!live[std::size_t(i)].partial);
        }

        // The finished session is selected in Sessions; Open replays it (at 100x) in the Monitor.
        const QString session = bench.window.lastSessionPath();
        QVERIFY(QFileInfo::exists(session));
        QCOMPARE(bench.window.sessions()->selectedPaths(), QStringList{session});
        ReplayControls* replay = bench.window.sessions()->replayControls();
        replay->speedBox()->setCurrentIndex(int(ReplayControls::speeds().indexOf(100.0)));
        QSignalSpy started(replay, &ReplayControls::replayStarted);
        QPushButton* open = button(*bench.window.sessions(), QStringLiteral("Open"));
        QVERIFY(open && open->isEnabled());
        QTest::mouseClick(open, Qt::LeftButton);
        QVERIFY2(QTest::qWaitFor([&] { return started.count() == 1; }, 10'000), qPrintable(replay->statusText()));
        QCOMPARE(started.first().at(1).toString(), session);
        QVERIFY(bench.window.monitor()->source().startsWith(QStringLiteral("replay-")));
        QVERIFY(QTest::qWaitFor([&] { return state->phase() == RunPhase::Ended; }, 60'000));
        QVERIFY(QTest::qWaitFor([&] { return state->steps().size() == std::size_t(kSteps); }, 5000));

        // The same aggregates as live, step by step; the same memory, peaks included.
        for (int i = 0; i < kSteps; ++i)
            step_aggregates::compareSteps(state->steps()[std::size_t(i)], live[std::size_t(i)], 1e-12);
        QCOMPARE(state->memory().size(), liveMemory.size());
        for (const auto& [rank, track] : state->memory()) {
            QCOMPARE(track.latest.peak, liveMemory[rank].peak);
            QCOMPARE(track.latest.current, liveMemory[rank].current);
        }
        // The bubble chart plots them: one point per step at the step's measured bubble.
        QCPGraph* overall = bench.window.monitor()->charts()->bubbleChart()->overallGraph();
        QCOMPARE(overall->dataCount(), kSteps);
        for (int i = 0; i < kSteps; ++i) {
            QCOMPARE(overall->data()->at(i)->key, double(i + 1));
            QVERIFY(std::abs(overall->data()->at(i)->value - *live[std::size_t(i)].bubble) < 1e-12);
        }

        // Independently: the session read back and aggregated in-process.
        const SessionAggregates stored = computeSessionAggregates(store::SessionReader(session.toStdString()));
        QCOMPARE(int(stored.steps.size()), kSteps);
        for (int i = 0; i < kSteps; ++i)
            step_aggregates::compareSteps(stored.steps[std::size_t(i)], live[std::size_t(i)], 1e-12);
    }

    void asRootTheSettingLaunchesAndClosingStopsTheEngine()
    {
        // Without Open MPI's variables (the workbench started as a user starts it), root's launch is
        // refused with the fix named; Run > Allow Open MPI as Root then runs the demo on its 8 ranks;
        // closing the workbench stops the engine it started.
        if (geteuid() != 0)
            QSKIP("only root meets Open MPI's refusal");
        const QByteArray allow = qgetenv("OMPI_ALLOW_RUN_AS_ROOT"), confirm = qgetenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
        qunsetenv("OMPI_ALLOW_RUN_AS_ROOT");
        qunsetenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM");
        struct Restore {
            QByteArray allow, confirm;
            ~Restore()
            {
                qputenv("OMPI_ALLOW_RUN_AS_ROOT", allow);
                qputenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", confirm);
                QSettings().remove("run/allow_run_as_root");
            }
        } restore{allow, confirm};

        auto bench = std::make_unique<Workbench>();
        QVERIFY(bench->openDemo(2));
        QVERIFY(QTest::qWaitFor([&] { return bench->client.state() == ConnectionState::Connected; }, 30'000));
        QAction* launch = menuAction(bench->window, QStringLiteral("Run"), QStringLiteral("Launch Designed Job"));
        QAction* allowRoot = menuAction(bench->window, QStringLiteral("Run"), QStringLiteral("Allow Open MPI as Root"));
        QVERIFY(launch && allowRoot && allowRoot->isCheckable());
        RunState* state = bench->window.monitor()->runState();
        const auto ended = [&] {
            return QTest::qWaitFor(
                [&] { return state->phase() == RunPhase::Completed || state->phase() == RunPhase::Failed; },
                kRunTimeoutMs);
        };

        allowRoot->setChecked(false);
        launch->trigger();
        QVERIFY2(ended(), qPrintable(bench->window.statusMessage()));
        QCOMPARE(runPhaseName(state->phase()), runPhaseName(RunPhase::Failed));
        QVERIFY2(state->cause().contains(QStringLiteral("Allow Open MPI as Root")), qPrintable(state->cause()));

        allowRoot->setChecked(true);
        QVERIFY(QSettings().value("run/allow_run_as_root").toBool());
        launch->trigger();
        QVERIFY(QTest::qWaitFor(
            [&] { return state->phase() == RunPhase::Starting || state->phase() == RunPhase::Running; }, 30'000));
        QVERIFY2(ended(), qPrintable(bench->window.statusMessage()));
        QCOMPARE(runPhaseName(state->phase()), runPhaseName(RunPhase::Completed));
        QVERIFY(QTest::qWaitFor([&] { return state->steps().size() == 2 && state->memory().size() == 8; }, 5000));

        const qint64 engine = bench->client.engineProcessId();
        QVERIFY(engine > 0);
        QVERIFY(::kill(pid_t(engine), 0) == 0);
        QVERIFY(bench->window.close());
        bench.reset();
        // The engine was waited for: no such process any more.
        QCOMPARE(::kill(pid_t(engine), 0), -1);
        QCOMPARE(errno, ESRCH);
    }

    void theScreenshotTourSavesEveryScreen()
    {
        Workbench bench;
        QVERIFY(bench.openDemo(kSteps));
        QTemporaryDir shots;
        ScreenshotTour tour(bench.window, shots.path(), kSteps);
        tour.setTimeout(kRunTimeoutMs);
        QSignalSpy finished(&tour, &ScreenshotTour::finished);
        tour.start(200);
        QVERIFY(finished.wait(kRunTimeoutMs + 10'000));
        QVERIFY2(finished.first().at(0).toBool(), qPrintable(finished.first().at(1).toString()));
        QCOMPARE(QDir(shots.path()).entryList({QStringLiteral("*.png")}, QDir::Files, QDir::Name),
                 (QStringList{"designer.png", "monitor-live.png", "monitor-replay.png", "sessions-replay.png"}));
        const qreal dpr = bench.window.devicePixelRatioF();
        for (const QString& name : ScreenshotTour::fullTourFiles()) {
            const QImage image(QDir(shots.path()).filePath(name));
            QCOMPARE(image.size(), bench.window.size() * dpr);
        }
        // The live capture came while the job ran with at least half its steps in; the replay's
        // once it had played as far.
        QVERIFY(bench.window.monitor()->source().startsWith(QStringLiteral("replay-")));
        QVERIFY(int(bench.window.monitor()->runState()->steps().size()) >= kSteps / 2);
    }
};

QTEST_MAIN(TestMainWindowReplay)
#include "tst_mainwindow_replay.moc"
