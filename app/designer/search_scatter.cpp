#include "designer/search_scatter.h"

#include "plan/units.h"

#include <qcustomplot.h>

#include <QMouseEvent>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <span>

namespace meshbench::app {

namespace {

constexpr double kPickRadiusPx = 6;
QString layoutWords(const plan::SearchCandidate& c)
{
    const plan::ParallelSpec& p = c.parallel;
    return QStringLiteral("tp %1 pp %2 dp %3 ep %4, %5 (v %6), %7 x %8, ZeRO-%9, %10\n%11 step, %12 tokens/s, "
                          "MFU %13%, %14 per GPU")
        .arg(p.tp)
        .arg(p.pp)
        .arg(p.dp)
        .arg(p.ep)
        .arg(QString::fromUtf8(plan::scheduleName(p.schedule).data()))
        .arg(p.virtualStages)
        .arg(p.microbatches)
        .arg(p.microBatchSize)
        .arg(p.zero)
        .arg(QString::fromUtf8(plan::recomputeName(p.recompute).data()))
        .arg(QString::fromStdString(plan::formatSeconds(c.stepTime)))
        .arg(c.tokensPerSecond, 0, 'f', 0)
        .arg(100 * c.mfu, 0, 'f', 1)
        .arg(QString::fromStdString(plan::formatBytes(c.memoryBytes)));
}

}  // namespace

SearchScatter::SearchScatter(QWidget* parent) : ChartWidget(parent)
{
    setObjectName(QStringLiteral("search-scatter"));  // also the suggested export file name
    QCustomPlot* p = plot();
    p->xAxis->setLabel(tr("memory per GPU (GB)"));
    p->yAxis->setLabel(tr("tokens/s"));
    // The legend in a row of its own above the points, so it never hides one.
    p->setAutoAddPlottableToLegend(false);
    m_legend = new QCPLegend;
    legendRow(m_legend, 0);
    p->setMouseTracking(true);
    p->installEventFilter(this);
    restyle();
}

QPointF SearchScatter::pointOf(const plan::SearchCandidate& candidate)
{
    return {candidate.memoryBytes / 1e9, candidate.tokensPerSecond};
}

void SearchScatter::setResult(const plan::SearchResult& result, std::optional<QPointF> designed)
{
    m_result = result;
    m_selected = -1;
    QCustomPlot* p = plot();
    p->clearGraphs();
    m_legend->clearItems();
    m_scheduleGraphs.clear();
    const std::vector<plan::SearchCandidate>& best = m_result.best;

    // The frontier: from the least memory up, each layout faster than every one before it.
    std::vector<int> order(best.size());
    for (std::size_t i = 0; i < best.size(); ++i)
        order[i] = int(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return best[std::size_t(a)].memoryBytes < best[std::size_t(b)].memoryBytes ||
               (best[std::size_t(a)].memoryBytes == best[std::size_t(b)].memoryBytes &&
                best[std::size_t(a)].tokensPerSecond > best[std::size_t(b)].tokensPerSecond);
    });
    m_frontier.clear();
    double fastest = -1;
    for (int i : order)
        if (best[std::size_t(i)].tokensPerSecond > fastest) {
            fastest = best[std::size_t(i)].tokensPerSecond;
            m_frontier.push_back(i);
        }
    m_frontierGraph = p->addGraph();
    m_frontierGraph->setName(tr("frontier"));
    m_frontierGraph->addToLegend(m_legend);
    m_frontierGraph->setLineStyle(QCPGraph::lsStepLeft);
    m_frontierGraph->setPen(QPen(palette().color(QPalette::WindowText), 1, Qt::DashLine));
    for (int i : m_frontier)
        m_frontierGraph->addData(pointOf(best[std::size_t(i)]).x(), pointOf(best[std::size_t(i)]).y());

