#pragma once
// File > Import Traces: the traces to read (files, folders), and optionally the traced run's job
// spec, a pattern that finds the rank in a file's name, the range that marks a step, and the
// session to write: by default in the sessions folder, named after the input.

#include "trace_import_job.h"

#include <QDialog>

class QLineEdit;
class QListWidget;
class QPushButton;

namespace meshbench::app {

class TraceImportDialog : public QDialog {
    Q_OBJECT
public:
    explicit TraceImportDialog(const QString& sessionsDir, QWidget* parent = nullptr);

    void setPaths(const QStringList& paths);
    QStringList paths() const;
    TraceImportSettings settings() const;
    QLineEdit* jobEdit() const { return m_job; }
    QLineEdit* sessionEdit() const { return m_session; }
    QPushButton* importButton() const { return m_import; }

    // `sessionsDir`/NAME.meshbench, NAME after the input (a folder's name, a file's base name, the
    // folder that holds several files), numbered -2, -3, ... past the sessions already there.
    static QString defaultSessionPath(const QStringList& paths, const QString& sessionsDir);

private:
    void addFiles();
    void addFolder();
    void removeSelected();
    void chooseJob();
    void chooseSession();
    void pathsChanged();
    void updateImportButton();

    QString m_sessionsDir;
    QListWidget* m_paths;
    QLineEdit* m_job;
    QLineEdit* m_rankFrom;
    QLineEdit* m_stepMarker;
    QLineEdit* m_session;
    QPushButton* m_import;
    bool m_sessionChosen = false;  // the user named the session: it no longer follows the input
};

}  // namespace meshbench::app
