#include "main_window.h"

#include "monitor_page.h"
#include "palette_theme.h"

#include "client/engine_client.h"
#include "designer/designer_view.h"
#include "designer/job_document.h"
#include "live/session_spec.h"
#include "monitor/bubble_chart.h"
#include "monitor/expert_load_view.h"
#include "monitor/memory_chart.h"
#include "monitor/monitor_charts.h"
#include "monitor/run_state.h"
#include "monitor/training_chart.h"
#include "sessions/replay_controls.h"
#include "sessions/session_list_model.h"
#include "sessions/sessions_view.h"
#include "sessions/trace_import_dialog.h"
#include "sessions/trace_import_job.h"

#include "plan/job_spec.h"
#include "plan/units.h"
#include "store/session_store.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QProgressDialog>
#include <QPushButton>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QToolBar>

namespace meshbench::app {

namespace {

constexpr int kRecentFiles = 10;

QString sessionsDirectory()
{
    if (const QByteArray data = qgetenv("XDG_DATA_HOME"); !data.isEmpty())
        return QDir(QString::fromLocal8Bit(data)).filePath("meshbench/sessions");
    return QDir::home().filePath(".local/share/meshbench/sessions");
}

}  // namespace

MainWindow::MainWindow(EngineClient* client, QWidget* parent)
    : QMainWindow(parent), m_client(client), m_tabs(new QTabWidget), m_designer(new DesignerView),
      m_monitor(new MonitorPage(client)), m_sessions(new SessionsView), m_engineLabel(new QLabel),
      m_jobLabel(new QLabel), m_progress(new QProgressBar)
{
    setWindowTitle(tr("Meshbench"));
    setWindowIcon(QIcon(QStringLiteral(":/meshbench.svg")));
    m_tabs->addTab(m_designer, tr("&Designer"));
    m_tabs->addTab(m_monitor, tr("&Monitor"));
    m_tabs->addTab(m_sessions, tr("&Sessions"));
    setCentralWidget(m_tabs);
    m_sessions->setDirectory(sessionsDirectory());

    // The running job's progress: steps done of the steps it runs.
    m_progress->setMaximumWidth(160);
    m_progress->setFormat(tr("step %v / %m"));
    m_progress->hide();
    statusBar()->addPermanentWidget(m_progress);
    statusBar()->addPermanentWidget(m_jobLabel);
    statusBar()->addPermanentWidget(m_engineLabel);
    m_engineLabel->setText(client ? tr("engine: not connected") : tr("engine: offline"));
    m_jobLabel->setText(tr("no job"));

    connect(m_designer, &DesignerView::launchRequested, this, &MainWindow::launch);
    connect(m_monitor, &MonitorPage::statusChanged, m_jobLabel, &QLabel::setText);
    if (m_client) {
        m_sessions->replayControls()->setClient(m_client);
        connect(m_client, &EngineClient::stateChanged, this, [this](ConnectionState state, const QString& endpoint) {
            m_engineLabel->setText(tr("engine: %1 %2").arg(connectionStateName(state), endpoint));
            // An engine already serving there keeps its own environment and settings: say whose it is.
            if (state == ConnectionState::Connected && !m_client->ownsEngine())
                showMessage(tr("attached to an engine this workbench did not start (%1); it keeps its own "
                               "environment, and stays when the workbench closes")
                                .arg(endpoint));
        });
        connect(m_client, &EngineClient::engineError, this, &MainWindow::showMessage);
    }
    connect(m_monitor->runState(), &RunState::stepsChanged, this, &MainWindow::updateProgress);
    connect(m_monitor->runState(), &RunState::stateChanged, this, &MainWindow::updateProgress);
    // A run that ended has written its session: list it, selected, ready to replay.
    connect(m_monitor->runState(), &RunState::stateChanged, this, [this] {
        const RunPhase phase = m_monitor->runState()->phase();
        const bool ended = phase == RunPhase::Completed || phase == RunPhase::Failed || phase == RunPhase::Stopped;
        if (!ended || m_runningSession.isEmpty() || m_monitor->source() != m_runningJob ||
            m_announcedJob == m_runningJob)
            return;
        m_announcedJob = m_runningJob;
        m_sessions->selectSession(m_runningSession);
        showMessage(
            tr("%1 %2; its session is selected in Sessions, ready to replay").arg(m_runningJob, runPhaseName(phase)));
    });
    connect(m_sessions, &SessionsView::openRequested, m_sessions->replayControls(), &ReplayControls::openSession);
    connect(m_sessions->replayControls(), &ReplayControls::replayStarted, this,
            [this](const QString& source, const QString& path) {
                try {
                    const store::SessionReader reader(path.toStdString());
                    m_monitor->follow(source, live::sessionSpecAsRun(reader), &reader);
                    showArea(Area::Monitor);
                } catch (const std::exception& e) {
                    showMessage(tr("cannot replay %1: %2").arg(path, QString::fromUtf8(e.what())));
                }
            });

    buildMenus();
    QSettings settings;
    resize(1440, 900);  // until the user's own size is restored
    restoreGeometry(settings.value("window/geometry").toByteArray());
    restoreState(settings.value("window/state").toByteArray());
    m_recentFiles = settings.value("files/recent").toStringList();
    rebuildRecentMenu();
    if (const int area = settings.value("window/area", 0).toInt(); area >= 0 && area < m_tabs->count())
        m_tabs->setCurrentIndex(area);
}

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open Job..."), QKeySequence::Open, this, [this] { openDialog(tr("Job specs (*.json)")); });
    file->addAction(tr("Open &Session..."), QKeySequence(tr("Ctrl+Shift+O")), this,
                    [this] { openDialog(tr("Sessions (*.meshbench)")); });
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    file->addAction(tr("Import &Traces..."), this, &MainWindow::importDialog)
        ->setToolTip(tr("Read other stacks' per-rank traces (torch.profiler, Nsight Systems, Megatron's expert "
                        "counts) into a session, and open it"));
    file->addSeparator();
    file->addAction(tr("&Save Job"), QKeySequence::Save, this, [this] { saveJob(false); });
    file->addAction(tr("Save Job &As..."), QKeySequence::SaveAs, this, [this] { saveJob(true); });
    QMenu* exportMenu = file->addMenu(tr("&Export"));
    exportMenu->addAction(tr("Session as &Chrome Trace..."), m_sessions, &SessionsView::exportChromeTrace);
    exportMenu->addAction(tr("Session as C&SV..."), m_sessions, &SessionsView::exportCsv);
    exportMenu->addSeparator();
    // Each Monitor chart, as its right-click menu also offers.
    const MonitorCharts* charts = m_monitor->charts();
    for (const auto& [shown, name] : {std::pair<ChartWidget*, QString>{charts->bubbleChart(), tr("&Bubble Chart")},
                                      {charts->expertLoadView(), tr("E&xpert Load Chart")},
                                      {charts->memoryChart(), tr("&Memory Chart")},
                                      {charts->trainingChart(), tr("&Training Chart")}}) {
        ChartWidget* chart = shown;  // a variable, not a binding: lambdas capture it (clang 14 cannot a binding)
        QMenu* menu = exportMenu->addMenu(name);
        menu->addAction(tr("as PNG..."), chart, [chart] { chart->exportWithChosenPath(QStringLiteral("png")); });
        menu->addAction(tr("as PDF..."), chart, [chart] { chart->exportWithChosenPath(QStringLiteral("pdf")); });
        connect(chart, &ChartWidget::exportFinished, this, [this](const QString& path, const QString& error) {
            showMessage(error.isEmpty() ? tr("exported %1").arg(path) : tr("cannot export: %1").arg(error));
        });
    }
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->addAction(tr("&Designer"), QKeySequence(tr("Ctrl+1")), this, [this] { showArea(Area::Designer); });
    view->addAction(tr("&Monitor"), QKeySequence(tr("Ctrl+2")), this, [this] { showArea(Area::Monitor); });
    view->addAction(tr("&Sessions"), QKeySequence(tr("Ctrl+3")), this, [this] { showArea(Area::Sessions); });
    view->addSeparator();
    QAction* dark = view->addAction(tr("D&ark Palette"));
    dark->setCheckable(true);
    dark->setChecked(QSettings().value("view/theme").toString() == themeName(Theme::Dark));
    connect(dark, &QAction::toggled, this, [](bool on) {
        const Theme theme = on ? Theme::Dark : Theme::Light;
        applyTheme(theme);
        QSettings().setValue("view/theme", themeName(theme));
    });

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    QAction* launchAction = run->addAction(tr("&Launch Designed Job"), QKeySequence(tr("Ctrl+R")), m_designer,
                                           &DesignerView::requestLaunch);
    QAction* stopAction = run->addAction(tr("&Stop Job"), QKeySequence(tr("Ctrl+.")), this, &MainWindow::stopJob);
    launchAction->setIcon(style()->standardIcon(QStyle::SP_MediaPlay));
    stopAction->setIcon(style()->standardIcon(QStyle::SP_MediaStop));
    // Launch and Stop one click away, whatever the area shown.
    QToolBar* runBar = addToolBar(tr("Run"));
    runBar->setObjectName(QStringLiteral("runToolBar"));  // for saveState
    runBar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    runBar->addAction(launchAction);
    runBar->addAction(stopAction);
    run->addSeparator();
    run->addAction(tr("&Calibrate from Session..."), this, [this] {
        const QStringList sessions = QFileDialog::getOpenFileNames(this, tr("Calibrate from Session"),
                                                                   sessionsDirectory(), tr("Sessions (*.meshbench)"));
        if (!sessions.isEmpty())
            calibrateFrom(sessions);
    });
    run->addAction(tr("Plan from the &Device Table"), this, [this] {
        m_designer->document()->set(QStringLiteral("cluster.calibration"), nullptr);
        showMessage(tr("planning from the device table's rates"));
    });
    run->addSeparator();
    m_oneDevice = run->addAction(tr("Run on &One Device"));
    m_oneDevice->setCheckable(true);
    m_oneDevice->setToolTip(tr("Launch the designed model unsharded on one device: a baseline for the mesh"));
    m_oneDevice->setChecked(QSettings().value("run/one_device", false).toBool());
    connect(m_oneDevice, &QAction::toggled, this, [](bool on) { QSettings().setValue("run/one_device", on); });
    // Open MPI refuses to start ranks as root; a root user who means it says so here (the engine
    // then passes mpirun --allow-run-as-root), not through variables set before the workbench starts.
    m_allowRoot = run->addAction(tr("Allow Open MPI as &Root"));
    m_allowRoot->setCheckable(true);
    m_allowRoot->setToolTip(tr("Let mpirun start the job's ranks as root (Open MPI's --allow-run-as-root)"));
    m_allowRoot->setChecked(QSettings().value("run/allow_run_as_root", false).toBool());
    connect(m_allowRoot, &QAction::toggled, this, [](bool on) { QSettings().setValue("run/allow_run_as_root", on); });

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About Meshbench"), this, [this] {
        QMessageBox::about(this, tr("About Meshbench"),
                           tr("<b>Meshbench</b><p>Design DP x PP x TP x EP layouts, launch and watch training "
                              "runs, replay and compare sessions.</p><p>Engine: meshbench-engine serve; "
                              "sessions in %1</p>")
                               .arg(sessionsDirectory()));
    });
}

