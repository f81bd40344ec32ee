#include "monitor/training_chart.h"

#include <qcustomplot.h>

#include <cmath>

namespace meshbench::app {

namespace {

void addIfFinite(QCPGraph* graph, double key, const std::optional<double>& value)
{
    if (value && std::isfinite(*value))
        graph->addData(key, *value);
}

// Fits the graph's value axis to its data, from 0 when the data is all positive.
void fitValues(QCPGraph* graph)
{
    bool found = false;
    const QCPRange range = graph->getValueRange(found);
    if (!found)
        return;
    const double lower = range.lower >= 0 ? 0 : range.lower;
    const double span = std::max(range.upper - lower, std::abs(range.upper) * 1e-3 + 1e-12);
    graph->valueAxis()->setRange(lower, range.upper + 0.08 * span);
}

}  // namespace

TrainingChart::TrainingChart(QWidget* parent) : RunChart(parent)
{
    setObjectName(QStringLiteral("training-chart"));  // also the suggested export file name
    QCustomPlot* p = plot();
    p->setAutoAddPlottableToLegend(false);
    QCPAxisRect* lossRect = p->axisRect();
    auto* speedRect = new QCPAxisRect(p);
    p->plotLayout()->addElement(1, 0, speedRect);
    auto* margins = new QCPMarginGroup(p);
    lossRect->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    speedRect->setMarginGroup(QCP::msLeft | QCP::msRight, margins);

    const auto setUp = [&](QCPAxisRect* rect, const QString& left, const QString& right) {
        rect->axis(QCPAxis::atTop)->setVisible(false);
        rect->axis(QCPAxis::atRight)->setVisible(true);
        rect->axis(QCPAxis::atRight)->setTickLabels(true);
        rect->axis(QCPAxis::atBottom)->setLabel(tr("step"));
        rect->axis(QCPAxis::atLeft)->setLabel(left);
        rect->axis(QCPAxis::atRight)->setLabel(right);
        auto* legend = new QCPLegend;
        legendRow(legend, rect == lossRect ? 0 : 2);
        return legend;
    };
    QCPLegend* lossLegend = setUp(lossRect, tr("loss"), tr("aux loss"));
    QCPLegend* speedLegend = setUp(speedRect, tr("tokens/s"), tr("MFU"));
    speedRect->axis(QCPAxis::atRight)->setTicker(percentTicker());
    // The panels share their steps: only the lower one names them.
    lossRect->axis(QCPAxis::atBottom)->setTickLabels(false);
    lossRect->axis(QCPAxis::atBottom)->setLabel(QString());

    const auto addGraph = [&](QCPAxisRect* rect, QCPAxis::AxisType valueAxis, QCPLegend* legend, const QString& name,
                              int color) {
        QCPGraph* graph = p->addGraph(rect->axis(QCPAxis::atBottom), rect->axis(valueAxis));
        graph->setName(name);
        graph->setPen(QPen(seriesColor(color), 1.5));
        graph->addToLegend(legend);
        return graph;
    };
    m_loss = addGraph(lossRect, QCPAxis::atLeft, lossLegend, tr("loss"), 0);
    m_auxLoss = addGraph(lossRect, QCPAxis::atRight, lossLegend, tr("aux loss"), 1);
    m_tokens = addGraph(speedRect, QCPAxis::atLeft, speedLegend, tr("tokens/s"), 4);
    m_mfu = addGraph(speedRect, QCPAxis::atRight, speedLegend, tr("MFU"), 6);
    restyle();
}

void TrainingChart::reset()
{
    for (QCPGraph* graph : {m_loss, m_auxLoss, m_tokens, m_mfu})
        graph->data()->clear();
}

void TrainingChart::appendSteps(std::size_t first)
{
    const std::vector<live::StepAggregate>& steps = runState()->steps();
    for (std::size_t i = first; i < steps.size(); ++i) {
        const live::StepAggregate& step = steps[i];
        const double key = step.step;
        addIfFinite(m_loss, key, step.loss);
        addIfFinite(m_auxLoss, key, step.auxLoss);
        addIfFinite(m_tokens, key, step.tokensPerSecond);
        addIfFinite(m_mfu, key, step.mfu);
    }
    if (steps.empty())
        return;
    for (QCPGraph* graph : {m_loss, m_tokens})
        graph->keyAxis()->setRange(steps.front().step - 0.5, steps.back().step + 0.5);
    for (QCPGraph* graph : {m_loss, m_auxLoss, m_tokens, m_mfu})
        fitValues(graph);
}

}  // namespace meshbench::app
