#include "search_panel.h"

#include "search_results_model.h"
#include "search_scatter.h"

#include "job_document.h"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QThread>
#include <QVBoxLayout>

#include <memory>

namespace meshbench::app {

SearchPanel::SearchPanel(JobDocument* document, QWidget* parent)
    : QWidget(parent), m_document(document), m_model(new SearchResultsModel(this)),
      m_proxy(new QSortFilterProxyModel(this))
{
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(SearchResultsModel::SortRole);
    m_proxy->setFilterKeyColumn(-1);
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);

    m_table = new QTableView;
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(SearchResultsModel::StepTime, Qt::AscendingOrder);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    connect(m_table, &QTableView::doubleClicked, this, [this](const QModelIndex& index) { applyRow(index.row()); });

    m_scatter = new SearchScatter;
    connect(m_scatter, &SearchScatter::candidateSelected, this, &SearchPanel::selectCandidate);
    connect(m_scatter, &SearchScatter::candidateActivated, this,
            [this](int index) { m_document->merge(layoutPatch(m_model->candidate(index).parallel)); });
    m_views = new QTabWidget;
    m_views->addTab(m_table, tr("Table"));
    m_views->addTab(m_scatter, tr("Scatter"));

    m_run = new QPushButton(tr("Run search"));
    m_apply = new QPushButton(tr("Apply"));
    m_apply->setToolTip(tr("Write the selected layout into the job (or double-click a row)"));
    m_top = new QSpinBox;
    m_top->setRange(1, 200);
    m_top->setValue(20);
    m_top->setPrefix(tr("top "));
    m_filter = new QLineEdit;
    m_filter->setPlaceholderText(tr("filter, e.g. interleaved"));
    m_filter->setClearButtonEnabled(true);
    m_sequenceParallelOnly = new QCheckBox(tr("sequence parallel only"));
    m_status = new QLabel;
    m_status->setWordWrap(true);

    auto* bar = new QHBoxLayout;
    bar->addWidget(m_run);
    bar->addWidget(m_top);
    bar->addWidget(m_filter, 1);
    bar->addWidget(m_sequenceParallelOnly);
    bar->addWidget(m_apply);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addLayout(bar);
    layout->addWidget(m_status);
    layout->addWidget(m_views, 1);

    connect(m_run, &QPushButton::clicked, this, &SearchPanel::runSearch);
    connect(m_apply, &QPushButton::clicked, this, [this] {
        const QModelIndexList rows = m_table->selectionModel()->selectedRows();
        if (!rows.isEmpty())
            applyRow(rows.first().row());
    });
    connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex& current) {
                const QModelIndex source = m_proxy->mapToSource(current);
                if (source.isValid())
                    m_scatter->select(source.row());
            });
    connect(m_filter, &QLineEdit::textChanged, this, &SearchPanel::updateFilter);
    connect(m_sequenceParallelOnly, &QCheckBox::toggled, this, &SearchPanel::updateFilter);
}

SearchPanel::~SearchPanel()
{
    // The worker holds only its own copies, but must not outlive the model it reports to.
    if (m_worker)
        m_worker->wait();
}

void SearchPanel::updateFilter()
{
    // "sp yes" rows only: a fixed expression on the text of the sp column; otherwise any column.
    if (m_sequenceParallelOnly->isChecked()) {
        m_proxy->setFilterKeyColumn(SearchResultsModel::SequenceParallel);
        m_proxy->setFilterRegularExpression(QRegularExpression(QStringLiteral("^yes$")));
    } else {
        m_proxy->setFilterKeyColumn(-1);
        m_proxy->setFilterFixedString(m_filter->text());
    }
}

void SearchPanel::runSearch()
{
    if (m_worker)
        return;
    if (!m_document->spec()) {
        m_status->setText(tr("Fix the errors in the form before searching."));
        return;
    }
    const plan::JobSpec spec = *m_document->spec();
    plan::SearchOptions options;
    options.top = m_top->value();
    auto result = std::make_shared<plan::SearchResult>();
    // The search takes tens to hundreds of ms on large clusters: never on the GUI thread.
    m_worker = QThread::create([spec, options, result] { *result = plan::searchLayouts(spec, options); });
    connect(m_worker, &QThread::finished, this, [this, result] {
        m_worker->deleteLater();
        m_worker = nullptr;
        m_run->setEnabled(true);
        if (!result->errors.empty()) {
            QStringList lines;
            for (const plan::SpecError& e : result->errors)
                lines << QString::fromStdString(e.path.empty() ? e.message : e.path + ": " + e.message);
            m_status->setText(lines.join(u'\n'));
        } else {
            m_status->setText(tr("%1 layouts priced, %2 fit; best %3 in %4 ms (global batch %5)")
                                  .arg(result->evaluated)
                                  .arg(result->fitting)
                                  .arg(result->best.size())
                                  .arg(result->totalSeconds * 1e3, 0, 'f', 1)
                                  .arg(result->globalBatch));
        }
        m_model->setResult(std::move(*result));
        // The designed layout's own point: its plan's most loaded stage and throughput.
        std::optional<QPointF> designed;
        if (const plan::Plan* plan = m_document->plan())
            designed = QPointF(plan->mostLoaded().total() / 1e9, plan->tokensPerSecond);
        m_scatter->setResult(m_model->result(), designed);
        emit searchFinished();
    });
    m_run->setEnabled(false);
    m_status->setText(tr("Searching…"));
    m_worker->start();
}

void SearchPanel::selectCandidate(int index)
{
    const QModelIndex row = m_proxy->mapFromSource(m_model->index(index, 0));
    if (row.isValid())
        m_table->selectRow(row.row());
}

void SearchPanel::applyRow(int proxyRow)
{
    const QModelIndex source = m_proxy->mapToSource(m_proxy->index(proxyRow, 0));
    if (!source.isValid())
        return;
    m_document->merge(layoutPatch(m_model->candidate(source.row()).parallel));
}

}  // namespace meshbench::app
