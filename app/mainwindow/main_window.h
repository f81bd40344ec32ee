#pragma once
// The workbench's main window: Designer, Monitor and Sessions as tabs, menus with shortcuts, the
// engine connection, window state and recent files kept with QSettings, and a status bar with the
// engine connection, the job's state, its step and its lost-record count.

#include <QMainWindow>
#include <QStringList>

class QAction;
class QLabel;
class QMenu;
class QProgressBar;
class QProgressDialog;
class QTabWidget;

namespace meshbench::app {

class DesignerView;
class EngineClient;
class MonitorPage;
class SessionsView;
class TraceImportJob;
struct TraceImportSettings;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    enum class Area { Designer = 0, Monitor = 1, Sessions = 2 };

    // The window talks to an engine through `client` (not owned); null works offline (design,
    // open sessions) and launching says it needs an engine.
    explicit MainWindow(EngineClient* client, QWidget* parent = nullptr);

    // A job spec (.json) opens in the Designer, a session (.meshbench) in the Monitor. False with
    // the reason shown in the status bar (no dialog) when it cannot be opened.
    bool openFile(const QString& path);
    // Calibrates the designed job's device from stored sessions (Run > Calibrate from Session):
    // the Designer then shows the calibrated plan beside the device table's. False with the
    // reason in the status bar (and a dialog when shown).
    bool calibrateFrom(const QStringList& sessions);
    // Imports other stacks' traces into a session (File > Import Traces, after its dialog) on a
    // worker thread, behind a progress dialog of the bytes and events read whose Cancel stops it;
    // the new session then opens in the Monitor as File > Open opens one, and the import's summary
    // is shown. importFinished() says how it ended. False (nothing started) while one runs.
    bool importTraces(const TraceImportSettings& settings);
    // The import running now, null when none.
    TraceImportJob* runningImport() const { return m_import; }
    void showArea(Area area);
    // Saves a PNG of the window showing `area` (which stays shown); false with `error`.
    bool grabArea(Area area, const QString& path, QString* error = nullptr);
    // Saves a PNG of each area into `dir` (designer.png, monitor.png, sessions.png).
    bool saveScreenshots(const QString& dir, QString* error = nullptr);
    // The session file of the job launched last (empty before the engine accepted one).
    const QString& lastSessionPath() const { return m_runningSession; }
    // Whether launches run the designed model on one device (a baseline, and what works without
    // Open MPI) instead of the designed mesh.
    bool launchesOnOneDevice() const;

    EngineClient* client() const { return m_client; }
    DesignerView* designer() const { return m_designer; }
    MonitorPage* monitor() const { return m_monitor; }
    SessionsView* sessions() const { return m_sessions; }
    QString statusMessage() const;

signals:
    // A launch did not start: no engine, a job that does not plan, or the engine's refusal.
    void launchRefused(const QString& why);
    // An import ended: ok with the session it wrote (open in the Monitor) and its summary, or not
    // with the reason (nothing opened, no session left).
    void importFinished(bool ok, const QString& sessionPath, const QStringList& lines);

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void launch(const QByteArray& jobJson);
    void stopJob();
    void updateProgress();
    void addRecentFile(const QString& path);
    void rebuildRecentMenu();
    void showMessage(const QString& text);
    void openDialog(const QString& filter);
    void saveJob(bool askForPath);
    void importDialog();
    void importEnded(bool ok, const QString& sessionPath, const QStringList& lines);

    EngineClient* m_client;
    QTabWidget* m_tabs;
    DesignerView* m_designer;
    MonitorPage* m_monitor;
    SessionsView* m_sessions;
    QLabel* m_engineLabel;
    QLabel* m_jobLabel;
    QProgressBar* m_progress;
    QMenu* m_recentMenu = nullptr;
    QStringList m_recentFiles;
    QString m_jobPath;
    QString m_runningJob;
    QString m_runningSession;
    QString m_announcedJob;  // the last job whose end was announced
    QAction* m_oneDevice = nullptr;
    QAction* m_allowRoot = nullptr;
    TraceImportJob* m_import = nullptr;
    QProgressDialog* m_importProgress = nullptr;
};

}  // namespace meshbench::app
