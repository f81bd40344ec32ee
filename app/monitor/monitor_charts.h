#pragma once
// The Monitor's charts for one RunState, in two columns of resizable panes: bubble above memory on
// the left, expert load above training on the right. The main window places the timeline above it.

#include "monitor/run_chart.h"

#include <vector>

namespace meshbench::app {

class BubbleChart;
class ExpertLoadView;
class MemoryChart;
class TrainingChart;

class MonitorCharts : public QWidget {
    Q_OBJECT
public:
    explicit MonitorCharts(QWidget* parent = nullptr);

    void setRunState(RunState* state);
    BubbleChart* bubbleChart() const { return m_bubble; }
    ExpertLoadView* expertLoadView() const { return m_experts; }
    MemoryChart* memoryChart() const { return m_memory; }
    TrainingChart* trainingChart() const { return m_training; }
    // All four, for "export chart" menus.
    std::vector<RunChart*> charts() const;

private:
    BubbleChart* m_bubble = nullptr;
    ExpertLoadView* m_experts = nullptr;
    MemoryChart* m_memory = nullptr;
    TrainingChart* m_training = nullptr;
};

}  // namespace meshbench::app
