#pragma once
// The measured pipeline bubble per step, overall and per stage, with the planner's predicted
// overall bubble as a dashed reference line: a bubble far above the line is time the schedule
// did not explain (stragglers, slow transfers, an unbalanced stage).

#include "monitor/run_chart.h"

#include <optional>
#include <vector>

class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;

namespace meshbench::app {

class BubbleChart : public RunChart {
    Q_OBJECT
public:
    explicit BubbleChart(QWidget* parent = nullptr);

    // Keys are step numbers, values bubble ratios (idle / pipeline time, 0..1).
    QCPGraph* overallGraph() const { return m_overall; }
    QCPGraph* stageGraph(int stage) const;
    int stageGraphCount() const { return int(m_stages.size()); }
    // Hidden while no planned value is known.
    QCPItemStraightLine* plannedLine() const { return m_planned; }

protected:
    void reset() override;
    void appendSteps(std::size_t first) override;
    void applyPalette() override;

private:
    void ensureStageGraphs(int stages);
    void setPlanned(std::optional<double> planned);
    void fitAxes();

    QCPGraph* m_overall = nullptr;
    std::vector<QCPGraph*> m_stages;
    QCPItemStraightLine* m_planned = nullptr;
    QCPItemText* m_plannedLabel = nullptr;
    double m_maxValue = 0;
    std::optional<double> m_plannedValue;
};

}  // namespace meshbench::app
