#pragma once
// The search's ranked layouts as a picture: tokens/s against memory per GPU, one colour per
// schedule, the Pareto frontier (no other layout is both faster and smaller) drawn through them,
// and the designed layout marked. Hovering a point names its layout; a click selects it, a double
// click applies it. Exported like the Monitor's charts (right click).

#include "charts/chart_widget.h"

#include "plan/search.h"

#include <optional>
#include <vector>

class QCPGraph;
class QCPLegend;

namespace meshbench::app {

class SearchScatter : public ChartWidget {
    Q_OBJECT
public:
    explicit SearchScatter(QWidget* parent = nullptr);

    // The points of `result.best`, and the designed layout's (memory per GPU, tokens/s) when known.
    void setResult(const plan::SearchResult& result, std::optional<QPointF> designed = std::nullopt);

    // Candidate `index` of the result, in plot coordinates: (memory per GPU in GB, tokens/s).
    static QPointF pointOf(const plan::SearchCandidate& candidate);
    // The result's candidates on the frontier, by index, from the least memory up.
    const std::vector<int>& frontier() const { return m_frontier; }
    // The candidate drawn nearest `pixel` (within a few pixels), or -1.
    int candidateAt(const QPoint& pixel) const;
    // The widget position of candidate `index`'s point.
    QPoint pixelOf(int index) const;
    // One graph per schedule that occurs, in the order of plan::ScheduleKind.
    const std::vector<QCPGraph*>& scheduleGraphs() const { return m_scheduleGraphs; }
    QCPGraph* designedGraph() const { return m_designed; }
    // The candidate a click last selected, or -1.
    int selected() const { return m_selected; }
    void select(int index);

Q_SIGNALS:
    void candidateSelected(int index);
    void candidateActivated(int index);

protected:
    void reset() override {}
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    plan::SearchResult m_result;
    QCPLegend* m_legend = nullptr;
    std::vector<QCPGraph*> m_scheduleGraphs;
    QCPGraph* m_frontierGraph = nullptr;
    QCPGraph* m_designed = nullptr;
    QCPGraph* m_selectedGraph = nullptr;
    std::vector<int> m_frontier;
    int m_selected = -1;
};

}  // namespace meshbench::app
