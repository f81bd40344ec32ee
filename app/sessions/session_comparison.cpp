#include "session_comparison.h"

#include "plan/report.h"
#include "store/session_store.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

#include <array>
#include <cmath>
#include <map>

namespace meshbench::app {

SessionFigures sessionFigures(const store::SessionReader& session)
{
    SessionFigures f;
    f.name = QString::fromStdString(session.header().name);
    f.layout = QString::fromStdString(session.header().layout);

    std::map<std::int32_t, wire::StepMetricsRecord> steps;
    for (const auto& m : session.stepMetrics())
        steps.emplace(m.record.step, m.record);
    f.steps = int(steps.size());
    if (!steps.empty())
        f.finalLoss = steps.rbegin()->second.loss;
    const bool skipFirst = steps.size() > 1 || (steps.size() == 1 && steps.begin()->first != 1);
    double bubbleSum = 0, secondsSum = 0;
    std::int64_t tokens = 0;
    int bubbles = 0, timed = 0;
    for (const auto& [step, m] : steps) {
        if (skipFirst && step == 1)
            continue;
        if (std::isfinite(m.bubbleRatio)) {
            bubbleSum += m.bubbleRatio;
            ++bubbles;
        }
        if (m.endNs > m.beginNs) {
            secondsSum += double(m.endNs - m.beginNs) * 1e-9;
            tokens += m.tokens;
            ++timed;
        }
    }
    if (bubbles > 0)
        f.meanBubble = bubbleSum / bubbles;
    if (timed > 0) {
        f.meanStepSeconds = secondsSum / timed;
        if (tokens > 0)
            f.tokensPerSecond = double(tokens) / secondsSum;
    }

    // Per (rank, step): each category's peak in that step; the rank's peak is the largest sum.
    std::map<std::pair<std::uint32_t, std::int32_t>, std::array<std::int64_t, wire::kMemoryCategories>> perStep;
    for (const auto& s : session.memorySamples()) {
        if (s.rank == store::kEngineRank)
            continue;
        auto [it, added] = perStep.try_emplace({s.rank, s.record.step});
        if (added)
            it->second.fill(0);
        std::int64_t& slot = it->second[std::size_t(s.record.category)];
        slot = std::max(slot, std::max(s.record.peakBytes, s.record.currentBytes));
    }
    f.peakMemoryBytes.resize(session.header().ranks.size());
    for (const auto& [key, categories] : perStep) {
        if (key.first >= f.peakMemoryBytes.size())
            f.peakMemoryBytes.resize(key.first + 1);
        std::int64_t sum = 0;
        for (std::int64_t bytes : categories)
            sum += bytes;
        std::optional<std::int64_t>& peak = f.peakMemoryBytes[key.first];
        peak = std::max(peak.value_or(0), sum);
    }
    return f;
}

namespace {

enum class Unit { Count, Percent, Milliseconds, Rate, Loss, Bytes };

QString formatted(double value, Unit unit)
{
    switch (unit) {
    case Unit::Count:
        return QString::number(value, 'f', 0);
    case Unit::Percent:
        return QString::number(value * 100, 'f', 2) + QStringLiteral(" %");
    case Unit::Milliseconds:
        return QString::number(value * 1e3, 'f', 2) + QStringLiteral(" ms");
    case Unit::Rate:
        return QString::number(value, 'f', 0);
    case Unit::Loss:
        return QString::number(value, 'f', 4);
    case Unit::Bytes:
        return QString::fromStdString(plan::formatBytes(value));
    }
    return {};
}

QTableWidgetItem* valueItem(std::optional<double> value, Unit unit)
{
    auto* item = new QTableWidgetItem(value ? formatted(*value, unit) : QStringLiteral("—"));
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    if (value)
        item->setData(Qt::UserRole, *value);
    return item;
}

}  // namespace

SessionComparison::SessionComparison(QWidget* parent)
    : QWidget(parent), m_title(new QLabel(this)), m_error(new QLabel(this)), m_table(new QTableWidget(0, 4, this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_title->setWordWrap(true);
    m_error->setWordWrap(true);
    m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_error->setForegroundRole(QPalette::BrightText);
    m_error->setBackgroundRole(QPalette::Highlight);
    m_error->setAutoFillBackground(true);
    m_error->hide();
    m_table->setHorizontalHeaderLabels({tr("Metric"), tr("A"), tr("B"), tr("B vs A")});
    m_table->verticalHeader()->hide();
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setStretchLastSection(true);
    layout->addWidget(m_title);
    layout->addWidget(m_error);
    layout->addWidget(m_table, 1);
    clear();
}

QString SessionComparison::errorText() const
{
    return m_error->isHidden() ? QString() : m_error->text();
}

void SessionComparison::clear()
{
    m_title->setText(tr("Select two sessions and press Compare."));
    m_error->clear();
    m_error->hide();
    m_table->setRowCount(0);
}

void SessionComparison::compare(const QString& pathA, const QString& pathB)
{
    QStringList errors;
    auto load = [&errors](const QString& path, const QString& side) -> std::optional<SessionFigures> {
        try {
            const store::SessionReader reader(path.toStdString());
            return sessionFigures(reader);
        } catch (const std::exception& e) {
            errors << tr("%1: %2").arg(side, QString::fromUtf8(e.what()));
            return std::nullopt;
        }
    };
    const std::optional<SessionFigures> a = load(pathA, QStringLiteral("A"));
    const std::optional<SessionFigures> b = load(pathB, QStringLiteral("B"));
    m_title->setText(tr("A: %1\nB: %2").arg(a ? a->name + QStringLiteral("  (") + a->layout + QStringLiteral(")") : pathA,
                                             b ? b->name + QStringLiteral("  (") + b->layout + QStringLiteral(")") : pathB));
    m_error->setText(errors.join(QLatin1Char('\n')));
    m_error->setVisible(!errors.isEmpty());
    fill(a, b);
}

void SessionComparison::fill(const std::optional<SessionFigures>& a, const std::optional<SessionFigures>& b)
{
    struct Metric {
        QString name;
        Unit unit;
        std::optional<double> a, b;
    };
    auto of = [](const std::optional<SessionFigures>& f, auto get) -> std::optional<double> {
        return f ? get(*f) : std::nullopt;
    };
    std::vector<Metric> metrics = {
        {tr("Steps"), Unit::Count, of(a, [](const SessionFigures& f) { return std::optional<double>(f.steps); }),
         of(b, [](const SessionFigures& f) { return std::optional<double>(f.steps); })},
        {tr("Mean bubble (measured)"), Unit::Percent, of(a, [](const SessionFigures& f) { return f.meanBubble; }),
         of(b, [](const SessionFigures& f) { return f.meanBubble; })},
        {tr("Mean step time"), Unit::Milliseconds, of(a, [](const SessionFigures& f) { return f.meanStepSeconds; }),
         of(b, [](const SessionFigures& f) { return f.meanStepSeconds; })},
        {tr("Tokens/s"), Unit::Rate, of(a, [](const SessionFigures& f) { return f.tokensPerSecond; }),
         of(b, [](const SessionFigures& f) { return f.tokensPerSecond; })},
        {tr("Final loss"), Unit::Loss, of(a, [](const SessionFigures& f) { return f.finalLoss; }),
         of(b, [](const SessionFigures& f) { return f.finalLoss; })},
    };
    const std::size_t ranks = std::max(a ? a->peakMemoryBytes.size() : 0, b ? b->peakMemoryBytes.size() : 0);
    for (std::size_t r = 0; r < ranks; ++r) {
        auto peak = [r](const SessionFigures& f) -> std::optional<double> {
            if (r >= f.peakMemoryBytes.size() || !f.peakMemoryBytes[r])
                return std::nullopt;
            return double(*f.peakMemoryBytes[r]);
        };
        metrics.push_back({tr("Peak memory, rank %1").arg(r), Unit::Bytes, of(a, peak), of(b, peak)});
    }

    m_table->setRowCount(int(metrics.size()));
    for (int row = 0; row < int(metrics.size()); ++row) {
        const Metric& m = metrics[std::size_t(row)];
        m_table->setItem(row, 0, new QTableWidgetItem(m.name));
        m_table->setItem(row, 1, valueItem(m.a, m.unit));
        m_table->setItem(row, 2, valueItem(m.b, m.unit));
        std::optional<double> change;
        if (m.a && m.b && *m.a != 0 && std::isfinite(*m.a) && std::isfinite(*m.b))
            change = (*m.b - *m.a) / std::abs(*m.a);
        auto* diff = new QTableWidgetItem(change ? QString::asprintf("%+.1f %%", *change * 100) : QStringLiteral("—"));
        diff->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        if (change)
            diff->setData(Qt::UserRole, *change * 100);
        m_table->setItem(row, 3, diff);
    }
}

}  // namespace meshbench::app