bool MainWindow::calibrateFrom(const QStringList& sessions)
{
    QStringList report;
    QString error;
    if (!m_designer->document()->calibrateFrom(sessions, &report, &error)) {
        showMessage(tr("cannot calibrate: %1").arg(error));
        if (isVisible())
            QMessageBox::warning(this, tr("Cannot calibrate"), error);
        return false;
    }
    showArea(Area::Designer);
    showMessage(report.isEmpty() ? tr("calibrated") : report.front());
    return true;
}

void MainWindow::openDialog(const QString& filter)
{
    const QString path = QFileDialog::getOpenFileName(this, tr("Open"), QString(), filter);
    if (!path.isEmpty())
        openFile(path);
}

bool MainWindow::openFile(const QString& path)
{
    QString error;
    bool ok = false;
    if (path.endsWith(".meshbench")) {
        ok = m_monitor->showSession(path, &error);
        if (ok)
            showArea(Area::Monitor);
    } else {
        ok = m_designer->loadFile(path, &error);
        if (ok) {
            m_jobPath = path;
            showArea(Area::Designer);
        }
    }
    if (!ok) {
        // An error dialog the user must dismiss, once: the window stays usable behind it.
        showMessage(tr("cannot open %1: %2").arg(path, error));
        if (isVisible())
            QMessageBox::warning(this, tr("Cannot open"), tr("%1\n\n%2").arg(path, error));
        return false;
    }
    addRecentFile(path);
    showMessage(tr("opened %1").arg(path));
    return true;
}

