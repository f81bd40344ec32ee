#include "monitor/expert_load_view.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSpinBox>

#include <algorithm>
#include <cmath>
#include <limits>

namespace meshbench::app {

namespace {

constexpr double kNoData = std::numeric_limits<double>::quiet_NaN();
constexpr int kInitialColumns = 64;
constexpr int kHottestNamed = 3;

const live::ExpertLayerStats* findLayer(const live::StepAggregate& step, int layer)
{
    for (const live::ExpertLayerStats& stats : step.expertLayers)
        if (stats.layer == layer)
            return &stats;
    return nullptr;
}

// Whole-number ticks only (experts, layers, steps), thinned out when there are many.
QSharedPointer<QCPAxisTicker> integerTicker()
{
    QSharedPointer<QCPAxisTickerFixed> ticker(new QCPAxisTickerFixed);
    ticker->setTickStep(1);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    return ticker;
}

}  // namespace

ExpertLoadView::ExpertLoadView(QWidget* parent) : RunChart(parent)
{
    setObjectName(QStringLiteral("expert-load"));  // also the suggested export file name
    m_mode = new QComboBox(this);
    m_mode->addItem(tr("Experts × steps"));
    m_mode->addItem(tr("Layers × experts"));
    m_layer = new QComboBox(this);
    m_step = new QSpinBox(this);
    m_step->setRange(-1, std::numeric_limits<int>::max());
    m_step->setSpecialValueText(tr("latest"));
    m_step->setValue(-1);
    m_step->setVisible(false);
    controls()->addWidget(m_mode);
    controls()->addWidget(m_layer);
    controls()->addWidget(m_step);
    // Beside the controls rather than in a row of its own: height is what a small chart lacks. It is
    // clipped where narrow, so the tooltip holds it whole.
    m_hottest = new QLabel(this);
    m_hottest->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_hottest->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    controls()->addWidget(m_hottest, 1);

    QCustomPlot* p = plot();
    p->setAutoAddPlottableToLegend(false);
    QCPAxisRect* mapRect = p->axisRect();
    m_scale = new QCPColorScale(p);
    p->plotLayout()->addElement(0, 1, m_scale);
    m_scale->axis()->setLabel(tr("tokens"));
    m_map = new QCPColorMap(p->xAxis, p->yAxis);
    m_map->setColorScale(m_scale);
    m_map->setInterpolate(false);
    QCPColorGradient gradient(QCPColorGradient::gpThermal);
    gradient.setNanHandling(QCPColorGradient::nhTransparent);  // cells of steps that did not report
    m_map->setGradient(gradient);
    p->xAxis->setTicker(integerTicker());
    p->yAxis->setTicker(integerTicker());

    auto* stats = new QCPAxisRect(p);
    p->plotLayout()->addElement(1, 0, stats);
    p->plotLayout()->setRowStretchFactor(0, 2);
    p->plotLayout()->setRowStretchFactor(1, 1);
    stats->axis(QCPAxis::atTop)->setVisible(false);
    stats->axis(QCPAxis::atRight)->setVisible(true);
    stats->axis(QCPAxis::atBottom)->setLabel(tr("step"));
    stats->axis(QCPAxis::atLeft)->setLabel(tr("max / mean"));
    stats->axis(QCPAxis::atRight)->setLabel(tr("dropped"));
    stats->axis(QCPAxis::atRight)->setTicker(percentTicker());
    auto* margins = new QCPMarginGroup(p);
    mapRect->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    stats->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    auto* scaleMargins = new QCPMarginGroup(p);
    mapRect->setMarginGroup(QCP::msTop | QCP::msBottom, scaleMargins);
    m_scale->setMarginGroup(QCP::msTop | QCP::msBottom, scaleMargins);

    auto* legend = new QCPLegend;
    legendRow(legend, 1);
    const auto addGraph = [&](QCPAxis* valueAxis, const QString& name, int color, Qt::PenStyle style) {
        QCPGraph* graph = p->addGraph(stats->axis(QCPAxis::atBottom), valueAxis);
        graph->setName(name);
        graph->setPen(QPen(seriesColor(color), 1.5, style));
        graph->addToLegend(legend);
        return graph;
    };
    m_imbalance = addGraph(stats->axis(QCPAxis::atLeft), tr("imbalance, worst layer"), 2, Qt::SolidLine);
    m_p95 = addGraph(stats->axis(QCPAxis::atLeft), tr("p95 over layers"), 1, Qt::SolidLine);
    m_dropped = addGraph(stats->axis(QCPAxis::atRight), tr("dropped"), 0, Qt::DashLine);

    connect(m_mode, &QComboBox::currentIndexChanged, this, [this](int index) {
        m_layer->setVisible(index == 0);
        m_step->setVisible(index == 1);
        rebuild();
    });
    connect(m_layer, &QComboBox::currentIndexChanged, this, [this] {
        if (mode() == Mode::ExpertsBySteps)
            rebuild();
    });
    connect(m_step, &QSpinBox::valueChanged, this, [this] {
        drawLayersByExperts();
        replot();
    });
    restyle();
}

void ExpertLoadView::setMode(Mode mode) { m_mode->setCurrentIndex(mode == Mode::ExpertsBySteps ? 0 : 1); }

ExpertLoadView::Mode ExpertLoadView::mode() const
{
    return m_mode->currentIndex() == 0 ? Mode::ExpertsBySteps : Mode::LayersByExperts;
}

void ExpertLoadView::setLayer(int layer)
{
    const int index = m_layer->findData(layer);
    if (index >= 0)
        m_layer->setCurrentIndex(index);
}

int ExpertLoadView::layer() const { return m_layer->currentIndex() >= 0 ? m_layer->currentData().toInt() : -1; }

void ExpertLoadView::setStep(int step) { m_step->setValue(std::max(step, -1)); }

QString ExpertLoadView::hottestText() const { return m_hottest->text(); }

void ExpertLoadView::setHottest(const QString& text)
{
    m_hottest->setText(text);
    m_hottest->setToolTip(text);
}

void ExpertLoadView::syncLayerChoices()
{
    const std::vector<int> layers = runState() ? runState()->moeLayers() : std::vector<int>{};
    if (layers == m_layers)
        return;
    const int kept = layer();
    m_layers = layers;
    const QSignalBlocker blocker(m_layer);
    m_layer->clear();
    for (int l : layers)
        m_layer->addItem(tr("layer %1").arg(l), l);
    const int index = m_layer->findData(kept);
    m_layer->setCurrentIndex(index >= 0 ? index : 0);
}

void ExpertLoadView::reset()
{
    syncLayerChoices();
    m_map->data()->clear();
    m_columns = 0;
    m_maxTokens = 0;
    m_maxImbalance = 0;
    m_maxDropped = 0;
    for (QCPGraph* graph : {m_imbalance, m_p95, m_dropped})
        graph->data()->clear();
    setHottest(runState() && runState()->expertCount() == 0 ? tr("Dense model: no experts.") : QString());
    setAxisLabels();
}

void ExpertLoadView::setAxisLabels()
{
    QCustomPlot* p = plot();
    const bool bySteps = mode() == Mode::ExpertsBySteps;
    // Experts x steps shares its steps with the panel below, which names them.
    p->xAxis->setTickLabels(!bySteps);
    p->xAxis->setLabel(bySteps ? QString() : tr("expert"));
    p->yAxis->setLabel(bySteps ? tr("expert") : tr("MoE layer"));
    if (bySteps) {
        p->yAxis->setTicker(integerTicker());
        return;
    }
    QSharedPointer<QCPAxisTickerText> names(new QCPAxisTickerText);
    for (std::size_t i = 0; i < m_layers.size(); ++i)
        names->addTick(double(i), QString::number(m_layers[i]));
    p->yAxis->setTicker(names);
}

void ExpertLoadView::appendSteps(std::size_t first)
{
    const std::vector<live::StepAggregate>& steps = runState()->steps();
    const bool bySteps = mode() == Mode::ExpertsBySteps;
    const live::StepAggregate* latest = nullptr;
    for (std::size_t i = first; i < steps.size(); ++i) {
        const live::StepAggregate& step = steps[i];
        if (step.expertLayers.empty())
            continue;
        latest = &step;
        const double key = step.step;
        double worst = 0;
        for (const live::ExpertLayerStats& stats : step.expertLayers)
            worst = std::max(worst, stats.imbalance.value_or(0.0));
        if (worst > 0)
            m_imbalance->addData(key, worst);
        if (step.imbalanceP95)
            m_p95->addData(key, *step.imbalanceP95);
        if (step.droppedFraction) {
            m_dropped->addData(key, *step.droppedFraction);
            m_maxDropped = std::max(m_maxDropped, *step.droppedFraction);
        }
        m_maxImbalance = std::max(m_maxImbalance, worst);
        if (bySteps)
            writeStepColumn(step);
    }
    if (latest)
        updateHottest(*latest);
    if (!bySteps)
        drawLayersByExperts();

    QCPAxisRect* stats = m_imbalance->keyAxis()->axisRect();
    if (!steps.empty()) {
        const QCPRange stepRange(steps.front().step - 0.5, steps.back().step + 0.5);
        stats->axis(QCPAxis::atBottom)->setRange(stepRange);
        if (bySteps)
            plot()->xAxis->setRange(stepRange);
    }
    stats->axis(QCPAxis::atLeft)->setRange(0, std::max(m_maxImbalance, 1.0) * 1.1);
    stats->axis(QCPAxis::atRight)->setRange(0, std::max(m_maxDropped, 0.01) * 1.1);
    if (bySteps) {
        plot()->yAxis->setRange(-0.5, std::max(runState()->expertCount(), 1) - 0.5);
        m_map->setDataRange(QCPRange(0, std::max(m_maxTokens, 1.0)));
    }
}

void ExpertLoadView::writeStepColumn(const live::StepAggregate& step)
{
    const live::ExpertLayerStats* stats = findLayer(step, layer());
    if (!stats || stats->routed.empty())
        return;
    const int experts = int(stats->routed.size());
    QCPColorMapData* cells = m_map->data();
    if (m_columns == 0 || cells->valueSize() != experts) {
        m_firstColumnStep = step.step;
        m_columns = kInitialColumns;
        cells->setSize(m_columns, experts);
        cells->fill(kNoData);
    }
    const int column = step.step - m_firstColumnStep;
    if (column < 0)
        return;  // steps arrive in order within a generation, so this is a step before the map
    if (column >= m_columns) {
        // Doubling keeps the copies amortised O(1) per step.
        const int columns = std::max(2 * m_columns, column + 1);
        auto* grown = new QCPColorMapData(columns, experts, QCPRange(), QCPRange());
        grown->fill(kNoData);
        for (int c = 0; c < m_columns; ++c)
            for (int e = 0; e < experts; ++e)
                grown->setCell(c, e, cells->cell(c, e));
        m_map->setData(grown, false);
        cells = grown;
        m_columns = columns;
    }
    cells->setRange(QCPRange(m_firstColumnStep, m_firstColumnStep + m_columns - 1), QCPRange(0, experts - 1));
    for (int e = 0; e < experts; ++e) {
        cells->setCell(column, e, stats->routed[std::size_t(e)]);
        m_maxTokens = std::max(m_maxTokens, double(stats->routed[std::size_t(e)]));
    }
}

void ExpertLoadView::drawLayersByExperts()
{
    if (mode() != Mode::LayersByExperts || !runState())
        return;
    const std::vector<live::StepAggregate>& steps = runState()->steps();
    const live::StepAggregate* shown = nullptr;
    if (m_step->value() < 0) {
        for (auto it = steps.rbegin(); it != steps.rend() && !shown; ++it)
            if (!it->expertLayers.empty())
                shown = &*it;
    } else {
        for (const live::StepAggregate& step : steps)
            if (step.step == m_step->value())
                shown = &step;
    }
    QCPColorMapData* cells = m_map->data();
    const int experts = runState()->expertCount();
    const int layers = int(m_layers.size());
    if (!shown || experts == 0 || layers == 0) {
        cells->clear();
        return;
    }
    cells->setSize(experts, layers);
    cells->setRange(QCPRange(0, experts - 1), QCPRange(0, layers - 1));
    cells->fill(kNoData);
    double maxTokens = 1;
    for (const live::ExpertLayerStats& stats : shown->expertLayers) {
        const auto row = std::find(m_layers.begin(), m_layers.end(), stats.layer);
        if (row == m_layers.end())
            continue;
        for (int e = 0; e < std::min(experts, int(stats.routed.size())); ++e) {
            cells->setCell(e, int(row - m_layers.begin()), stats.routed[std::size_t(e)]);
            maxTokens = std::max(maxTokens, double(stats.routed[std::size_t(e)]));
        }
    }
    m_map->setDataRange(QCPRange(0, maxTokens));
    plot()->xAxis->setRange(-0.5, experts - 0.5);
    plot()->yAxis->setRange(-0.5, layers - 0.5);
    plot()->xAxis->setLabel(tr("expert (step %1)").arg(shown->step));
}

void ExpertLoadView::updateHottest(const live::StepAggregate& step)
{
    // The overload factor of a layer's hottest expert is its routed tokens over the layer's mean:
    // the layer's imbalance.
    std::vector<const live::ExpertLayerStats*> layers;
    for (const live::ExpertLayerStats& stats : step.expertLayers)
        if (stats.imbalance)
            layers.push_back(&stats);
    std::sort(layers.begin(), layers.end(), [](const auto* a, const auto* b) { return *a->imbalance > *b->imbalance; });
    QStringList named;
    for (std::size_t i = 0; i < std::min(layers.size(), std::size_t(kHottestNamed)); ++i)
        named << tr("layer %1 expert %2 (%3× mean)")
                     .arg(layers[i]->layer)
                     .arg(layers[i]->hottestExpert)
                     .arg(*layers[i]->imbalance, 0, 'f', 2);
    setHottest(named.isEmpty() ? QString()
                               : tr("Hottest at step %1: %2").arg(step.step).arg(named.join(QStringLiteral(", "))));
}

}  // namespace meshbench::app
