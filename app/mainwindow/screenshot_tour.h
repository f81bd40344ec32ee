#pragma once
// Walks the workbench through the demo and saves a PNG of every screen, so a reviewer can see them
// without a display: the Designer with the job planned, the Monitor while the job runs (once half
// of its steps have arrived), and, once it has ended, the Sessions area replaying the session it
// wrote, with the Monitor following that replay. Without an engine or a valid job it saves the
// three areas as they are.

#include "main_window.h"

#include <QDir>
#include <QObject>
#include <QString>
#include <QTimer>

namespace meshbench::app {

class ScreenshotTour : public QObject {
    Q_OBJECT
public:
    // The PNGs a full tour writes into its folder, in the order it takes them.
    static QStringList fullTourFiles();

    // `steps` > 0 shortens the job to that many steps (the Designer shows the change).
    ScreenshotTour(MainWindow& window, const QString& dir, int steps, QObject* parent = nullptr);

    // Starts after `settleMs` (plans and charts settle); ends with finished().
    void start(int settleMs = 1500);
    // Fails the tour when it has not finished after this long (default 10 minutes).
    void setTimeout(int ms) { m_timeout.setInterval(ms); }

signals:
    // ok, and a line saying what was saved or what went wrong.
    void finished(bool ok, const QString& message);

private:
    void begin();
    void onRunChanged();
    void finish(bool ok, const QString& message);
    bool save(MainWindow::Area area, const QString& name);

    enum class Stage { Idle, Launching, Running, Replaying, Done };
    MainWindow& m_window;
    QDir m_dir;
    int m_steps;
    Stage m_stage = Stage::Idle;
    int m_liveTarget = 0;  // the Monitor is captured once this many steps arrived
    QTimer m_timeout;
};

}  // namespace meshbench::app
