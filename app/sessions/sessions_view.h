#pragma once
// The Sessions area: the sortable, filterable list of a folder's sessions, with Open (replay in
// the Monitor), Compare (two or more selected, shown in the comparison pane below), Export Chrome trace,
// Export CSV and Refresh; the replay bar sits at the bottom. Errors show in the status line.

#include <QString>
#include <QWidget>

class QLabel;
class QLineEdit;
class QPushButton;
class QTableView;

namespace meshbench::app {

class ReplayControls;
class SessionComparison;
class SessionFilterModel;
class SessionListModel;

class SessionsView : public QWidget {
    Q_OBJECT

public:
    explicit SessionsView(QWidget* parent = nullptr);

    void setDirectory(const QString& dir);
    SessionListModel* model() const { return m_model; }
    SessionFilterModel* proxy() const { return m_proxy; }
    QTableView* table() const { return m_table; }
    QLineEdit* filterEdit() const { return m_filter; }
    ReplayControls* replayControls() const { return m_replay; }
    SessionComparison* comparison() const { return m_comparison; }
    // The selected sessions' paths, in selection order (readable ones only).
    QStringList selectedPaths() const;
    // Re-reads the folder and selects the session at `path` alone (clearing any filter that hides
    // it); false when the folder holds no such session.
    bool selectSession(const QString& path);
    QString statusText() const;

public slots:
    void openSelected();
    void compareSelected();
    // Ask for a file or folder, then export in the background; the result shows in the status.
    void exportChromeTrace();
    void exportCsv();
    // The same without a dialog.
    void exportChromeTraceTo(const QString& session, const QString& outFile);
    void exportCsvTo(const QString& session, const QString& outDir);

signals:
    void openRequested(const QString& path);
    void compareRequested(const QStringList& paths);
    // An export ended: ok, and what the status line says.
    void exportFinished(bool ok, const QString& message);

private:
    void updateActions();
    void showStatus(const QString& text, bool error);
    void runExport(const QString& session, const QString& target, bool chrome);
    // Selects the listed sessions that the filter shows; returns how many.
    int selectPaths(const QStringList& paths);

    SessionListModel* m_model = nullptr;
    SessionFilterModel* m_proxy = nullptr;
    QLineEdit* m_filter = nullptr;
    QTableView* m_table = nullptr;
    QPushButton* m_open = nullptr;
    QPushButton* m_compare = nullptr;
    QPushButton* m_chrome = nullptr;
    QPushButton* m_csv = nullptr;
    QPushButton* m_refresh = nullptr;
    QLabel* m_status = nullptr;
    SessionComparison* m_comparison = nullptr;
    ReplayControls* m_replay = nullptr;
    QStringList m_keptSelection;  // across a re-read of the folder
};

}  // namespace meshbench::app
