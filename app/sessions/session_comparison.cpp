#include "sessions/session_comparison.h"

#include "plan/units.h"
#include "sessions/comparison_chart.h"

#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

namespace meshbench::app {

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
    : QWidget(parent), m_title(new QLabel(this)), m_error(new QLabel(this)), m_table(new QTableWidget(0, 4, this)),
      m_chart(new ComparisonChart(this))
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
    m_table->verticalHeader()->hide();
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setStretchLastSection(true);
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(m_table);
    split->addWidget(m_chart);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    split->setChildrenCollapsible(false);
    layout->addWidget(m_title);
    layout->addWidget(m_error);
    layout->addWidget(split, 1);
    clear();
}

QString SessionComparison::errorText() const { return m_error->isHidden() ? QString() : m_error->text(); }

SessionComparison::~SessionComparison()
{
    // A reader holds only its own copies, but reports to this widget: it ends first, unreported.
    for (QThread* reader : m_readers) {
        reader->wait();
        delete reader;
    }
}

void SessionComparison::clear()
{
    ++m_generation;
    m_title->setText(tr("Select two or more sessions and press Compare."));
    m_error->clear();
    m_error->hide();
    m_table->setRowCount(0);
    m_table->setColumnCount(4);
    m_table->setHorizontalHeaderLabels({tr("Metric"), tr("A"), tr("B"), tr("B vs A")});
    m_chart->setSessions({});
}

struct SessionComparison::Loaded {
    QStringList titles, errors;
    std::vector<std::optional<ComparedSession>> sessions;
};

void SessionComparison::compare(const QStringList& paths)
{
    const int generation = ++m_generation;
    m_title->setText(tr("Reading %n session(s)…", nullptr, int(paths.size())));
    auto loaded = std::make_shared<Loaded>();
    QThread* reader = QThread::create([paths, loaded] {
        for (int i = 0; i < paths.size(); ++i) {
            const QString side = sessionLetter(i);
            try {
                ComparedSession session = loadComparedSession(paths[i]);
                loaded->titles << tr("%1: %2  (%3)").arg(side, session.figures.name, session.figures.layout) +
                                      (session.planProblem.isEmpty() ? QString()
                                                                     : tr("; no plan: %1").arg(session.planProblem));
                loaded->sessions.push_back(std::move(session));
            } catch (const std::exception& e) {
                loaded->errors << tr("%1: %2").arg(side, QString::fromUtf8(e.what()));
                loaded->titles << tr("%1: %2").arg(side, paths[i]);
                loaded->sessions.push_back(std::nullopt);
            }
        }
    });
    m_readers.push_back(reader);
    connect(reader, &QThread::finished, this, [this, reader, loaded, generation] {
        m_readers.erase(std::find(m_readers.begin(), m_readers.end(), reader));
        reader->deleteLater();
        if (generation != m_generation)
            return;
        display(*loaded);
        emit compared();
    });
    reader->start();
}

void SessionComparison::display(const Loaded& loaded)
{
    m_title->setText(loaded.titles.join(QLatin1Char('\n')));
    m_error->setText(loaded.errors.join(QLatin1Char('\n')));
    m_error->setVisible(!loaded.errors.isEmpty());
    fill(loaded.sessions);
    std::vector<ComparedSession> readable;
    for (const std::optional<ComparedSession>& session : loaded.sessions)
        if (session)
            readable.push_back(*session);
    m_chart->setSessions(std::move(readable));
}

void SessionComparison::fill(const std::vector<std::optional<ComparedSession>>& sessions)
{
    using Getter = std::function<std::optional<double>(const ComparedSession&)>;
    struct Metric {
        QString name;
        Unit unit;
        Getter get;
    };
    std::vector<Metric> metrics = {
        {tr("Steps"), Unit::Count,
         [](const ComparedSession& c) { return std::optional<double>(c.figures.steps.size()); }},
        {tr("Mean bubble (measured)"), Unit::Percent, [](const ComparedSession& c) { return c.meanBubble; }},
        {tr("Mean step time"), Unit::Milliseconds, [](const ComparedSession& c) { return c.figures.meanStepSeconds; }},
        {tr("Tokens/s"), Unit::Rate, [](const ComparedSession& c) { return c.figures.tokensPerSecond; }},
        {tr("Final loss"), Unit::Loss, [](const ComparedSession& c) { return c.figures.finalLoss; }},
    };
    std::size_t ranks = 0;
    for (const std::optional<ComparedSession>& session : sessions)
        if (session)
            ranks = std::max(ranks, session->figures.peakMemoryBytes.size());
    for (std::size_t r = 0; r < ranks; ++r)
        metrics.push_back(
            {tr("Peak memory, rank %1").arg(r), Unit::Bytes, [r](const ComparedSession& c) -> std::optional<double> {
                 const std::vector<std::optional<std::int64_t>>& peaks = c.figures.peakMemoryBytes;
                 if (r >= peaks.size() || !peaks[r])
                     return std::nullopt;
                 return double(*peaks[r]);
             }});

    const int n = int(sessions.size());
    QStringList headers{tr("Metric")};
    for (int i = 0; i < n; ++i)
        headers << sessionLetter(i);
    for (int i = 1; i < n; ++i)
        headers << tr("%1 vs A").arg(headers[i + 1]);
    m_table->setColumnCount(int(headers.size()));
    m_table->setHorizontalHeaderLabels(headers);
    m_table->setRowCount(int(metrics.size()));
    for (int row = 0; row < int(metrics.size()); ++row) {
        const Metric& m = metrics[std::size_t(row)];
        m_table->setItem(row, 0, new QTableWidgetItem(m.name));
        std::vector<std::optional<double>> values;
        values.reserve(sessions.size());
        for (const std::optional<ComparedSession>& session : sessions)
            values.push_back(session ? m.get(*session) : std::nullopt);
        for (int i = 0; i < n; ++i)
            m_table->setItem(row, 1 + i, valueItem(values[std::size_t(i)], m.unit));
        for (int i = 1; i < n; ++i) {
            const std::optional<double>& a = values.front();
            const std::optional<double>& b = values[std::size_t(i)];
            std::optional<double> change;
            if (a && b && *a != 0 && std::isfinite(*a) && std::isfinite(*b))
                change = (*b - *a) / std::abs(*a);
            auto* diff =
                new QTableWidgetItem(change ? QString::asprintf("%+.1f %%", *change * 100) : QStringLiteral("—"));
            diff->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
            if (change)
                diff->setData(Qt::UserRole, *change * 100);
            m_table->setItem(row, n + i, diff);
        }
    }
}

}  // namespace meshbench::app