void MainWindow::importDialog()
{
    if (m_import) {
        showMessage(tr("an import is running already"));
        return;
    }
    TraceImportDialog dialog(m_sessions->model()->directory(), this);
    if (dialog.exec() == QDialog::Accepted)
        importTraces(dialog.settings());
}

bool MainWindow::importTraces(const TraceImportSettings& settings)
{
    if (m_import)
        return false;
    QDir().mkpath(QFileInfo(settings.sessionPath).absolutePath());
    m_import = new TraceImportJob(settings, this);
    m_importProgress = new QProgressDialog(tr("Reading traces..."), tr("Cancel"), 0, 0, this);
    m_importProgress->setWindowTitle(tr("Import Traces"));
    m_importProgress->setWindowModality(Qt::WindowModal);
    m_importProgress->setMinimumDuration(0);
    m_importProgress->setAutoClose(false);
    m_importProgress->setAutoReset(false);
    m_importProgress->setMinimumWidth(420);
    connect(m_importProgress, &QProgressDialog::canceled, m_import, [this] {
        m_import->cancel();
        showMessage(tr("cancelling the import..."));
    });
    connect(m_import, &TraceImportJob::progress, m_importProgress, [this](quint64 bytes, quint64 events) {
        const quint64 total = m_import->totalBytes();
        const QString read = QString::fromStdString(plan::formatBytes(double(bytes)));
        const QString of =
            total > 0 ? tr(" of %1").arg(QString::fromStdString(plan::formatBytes(double(total)))) : QString();
        m_importProgress->setLabelText(tr("Reading traces: %1%2, %3 events")
                                           .arg(read, of, QString::fromStdString(plan::withThousands(qint64(events)))));
        if (total > 0) {
            m_importProgress->setMaximum(1000);
            m_importProgress->setValue(int(std::min<quint64>(1000, bytes * 1000 / total)));
        }
    });
    connect(m_import, &TraceImportJob::finished, this, &MainWindow::importEnded);
    m_import->start();
    m_importProgress->show();
    showMessage(tr("importing %1 into %2").arg(settings.paths.join(QStringLiteral(", ")), settings.sessionPath));
    return true;
}

