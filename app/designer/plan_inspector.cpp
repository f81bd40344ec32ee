#include "plan_inspector.h"

#include "job_document.h"

#include "plan/units.h"
#include "timeline/timeline_data.h"
#include "timeline/timeline_view.h"

#include <qcustomplot.h>

#include <QLabel>
#include <QSplitter>
#include <QVBoxLayout>

namespace meshbench::app {
namespace {

QColor capacityColor() { return QColor(0xd6, 0x27, 0x28); }

// Categorical colours that read on light and dark backgrounds.
const QColor kCategoryColors[PlanInspector::CategoryCount] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b),
                                                              QColor(0x59, 0xa1, 0x4f), QColor(0xb0, 0x7a, 0xa1)};

QString text(const std::string& s) { return QString::fromStdString(s); }

// A figure with its unit ("80.00 GB", "1.095 s") that word wrap must not split.
QString figure(const std::string& s) { return text(s).replace(u' ', QChar::Nbsp); }

QString percent(double share) { return QString::fromStdString(plan::formatPercent(share)); }

}  // namespace

PlanInspector::PlanInspector(QWidget* parent) : QWidget(parent)
{
    m_plot = new QCustomPlot;
    m_plot->setMinimumHeight(180);
    const QPalette pal = palette();
    m_plot->setBackground(pal.color(QPalette::Base));
    for (QCPAxis* axis : {m_plot->xAxis, m_plot->yAxis}) {
        axis->setBasePen(QPen(pal.color(QPalette::Text)));
        axis->setTickPen(QPen(pal.color(QPalette::Text)));
        axis->setSubTickPen(QPen(pal.color(QPalette::Text)));
        axis->setTickLabelColor(pal.color(QPalette::Text));
        axis->setLabelColor(pal.color(QPalette::Text));
    }
    m_plot->xAxis->setLabel(tr("pipeline stage"));
    const QString names[CategoryCount] = {tr("weights"), tr("gradients"), tr("optimizer"), tr("activations")};
    for (int c = 0; c < CategoryCount; ++c) {
        auto* bars = new QCPBars(m_plot->xAxis, m_plot->yAxis);
        bars->setName(names[c]);
        bars->setWidth(0.6);
        bars->setPen(Qt::NoPen);
        bars->setBrush(kCategoryColors[c]);
        if (c > 0)
            bars->moveAbove(m_bars[c - 1]);
        m_bars[c] = bars;
    }
    m_capacity = new QCPItemStraightLine(m_plot);
    m_capacity->setPen(QPen(capacityColor(), 2, Qt::DashLine));
    m_capacityLabel = new QCPItemText(m_plot);
    m_capacityLabel->setColor(capacityColor());
    m_capacityLabel->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
    // The legend in a row of its own above the axis rect, where it cannot hide a bar.
    m_plot->legend->setVisible(true);
    m_plot->legend->setBrush(Qt::NoBrush);
    m_plot->legend->setBorderPen(Qt::NoPen);
    m_plot->legend->setTextColor(pal.color(QPalette::Text));
    m_plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
    m_plot->plotLayout()->insertRow(0);
    m_plot->plotLayout()->addElement(0, 0, m_plot->legend);
    m_plot->plotLayout()->setRowStretchFactor(0, 0.001);

    m_summary = new QLabel;
    m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_summary->setWordWrap(true);
    m_bubble = new QLabel;

    m_timelineData = new TimelineData(this);
    m_timeline = new TimelineView;
    m_timeline->setData(m_timelineData);
    m_timeline->setMinimumHeight(120);

    auto* top = new QWidget;
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addWidget(m_plot, 1);
    topLayout->addWidget(m_summary);
    auto* bottom = new QWidget;
    auto* bottomLayout = new QVBoxLayout(bottom);
    bottomLayout->setContentsMargins(0, 0, 0, 0);
    bottomLayout->addWidget(m_bubble);
    bottomLayout->addWidget(m_timeline, 1);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(top);
    split->addWidget(bottom);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(split);

    setPlan(nullptr);
}

QString PlanInspector::summaryText() const { return m_summary->text() + u'\n' + m_bubble->text(); }

