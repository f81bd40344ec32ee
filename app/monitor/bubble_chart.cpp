#include "monitor/bubble_chart.h"

#include "monitor/run_state.h"

#include <qcustomplot.h>

#include <algorithm>

namespace meshbench::app {

namespace {

const QColor kPlannedColor(128, 128, 128);  // mid grey: reads on light and dark

}  // namespace

BubbleChart::BubbleChart(QWidget* parent) : RunChart(parent)
{
    setObjectName(QStringLiteral("bubble-chart"));  // also the suggested export file name
    QCustomPlot* p = plot();
    p->xAxis->setLabel(tr("step"));
    p->yAxis->setLabel(tr("pipeline bubble"));
    p->yAxis->setTicker(percentTicker());
    legendRow(p->legend, 0);

    m_overall = p->addGraph();
    m_overall->setName(tr("overall"));
    m_overall->setPen(QPen(seriesColor(0), 2.5));

    m_planned = new QCPItemStraightLine(p);
    m_planned->setPen(QPen(kPlannedColor, 1.5, Qt::DashLine));
    m_planned->setVisible(false);
    m_plannedLabel = new QCPItemText(p);
    m_plannedLabel->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    m_plannedLabel->position->setTypeY(QCPItemPosition::ptPlotCoords);
    m_plannedLabel->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
    m_plannedLabel->setColor(kPlannedColor);
    m_plannedLabel->setPadding(QMargins(2, 0, 2, 0));
    m_plannedLabel->setVisible(false);
    restyle();
}

void BubbleChart::applyPalette()
{
    m_plannedLabel->setBrush(palette().brush(QPalette::Base));  // the curves pass behind it
}

QCPGraph* BubbleChart::stageGraph(int stage) const
{
    return stage >= 0 && stage < int(m_stages.size()) ? m_stages[std::size_t(stage)] : nullptr;
}

void BubbleChart::ensureStageGraphs(int stages)
{
    // One stage has no pipeline: its curve would be the overall one again.
    if (stages < 2)
        return;
    while (int(m_stages.size()) < stages) {
        QCPGraph* graph = plot()->addGraph();
        const int stage = int(m_stages.size());
        graph->setName(tr("stage %1").arg(stage));
        graph->setPen(QPen(seriesColor(stage + 1), 1.2));
        m_stages.push_back(graph);
    }
}

void BubbleChart::setPlanned(std::optional<double> planned)
{
    m_plannedValue = planned;
    m_planned->setVisible(planned.has_value());
    m_plannedLabel->setVisible(planned.has_value());
    if (!planned)
        return;
    m_planned->point1->setCoords(0, *planned);
    m_planned->point2->setCoords(1, *planned);
    m_plannedLabel->position->setCoords(0.99, *planned);
    m_plannedLabel->setText(tr("planned %1%").arg(*planned * 100, 0, 'g', 3));
}

void BubbleChart::reset()
{
    for (QCPGraph* graph : m_stages)
        plot()->removeGraph(graph);
    m_stages.clear();
    m_overall->data()->clear();
    m_maxValue = 0;
    setPlanned(runState() ? runState()->plannedBubble() : std::nullopt);
    if (runState())
        ensureStageGraphs(runState()->stageCount());
    fitAxes();
}

void BubbleChart::appendSteps(std::size_t first)
{
    const std::vector<live::StepAggregate>& steps = runState()->steps();
    for (std::size_t i = first; i < steps.size(); ++i) {
        const live::StepAggregate& step = steps[i];
        const double key = step.step;
        if (step.bubble) {
            m_overall->addData(key, *step.bubble);
            m_maxValue = std::max(m_maxValue, *step.bubble);
        }
        ensureStageGraphs(int(step.stages.size()));
        for (const live::StageBubble& stage : step.stages)
            if (QCPGraph* graph = stageGraph(stage.stage); graph && stage.measured) {
                graph->addData(key, *stage.measured);
                m_maxValue = std::max(m_maxValue, *stage.measured);
            }
        if (!m_plannedValue && step.plannedBubble)
            setPlanned(step.plannedBubble);
    }
    fitAxes();
}

void BubbleChart::fitAxes()
{
    const std::vector<live::StepAggregate>* steps = runState() ? &runState()->steps() : nullptr;
    if (steps && !steps->empty())
        plot()->xAxis->setRange(steps->front().step - 0.5, steps->back().step + 0.5);
    else
        plot()->xAxis->setRange(0, 10);
    const double top = std::max({m_maxValue, m_plannedValue.value_or(0.0), 0.05});
    plot()->yAxis->setRange(0, std::min(top * 1.15, 1.0));
}

}  // namespace meshbench::app