void MainWindow::importEnded(bool ok, const QString& sessionPath, const QStringList& lines)
{
    const bool cancelled = m_import->isCancelled();
    // Hidden, not closed (closing would emit canceled()), then gone with the job.
    m_importProgress->disconnect();
    m_importProgress->hide();
    m_importProgress->deleteLater();
    m_importProgress = nullptr;
    m_import->deleteLater();
    m_import = nullptr;
    const QString why = lines.join(u'\n');
    if (!ok) {
        showMessage(cancelled ? lines.value(0) : tr("import failed: %1").arg(lines.value(0)));
        if (isVisible() && !cancelled)  // the user who cancelled needs no dialog to say so
            QMessageBox::warning(this, tr("Cannot import"), why);
        emit importFinished(false, QString(), lines);
        return;
    }
    // Listed and selected in Sessions when written there; open in the Monitor as File > Open does.
    m_sessions->selectSession(sessionPath);
    if (!openFile(sessionPath)) {
        emit importFinished(false, QString(), {tr("%1 was written but does not open").arg(sessionPath)});
        return;
    }
    showMessage(tr("imported %1: %2").arg(sessionPath, lines.value(0)));
    if (isVisible()) {
        auto* summary = new QMessageBox(
            QMessageBox::Information, tr("Traces Imported"),
            tr("The traces were imported into %1, now open in the Monitor.").arg(sessionPath), QMessageBox::Ok, this);
        // A long summary (many ranks, many warnings) shows its first lines; Show Details has them all.
        constexpr int kShownLines = 12;
        summary->setInformativeText(lines.size() <= kShownLines
                                        ? why
                                        : QStringList(lines.mid(0, kShownLines)).join(u'\n') + u'\n' +
                                              tr("... %1 lines in all (Show Details)").arg(lines.size()));
        if (lines.size() > kShownLines)
            summary->setDetailedText(why);
        summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
        summary->setAttribute(Qt::WA_DeleteOnClose);
        summary->setModal(false);
        summary->show();
    }
    emit importFinished(true, sessionPath, lines);
}

