// The session comparison's charts on two real runs: the demo (1F1B) and the same job with zb-h1,
// each run for a few steps by `meshbench-engine run` on this machine's CPU. Every drawn point is
// checked against what the session stores, read here straight from the file: the step metrics,
// the memory samples, the Monitor's replay of the spans, and the plan of the spec the session ran.

#include "monitor/run_state.h"
#include "sessions/comparison_chart.h"
#include "sessions/session_comparison.h"

#include "live/session_spec.h"
#include "plan/planner.h"
#include "store/session_store.h"

#include <QComboBox>
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QTableWidget>
#include <QtTest>

#include <qcustomplot.h>

#include <array>
#include <map>
#include <optional>

using namespace meshbench;
using namespace meshbench::app;
using Figure = ComparisonChart::Figure;

namespace {

// A few steps for the checks; the README's picture (MESHBENCH_SCREENSHOT_DIR set) runs longer.
const int kSteps = qEnvironmentVariableIsSet("MESHBENCH_SCREENSHOT_DIR") ? 30 : 3;

QString engine() { return QCoreApplication::applicationDirPath() + QStringLiteral("/meshbench-engine"); }

// The demo's spec with `schedule`, written into `dir`.
QString demoSpec(const QTemporaryDir& dir, const QString& schedule)
{
    QFile demo(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"));
    if (!demo.open(QIODevice::ReadOnly))
        return {};
    QJsonObject spec = QJsonDocument::fromJson(demo.readAll()).object();
    QJsonObject parallel = spec.value(QStringLiteral("parallel")).toObject();
    parallel.insert(QStringLiteral("schedule"), schedule);
    spec.insert(QStringLiteral("parallel"), parallel);
    spec.insert(QStringLiteral("name"), QStringLiteral("demo ") + schedule);
    const QString path = dir.filePath(schedule + QStringLiteral(".json"));
    QFile out(path);
    if (!out.open(QIODevice::WriteOnly))
        return {};
    out.write(QJsonDocument(spec).toJson());
    return path;
}

// Runs the job for kSteps steps into `session`; the engine's output on failure.
QString run(const QString& spec, const QString& session)
{
    QProcess process;
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(engine(), {QStringLiteral("run"), spec, QStringLiteral("--steps"), QString::number(kSteps),
                             QStringLiteral("--session"), session});
    if (!process.waitForFinished(240'000)) {
        process.kill();
        process.waitForFinished();
        return QStringLiteral("the engine did not finish: ") + QString::fromUtf8(process.readAll());
    }
    if (process.exitStatus() != QProcess::NormalExit || process.exitCode() != 0)
        return QString::fromUtf8(process.readAll());
    return {};
}

struct Point {
    double key, value;
};

template <typename Plottable>
std::vector<Point> pointsOf(const Plottable* plottable)
{
    std::vector<Point> points;
    for (auto it = plottable->data()->constBegin(); it != plottable->data()->constEnd(); ++it)
        points.push_back({it->mainKey(), it->mainValue()});
    return points;
}

std::vector<Point> pointsOf(const QCPAbstractPlottable* plottable)
{
    if (const auto* graph = qobject_cast<const QCPGraph*>(plottable))
        return pointsOf(graph);
    if (const auto* bars = qobject_cast<const QCPBars*>(plottable))
        return pointsOf(bars);
    return {};
}

// What one session stores, read independently of the comparison's own loader.
struct Stored {
    std::map<std::int32_t, wire::StepMetricsRecord> steps;
    std::vector<double> peakGB;         // per rank
    std::vector<double> plannedPeakGB;  // per rank
    std::vector<double> stageBubble;    // per stage, mean over steps 2.. of the Monitor's replay
    std::vector<double> plannedStageBubble;
    double plannedStepMs = 0, plannedTokensPerSecond = 0, plannedBubble = 0;
};

Stored readStored(const QString& path)
{
    const store::SessionReader reader(path.toStdString());
    Stored s;
    for (const auto& m : reader.stepMetrics())
        s.steps.emplace(m.record.step, m.record);

    // Per rank: the largest, over steps, of the step's per-category peaks summed.
    std::map<std::pair<std::uint32_t, std::int32_t>, std::array<std::int64_t, wire::kMemoryCategories>> perStep;
    for (const auto& sample : reader.memorySamples()) {
        if (sample.rank == store::kEngineRank)
            continue;
        auto& byCategory = perStep.try_emplace({sample.rank, sample.record.step}).first->second;
        auto& slot = byCategory[std::size_t(sample.record.category)];
        slot = std::max({slot, sample.record.peakBytes, sample.record.currentBytes});
    }
    s.peakGB.assign(reader.header().ranks.size(), 0.0);
    for (const auto& [key, categories] : perStep) {
        std::int64_t sum = 0;
        for (std::int64_t bytes : categories)
            sum += bytes;
        s.peakGB[key.first] = std::max(s.peakGB[key.first], double(sum) / 1e9);
    }

    const plan::Plan plan = plan::makePlan(live::sessionSpecAsRun(reader));
    s.plannedStepMs = plan.step.total * 1e3;
    s.plannedTokensPerSecond = plan.tokensPerSecond;
    s.plannedBubble = plan.simulation.overallBubbleRatio;
    s.plannedStageBubble = plan.simulation.bubbleRatio;
    for (const store::RankInfo& rank : reader.header().ranks)
        s.plannedPeakGB.push_back(plan.stages[std::size_t(rank.pp)].memory.total() / 1e9);

    const SessionAggregates replayed = computeSessionAggregates(reader);
    s.stageBubble.assign(plan.stages.size(), 0.0);
    int counted = 0;
    for (const live::StepAggregate& step : replayed.steps) {
        if (step.step == 1)
            continue;
        ++counted;
        for (const live::StageBubble& stage : step.stages)
            s.stageBubble[std::size_t(stage.stage)] += stage.measured.value();
    }
    for (double& bubble : s.stageBubble)
        bubble /= counted;
    return s;
}

std::optional<double> storedValue(const wire::StepMetricsRecord& step, Figure figure)
{
    const double seconds = double(step.endNs - step.beginNs) * 1e-9;
    switch (figure) {
    case Figure::Loss:
        return step.loss;
    case Figure::StepTime:
        return seconds * 1e3;
    case Figure::TokensPerSecond:
        return double(step.tokens) / seconds;
    case Figure::Bubble:
        return step.bubbleRatio;
    default:
        return std::nullopt;
    }
}

// Compares and waits for the table and chart to show the sessions.
bool compareAndWait(SessionComparison& comparison, const QStringList& paths)
{
    QSignalSpy compared(&comparison, &SessionComparison::compared);
    comparison.compare(paths);
    return compared.wait(60'000);
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); }

}  // namespace

class TestSessionsCompare : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    QString m_demo, m_variant;
    std::array<Stored, 2> m_stored;

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_demo = m_dir.filePath(QStringLiteral("demo.meshbench"));
        m_variant = m_dir.filePath(QStringLiteral("zb-h1.meshbench"));
        const QString demoRun = run(demoSpec(m_dir, QStringLiteral("1f1b")), m_demo);
        QVERIFY2(demoRun.isEmpty(), qPrintable(demoRun));
        const QString variantRun = run(demoSpec(m_dir, QStringLiteral("zb-h1")), m_variant);
        QVERIFY2(variantRun.isEmpty(), qPrintable(variantRun));
        m_stored = {readStored(m_demo), readStored(m_variant)};
        for (const Stored& s : m_stored)
            QCOMPARE(int(s.steps.size()), kSteps);
    }

