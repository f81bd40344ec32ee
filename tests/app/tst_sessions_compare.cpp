// The session comparison's charts on two real runs: the demo (1F1B) and the same job with zb-h1,
// each run for a few steps by `meshbench-engine run` on this machine's CPU. Every drawn point is
// checked against what the session stores, read here straight from the file: the step metrics,
// the memory samples, the Monitor's replay of the spans, and the plan of the spec the session ran.

#include "monitor/run_state.h"
#include "sessions/compared_session.h"
#include "sessions/comparison_chart.h"
#include "sessions/session_comparison.h"

#include "live/session_spec.h"
#include "plan/planner.h"
#include "store/session_store.h"
#include "wire/clock.h"

#include <QComboBox>
#include <QFile>
#include <QImage>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTableWidget>
#include <QtTest>

#include <qcustomplot.h>

#include <algorithm>
#include <array>
#include <limits>
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
    QString path = dir.filePath(schedule + QStringLiteral(".json"));
    QFile out(path);
    if (!out.open(QIODevice::WriteOnly))
        return {};
    out.write(QJsonDocument(spec).toJson());
    return path;
}

struct EngineRun {
    bool ok = false;
    QString output;  // stdout and stderr
};

// Runs `meshbench-engine ARGS`.
EngineRun engineRun(const QStringList& arguments)
{
    QProcess process;
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(engine(), arguments);
    if (!process.waitForFinished(240'000)) {
        process.kill();
        process.waitForFinished();
        return {false, QStringLiteral("the engine did not finish: ") + QString::fromUtf8(process.readAll())};
    }
    const bool ok = process.exitStatus() == QProcess::NormalExit && process.exitCode() == 0;
    return {ok, QString::fromUtf8(process.readAll())};
}

// Runs the job for kSteps steps into `session`.
EngineRun run(const QString& spec, const QString& session)
{
    return engineRun({QStringLiteral("run"), spec, QStringLiteral("--steps"), QString::number(kSteps),
                      QStringLiteral("--session"), session});
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
    std::vector<double> peakGB;                 // per rank
    std::vector<double> plannedPeakGB;          // per rank
    std::map<std::int32_t, double> stepBubble;  // per step, the Monitor's replay
    std::vector<double> stageBubble;            // per stage, mean over steps 2.. of the Monitor's replay
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
        s.stepBubble.emplace(step.step, step.bubble.value());
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

// A figure of a stored step as the comparison should draw it; the bubble is the Monitor's.
std::optional<double> storedValue(const Stored& stored, std::int32_t stepNumber, Figure figure)
{
    const wire::StepMetricsRecord& step = stored.steps.at(stepNumber);
    const double seconds = double(step.endNs - step.beginNs) * 1e-9;
    switch (figure) {
    case Figure::Loss:
        return step.loss;
    case Figure::StepTime:
        return seconds * 1e3;
    case Figure::TokensPerSecond:
        return double(step.tokens) / seconds;
    case Figure::Bubble:
        return stored.stepBubble.at(stepNumber);
    default:
        return std::nullopt;
    }
}

// The bubble of each step worked here from the stored spans, independently of plan/measured_bubble:
// one window over every rank's F, B, W, send and receive spans, each rank busy for the union of its
// F, B and W spans; bubble = idle summed over ranks / (ranks x window).
struct ReferenceStep {
    std::int64_t beginNs = std::numeric_limits<std::int64_t>::max();
    std::int64_t endNs = std::numeric_limits<std::int64_t>::min();
    std::map<std::uint32_t, std::vector<std::pair<std::int64_t, std::int64_t>>> compute;  // per rank

    std::int64_t busyNs(std::uint32_t rank) const
    {
        std::vector<std::pair<std::int64_t, std::int64_t>> spans = compute.at(rank);
        std::sort(spans.begin(), spans.end());
        std::int64_t busy = 0, until = std::numeric_limits<std::int64_t>::min();
        for (const auto& [begin, end] : spans) {
            busy += std::max<std::int64_t>(0, end - std::max(begin, until));
            until = std::max(until, end);
        }
        return busy;
    }
    double window() const { return double(endNs - beginNs); }
    double bubble() const
    {
        double busy = 0;
        for (const auto& entry : compute)
            busy += double(busyNs(entry.first));
        return 1.0 - busy / (double(compute.size()) * window());
    }
};

std::map<std::int32_t, ReferenceStep> referenceSteps(const store::SessionReader& reader)
{
    using Kind = wire::SpanKind;
    std::map<std::int32_t, ReferenceStep> steps;
    reader.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                 [&steps](const store::StoredSpan& stored) {
                     const wire::SpanRecord& span = stored.span;
                     const bool compute =
                         span.kind == Kind::Forward || span.kind == Kind::Backward || span.kind == Kind::WeightGrad;
                     const bool transfer = span.kind == Kind::SendActivation || span.kind == Kind::RecvActivation ||
                                           span.kind == Kind::SendGradient || span.kind == Kind::RecvGradient;
                     if (!compute && !transfer)
                         return;
                     ReferenceStep& step = steps[span.step];
                     step.beginNs = std::min(step.beginNs, span.beginNs);
                     step.endNs = std::max(step.endNs, span.endNs);
                     auto& rankSpans = step.compute[stored.rank];
                     if (compute)
                         rankSpans.emplace_back(span.beginNs, span.endNs);
                 });
    return steps;
}

// How far the engine can have moved a rank's times onto its own clock within [t0, t1] (its clock),
// and how much it can have scaled their lengths: it used one of the states the rank's samples built
// in turn (wire::RankClock), or none before the first. RankClock evaluates at the rank's time, which
// is the engine's plus the move; its drift, held to 500 ppm, changes the move by at most that share.
struct ClockMove {
    double shiftNs = 0;
    double drift = 0;
};

ClockMove clockMove(const std::vector<wire::ClockOffsetRecord>& samples, std::int64_t t0, std::int64_t t1)
{
    constexpr double kMaxDrift = 500e-6;
    ClockMove move;
    wire::RankClock clock;
    for (const wire::ClockOffsetRecord& sample : samples) {
        clock.add(sample.timeNs + sample.offsetNs, sample.offsetNs);
        for (std::int64_t t : {t0, t1})
            move.shiftNs = std::max(move.shiftNs, std::abs(double(clock.offsetAt(t))) / (1 - kMaxDrift));
        move.drift = std::max(move.drift, std::abs(clock.driftNsPerSecond()) * 1e-9);
    }
    return move;
}

// The bubble the agents computed for a step on their own clocks lies in this range around the
// engine's: the window's ends move by at most the largest move, each rank's busy time by its
// drift's share plus, for spans moved by different clock states, twice the move per span.
std::pair<double, double> agentBubbleRange(const ReferenceStep& step,
                                           const std::map<std::uint32_t, std::vector<wire::ClockOffsetRecord>>& offsets)
{
    double busy = 0, busySlack = 0, windowSlack = 0;
    for (const auto& [rank, spans] : step.compute) {
        const auto samples = offsets.find(rank);
        const ClockMove move =
            samples == offsets.end() ? ClockMove{} : clockMove(samples->second, step.beginNs, step.endNs);
        const double rankBusy = double(step.busyNs(rank));
        busy += rankBusy;
        busySlack += rankBusy * move.drift / (1 - move.drift) + 2 * move.shiftNs * double(spans.size());
        windowSlack = std::max(windowSlack, 2 * move.shiftNs);
    }
    const double ranks = double(step.compute.size());
    return {1.0 - (busy + busySlack) / (ranks * (step.window() - windowSlack)),
            1.0 - (busy - busySlack) / (ranks * (step.window() + windowSlack))};
}

// The last number `line` captures in each line of `text` it matches, keyed by the first one (a step)
// when it captures two, else by 0.
std::map<int, double> numbersAfter(const QString& text, const QRegularExpression& line)
{
    std::map<int, double> numbers;
    for (const QString& row : text.split(QLatin1Char('\n'))) {
        const QRegularExpressionMatch match = line.match(row);
        if (match.hasMatch())
            numbers[line.captureCount() > 1 ? match.captured(1).toInt() : 0] =
                match.captured(line.captureCount()).toDouble();
    }
    return numbers;
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
    std::array<QString, 2> m_cliOutput;  // of each session's `meshbench-engine run`

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        m_demo = m_dir.filePath(QStringLiteral("demo.meshbench"));
        m_variant = m_dir.filePath(QStringLiteral("zb-h1.meshbench"));
        const EngineRun demoRun = run(demoSpec(m_dir, QStringLiteral("1f1b")), m_demo);
        QVERIFY2(demoRun.ok, qPrintable(demoRun.output));
        const EngineRun variantRun = run(demoSpec(m_dir, QStringLiteral("zb-h1")), m_variant);
        QVERIFY2(variantRun.ok, qPrintable(variantRun.output));
        m_cliOutput = {demoRun.output, variantRun.output};
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
                    const std::optional<double> expected = storedValue(stored, std::int32_t(p.key), figure);
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
                QVERIFY(
                    close(p.value, *storedValue(m_stored[1], step, figure) - *storedValue(m_stored[0], step, figure)));
            }
        }
        // The two schedules plan different bubbles: the dashed lines are not one line drawn twice.
        QVERIFY(m_stored[1].plannedBubble < m_stored[0].plannedBubble);
    }

    // The bubble is one figure, plan::measuredBubble over every rank's spans: the Monitor's replay
    // equals the definition worked from the stored spans; Compare's curve and mean and the CLI's mean
    // (to its printed digit) are the Monitor's; the agents' own figure, their step line and
    // steps.csv, is the same definition on the ranks' clocks, within what the engine's clock
    // alignment (the stored offsets) can move it.
    void theBubbleIsOneFigureInEveryPlace()
    {
        for (int i = 0; i < 2; ++i) {
            const QString path = i == 0 ? m_demo : m_variant;
            const store::SessionReader reader(path.toStdString());
            const std::map<std::int32_t, ReferenceStep> reference = referenceSteps(reader);
            QCOMPARE(int(reference.size()), kSteps);
            std::map<std::uint32_t, std::vector<wire::ClockOffsetRecord>> offsets;
            for (const auto& [rank, offset] : reader.clockOffsets())
                offsets[rank].push_back(offset);

            // The Monitor.
            const SessionAggregates monitor = computeSessionAggregates(reader);
            QCOMPARE(int(monitor.steps.size()), kSteps);
            std::map<std::int32_t, double> monitorBubble;
            double steadySum = 0;
            int steady = 0;
            for (const live::StepAggregate& step : monitor.steps) {
                QVERIFY(step.bubble);
                QCOMPARE(step.ranksReporting, int(reader.header().ranks.size()));
                QVERIFY2(close(*step.bubble, reference.at(step.step).bubble()),
                         qPrintable(QStringLiteral("step %1: Monitor %2, worked from the spans %3")
                                        .arg(step.step)
                                        .arg(*step.bubble)
                                        .arg(reference.at(step.step).bubble())));
                monitorBubble[step.step] = *step.bubble;
                if (step.step > 1) {
                    steadySum += *step.bubble;
                    ++steady;
                }
            }
            const double steadyMean = steadySum / steady;

            // Sessions > Compare.
            const ComparedSession compared = loadComparedSession(path);
            QCOMPARE(compared.stepBubble.size(), monitorBubble.size());
            for (const auto& [step, bubble] : monitorBubble)
                QVERIFY(close(compared.stepBubble.at(step), bubble));
            QVERIFY(compared.meanBubble);
            QVERIFY(close(*compared.meanBubble, steadyMean));

            // The CLI's summary prints the mean in percent to one decimal.
            const std::map<int, double> cli = numbersAfter(
                m_cliOutput[std::size_t(i)], QRegularExpression(QStringLiteral("bubble ([0-9.]+)% measured")));
            QCOMPARE(int(cli.size()), 1);
            QVERIFY2(std::abs(cli.at(0) / 100 - steadyMean) <= 0.0005 + 1e-12,
                     qPrintable(QStringLiteral("CLI %1%, Monitor %2").arg(cli.at(0)).arg(100 * steadyMean)));

            // steps.csv holds the agents' step metrics as stored, each double exactly.
            QTemporaryDir csvDir;
            const EngineRun exported =
                engineRun({QStringLiteral("export"), path, QStringLiteral("--csv"), csvDir.path()});
            QVERIFY2(exported.ok, qPrintable(exported.output));
            QFile csv(csvDir.filePath(QStringLiteral("steps.csv")));
            QVERIFY(csv.open(QIODevice::ReadOnly));
            const QStringList rows = QString::fromUtf8(csv.readAll()).split(QStringLiteral("\r\n"), Qt::SkipEmptyParts);
            const QStringList header = rows.front().split(QLatin1Char(','));
            const auto stepColumn = header.indexOf(QStringLiteral("step"));
            const auto bubbleColumn = header.indexOf(QStringLiteral("bubble_ratio"));
            QVERIFY(stepColumn >= 0 && bubbleColumn >= 0);
            std::map<std::int32_t, std::vector<double>> csvBubble;
            for (const QString& row : rows.mid(1)) {
                const QStringList fields = row.split(QLatin1Char(','));
                csvBubble[fields[stepColumn].toInt()].push_back(fields[bubbleColumn].toDouble());
            }
            QCOMPARE(int(csvBubble.size()), kSteps);

            // The agents' step line (rank 0's stdout, kept in the session's log).
            QString agentOutput;
            for (const auto& log : reader.logs())
                agentOutput += QString::fromStdString(log.record.text) + QLatin1Char('\n');
            const std::map<int, double> agentLine = numbersAfter(
                agentOutput, QRegularExpression(QStringLiteral("^step +([0-9]+) .* bubble ([0-9.]+)% \\(plan")));
            QCOMPARE(int(agentLine.size()), kSteps);

            for (const auto& [step, bubble] : monitorBubble) {
                const wire::StepMetricsRecord& stored = m_stored[std::size_t(i)].steps.at(step);
                QVERIFY(!csvBubble.at(step).empty());
                for (double value : csvBubble.at(step))
                    QCOMPARE(value, stored.bubbleRatio);
                QVERIFY2(std::abs(agentLine.at(step) / 100 - stored.bubbleRatio) <= 0.0005 + 1e-12,
                         qPrintable(QStringLiteral("step %1: the agent printed %2%, stored %3")
                                        .arg(step)
                                        .arg(agentLine.at(step))
                                        .arg(stored.bubbleRatio)));
                const auto [low, high] = agentBubbleRange(reference.at(step), offsets);
                QVERIFY2(stored.bubbleRatio >= low && stored.bubbleRatio <= high,
                         qPrintable(QStringLiteral("step %1: the agents' %2 outside [%3, %4] around the engine's %5")
                                        .arg(step)
                                        .arg(stored.bubbleRatio, 0, 'g', 9)
                                        .arg(low, 0, 'g', 9)
                                        .arg(high, 0, 'g', 9)
                                        .arg(bubble, 0, 'g', 9)));
            }
        }
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
