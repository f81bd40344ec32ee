#include "sessions_view.h"

#include "replay_controls.h"
#include "session_comparison.h"
#include "session_list_model.h"

#include "store/session_export.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QThread>
#include <QVBoxLayout>

#include <memory>

namespace meshbench::app {

SessionsView::SessionsView(QWidget* parent)
    : QWidget(parent), m_model(new SessionListModel(this)), m_proxy(new SessionFilterModel(this)),
      m_filter(new QLineEdit(this)), m_table(new QTableView(this)), m_open(new QPushButton(tr("&Open"), this)),
      m_compare(new QPushButton(tr("&Compare"), this)), m_chrome(new QPushButton(tr("Export Chrome &trace…"), this)),
      m_csv(new QPushButton(tr("Export CS&V…"), this)), m_refresh(new QPushButton(tr("&Refresh"), this)),
      m_status(new QLabel(this)), m_comparison(new SessionComparison(this)), m_replay(new ReplayControls(this))
{
    m_proxy->setSourceModel(m_model);
    m_filter->setPlaceholderText(tr("Filter by name, layout or outcome"));
    m_filter->setClearButtonEnabled(true);
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(SessionListModel::Date, Qt::DescendingOrder);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->verticalHeader()->hide();
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_status->setWordWrap(true);
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_open->setToolTip(tr("Replay the selected session in the Monitor"));
    m_compare->setToolTip(tr("Compare the selected sessions (two or more): a table and their curves overlaid"));

    auto* buttons = new QHBoxLayout;
    buttons->addWidget(m_filter, 1);
    for (QPushButton* b : {m_open, m_compare, m_chrome, m_csv, m_refresh})
        buttons->addWidget(b);
    auto* top = new QWidget(this);
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addLayout(buttons);
    topLayout->addWidget(m_table, 1);
    topLayout->addWidget(m_status);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->addWidget(top);
    splitter->addWidget(m_comparison);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 1);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(splitter, 1);
    layout->addWidget(m_replay);

    connect(m_filter, &QLineEdit::textChanged, m_proxy, &SessionFilterModel::setFilterText);
    connect(m_open, &QPushButton::clicked, this, &SessionsView::openSelected);
    connect(m_compare, &QPushButton::clicked, this, &SessionsView::compareSelected);
    connect(m_chrome, &QPushButton::clicked, this, &SessionsView::exportChromeTrace);
    connect(m_csv, &QPushButton::clicked, this, &SessionsView::exportCsv);
    connect(m_refresh, &QPushButton::clicked, m_model, &SessionListModel::refresh);
    connect(m_table, &QTableView::activated, this, &SessionsView::openSelected);
    connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this, &SessionsView::updateActions);
    // The folder is re-read whenever a session file changes (a run ending, a new one): the rows
    // selected before stay selected.
    connect(m_model, &SessionListModel::modelAboutToBeReset, this, [this] { m_keptSelection = selectedPaths(); });
    connect(m_model, &SessionListModel::modelReset, this, [this] {
        selectPaths(m_keptSelection);
        updateActions();
    });
    connect(m_model, &SessionListModel::errorChanged, this, [this](const QString& e) { showStatus(e, !e.isEmpty()); });
    updateActions();
}

void SessionsView::setDirectory(const QString& dir) { m_model->setDirectory(dir); }

QStringList SessionsView::selectedPaths() const
{
    QStringList paths;
    for (const QModelIndex& index : m_table->selectionModel()->selectedRows())
        if (index.data(SessionListModel::ReadableRole).toBool())
            paths << index.data(SessionListModel::PathRole).toString();
    return paths;
}

QString SessionsView::statusText() const { return m_status->text(); }

void SessionsView::showStatus(const QString& text, bool error)
{
    m_status->setText(text);
    m_status->setForegroundRole(error ? QPalette::Highlight : QPalette::WindowText);
}

void SessionsView::updateActions()
{
    const qsizetype selected = selectedPaths().size();
    m_open->setEnabled(selected == 1);
    m_chrome->setEnabled(selected == 1);
    m_csv->setEnabled(selected == 1);
    m_compare->setEnabled(selected >= 2);
}

bool SessionsView::selectSession(const QString& path)
{
    m_model->refresh();
    m_filter->clear();
    return selectPaths({path}) == 1;
}

int SessionsView::selectPaths(const QStringList& paths)
{
    QStringList wanted;
    for (const QString& path : paths)
        wanted << QFileInfo(path).absoluteFilePath();
    QItemSelection selection;
    for (int row = 0; row < m_model->rowCount(); ++row) {
        if (!wanted.contains(QFileInfo(m_model->row(row).path).absoluteFilePath()))
            continue;
        const QModelIndex index = m_proxy->mapFromSource(m_model->index(row, 0));
        if (index.isValid())
            selection.select(index, index);
    }
    m_table->selectionModel()->select(selection, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    if (!selection.isEmpty())
        m_table->scrollTo(selection.indexes().front());
    return int(selection.size());
}

void SessionsView::openSelected()
{
    const QStringList paths = selectedPaths();
    if (paths.size() == 1)
        emit openRequested(paths.front());
    else if (m_table->selectionModel()->hasSelection())
        showStatus(tr("that session cannot be read (see its tooltip)"), true);
}

void SessionsView::compareSelected()
{
    const QStringList paths = selectedPaths();
    if (paths.size() < 2) {
        showStatus(tr("select two or more readable sessions to compare"), true);
        return;
    }
    m_comparison->compare(paths);
    emit compareRequested(paths);
}

void SessionsView::exportChromeTrace()
{
    const QStringList paths = selectedPaths();
    if (paths.size() != 1)
        return;
    const QString suggestion = QFileInfo(paths.front()).completeBaseName() + QStringLiteral(".trace.json");
    const QString out =
        QFileDialog::getSaveFileName(this, tr("Export Chrome trace"), suggestion, tr("Trace Event Format (*.json)"));
    if (!out.isEmpty())
        exportChromeTraceTo(paths.front(), out);
}

void SessionsView::exportCsv()
{
    const QStringList paths = selectedPaths();
    if (paths.size() != 1)
        return;
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Export CSV into folder"));
    if (!dir.isEmpty())
        exportCsvTo(paths.front(), dir);
}

void SessionsView::exportChromeTraceTo(const QString& session, const QString& outFile)
{
    runExport(session, outFile, true);
}

void SessionsView::exportCsvTo(const QString& session, const QString& outDir) { runExport(session, outDir, false); }

void SessionsView::runExport(const QString& session, const QString& target, bool chrome)
{
    // A large session takes seconds to export: off the GUI thread, the result reported back.
    auto error = std::make_shared<QString>();
    QThread* thread = QThread::create([session, target, chrome, error] {
        try {
            const store::SessionReader reader(session.toStdString());
            if (chrome)
                store::exportChromeTrace(reader, target.toStdString());
            else
                store::exportCsv(reader, target.toStdString());
        } catch (const std::exception& e) {
            *error = QString::fromUtf8(e.what());
        }
    });
    showStatus(tr("exporting %1…").arg(QFileInfo(session).fileName()), false);
    connect(thread, &QThread::finished, this, [this, error, target, chrome] {
        const bool ok = error->isEmpty();
        const QString message = ok ? tr("exported %1 to %2").arg(chrome ? tr("Chrome trace") : tr("CSV"), target)
                                   : tr("export failed: %1").arg(*error);
        showStatus(message, !ok);
        emit exportFinished(ok, message);
    });
    connect(thread, &QThread::finished, thread, &QObject::deleteLater);
    thread->start();
}

}  // namespace meshbench::app
