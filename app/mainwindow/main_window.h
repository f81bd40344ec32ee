#pragma once
// The workbench's main window: Designer, Monitor and Sessions as tabs, menus with shortcuts, the
// engine connection, window state and recent files kept with QSettings, and a status bar with the
// engine connection, the job's state, its step and its lost-record count.

#include <QMainWindow>
#include <QStringList>

class QLabel;
class QMenu;
class QTabWidget;

namespace meshbench::app {

class DesignerView;
class EngineClient;
class MonitorPage;
class SessionsView;

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
    void showArea(Area area);
    // Saves a PNG of each area into `dir` (designer.png, monitor.png, sessions.png).
    bool saveScreenshots(const QString& dir, QString* error = nullptr);

    DesignerView* designer() const { return m_designer; }
    MonitorPage* monitor() const { return m_monitor; }
    SessionsView* sessions() const { return m_sessions; }
    QString statusMessage() const;

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    void launch(const QByteArray& jobJson);
    void stopJob();
    void addRecentFile(const QString& path);
    void rebuildRecentMenu();
    void showMessage(const QString& text);
    void openDialog(const QString& filter);
    void saveJob(bool askForPath);

    EngineClient* m_client;
    QTabWidget* m_tabs;
    DesignerView* m_designer;
    MonitorPage* m_monitor;
    SessionsView* m_sessions;
    QLabel* m_engineLabel;
    QLabel* m_jobLabel;
    QMenu* m_recentMenu = nullptr;
    QStringList m_recentFiles;
    QString m_jobPath;
    QString m_runningJob;
};

}  // namespace meshbench::app
