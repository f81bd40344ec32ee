#include "sessions/comparison_chart.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QLabel>

#include <cmath>

namespace meshbench::app {

namespace {

using Figure = ComparisonChart::Figure;

constexpr double kGB = 1e9;  // decimal, as the planner and the Monitor's memory chart

bool perStep(Figure figure) { return figure != Figure::StageBubble && figure != Figure::PeakMemory; }

bool isRatio(Figure figure) { return figure == Figure::Bubble || figure == Figure::StageBubble; }

std::optional<double> finite(double value)
{
    return std::isfinite(value) ? std::optional<double>(value) : std::nullopt;
}

std::optional<double> scaled(const std::optional<double>& value, double scale)
{
    return value ? std::optional<double>(*value * scale) : std::nullopt;
}

std::optional<double> stepValue(const wire::StepMetricsRecord& step, Figure figure)
{
    switch (figure) {
    case Figure::Loss:
        return finite(step.loss);
    case Figure::StepTime:
        return scaled(stepSeconds(step), 1e3);
    case Figure::TokensPerSecond:
        return stepTokensPerSecond(step);
    case Figure::Bubble:  // measured over every rank: stepValues
    case Figure::StageBubble:
    case Figure::PeakMemory:
        break;
    }
    return std::nullopt;
}

// The figure per step as the chart draws it: from the step metrics, or for the bubble the one the
// Monitor shows (plan::measuredBubble over every rank's spans).
std::map<std::int32_t, double> stepValues(const ComparedSession& session, Figure figure)
{
    if (figure == Figure::Bubble)
        return session.stepBubble;
    std::map<std::int32_t, double> values;
    for (const auto& [step, record] : session.figures.steps)
        if (const std::optional<double> value = stepValue(record, figure))
            values.emplace(step, *value);
    return values;
}

std::optional<double> plannedStepValue(const ComparedSession& session, Figure figure)
{
    switch (figure) {
    case Figure::StepTime:
        return scaled(session.plannedStepSeconds, 1e3);
    case Figure::TokensPerSecond:
        return session.plannedTokensPerSecond;
    case Figure::Bubble:
        return session.plannedBubble;
    case Figure::Loss:
    case Figure::StageBubble:
    case Figure::PeakMemory:
        break;
    }
    return std::nullopt;
}

std::vector<std::optional<double>> keyedValues(const ComparedSession& session, Figure figure, bool planned)
{
    if (figure == Figure::StageBubble)
        return planned ? session.plannedStageBubble : session.stageBubble;
    std::vector<std::optional<double>> gb;
    if (planned) {
        for (const std::optional<double>& bytes : session.plannedPeakBytes)
            gb.push_back(scaled(bytes, 1 / kGB));
    } else {
        for (const std::optional<std::int64_t>& bytes : session.figures.peakMemoryBytes)
            gb.push_back(bytes ? std::optional<double>(double(*bytes) / kGB) : std::nullopt);
    }
    return gb;
}

// The figure's name and, in brackets, its unit as the axes show it.
QString axisLabel(Figure figure)
{
    switch (figure) {
    case Figure::Loss:
        return ComparisonChart::tr("loss");
    case Figure::StepTime:
        return ComparisonChart::tr("step time (ms)");
    case Figure::TokensPerSecond:
        return ComparisonChart::tr("tokens/s");
    case Figure::Bubble:
        return ComparisonChart::tr("bubble (measured spans, %)");
    case Figure::StageBubble:
        return ComparisonChart::tr("mean bubble (measured spans, %)");
    case Figure::PeakMemory:
        return ComparisonChart::tr("peak memory (GB)");
    }
    return {};
}

QString differenceLabel(Figure figure)
{
    switch (figure) {
    case Figure::StepTime:
        return ComparisonChart::tr("minus A (ms)");
    case Figure::Bubble:
    case Figure::StageBubble:
        return ComparisonChart::tr("minus A (points)");
    case Figure::PeakMemory:
        return ComparisonChart::tr("minus A (GB)");
    case Figure::Loss:
    case Figure::TokensPerSecond:
        break;
    }
    return ComparisonChart::tr("minus A");
}

// Whole numbers only (steps, stages, ranks), as many as the axis has room for.
QSharedPointer<QCPAxisTicker> integerTicker()
{
    auto ticker = QSharedPointer<QCPAxisTickerFixed>(new QCPAxisTickerFixed);
    ticker->setTickStep(1);
    ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    return ticker;
}

// Fits a value axis to what it shows, with 0 in the range when `includeZero`.
void fitValueAxis(QCPAxis* axis, const QList<QCPAbstractPlottable*>& plottables, bool includeZero)
{
    bool any = false;
    QCPRange range;
    for (QCPAbstractPlottable* plottable : plottables) {
        bool found = false;
        const QCPRange r = plottable->getValueRange(found);
        if (!found)
            continue;
        range = any ? QCPRange(std::min(range.lower, r.lower), std::max(range.upper, r.upper)) : r;
        any = true;
    }
    if (!any)
        return;
    if (includeZero)
        range = QCPRange(std::min(range.lower, 0.0), std::max(range.upper, 0.0));
    const double span = std::max(range.size(), std::max(std::abs(range.upper), std::abs(range.lower)) * 1e-3 + 1e-12);
    axis->setRange(range.lower - (range.lower < 0 ? 0.08 * span : 0), range.upper + 0.08 * span);
}

}  // namespace

ComparisonChart::ComparisonChart(QWidget* parent) : ChartWidget(parent)
{
    setObjectName(QStringLiteral("comparison-chart"));  // also the suggested export file name
    m_figureBox = new QComboBox(this);
    m_figureBox->addItem(tr("Loss"), int(Figure::Loss));
    m_figureBox->addItem(tr("Step time"), int(Figure::StepTime));
    m_figureBox->addItem(tr("Tokens/s"), int(Figure::TokensPerSecond));
    m_figureBox->addItem(tr("Bubble per step"), int(Figure::Bubble));
    m_figureBox->addItem(tr("Bubble per stage"), int(Figure::StageBubble));
    m_figureBox->addItem(tr("Peak memory per rank"), int(Figure::PeakMemory));
    m_figureBox->setCurrentIndex(m_figureBox->findData(int(m_figure)));
    auto* label = new QLabel(tr("Figure:"), this);
    label->setBuddy(m_figureBox);
    controls()->addWidget(label);
    controls()->addWidget(m_figureBox);
    controls()->addStretch(1);
    connect(m_figureBox, &QComboBox::currentIndexChanged, this,
            [this](int index) { setFigure(Figure(m_figureBox->itemData(index).toInt())); });

    QCustomPlot* p = plot();
    p->setAutoAddPlottableToLegend(false);
    m_values = p->axisRect();
    m_differences = new QCPAxisRect(p);
    p->plotLayout()->addElement(1, 0, m_differences);
    p->plotLayout()->setRowStretchFactor(1, 0.45);
    auto* margins = new QCPMarginGroup(p);
    m_values->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    m_differences->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    // The panels share their keys: only the lower one names them.
    m_values->axis(QCPAxis::atBottom)->setTickLabels(false);
    legendRow(p->legend, 0);
    m_barGroup = new QCPBarsGroup(p);
    m_differenceGroup = new QCPBarsGroup(p);
    restyle();
}

void ComparisonChart::setSessions(std::vector<ComparedSession> sessions)
{
    m_sessions = std::move(sessions);
    rebuild();
}

void ComparisonChart::setFigure(Figure figure)
{
    if (figure == m_figure)
        return;
    m_figure = figure;
    m_figureBox->setCurrentIndex(m_figureBox->findData(int(figure)));
    rebuild();
}

QCPAbstractPlottable* ComparisonChart::measured(int i) const
{
    return i >= 0 && i < int(m_drawn.size()) ? m_drawn[std::size_t(i)].measured : nullptr;
}

QCPGraph* ComparisonChart::planned(int i) const
{
    return i >= 0 && i < int(m_drawn.size()) ? m_drawn[std::size_t(i)].planned : nullptr;
}

QCPAbstractPlottable* ComparisonChart::difference(int i) const
{
    return i >= 0 && i < int(m_drawn.size()) ? m_drawn[std::size_t(i)].difference : nullptr;
}

void ComparisonChart::reset()
{
    QCustomPlot* p = plot();
    p->clearPlottables();  // their legend items go with them
    m_drawn.assign(m_sessions.size(), Drawn{});
    const bool ratio = isRatio(m_figure);
    for (QCPAxis* axis : {m_values->axis(QCPAxis::atLeft), m_differences->axis(QCPAxis::atLeft)})
        axis->setTicker(ratio ? percentTicker() : QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    m_values->axis(QCPAxis::atLeft)->setLabel(axisLabel(m_figure));
    m_differences->axis(QCPAxis::atLeft)->setLabel(differenceLabel(m_figure));
    for (QCPAxis* axis : {m_values->axis(QCPAxis::atBottom), m_differences->axis(QCPAxis::atBottom)})
        axis->setTicker(integerTicker());
    if (perStep(m_figure))
        drawPerStep();
    else
        drawPerKey();

    QList<QCPAbstractPlottable*> values, differences;
    for (const Drawn& drawn : m_drawn) {
        for (QCPAbstractPlottable* plottable : {drawn.measured, static_cast<QCPAbstractPlottable*>(drawn.planned)})
            if (plottable)
                values << plottable;
        if (drawn.difference)
            differences << drawn.difference;
    }
    fitValueAxis(m_values->axis(QCPAxis::atLeft), values, m_figure != Figure::Loss);
    fitValueAxis(m_differences->axis(QCPAxis::atLeft), differences, true);
    restyle();
}

void ComparisonChart::drawPerStep()
{
    QCustomPlot* p = plot();
    QCPAxis* key = m_values->axis(QCPAxis::atBottom);
    QCPAxis* differenceKey = m_differences->axis(QCPAxis::atBottom);
    differenceKey->setLabel(tr("step"));
    std::optional<std::int32_t> first, last;
    for (std::size_t i = 0; i < m_sessions.size(); ++i) {
        const ComparedSession& session = m_sessions[i];
        const QColor colour = seriesColor(int(i));
        auto* measured = p->addGraph(key, m_values->axis(QCPAxis::atLeft));
        measured->setName(sessionLetter(int(i)) + QStringLiteral(": ") + session.figures.name + QStringLiteral(" (") +
                          session.figures.layout + QLatin1Char(')'));
        measured->setPen(QPen(colour, 1.8));
        measured->addToLegend();
        const std::map<std::int32_t, double> values = stepValues(session, m_figure);
        for (const auto& [step, value] : values) {
            measured->addData(step, value);
            first = std::min(first.value_or(step), step);
            last = std::max(last.value_or(step), step);
        }
        m_drawn[i].measured = measured;

        if (const std::optional<double> planned = plannedStepValue(session, m_figure);
            planned && !session.figures.steps.empty()) {
            auto* graph = p->addGraph(key, m_values->axis(QCPAxis::atLeft));
            graph->setName(sessionLetter(int(i)) + tr(" plan"));
            graph->setPen(QPen(colour, 1.2, Qt::DashLine));
            graph->addToLegend();
            for (const auto& entry : session.figures.steps)
                graph->addData(entry.first, *planned);
            m_drawn[i].planned = graph;
        }

        if (i == 0)
            continue;
        auto* difference = p->addGraph(differenceKey, m_differences->axis(QCPAxis::atLeft));
        difference->setName(sessionLetter(int(i)) + QStringLiteral(" − A"));
        difference->setPen(QPen(colour, 1.5));
        const std::map<std::int32_t, double> reference = stepValues(m_sessions.front(), m_figure);
        for (const auto& [step, value] : values)
            if (const auto other = reference.find(step); other != reference.end())
                difference->addData(step, value - other->second);
        m_drawn[i].difference = difference;
    }
    if (first) {
        key->setRange(*first - 0.5, *last + 0.5);
        differenceKey->setRange(*first - 0.5, *last + 0.5);
    }
}

void ComparisonChart::drawPerKey()
{
    QCustomPlot* p = plot();
    QCPAxis* key = m_values->axis(QCPAxis::atBottom);
    QCPAxis* differenceKey = m_differences->axis(QCPAxis::atBottom);
    differenceKey->setLabel(m_figure == Figure::StageBubble ? tr("stage") : tr("rank"));
    const int groups = std::max(1, int(m_sessions.size()));
    const double width = 0.8 / groups;
    std::size_t keys = 0;
    const std::vector<std::optional<double>> reference =
        m_sessions.empty() ? std::vector<std::optional<double>>{} : keyedValues(m_sessions.front(), m_figure, false);
    for (std::size_t i = 0; i < m_sessions.size(); ++i) {
        const ComparedSession& session = m_sessions[i];
        const QColor colour = seriesColor(int(i));
        const std::vector<std::optional<double>> values = keyedValues(session, m_figure, false);
        keys = std::max(keys, values.size());
        auto* bars = new QCPBars(key, m_values->axis(QCPAxis::atLeft));
        bars->setName(sessionLetter(int(i)) + QStringLiteral(": ") + session.figures.name + QStringLiteral(" (") +
                      session.figures.layout + QLatin1Char(')'));
        bars->setPen(QPen(colour.darker(130), 1));
        bars->setBrush(colour);
        bars->setWidth(width);
        bars->setBarsGroup(m_barGroup);
        bars->addToLegend();
        for (std::size_t k = 0; k < values.size(); ++k)
            if (values[k])
                bars->addData(double(k), *values[k]);
        m_drawn[i].measured = bars;

        const std::vector<std::optional<double>> planned = keyedValues(session, m_figure, true);
        if (std::any_of(planned.begin(), planned.end(), [](const auto& v) { return v.has_value(); })) {
            // A level per key across the group's width, so each session's plan sits over its bars.
            auto* graph = p->addGraph(key, m_values->axis(QCPAxis::atLeft));
            graph->setName(sessionLetter(int(i)) + tr(" plan"));
            graph->setPen(QPen(colour, 1.5, Qt::DashLine));
            graph->setLineStyle(QCPGraph::lsStepCenter);
            graph->addToLegend();
            for (std::size_t k = 0; k < planned.size(); ++k)
                if (planned[k])
                    graph->addData(double(k), *planned[k]);
            keys = std::max(keys, planned.size());
            m_drawn[i].planned = graph;
        }

        if (i == 0)
            continue;
        auto* difference = new QCPBars(differenceKey, m_differences->axis(QCPAxis::atLeft));
        difference->setName(sessionLetter(int(i)) + QStringLiteral(" − A"));
        difference->setPen(QPen(colour.darker(130), 1));
        difference->setBrush(colour);
        difference->setWidth(width);
        difference->setBarsGroup(m_differenceGroup);
        for (std::size_t k = 0; k < values.size() && k < reference.size(); ++k)
            if (values[k] && reference[k])
                difference->addData(double(k), *values[k] - *reference[k]);
        m_drawn[i].difference = difference;
    }
    key->setRange(-0.5, double(std::max<std::size_t>(keys, 1)) - 0.5);
    differenceKey->setRange(-0.5, double(std::max<std::size_t>(keys, 1)) - 0.5);
}

}  // namespace meshbench::app
