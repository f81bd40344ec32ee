#pragma once
// The ranked layouts of plan::searchLayouts as a table. SortRole gives each cell's number (or
// text) so that a QSortFilterProxyModel sorts step times and throughputs numerically.

#include "job_document.h"

#include "plan/search.h"

#include <QAbstractTableModel>

namespace meshbench::app {

class SearchResultsModel : public QAbstractTableModel {
    Q_OBJECT
public:
    // The figures a user ranks by come first, so a narrow table still shows them; the layout after.
    enum Column {
        StepTime,
        TokensPerSecond,
        Mfu,
        Bubble,
        Memory,
        Schedule,
        Tp,
        Pp,
        Dp,
        Ep,
        VirtualStages,
        MicroBatchSize,
        Microbatches,
        Zero,
        SequenceParallel,
        Recompute,
        Overlap,
        ColumnCount
    };
    static constexpr int SortRole = Qt::UserRole + 1;

    explicit SearchResultsModel(QObject* parent = nullptr);

    void setResult(plan::SearchResult result);
    const plan::SearchResult& result() const { return m_result; }
    const plan::SearchCandidate& candidate(int row) const { return m_result.best[std::size_t(row)]; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    plan::SearchResult m_result;
};

// The parallel section of a job spec for a candidate's layout: the merge patch Apply writes.
nlohmann::json layoutPatch(const plan::ParallelSpec& parallel);

}  // namespace meshbench::app
