#include "monitor/memory_chart.h"

#include "plan/units.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>

#include <algorithm>

namespace meshbench::app {

namespace {

const QColor kCapacityColor(220, 50, 47);  // a strong red on both themes: the limit
// Below this share of the capacity the bars are scaled to the data (as the Designer's plan
// inspector does), with room left above them for the capacity note.
constexpr double kOffScaleShare = 0.05;
constexpr double kCapacityHeadroom = 1.1;
constexpr double kDataHeadroom = 1.25;

}  // namespace

MemoryChart::MemoryChart(QWidget* parent) : RunChart(parent)
{
    setObjectName(QStringLiteral("memory-chart"));  // also the suggested export file name
    m_rank = new QComboBox(this);
    controls()->addWidget(new QLabel(tr("Over time:"), this));
    controls()->addWidget(m_rank);
    controls()->addStretch(1);

    QCustomPlot* p = plot();
    p->setAutoAddPlottableToLegend(false);
    p->xAxis->setLabel(tr("rank"));
    QSharedPointer<QCPAxisTickerFixed> rankTicks(new QCPAxisTickerFixed);
    rankTicks->setTickStep(1);
    rankTicks->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    p->xAxis->setTicker(rankTicks);

    QCPBars* below = nullptr;
    for (int c = 0; c < wire::kMemoryCategories; ++c) {
        auto* bars = new QCPBars(p->xAxis, p->yAxis);
        bars->setName(QString::fromLatin1(wire::memoryCategoryName(wire::MemoryCategory(c))));
        bars->setWidth(0.7);
        bars->setPen(Qt::NoPen);
        bars->setBrush(seriesColor(c));
        if (below)
            bars->moveAbove(below);
        bars->addToLegend();
        below = bars;
        m_bars[std::size_t(c)] = bars;
    }
    m_peak = p->addGraph();
    m_peak->setName(tr("peak"));
    m_peak->setLineStyle(QCPGraph::lsNone);
    m_peak->addToLegend();

    m_capacity = new QCPItemStraightLine(p);
    m_capacity->setPen(QPen(kCapacityColor, 1.5, Qt::DashLine));
    m_capacity->setVisible(false);
    m_capacityNote = new QCPItemText(p);
    m_capacityNote->position->setType(QCPItemPosition::ptAxisRectRatio);
    m_capacityNote->position->setCoords(0.99, 0.02);
    m_capacityNote->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
    m_capacityNote->setColor(kCapacityColor);
    m_capacityNote->setPadding(QMargins(2, 0, 2, 0));
    m_capacityNote->setVisible(false);

    auto* overTime = new QCPAxisRect(p);
    p->plotLayout()->addElement(1, 0, overTime);
    overTime->axis(QCPAxis::atBottom)->setLabel(tr("seconds since the rank's first sample"));
    // Bars 3 : history 2 (rows 0 and 1 until legendRow puts the legend above them).
    p->plotLayout()->setRowStretchFactor(0, 3);
    p->plotLayout()->setRowStretchFactor(1, 2);
    auto* margins = new QCPMarginGroup(p);
    p->axisRect()->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    overTime->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    m_history = p->addGraph(overTime->axis(QCPAxis::atBottom), overTime->axis(QCPAxis::atLeft));
    m_history->setPen(QPen(seriesColor(0), 1.5));
    m_history->setLineStyle(QCPGraph::lsStepLeft);  // memory holds its value until the next sample
    legendRow(p->legend, 0);

    connect(m_rank, &QComboBox::currentIndexChanged, this, [this] {
        refreshHistory();
        replot();
    });
    fitValueAxis(0);
    restyle();
}

void MemoryChart::applyPalette()
{
    const QPen pen(palette().color(QPalette::WindowText), 2);
    QPainterPath dash;
    dash.moveTo(-7, 0);
    dash.lineTo(7, 0);
    m_peak->setPen(pen);
    m_peak->setScatterStyle(QCPScatterStyle(dash, pen, Qt::NoBrush, 14));
    m_capacityNote->setBrush(palette().brush(QPalette::Base));  // over a bar where one reaches it
}

void MemoryChart::setHistoryRank(std::uint32_t rank)
{
    const int index = m_rank->findData(rank);
    if (index >= 0)
        m_rank->setCurrentIndex(index);
}

int MemoryChart::historyRank() const { return m_rank->currentIndex() >= 0 ? m_rank->currentData().toInt() : -1; }

void MemoryChart::reset()
{
    for (QCPBars* bars : m_bars)
        bars->data()->clear();
    m_peak->data()->clear();
    m_history->data()->clear();
    m_plottedRank = -1;
    m_plottedPoints = 0;
    fitValueAxis(0);
    syncRankChoices();
}

void MemoryChart::fitValueAxis(double largestBytes)
{
    const double capacity = runState() ? runState()->deviceMemoryBytes() : 0.0;
    const bool offScale = capacity > 0 && largestBytes > 0 && largestBytes < kOffScaleShare * capacity;
    double top = offScale ? largestBytes * kDataHeadroom : std::max(largestBytes, capacity) * kCapacityHeadroom;
    if (top <= 0)
        top = 1e9;  // nothing known yet
    const plan::ByteUnit unit = plan::byteUnitFor(top);
    if (unit.bytes != m_unit) {
        m_unit = unit.bytes;
        m_plottedRank = -1;  // the history is redrawn in the new unit
        plot()->yAxis->setLabel(tr("memory (%1)").arg(QLatin1String(unit.name)));
        m_history->valueAxis()->setLabel(tr("total (%1)").arg(QLatin1String(unit.name)));
    }
    plot()->yAxis->setRange(0, top / m_unit);
    m_capacity->setVisible(capacity > 0 && !offScale);
    m_capacity->point1->setCoords(0, capacity / m_unit);
    m_capacity->point2->setCoords(1, capacity / m_unit);
    m_capacityNote->setVisible(offScale);
    m_capacityNote->setText(tr("capacity %1 off scale ↑").arg(QString::fromStdString(plan::formatBytes(capacity))));
}

void MemoryChart::syncRankChoices()
{
    const auto& memory = runState() ? runState()->memory() : std::map<std::uint32_t, RankMemoryTrack>{};
    if (std::size_t(m_rank->count()) == memory.size())
        return;  // ranks are only ever added (clear() resets to none)
    const int kept = historyRank();
    const QSignalBlocker blocker(m_rank);
    m_rank->clear();
    for (const auto& [rank, track] : memory)
        m_rank->addItem(tr("rank %1 (stage %2)").arg(rank).arg(track.latest.stage), rank);
    const int index = m_rank->findData(kept);
    m_rank->setCurrentIndex(index >= 0 ? index : 0);
}

void MemoryChart::refreshMemory()
{
    syncRankChoices();
    const auto& memory = runState()->memory();
    QVector<double> keys, peaks;
    keys.reserve(qsizetype(memory.size()));
    std::array<QVector<double>, wire::kMemoryCategories> current;
    double largest = 0;
    for (const auto& [rank, track] : memory) {
        keys.push_back(rank);
        std::int64_t peak = 0;
        for (std::size_t c = 0; c < current.size(); ++c) {
            current[c].push_back(double(track.latest.current[c]));
            peak += track.latest.peak[c];
        }
        peaks.push_back(double(peak));
        largest = std::max({largest, double(peak), double(track.latest.currentTotal())});
    }
    // Bytes so far: the largest figure picks the axis and its unit.
    fitValueAxis(largest);
    const auto toUnit = [this](QVector<double>& values) {
        for (double& value : values)
            value /= m_unit;
    };
    for (std::size_t c = 0; c < current.size(); ++c) {
        toUnit(current[c]);
        m_bars[c]->setData(keys, current[c], true);
    }
    toUnit(peaks);
    m_peak->setData(keys, peaks, true);
    plot()->xAxis->setRange(keys.isEmpty() ? -0.5 : keys.front() - 0.5, keys.isEmpty() ? 7.5 : keys.back() + 0.5);
    refreshHistory();
}

void MemoryChart::refreshHistory()
{
    const int rank = historyRank();
    const auto& memory = runState() ? runState()->memory() : std::map<std::uint32_t, RankMemoryTrack>{};
    const auto track = rank >= 0 ? memory.find(std::uint32_t(rank)) : memory.end();
    if (track == memory.end()) {
        m_history->data()->clear();
        m_plottedRank = -1;
        return;
    }
    const std::vector<MemoryPoint>& history = track->second.history;
    if (rank != m_plottedRank || history.size() < m_plottedPoints || history.empty()) {
        m_history->data()->clear();
        m_plottedRank = rank;
        m_plottedPoints = 0;
        m_historyOrigin = history.empty() ? 0 : history.front().timeNs;
    }
    // The last plotted point may since have been overwritten (more categories of the same instant).
    std::size_t from = m_plottedPoints;
    if (from > 0) {
        --from;
        m_history->data()->remove(double(history[from].timeNs - m_historyOrigin) * 1e-9);
    }
    for (std::size_t i = from; i < history.size(); ++i)
        m_history->addData(double(history[i].timeNs - m_historyOrigin) * 1e-9, double(history[i].totalBytes) / m_unit);
    m_plottedPoints = history.size();
    // From the first sample on, at least a second wide: one sample alone is no range to fit.
    m_history->keyAxis()->setRange(0, std::max(double(history.back().timeNs - m_historyOrigin) * 1e-9, 1.0));
    bool found = false;
    const QCPRange values = m_history->getValueRange(found);
    m_history->valueAxis()->setRange(0, std::max(found ? values.upper : 0.0, 1e-3) * 1.1);
}

}  // namespace meshbench::app
