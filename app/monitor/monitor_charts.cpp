#include "monitor/monitor_charts.h"

#include "monitor/bubble_chart.h"
#include "monitor/expert_load_view.h"
#include "monitor/memory_chart.h"
#include "monitor/training_chart.h"

#include <QSplitter>
#include <QVBoxLayout>

namespace meshbench::app {

MonitorCharts::MonitorCharts(QWidget* parent) : QWidget(parent)
{
    // Two columns, each split on its own: a chart of two panels (memory, training, expert load)
    // gets more height than the one-panel bubble chart, which rows shared across would not allow.
    auto* columns = new QSplitter(Qt::Horizontal, this);
    auto* left = new QSplitter(Qt::Vertical, columns);
    auto* right = new QSplitter(Qt::Vertical, columns);
    m_bubble = new BubbleChart(left);
    m_memory = new MemoryChart(left);
    m_experts = new ExpertLoadView(right);
    m_training = new TrainingChart(right);
    // Small enough for a 1280 x 800 window's share, large enough that no panel is squeezed to a line.
    for (RunChart* chart : charts())
        chart->setMinimumSize(300, 160);
    const auto share = [](QSplitter* splitter, int first, int second) {
        splitter->setChildrenCollapsible(false);  // a chart dragged to nothing would look lost
        splitter->setStretchFactor(0, first);
        splitter->setStretchFactor(1, second);
        splitter->setSizes({first * 1000, second * 1000});
    };
    share(columns, 1, 1);
    share(left, 2, 3);
    share(right, 1, 1);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(columns);
}

std::vector<RunChart*> MonitorCharts::charts() const { return {m_bubble, m_experts, m_memory, m_training}; }

void MonitorCharts::setRunState(RunState* state)
{
    for (RunChart* chart : charts())
        chart->setRunState(state);
}

}  // namespace meshbench::app
