#include "screenshot_tour.h"

#include "client/engine_client.h"
#include "designer/designer_view.h"
#include "designer/job_document.h"
#include "monitor/run_state.h"
#include "monitor_page.h"
#include "sessions/sessions_view.h"

namespace meshbench::app {

namespace {

constexpr int kConnectMs = 30'000;  // a local engine starts in about a second
constexpr auto kDesigner = "designer.png";
constexpr auto kMonitorLive = "monitor-live.png";
constexpr auto kSessionsReplay = "sessions-replay.png";
constexpr auto kMonitorReplay = "monitor-replay.png";

bool isTerminal(RunPhase phase)
{
    return phase == RunPhase::Completed || phase == RunPhase::Failed || phase == RunPhase::Stopped;
}

}  // namespace

QStringList ScreenshotTour::fullTourFiles() { return {kDesigner, kMonitorLive, kSessionsReplay, kMonitorReplay}; }

ScreenshotTour::ScreenshotTour(MainWindow& window, const QString& dir, int steps, QObject* parent)
    : QObject(parent), m_window(window), m_dir(dir), m_steps(steps)
{
    m_timeout.setSingleShot(true);
    m_timeout.setInterval(10 * 60 * 1000);
    connect(&m_timeout, &QTimer::timeout, this, [this] {
        finish(false, tr("the tour did not finish in %1 s (the run's state: %2)")
                          .arg(m_timeout.interval() / 1000)
                          .arg(runPhaseName(m_window.monitor()->runState()->phase())));
    });
    RunState* state = m_window.monitor()->runState();
    connect(state, &RunState::stepsChanged, this, &ScreenshotTour::onRunChanged);
    connect(state, &RunState::stateChanged, this, &ScreenshotTour::onRunChanged);
}

void ScreenshotTour::start(int settleMs)
{
    m_timeout.start();
    JobDocument* job = m_window.designer()->document();
    if (m_steps > 0 && job->spec()) {
        // A schedule longer than the run would leave the learning rate at its peak.
        const int warmup = std::min(m_steps / 4, job->spec()->train.warmupSteps);
        job->merge({{"train", {{"steps", m_steps}, {"decay_steps", m_steps}, {"warmup_steps", warmup}}}});
    }
    QTimer::singleShot(settleMs, this, &ScreenshotTour::begin);
}

void ScreenshotTour::begin()
{
    const plan::Plan* plan = m_window.designer()->document()->plan();
    EngineClient* client = m_window.client();
    if (!plan || !client) {
        // Nothing to run: the three areas as they are.
        QString error;
        if (!m_window.saveScreenshots(m_dir.path(), &error))
            return finish(false, error);
        return finish(
            true,
            tr("the three areas saved in %1 (no %2 to run)").arg(m_dir.path(), plan ? tr("engine") : tr("valid job")));
    }
    if (!m_dir.mkpath(QStringLiteral(".")))
        return finish(false, tr("cannot create %1").arg(m_dir.path()));
    if (!save(MainWindow::Area::Designer, kDesigner))
        return;
    const int steps = m_window.designer()->document()->spec()->train.steps;
    m_liveTarget = std::max(1, steps / 2);
    m_stage = Stage::Launching;
    const auto launch = [this] { m_window.designer()->requestLaunch(); };
    connect(&m_window, &MainWindow::launchRefused, this, [this](const QString& why) { finish(false, why); });
    connect(client, &EngineClient::engineError, this, [this](const QString& error) {
        if (m_stage == Stage::Launching)
            finish(false, error);
    });
    if (client->state() == ConnectionState::Connected) {
        launch();
        return;
    }
    connect(client, &EngineClient::stateChanged, this, [launch, this](ConnectionState state) {
        if (state == ConnectionState::Connected && m_stage == Stage::Launching)
            launch();
    });
    QTimer::singleShot(kConnectMs, this, [this, client] {
        if (m_stage == Stage::Launching && client->state() != ConnectionState::Connected)
            finish(false,
                   tr("no engine answers at %1 after %2 s").arg(client->controlEndpoint()).arg(kConnectMs / 1000));
    });
}

void ScreenshotTour::onRunChanged()
{
    const MonitorPage* monitor = m_window.monitor();
    const RunState* state = monitor->runState();
    const int arrived = int(state->steps().size());
    switch (m_stage) {
    case Stage::Launching:
    case Stage::Running:
        if (m_window.lastSessionPath().isEmpty() || !monitor->source().startsWith(QStringLiteral("job-")))
            return;  // not yet following the launched job
        if (m_stage == Stage::Launching && (arrived >= m_liveTarget || isTerminal(state->phase()))) {
            if (!save(MainWindow::Area::Monitor, kMonitorLive))
                return;
            m_stage = Stage::Running;
        }
        if (!isTerminal(state->phase()))
            return;
        if (state->phase() != RunPhase::Completed)
            return finish(false, tr("the job %1: %2").arg(runPhaseName(state->phase()), state->cause()));
        m_stage = Stage::Replaying;
        // The main window selected the finished run's session in Sessions as it ended.
        if (m_window.sessions()->selectedPaths() != QStringList{m_window.lastSessionPath()})
            return finish(false,
                          tr("the finished session %1 is not selected in Sessions").arg(m_window.lastSessionPath()));
        m_window.showArea(MainWindow::Area::Sessions);
        m_window.sessions()->openSelected();
        return;
    case Stage::Replaying:
        if (!monitor->source().startsWith(QStringLiteral("replay-")) ||
            (arrived < m_liveTarget && state->phase() != RunPhase::Ended))
            return;
        if (save(MainWindow::Area::Sessions, kSessionsReplay) && save(MainWindow::Area::Monitor, kMonitorReplay))
            finish(true, tr("%1 screens saved in %2").arg(fullTourFiles().size()).arg(m_dir.path()));
        return;
    case Stage::Idle:
    case Stage::Done:
        return;
    }
}

bool ScreenshotTour::save(MainWindow::Area area, const QString& name)
{
    QString error;
    if (m_window.grabArea(area, m_dir.filePath(name), &error))
        return true;
    finish(false, error);
    return false;
}

void ScreenshotTour::finish(bool ok, const QString& message)
{
    if (m_stage == Stage::Done)
        return;
    m_stage = Stage::Done;
    m_timeout.stop();
    emit finished(ok, message);
}

}  // namespace meshbench::app