    void perStepCurvesAreTheStoredSteps()
    {
        SessionComparison comparison;
        comparison.resize(1400, 700);
        comparison.show();
        QVERIFY(compareAndWait(comparison, {m_demo, m_variant}));
        QVERIFY2(comparison.errorText().isEmpty(), qPrintable(comparison.errorText()));
        ComparisonChart& chart = *comparison.chart();
        QCOMPARE(int(chart.sessions().size()), 2);

        for (Figure figure : {Figure::Loss, Figure::StepTime, Figure::TokensPerSecond, Figure::Bubble}) {
            // Through the chart's own control, as a user switches figures.
            QComboBox& box = *chart.figureBox();
            box.setCurrentIndex(box.findData(int(figure)));
            QCOMPARE(chart.figure(), figure);
            for (int i = 0; i < 2; ++i) {
                const Stored& stored = m_stored[std::size_t(i)];
                const std::vector<Point> measured = pointsOf(chart.measured(i));
                QCOMPARE(int(measured.size()), kSteps);
                for (const Point& p : measured) {
                    const std::optional<double> expected = storedValue(stored.steps.at(std::int32_t(p.key)), figure);
                    QVERIFY2(close(p.value, *expected),
                             qPrintable(QStringLiteral("figure %1 session %2 step %3: %4 vs %5")
                                            .arg(int(figure))
                                            .arg(i)
                                            .arg(p.key)
                                            .arg(p.value)
                                            .arg(*expected)));
                }
                if (figure == Figure::Loss) {
                    QVERIFY(!chart.planned(i));  // a plan predicts no loss
                } else {
                    const double plannedValue = figure == Figure::StepTime          ? stored.plannedStepMs
                                                : figure == Figure::TokensPerSecond ? stored.plannedTokensPerSecond
                                                                                    : stored.plannedBubble;
                    const std::vector<Point> planned = pointsOf(chart.planned(i));
                    QCOMPARE(int(planned.size()), kSteps);
                    for (const Point& p : planned)
                        QVERIFY(close(p.value, plannedValue));
                }
            }
            QVERIFY(!chart.difference(0));
            const std::vector<Point> difference = pointsOf(chart.difference(1));
            QCOMPARE(int(difference.size()), kSteps);
            for (const Point& p : difference) {
                const auto step = std::int32_t(p.key);
                QVERIFY(close(p.value, *storedValue(m_stored[1].steps.at(step), figure) -
                                           *storedValue(m_stored[0].steps.at(step), figure)));
            }
        }
        // The two schedules plan different bubbles: the dashed lines are not one line drawn twice.
        QVERIFY(m_stored[1].plannedBubble < m_stored[0].plannedBubble);
    }

