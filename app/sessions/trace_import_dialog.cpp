#include "trace_import_dialog.h"

#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

namespace meshbench::app {

namespace {

// A line edit with a Browse… button beside it.
QWidget* withBrowse(QLineEdit* edit, QPushButton* browse)
{
    auto* row = new QWidget;
    auto* layout = new QHBoxLayout(row);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(edit, 1);
    layout->addWidget(browse);
    return row;
}

}  // namespace

TraceImportDialog::TraceImportDialog(const QString& sessionsDir, QWidget* parent)
    : QDialog(parent), m_sessionsDir(sessionsDir), m_paths(new QListWidget(this)), m_job(new QLineEdit(this)),
      m_rankFrom(new QLineEdit(this)), m_stepMarker(new QLineEdit(this)), m_session(new QLineEdit(this)),
      m_import(nullptr)
{
    setWindowTitle(tr("Import Traces"));
    m_paths->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_paths->setMinimumHeight(120);
    auto* addFiles = new QPushButton(tr("Add &Files…"), this);
    auto* addFolder = new QPushButton(tr("Add F&older…"), this);
    auto* remove = new QPushButton(tr("&Remove"), this);
    auto* pathButtons = new QVBoxLayout;
    for (QPushButton* b : {addFiles, addFolder, remove})
        pathButtons->addWidget(b);
    pathButtons->addStretch(1);
    auto* pathRow = new QHBoxLayout;
    pathRow->addWidget(m_paths, 1);
    pathRow->addLayout(pathButtons);

    m_job->setPlaceholderText(tr("optional: the traced run's job spec (else its layout is inferred)"));
    m_rankFrom->setPlaceholderText(tr("optional: e.g. rank(\\d+), for files that do not say their rank"));
    m_stepMarker->setPlaceholderText(tr("optional: the range that marks a step (default ProfilerStep#)"));
    auto* browseJob = new QPushButton(tr("Browse…"), this);
    auto* browseSession = new QPushButton(tr("Browse…"), this);

    auto* form = new QFormLayout;
    form->addRow(tr("Traces:"), pathRow);
    form->addRow(tr("&Job spec:"), withBrowse(m_job, browseJob));
    form->addRow(tr("Ran&k from file name:"), m_rankFrom);
    form->addRow(tr("S&tep marker:"), m_stepMarker);
    form->addRow(tr("&Save session as:"), withBrowse(m_session, browseSession));
    auto* note = new QLabel(tr("torch.profiler traces (.json, .json.gz), Nsight Systems SQLite exports (.sqlite) and "
                               "Megatron's tokens_per_expert (.jsonl), one file per rank."),
                            this);
    note->setWordWrap(true);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel, this);
    m_import = buttons->addButton(tr("&Import"), QDialogButtonBox::AcceptRole);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(note);
    layout->addLayout(form);
    layout->addWidget(buttons);
    resize(720, sizeHint().height());

    connect(addFiles, &QPushButton::clicked, this, &TraceImportDialog::addFiles);
    connect(addFolder, &QPushButton::clicked, this, &TraceImportDialog::addFolder);
    connect(remove, &QPushButton::clicked, this, &TraceImportDialog::removeSelected);
    connect(browseJob, &QPushButton::clicked, this, &TraceImportDialog::chooseJob);
    connect(browseSession, &QPushButton::clicked, this, &TraceImportDialog::chooseSession);
    connect(m_session, &QLineEdit::textEdited, this, [this] { m_sessionChosen = true; });
    connect(m_session, &QLineEdit::textChanged, this, &TraceImportDialog::updateImportButton);
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    pathsChanged();
}

void TraceImportDialog::setPaths(const QStringList& paths)
{
    m_paths->clear();
    m_paths->addItems(paths);
    pathsChanged();
}

QStringList TraceImportDialog::paths() const
{
    QStringList paths;
    for (int i = 0; i < m_paths->count(); ++i)
        paths << m_paths->item(i)->text();
    return paths;
}

TraceImportSettings TraceImportDialog::settings() const
{
    return {paths(), m_job->text().trimmed(), m_rankFrom->text().trimmed(), m_stepMarker->text().trimmed(),
            m_session->text().trimmed()};
}

void TraceImportDialog::addFiles()
{
    const QStringList files = QFileDialog::getOpenFileNames(
        this, tr("Add Traces"), QString(), tr("Traces (*.json *.json.gz *.sqlite *.jsonl *.jsonl.gz);;All files (*)"));
    if (!files.isEmpty())
        setPaths(paths() + files);
}

void TraceImportDialog::addFolder()
{
    const QString folder = QFileDialog::getExistingDirectory(this, tr("Add a Folder of Traces"));
    if (!folder.isEmpty())
        setPaths(paths() << folder);
}

void TraceImportDialog::removeSelected()
{
    qDeleteAll(m_paths->selectedItems());
    pathsChanged();
}

void TraceImportDialog::chooseJob()
{
    const QString job =
        QFileDialog::getOpenFileName(this, tr("Job Spec of the Traced Run"), QString(), tr("Job specs (*.json)"));
    if (!job.isEmpty())
        m_job->setText(job);
}

void TraceImportDialog::chooseSession()
{
    const QString session =
        QFileDialog::getSaveFileName(this, tr("Save Session As"), m_session->text(), tr("Sessions (*.meshbench)"));
    if (session.isEmpty())
        return;
    m_sessionChosen = true;
    m_session->setText(session.endsWith(QLatin1String(".meshbench")) ? session : session + QLatin1String(".meshbench"));
}

void TraceImportDialog::pathsChanged()
{
    const QStringList inputs = paths();
    if (!m_sessionChosen)
        m_session->setText(inputs.isEmpty() ? QString() : defaultSessionPath(inputs, m_sessionsDir));
    updateImportButton();
}

void TraceImportDialog::updateImportButton()
{
    m_import->setEnabled(m_paths->count() > 0 && !m_session->text().trimmed().isEmpty());
}

QString TraceImportDialog::defaultSessionPath(const QStringList& paths, const QString& sessionsDir)
{
    QString name;
    if (paths.size() == 1) {
        const QFileInfo only(paths.front());
        name = only.isDir() ? QDir(only.absoluteFilePath()).dirName() : only.baseName();
    } else if (!paths.isEmpty()) {
        // Several files: the folder that holds them all, if one does.
        const QString folder = QFileInfo(paths.front()).absolutePath();
        bool shared = true;
        for (const QString& path : paths)
            shared = shared && QFileInfo(path).absolutePath() == folder;
        if (shared)
            name = QDir(folder).dirName();
    }
    if (name.isEmpty())
        name = QStringLiteral("imported-traces");
    const QDir dir(sessionsDir);
    QString path = dir.filePath(name + QLatin1String(".meshbench"));
    for (int n = 2; QFileInfo::exists(path); ++n)
        path = dir.filePath(QStringLiteral("%1-%2.meshbench").arg(name).arg(n));
    return path;
}

}  // namespace meshbench::app