    const std::span<const plan::ScheduleKind> schedules = plan::scheduleKinds();
    for (std::size_t k = 0; k < schedules.size(); ++k) {
        QCPGraph* graph = nullptr;
        for (const plan::SearchCandidate& c : best) {
            if (c.parallel.schedule != schedules[k])
                continue;
            if (!graph) {
                graph = p->addGraph();
                graph->setName(QString::fromUtf8(plan::scheduleName(schedules[k]).data()));
                graph->setLineStyle(QCPGraph::lsNone);
                graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, seriesColor(int(k)), 7));
                graph->setPen(QPen(seriesColor(int(k))));
                graph->addToLegend(m_legend);
                m_scheduleGraphs.push_back(graph);
            }
            graph->addData(pointOf(c).x(), pointOf(c).y());
        }
    }
    m_selectedGraph = p->addGraph();
    m_selectedGraph->setLineStyle(QCPGraph::lsNone);
    m_selectedGraph->setScatterStyle(
        QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(palette().color(QPalette::Highlight), 2), Qt::NoBrush, 13));
    m_designed = p->addGraph();
    m_designed->setName(tr("designed layout"));
    m_designed->setLineStyle(QCPGraph::lsNone);
    m_designed->setScatterStyle(
        QCPScatterStyle(QCPScatterStyle::ssCross, QPen(palette().color(QPalette::WindowText), 2), Qt::NoBrush, 12));
    if (designed) {
        m_designed->addData(designed->x(), designed->y());
        m_designed->addToLegend(m_legend);
    }
    p->rescaleAxes();
    // Room around the outermost points, from zero on both axes.
    p->xAxis->setRange(0, p->xAxis->range().upper * 1.08 + 1e-9);
    p->yAxis->setRange(0, p->yAxis->range().upper * 1.08 + 1e-9);
    replot();
}

QPoint SearchScatter::pixelOf(int index) const
{
    const QPointF point = pointOf(m_result.best[std::size_t(index)]);
    const QPointF pixel(plot()->xAxis->coordToPixel(point.x()), plot()->yAxis->coordToPixel(point.y()));
    return plot()->mapTo(this, pixel.toPoint());
}

int SearchScatter::candidateAt(const QPoint& pixel) const
{
    int nearest = -1;
    double best = kPickRadiusPx;
    for (std::size_t i = 0; i < m_result.best.size(); ++i) {
        const QPoint at = pixelOf(int(i));
        const double distance = std::hypot(double(at.x() - pixel.x()), double(at.y() - pixel.y()));
        if (distance <= best) {
            best = distance;
            nearest = int(i);
        }
    }
    return nearest;
}

void SearchScatter::select(int index)
{
    if (index < 0 || std::size_t(index) >= m_result.best.size())
        return;
    m_selected = index;
    m_selectedGraph->data()->clear();
    const QPointF point = pointOf(m_result.best[std::size_t(index)]);
    m_selectedGraph->addData(point.x(), point.y());
    replot();
}

bool SearchScatter::eventFilter(QObject* watched, QEvent* event)
{
    if (watched != plot())
        return ChartWidget::eventFilter(watched, event);
    const auto* mouse = dynamic_cast<QMouseEvent*>(event);
    if (!mouse)
        return false;
    const QPoint here = plot()->mapTo(this, mouse->position().toPoint());
    const int index = candidateAt(here);
    switch (event->type()) {
    case QEvent::MouseMove:
        if (index >= 0)
            QToolTip::showText(mouse->globalPosition().toPoint(), layoutWords(m_result.best[std::size_t(index)]),
                               plot());
        else
            QToolTip::hideText();
        return false;
    case QEvent::MouseButtonPress:
        if (mouse->button() == Qt::LeftButton && index >= 0) {
            select(index);
            emit candidateSelected(index);
        }
        return false;
    case QEvent::MouseButtonDblClick:
        if (mouse->button() == Qt::LeftButton && index >= 0)
            emit candidateActivated(index);
        return false;
    default:
        return false;
    }
}

}  // namespace meshbench::app