void PlanInspector::setPlan(const plan::Plan* plan, const plan::Plan* datasheet)
{
    if (!plan) {
        for (QCPBars* bars : m_bars)
            bars->data()->clear();
        m_capacityValue = 0;
        m_capacity->setVisible(false);
        m_capacityLabel->setVisible(false);
        m_plot->yAxis->setLabel(tr("memory per GPU"));
        m_summary->setText(tr("No plan: fix the errors in the form."));
        m_bubble->clear();
        m_timelineData->clear();
        m_plot->replot();
        return;
    }

    double highest = 0;
    for (const plan::StageMemory& s : plan->stages)
        highest = std::max(highest, s.memory.total());
    // Bars far below the capacity would be invisible next to it: scale to the bars then, and say so.
    const bool capacityOffScale = highest < 0.05 * plan->deviceMemory;
    const double top = capacityOffScale ? highest : std::max(highest, plan->deviceMemory);
    // The unit formatBytes prints the top in, so the axis reads 0-8 MB rather than 0.002-0.008 GB.
    const plan::ByteUnit unit = plan::byteUnitFor(top);

    QVector<double> keys;
    QVector<double> values[CategoryCount];
    for (const plan::StageMemory& s : plan->stages) {
        keys << s.stage;
        values[Weights] << s.memory.weights / unit.bytes;
        values[Grads] << s.memory.grads / unit.bytes;
        values[Optimizer] << s.memory.optimizer / unit.bytes;
        values[Activations] << s.memory.activations / unit.bytes;
    }
    for (int c = 0; c < CategoryCount; ++c)
        m_bars[c]->setData(keys, values[c], true);
    m_capacityValue = plan->deviceMemory / unit.bytes;
    m_capacity->point1->setCoords(-1, m_capacityValue);
    m_capacity->point2->setCoords(1, m_capacityValue);
    m_capacity->setVisible(true);
    const double right = double(plan->stages.size()) - 0.4;
    m_plot->xAxis->setRange(-0.6, right);
    m_plot->yAxis->setRange(0, top / unit.bytes * 1.15);
    const QString capacityText = figure(plan::formatBytes(plan->deviceMemory));
    m_plot->yAxis->setLabel(
        capacityOffScale ? tr("memory per GPU (%1); capacity %2 off scale").arg(QLatin1String(unit.name), capacityText)
                         : tr("memory per GPU (%1)").arg(QLatin1String(unit.name)));
    m_capacityLabel->position->setCoords(right, m_capacityValue);
    m_capacityLabel->setText(tr("capacity %1").arg(capacityText));
    m_capacityLabel->setVisible(!capacityOffScale);
    // One tick per stage while they are few enough to label.
    m_plot->xAxis->ticker()->setTickCount(int(std::min<std::size_t>(plan->stages.size(), 16)));
    m_plot->replot();

    const plan::StepBreakdown& b = plan->step;
    auto sec = [](double s) { return figure(plan::formatSeconds(s)); };
    m_summary->setText(
        tr("%1 ranks, %2 parameters, most loaded GPU %3 of %4%5\n"
           "FLOPs per step %6, step %7: compute %8, TP comm %9, EP comm %10, bubble %11, DP comm %12, optimizer %13\n"
           "MFU %14, %15 tokens/s")
            .arg(plan->worldSize)
            .arg(plan->parameters.total >= 1e9
                     ? QString::number(plan->parameters.total / 1e9, 'f', 1) + QChar::Nbsp + u'B'
                     : QString::number(plan->parameters.total / 1e6, 'f', 2) + QChar::Nbsp + u'M')
            .arg(figure(plan::formatBytes(plan->mostLoaded().total())), capacityText,
                 plan->fits ? QString() : tr(" — does not fit"))
            .arg(QString::number(plan->flopsPerStep, 'g', 3))
            .arg(sec(b.total), sec(b.compute), sec(b.tensorComm), sec(b.expertComm), sec(b.pipelineBubble),
                 sec(b.dataParallelComm), sec(b.optimizer))
            .arg(percent(plan->mfu))
            .arg(QString::number(plan->tokensPerSecond, 'f', 0)) +
        (datasheet ? tr("\nRates calibrated from %1; from the device table alone: step %2, %3 tokens/s, MFU %4")
                         .arg(text(plan->spec.cluster.calibration.source), sec(datasheet->step.total),
                              QString::number(datasheet->tokensPerSecond, 'f', 0), percent(datasheet->mfu))
                   : QString()));
    m_bubble->setText(plan->simulation.completed
                          ? tr("Schedule %1: planned bubble ratio %2")
                                .arg(text(std::string(plan::scheduleName(plan->spec.parallel.schedule))),
                                     percent(plan->simulation.overallBubbleRatio))
                          : tr("Schedule simulation failed: %1").arg(text(plan->simulation.error)));
    m_timelineData->loadPlan(*plan);
}

}  // namespace meshbench::app
