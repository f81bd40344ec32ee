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
    auto* rows = new QSplitter(Qt::Vertical, this);
    auto* top = new QSplitter(Qt::Horizontal, rows);
    auto* bottom = new QSplitter(Qt::Horizontal, rows);
    m_bubble = new BubbleChart(top);
    m_experts = new ExpertLoadView(top);
    m_memory = new MemoryChart(bottom);
    m_training = new TrainingChart(bottom);
    for (ChartWidget* chart : charts())
        chart->setMinimumSize(240, 180);
    for (QSplitter* splitter : {rows, top, bottom}) {
        // Equal shares to start with; the user drags from there.
        splitter->setStretchFactor(0, 1);
        splitter->setStretchFactor(1, 1);
        splitter->setSizes({1, 1});
    }
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(rows);
}

std::vector<ChartWidget*> MonitorCharts::charts() const
{
    return {m_bubble, m_experts, m_memory, m_training};
}

void MonitorCharts::setRunState(RunState* state)
{
    for (ChartWidget* chart : charts())
        chart->setRunState(state);
}

}  // namespace meshbench::app
