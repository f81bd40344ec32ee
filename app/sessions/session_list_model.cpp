#include "session_list_model.h"

#include "store/session_store.h"

#include <QFileInfo>
#include <QFileSystemWatcher>
#include <QTimer>

#include <limits>

namespace meshbench::app {

namespace {

constexpr int kDebounceMs = 300;  // a running engine touches the folder (WAL files) in bursts

SessionListModel::Row rowOf(const store::SessionSummary& s)
{
    SessionListModel::Row row;
    row.path = QString::fromStdString(s.path);
    row.name = QString::fromStdString(s.name);
    row.created = QDateTime::fromMSecsSinceEpoch(s.createdNs / 1'000'000);
    row.layout = QString::fromStdString(s.layout);
    row.outcome = QString::fromUtf8(store::outcomeName(s.outcome.outcome));
    row.detail = QString::fromStdString(s.outcome.cause);
    row.steps = s.steps;
    row.finalLoss = s.finalLoss;
    return row;
}

}  // namespace

SessionListModel::SessionListModel(QObject* parent)
    : QAbstractTableModel(parent), m_watcher(new QFileSystemWatcher(this)), m_debounce(new QTimer(this))
{
    m_debounce->setSingleShot(true);
    m_debounce->setInterval(kDebounceMs);
    connect(m_debounce, &QTimer::timeout, this, &SessionListModel::refresh);
    connect(m_watcher, &QFileSystemWatcher::directoryChanged, m_debounce, qOverload<>(&QTimer::start));
}

void SessionListModel::setDirectory(const QString& dir)
{
    if (!m_watcher->directories().isEmpty())
        m_watcher->removePaths(m_watcher->directories());
    m_dir = dir;
    refresh();
}

void SessionListModel::refresh()
{
    std::vector<Row> rows;
    QString error;
    if (!m_dir.isEmpty() && QFileInfo(m_dir).isDir()) {
        if (m_watcher->directories().isEmpty())
            m_watcher->addPath(m_dir);
        try {
            const store::SessionListing listing = store::listSessions(m_dir.toStdString());
            for (const store::SessionSummary& s : listing.sessions)
                rows.push_back(rowOf(s));
            for (const auto& [path, why] : listing.unreadable) {
                Row row;
                row.path = QString::fromStdString(path);
                row.name = QFileInfo(row.path).completeBaseName();
                row.outcome = QStringLiteral("unreadable");
                row.detail = QString::fromStdString(why);
                row.readable = false;
                rows.push_back(std::move(row));
            }
        } catch (const store::StoreError& e) {
            error = QString::fromUtf8(e.what());
        }
    }
    beginResetModel();
    m_rows = std::move(rows);
    endResetModel();
    if (error != m_error) {
        m_error = error;
        emit errorChanged(m_error);
    }
    emit refreshed();
}

int SessionListModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(m_rows.size()); }

int SessionListModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant SessionListModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    const Row& r = m_rows[std::size_t(index.row())];
    const int column = index.column();
    switch (role) {
    case PathRole:
        return r.path;
    case ReadableRole:
        return r.readable;
    case Qt::ToolTipRole:
        if (!r.detail.isEmpty() && (column == Outcome || column == Name))
            return r.detail;
        return column == Path || column == Name ? QVariant(r.path) : QVariant();
    case Qt::TextAlignmentRole:
        if (column == Steps || column == FinalLoss)
            return QVariant(Qt::AlignRight | Qt::AlignVCenter);
        return {};
    case SortRole:
        switch (column) {
        case Name:
            return r.name;
        case Date:
            return r.created;
        case Layout:
            return r.layout;
        case Outcome:
            return r.outcome;
        case Steps:
            return r.steps;
        case FinalLoss:
            // Sessions without a loss sort after every loss in ascending order.
            return r.finalLoss ? *r.finalLoss : std::numeric_limits<double>::infinity();
        case Path:
            return r.path;
        }
        return {};
    case Qt::DisplayRole:
        switch (column) {
        case Name:
            return r.name;
        case Date:
            return r.created.isValid() ? r.created.toString(QStringLiteral("yyyy-MM-dd HH:mm:ss")) : QString();
        case Layout:
            return r.layout;
        case Outcome:
            return r.outcome;
        case Steps:
            return r.readable ? QVariant(r.steps) : QVariant();
        case FinalLoss:
            return r.finalLoss ? QString::number(*r.finalLoss, 'f', 4) : QString();
        case Path:
            return r.path;
        }
        return {};
    default:
        return {};
    }
}

QVariant SessionListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount)
        return {};
    static const char* const names[ColumnCount] = {"Name", "Date", "Layout", "Outcome", "Steps", "Final loss", "Path"};
    return tr(names[section]);
}

SessionFilterModel::SessionFilterModel(QObject* parent) : QSortFilterProxyModel(parent)
{
    setSortRole(SessionListModel::SortRole);
}

void SessionFilterModel::setFilterText(const QString& text)
{
    if (text == m_text)
        return;
    m_text = text;
    invalidateFilter();
}

bool SessionFilterModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const
{
    const QString needle = m_text.trimmed();
    if (needle.isEmpty())
        return true;
    for (int column : {SessionListModel::Name, SessionListModel::Layout, SessionListModel::Outcome}) {
        const QModelIndex index = sourceModel()->index(sourceRow, column, sourceParent);
        if (index.data(Qt::DisplayRole).toString().contains(needle, Qt::CaseInsensitive))
            return true;
    }
    return false;
}

}  // namespace meshbench::app
