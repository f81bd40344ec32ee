#include "plan_inspector.h"

#include "job_document.h"

#include "plan/report.h"
#include "timeline/timeline_data.h"
#include "timeline/timeline_view.h"

#include <qcustomplot.h>

#include <QLabel>
#include <QSplitter>
#include <QVBoxLayout>

namespace meshbench::app {
namespace {

constexpr double kGB = 1e9;   // decimal, as plan::formatBytes and the datasheets

// Categorical colours that read on light and dark backgrounds.
const QColor kCategoryColors[PlanInspector::CategoryCount] = {
    QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b), QColor(0x59, 0xa1, 0x4f), QColor(0xb0, 0x7a, 0xa1)};

QString text(const std::string& s) { return QString::fromStdString(s); }

QString percent(double ratio) { return QString::number(ratio * 100.0, 'f', 1) + u'%'; }

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
    m_plot->yAxis->setLabel(tr("memory per GPU (GB)"));
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
    m_capacity->setPen(QPen(QColor(0xd6, 0x27, 0x28), 2, Qt::DashLine));
    m_plot->legend->setVisible(true);
    m_plot->legend->setBrush(pal.color(QPalette::Base));
    m_plot->legend->setTextColor(pal.color(QPalette::Text));
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);

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

void PlanInspector::setPlan(const plan::Plan* plan)
{
    if (!plan) {
        for (QCPBars* bars : m_bars)
            bars->data()->clear();
        m_capacityGB = 0;
        m_capacity->setVisible(false);
        m_summary->setText(tr("No plan: fix the errors in the form."));
        m_bubble->clear();
        m_timelineData->clear();
        m_plot->replot();
        return;
    }

    QVector<double> keys;
    QVector<double> values[CategoryCount];
    double highest = 0;
    for (const plan::StageMemory& s : plan->stages) {
        keys << s.stage;
        values[Weights] << s.memory.weights / kGB;
        values[Grads] << s.memory.grads / kGB;
        values[Optimizer] << s.memory.optimizer / kGB;
        values[Activations] << s.memory.activations / kGB;
        highest = std::max(highest, s.memory.total() / kGB);
    }
    for (int c = 0; c < CategoryCount; ++c)
        m_bars[c]->setData(keys, values[c], true);
    m_capacityGB = plan->deviceMemory / kGB;
    m_capacity->point1->setCoords(-1, m_capacityGB);
    m_capacity->point2->setCoords(1, m_capacityGB);
    m_capacity->setVisible(true);
    m_plot->xAxis->setRange(-0.6, double(plan->stages.size()) - 0.4);
    // Bars far below the capacity would be invisible next to it: scale to the bars then, and say so.
    const bool capacityOffScale = highest < 0.05 * m_capacityGB;
    m_plot->yAxis->setRange(0, (capacityOffScale ? highest : std::max(highest, m_capacityGB)) * 1.15);
    m_plot->yAxis->setLabel(capacityOffScale ? tr("memory per GPU (GB); capacity %1 GB off scale").arg(m_capacityGB, 0, 'f', 1)
                                             : tr("memory per GPU (GB)"));
    // One tick per stage while they are few enough to label.
    m_plot->xAxis->ticker()->setTickCount(int(std::min<std::size_t>(plan->stages.size(), 16)));
    m_plot->replot();

    const plan::StepBreakdown& b = plan->step;
    auto sec = [](double s) { return text(plan::formatSeconds(s)); };
    m_summary->setText(
        tr("%1 ranks, %2 parameters, most loaded GPU %3 of %4%5\n"
           "FLOPs per step %6, step %7: compute %8, TP comm %9, EP comm %10, bubble %11, DP comm %12, optimizer %13\n"
           "MFU %14, %15 tokens/s")
            .arg(plan->worldSize)
            .arg(plan->parameters.total >= 1e9 ? QString::number(plan->parameters.total / 1e9, 'f', 1) + QStringLiteral(" B")
                                               : QString::number(plan->parameters.total / 1e6, 'f', 2) + QStringLiteral(" M"))
            .arg(text(plan::formatBytes(plan->mostLoaded().total())), text(plan::formatBytes(plan->deviceMemory)),
                 plan->fits ? QString() : tr(" — does not fit"))
            .arg(QString::number(plan->flopsPerStep, 'g', 3))
            .arg(sec(b.total), sec(b.compute), sec(b.tensorComm), sec(b.expertComm), sec(b.pipelineBubble),
                 sec(b.dataParallelComm), sec(b.optimizer))
            .arg(percent(plan->mfu))
            .arg(QString::number(plan->tokensPerSecond, 'f', 0)));
    m_bubble->setText(plan->simulation.completed
                          ? tr("Schedule %1: planned bubble ratio %2")
                                .arg(text(std::string(plan::scheduleName(plan->spec.parallel.schedule))),
                                     percent(plan->simulation.overallBubbleRatio))
                          : tr("Schedule simulation failed: %1").arg(text(plan->simulation.error)));
    m_timelineData->loadPlan(*plan);
}

}  // namespace meshbench::app
