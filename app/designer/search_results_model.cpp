#include "search_results_model.h"

#include "plan/report.h"
#include "plan/spec_schema.h"
#include "plan/units.h"

namespace meshbench::app {

SearchResultsModel::SearchResultsModel(QObject* parent) : QAbstractTableModel(parent) {}

void SearchResultsModel::setResult(plan::SearchResult result)
{
    beginResetModel();
    m_result = std::move(result);
    endResetModel();
}

int SearchResultsModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : int(m_result.best.size());
}

int SearchResultsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant SearchResultsModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return {};
    if (role == Qt::TextAlignmentRole)
        return index.column() == Schedule || index.column() == Recompute ? QVariant(Qt::AlignLeft | Qt::AlignVCenter)
                                                                         : QVariant(Qt::AlignRight | Qt::AlignVCenter);
    if (role != Qt::DisplayRole && role != SortRole)
        return {};
    const plan::SearchCandidate& c = candidate(index.row());
    const plan::ParallelSpec& p = c.parallel;
    const bool display = role == Qt::DisplayRole;
    switch (Column(index.column())) {
    case Tp:
        return p.tp;
    case Pp:
        return p.pp;
    case Dp:
        return p.dp;
    case Ep:
        return p.ep;
    case VirtualStages:
        return p.virtualStages;
    case MicroBatchSize:
        return p.microBatchSize;
    case Microbatches:
        return p.microbatches;
    case Zero:
        return p.zero;
    case SequenceParallel:
        return display ? QVariant(p.sequenceParallel ? tr("yes") : tr("no")) : QVariant(int(p.sequenceParallel));
    case Recompute:
        return QString::fromUtf8(plan::recomputeName(p.recompute).data());
    case Schedule:
        return QString::fromUtf8(plan::scheduleName(p.schedule).data());
    case Overlap:
        return QString::fromStdString(plan::overlapLetters(p));
    case StepTime:
        return display ? QVariant(QString::fromStdString(plan::formatSeconds(c.stepTime))) : QVariant(c.stepTime);
    case TokensPerSecond:
        return display ? QVariant(QString::number(c.tokensPerSecond, 'f', 0)) : QVariant(c.tokensPerSecond);
    case Mfu:
        return display ? QVariant(QString::fromStdString(plan::formatPercent(c.mfu))) : QVariant(c.mfu);
    case Bubble:
        return display ? QVariant(QString::fromStdString(plan::formatPercent(c.bubbleRatio))) : QVariant(c.bubbleRatio);
    case Memory:
        return display ? QVariant(QString::fromStdString(plan::formatBytes(c.memoryBytes))) : QVariant(c.memoryBytes);
    case ColumnCount:
        break;
    }
    return {};
}

QVariant SearchResultsModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (role != Qt::DisplayRole || section < 0)
        return {};
    if (orientation == Qt::Vertical)
        return section < rowCount() ? QVariant(section + 1) : QVariant();
    static const char* const names[ColumnCount] = {"step", "tokens/s", "MFU", "bubble",    "memory", "schedule",
                                                   "tp",   "pp",       "dp",  "ep",        "v",      "mbs",
                                                   "m",    "zero",     "sp",  "recompute", "overlap"};
    return section < ColumnCount ? QVariant(tr(names[section])) : QVariant();
}

nlohmann::json layoutPatch(const plan::ParallelSpec& p)
{
    // The search's choices, keyed as the schema writes them.
    return {{"parallel", plan::layoutToJson(p)}};
}

}  // namespace meshbench::app