void MainWindow::saveJob(bool askForPath)
{
    QString path = m_jobPath;
    if (askForPath || path.isEmpty())
        path = QFileDialog::getSaveFileName(this, tr("Save Job"), path, tr("Job specs (*.json)"));
    if (path.isEmpty())
        return;
    QString error;
    if (!m_designer->saveFile(path, &error)) {
        showMessage(tr("cannot save %1: %2").arg(path, error));
        return;
    }
    m_jobPath = path;
    addRecentFile(path);
    showMessage(tr("saved %1").arg(path));
}

void MainWindow::launch(const QByteArray& jobJson)
{
    const auto refuse = [this](const QString& why) {
        showMessage(why);
        emit launchRefused(why);
    };
    if (!m_client)
        return refuse(tr("no engine: start meshbench with an engine to launch jobs"));
    const nlohmann::json job = nlohmann::json::parse(jobJson.constData(), nullptr, false);
    const plan::LoadResult loaded = plan::loadJobSpec(job);
    if (!loaded.valid())
        return refuse(tr("the job does not plan; fix the fields marked in the Designer"));
    const bool oneDevice = launchesOnOneDevice();
    const plan::JobSpec spec = oneDevice ? plan::singleDeviceSpec(*loaded.spec) : *loaded.spec;
    showMessage(tr("launching..."));
    const nlohmann::json submit = {
        {"op", "submit"}, {"job", job}, {"one_device", oneDevice}, {"allow_run_as_root", m_allowRoot->isChecked()}};
    m_client->request(submit, [this, spec, refuse](const nlohmann::json& reply) {
        if (!reply.value("ok", false))
            return refuse(tr("the engine refused the job: %1").arg(QString::fromStdString(reply.value("error", ""))));
        m_runningJob = QString::fromStdString(reply.value("job", ""));
        m_runningSession = QString::fromStdString(reply.value("session", ""));
        m_monitor->follow(m_runningJob, spec);
        showArea(Area::Monitor);
        showMessage(tr("%1 running, session %2").arg(m_runningJob, m_runningSession));
    });
}

void MainWindow::stopJob()
{
    if (!m_client || m_runningJob.isEmpty()) {
        showMessage(tr("no job to stop"));
        return;
    }
    m_client->request({{"op", "stop"}, {"source", m_runningJob.toStdString()}}, [this](const nlohmann::json& reply) {
        showMessage(reply.value("ok", false) ? tr("stopping %1").arg(m_runningJob)
                                             : QString::fromStdString(reply.value("error", "")));
    });
}