    void stageBubbleAndMemoryBarsAreTheStoredValues()
    {
        SessionComparison comparison;
        comparison.resize(1400, 700);
        comparison.show();
        QVERIFY(compareAndWait(comparison, {m_demo, m_variant}));
        ComparisonChart& chart = *comparison.chart();

        chart.setFigure(Figure::StageBubble);
        const std::size_t stages = 2;  // the demo's pp
        for (int i = 0; i < 2; ++i) {
            const Stored& stored = m_stored[std::size_t(i)];
            QCOMPARE(stored.stageBubble.size(), stages);
            QCOMPARE(stored.plannedStageBubble.size(), stages);
            const std::vector<Point> bars = pointsOf(chart.measured(i));
            QCOMPARE(bars.size(), stored.stageBubble.size());
            for (const Point& p : bars)
                QVERIFY(close(p.value, stored.stageBubble[std::size_t(p.key)]));
            const std::vector<Point> planned = pointsOf(chart.planned(i));
            QCOMPARE(planned.size(), stored.plannedStageBubble.size());
            for (const Point& p : planned)
                QVERIFY(close(p.value, stored.plannedStageBubble[std::size_t(p.key)]));
        }
        const std::vector<Point> stageDifference = pointsOf(chart.difference(1));
        QCOMPARE(stageDifference.size(), stages);
        for (const Point& p : stageDifference) {
            const auto stage = std::size_t(p.key);
            QVERIFY(close(p.value, m_stored[1].stageBubble[stage] - m_stored[0].stageBubble[stage]));
        }

        chart.setFigure(Figure::PeakMemory);
        for (int i = 0; i < 2; ++i) {
            const Stored& stored = m_stored[std::size_t(i)];
            const std::vector<Point> bars = pointsOf(chart.measured(i));
            QCOMPARE(bars.size(), std::size_t(8));
            for (const Point& p : bars)
                QVERIFY(close(p.value, stored.peakGB[std::size_t(p.key)]));
            const std::vector<Point> planned = pointsOf(chart.planned(i));
            QCOMPARE(planned.size(), std::size_t(8));
            for (const Point& p : planned)
                QVERIFY(close(p.value, stored.plannedPeakGB[std::size_t(p.key)]));
        }

        // The table beside the chart names the same sessions.
        QCOMPARE(comparison.table()->columnCount(), 4);

        QTemporaryDir out;
        QString error;
        QVERIFY2(chart.exportImage(out.filePath(QStringLiteral("comparison.png")), {}, &error), qPrintable(error));
        QVERIFY(QImage(out.filePath(QStringLiteral("comparison.png"))).width() > 0);
        if (const QString shots = qEnvironmentVariable("MESHBENCH_SCREENSHOT_DIR"); !shots.isEmpty()) {
            chart.setFigure(Figure::StepTime);
            QCoreApplication::processEvents();
            QVERIFY(comparison.grab().save(shots + QStringLiteral("/session-comparison.png")));
        }
    }

    void aThirdSessionGetsItsOwnColumnsAndCurves()
    {
        SessionComparison comparison;
        QVERIFY(compareAndWait(comparison, {m_demo, m_variant, m_demo}));
        QCOMPARE(comparison.table()->columnCount(), 1 + 3 + 2);
        QCOMPARE(comparison.table()->horizontalHeaderItem(5)->text(), QStringLiteral("C vs A"));
        QCOMPARE(int(comparison.chart()->sessions().size()), 3);
        // The same session as A: no difference at any step (the chart opens on the step time).
        const std::vector<Point> difference = pointsOf(comparison.chart()->difference(2));
        QCOMPARE(int(difference.size()), kSteps);
        for (const Point& p : difference)
            QCOMPARE(p.value, 0.0);
    }
};

QTEST_MAIN(TestSessionsCompare)
#include "tst_sessions_compare.moc"