void MainWindow::updateProgress()
{
    const RunState* state = m_monitor->runState();
    const bool running = state->phase() == RunPhase::Starting || state->phase() == RunPhase::Running ||
                         state->phase() == RunPhase::Playing || state->phase() == RunPhase::Seeking;
    if (!running || !state->spec() || state->spec()->train.steps <= 0) {
        m_progress->hide();
        return;
    }
    m_progress->setRange(0, state->spec()->train.steps);
    m_progress->setValue(state->steps().empty() ? 0 : std::min(state->steps().back().step, state->spec()->train.steps));
    m_progress->show();
}

void MainWindow::showArea(Area area) { m_tabs->setCurrentIndex(int(area)); }

void MainWindow::showMessage(const QString& text) { statusBar()->showMessage(text, 15000); }

QString MainWindow::statusMessage() const { return statusBar()->currentMessage(); }

void MainWindow::addRecentFile(const QString& path)
{
    const QString absolute = QFileInfo(path).absoluteFilePath();
    m_recentFiles.removeAll(absolute);
    m_recentFiles.prepend(absolute);
    while (m_recentFiles.size() > kRecentFiles)
        m_recentFiles.removeLast();
    QSettings().setValue("files/recent", m_recentFiles);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    m_recentMenu->clear();
    for (const QString& path : m_recentFiles)
        m_recentMenu->addAction(path, this, [this, path] { openFile(path); });
    m_recentMenu->setEnabled(!m_recentFiles.isEmpty());
}

bool MainWindow::launchesOnOneDevice() const { return m_oneDevice->isChecked(); }

bool MainWindow::grabArea(Area area, const QString& path, QString* error)
{
    showArea(area);
    QApplication::processEvents();
    if (grab().save(path))
        return true;
    if (error)
        *error = tr("cannot write %1").arg(path);
    return false;
}

bool MainWindow::saveScreenshots(const QString& dir, QString* error)
{
    QDir().mkpath(dir);
    const int current = m_tabs->currentIndex();
    bool ok = true;
    for (const auto& [area, name] : {std::pair{Area::Designer, "designer.png"}, std::pair{Area::Monitor, "monitor.png"},
                                     std::pair{Area::Sessions, "sessions.png"}})
        if (ok)
            ok = grabArea(area, QDir(dir).filePath(QString::fromLatin1(name)), error);
    m_tabs->setCurrentIndex(current);
    return ok;
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    // The engine this workbench started goes with it (EngineClient stops it), unless a job still
    // runs in it: then the user chooses.
    const RunPhase phase = m_monitor->runState()->phase();
    const bool jobRunning = !m_runningJob.isEmpty() && m_monitor->source() == m_runningJob &&
                            (phase == RunPhase::Starting || phase == RunPhase::Running);
    if (m_client && m_client->ownsEngine() && jobRunning) {
        QMessageBox ask(QMessageBox::Question, tr("A job is running"),
                        tr("%1 is still running in the engine this workbench started.").arg(m_runningJob),
                        QMessageBox::NoButton, this);
        QPushButton* stop = ask.addButton(tr("Stop the Job and Quit"), QMessageBox::DestructiveRole);
        QPushButton* keep = ask.addButton(tr("Keep It Running"), QMessageBox::AcceptRole);
        ask.addButton(QMessageBox::Cancel);
        ask.exec();
        if (ask.clickedButton() == static_cast<QAbstractButton*>(keep)) {
            m_client->releaseEngine();
        } else if (ask.clickedButton() != static_cast<QAbstractButton*>(stop)) {
            event->ignore();
            return;
        }
    }
    QSettings settings;
    settings.setValue("window/geometry", saveGeometry());
    settings.setValue("window/state", saveState());
    settings.setValue("window/area", m_tabs->currentIndex());
    event->accept();
}

}  // namespace meshbench::app
