// Issue 29's acceptance on a real PyTorch program: tests/python/pipeline_program.py (Debian's
// python3-torch on the CPU, gloo) trains a small MoE model as 2 pipeline stages x 2 data-parallel
// replicas under `meshbench-engine run`, its job spec's launch.command in meshbench-agent's place, and
// reports through the Python client (agent/python/meshbench) while torch.profiler traces it.
//   * Live: the session holds every rank's ops; the bubble the engine measured per stage and overall is
//     the one this test recomputes from the stored spans by the planner's definition
//     (plan/measured_bubble.h); the expert loads and the loss are the ones the program logged itself;
//     no record is lost.
//   * A rank killed mid-run (SIGKILL, no last word): the run fails (exit 3) naming that rank, not the
//     peers whose send/recv broke with it, and no process of the job is left.
//   * The same run's torch.profiler traces, imported: every op's span is the live span of the same
//     (rank, step, stage, micro-batch, kind).
//   * Handed over live (meshbench.profiler_handler): each rank's trace is imported into the running
//     session, its steps and clock placed on the rank's live ops; the two paths the program hands over
//     that the engine must refuse (relative, absent) are refused in words, and the run goes on.
// Skipped where /usr/bin/python3 has no torch or zmq (python3-torch, python3-zmq).

#include "live/session_replay.h"
#include "store/session_store.h"

#include "common/process_run.h"
#include "common/session_checks.h"

#include <QtTest>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

using namespace meshbench;
using nlohmann::json;

namespace {

const QString kEngine = QStringLiteral(MESHBENCH_ENGINE);
const QString kPython = QStringLiteral(MESHBENCH_PYTHON3);
const std::string kSource = MESHBENCH_SOURCE_DIR;

// The program's layout and length, which the job spec gives it.
constexpr int kDp = 2;
constexpr int kPp = 2;
constexpr int kWorld = kDp * kPp;
constexpr int kMicrobatches = 4;
constexpr int kMicroBatchSize = 2;
constexpr int kSeq = 8;
constexpr int kSteps = 5;
constexpr int kExperts = 4;
// The profiler's schedule in the program: wait 0, warm-up 1, then every step but the last active,
// once. The warm-up step's ops are not recorded; the trace is handed over while the last step runs.
constexpr int kFirstTracedStep = 2;
constexpr int kLastTracedStep = kSteps - 1;
constexpr int kTracedSteps = kLastTracedStep - kFirstTracedStep + 1;

std::string readFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// An op as both sides name it.
using OpKey = std::tuple<int, int, int, int, int>;  // rank, step, stage, micro-batch, kind
struct Span {
    std::int64_t begin = 0;
    std::int64_t end = 0;
};

bool isPipelineKind(int kind) { return kind <= int(wire::SpanKind::RecvGradient); }
bool isBusyKind(int kind)
{
    return kind == int(wire::SpanKind::Forward) || kind == int(wire::SpanKind::Backward) ||
           kind == int(wire::SpanKind::WeightGrad);
}

// Rows of a query on a session file (read-only), every column both as an int64 and as a double.
struct Rows {
    std::vector<std::vector<std::int64_t>> ints;
    std::vector<std::vector<double>> reals;
};

Rows query(const QString& session, const std::string& sql)
{
    sqlite3* db = nullptr;
    Rows rows;
    if (sqlite3_open_v2(session.toStdString().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
        qFatal("cannot open %s", qPrintable(session));
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK)
        qFatal("%s: %s", sql.c_str(), sqlite3_errmsg(db));
    while (sqlite3_step(statement) == SQLITE_ROW) {
        const int columns = sqlite3_column_count(statement);
        std::vector<std::int64_t> ints(std::size_t(columns), 0);
        std::vector<double> reals(std::size_t(columns), 0);
        for (int c = 0; c < columns; ++c) {
            ints[std::size_t(c)] = sqlite3_column_int64(statement, c);
            reals[std::size_t(c)] = sqlite3_column_double(statement, c);
        }
        rows.ints.push_back(std::move(ints));
        rows.reals.push_back(std::move(reals));
    }
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return rows;
}

// Every span of a session by what names it (a name seen twice fails the test).
std::map<OpKey, Span> spansOf(const QString& session, const std::string& where = "1")
{
    std::map<OpKey, Span> spans;
    const Rows rows =
        query(session, "SELECT rank, step, stage, microbatch, kind, begin_ns, end_ns FROM spans WHERE " + where);
    for (const auto& r : rows.ints) {
        const OpKey key{int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])};
        if (!spans.emplace(key, Span{r[5], r[6]}).second)
            qFatal("span (rank %d, step %d, stage %d, micro-batch %d, kind %d) is stored twice", int(r[0]), int(r[1]),
                   int(r[2]), int(r[3]), int(r[4]));
    }
    return spans;
}

// The planner's measured bubble (plan/measured_bubble.h), written out again here from its
// definition: one window per step over every rank's pipeline spans; a rank's busy time is the union
// of its F, B and W spans; a stage's bubble is the mean over its ranks of idle / window; the overall
// bubble is the mean over every rank.
struct Bubble {
    std::vector<double> stages;
    double overall = 0;
};

std::int64_t unionLength(std::vector<Span> spans)
{
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
    std::int64_t length = 0;
    std::int64_t coveredTo = INT64_MIN;
    for (const Span& s : spans) {
        const std::int64_t from = std::max(s.begin, coveredTo);
        if (s.end > from)
            length += s.end - from;
        coveredTo = std::max(coveredTo, s.end);
    }
    return length;
}

std::map<int, Bubble> recomputedBubbles(const std::map<OpKey, Span>& spans, const std::map<int, int>& stageOf)
{
    struct RankStep {
        std::int64_t begin = INT64_MAX;
        std::int64_t end = INT64_MIN;
        std::vector<Span> busy;
    };
    std::map<int, std::map<int, RankStep>> steps;  // step -> rank -> phase
    for (const auto& [key, span] : spans) {
        const auto [rank, step, stage, microbatch, kind] = key;
        if (!isPipelineKind(kind))
            continue;
        RankStep& r = steps[step][rank];
        r.begin = std::min(r.begin, span.begin);
        r.end = std::max(r.end, span.end);
        if (isBusyKind(kind))
            r.busy.push_back(span);
    }
    std::map<int, Bubble> bubbles;
    for (const auto& [step, ranks] : steps) {
        std::int64_t begin = INT64_MAX, end = INT64_MIN;
        for (const auto& [rank, r] : ranks) {
            begin = std::min(begin, r.begin);
            end = std::max(end, r.end);
        }
        const double window = double(end - begin);
        std::vector<double> idleSum(kPp, 0.0);
        std::vector<int> stageRanks(kPp, 0);
        double overall = 0;
        for (const auto& [rank, r] : ranks) {
            const double idle = (window - double(unionLength(r.busy))) / window;
            idleSum[std::size_t(stageOf.at(rank))] += idle;
            ++stageRanks[std::size_t(stageOf.at(rank))];
            overall += idle;
        }
        Bubble& b = bubbles[step];
        for (int s = 0; s < kPp; ++s)
            b.stages.push_back(idleSum[std::size_t(s)] / stageRanks[std::size_t(s)]);
        b.overall = overall / double(ranks.size());
    }
    return bubbles;
}

// The folder of one run of the program: its job spec, the program's logs and traces.
struct ProgramRun {
    QString dir;
    QString job() const { return dir + "/job.json"; }
    QString session() const { return dir + "/live.meshbench"; }
    QString logs() const { return dir + "/logs"; }
    QString traces() const { return dir + "/traces"; }
    // The trace meshbench.profiler_handler wrote for `rank` (rankR.stepN.1.pt.trace.json), or empty.
    QString trace(int rank) const
    {
        const QStringList found =
            QDir(traces()).entryList({QString("rank%1.step*.pt.trace.json").arg(rank)}, QDir::Files);
        return found.size() == 1 ? QDir(traces()).absoluteFilePath(found.front()) : QString();
    }
    json log(int rank) const
    {
        return json::parse(readFile((logs() + QString("/rank-%1.json").arg(rank)).toStdString()));
    }
};

// The job spec that describes what the program runs (it reads its layout from it), with
// launch.command running it; `extra` are more arguments for it.
ProgramRun prepare(const QString& dir, const std::vector<std::string>& extra = {})
{
    ProgramRun run{dir};
    QDir().mkpath(dir);
    json command = json::array({kPython.toStdString(), kSource + "/tests/python/pipeline_program.py", "--log-dir",
                                run.logs().toStdString(), "--trace-dir", run.traces().toStdString(), "--store",
                                (dir + "/torch-store").toStdString()});
    for (const std::string& argument : extra)
        command.push_back(argument);
    const json spec = {
        {"name", "pytorch pipeline, pp 2 x dp 2"},
        {"model",
         {{"layers", kPp},
          {"hidden", 16},
          {"heads", 2},
          {"ffn_hidden", 32},
          {"vocab", 32},
          {"seq_len", kSeq},
          {"moe",
           {{"experts", kExperts},
            {"top_k", 1},
            {"moe_ffn_hidden", 32},
            {"every_n_layers", 1},
            {"capacity_factor", 1.25}}}}},
        {"parallel",
         {{"dp", kDp},
          {"pp", kPp},
          {"tp", 1},
          {"ep", 1},
          {"schedule", "1f1b"},
          {"microbatches", kMicrobatches},
          {"micro_batch_size", kMicroBatchSize}}},
        {"cluster", {{"nodes", 1}, {"devices_per_node", kWorld}, {"device", "cpu"}}},
        {"train", {{"steps", kSteps}, {"lr", 0.1}, {"seed", 7}}},
        {"backend", "cpu"},
        {"launch",
         {{"command", command},
          {"env",
           {{"PYTHONPATH", kSource + "/agent/python"}, {"OMP_NUM_THREADS", "1"}, {"GLOO_SOCKET_IFNAME", "lo"}}}}},
    };
    std::ofstream(run.job().toStdString()) << spec.dump(2);
    return run;
}

// Processes whose command line mentions `text` (the run's own folder: the job's processes alone).
std::vector<int> processesMentioning(const std::string& text)
{
    std::vector<int> found;
    for (const QString& entry : QDir("/proc").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        bool number = false;
        const int pid = entry.toInt(&number);
        if (!number || pid == getpid())
            continue;
        std::string commandLine = readFile("/proc/" + entry.toStdString() + "/cmdline");
        std::replace(commandLine.begin(), commandLine.end(), '\0', ' ');
        const std::string stat = readFile("/proc/" + entry.toStdString() + "/stat");
        const std::size_t close = stat.rfind(')');
        const bool zombie = close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
        if (!zombie && commandLine.find(text) != std::string::npos)
            found.push_back(pid);
    }
    return found;
}

}  // namespace

class TestPytorchLive : public QObject {
    Q_OBJECT

    QTemporaryDir m_dir;
    std::optional<ProgramRun> m_live;
    QString m_liveOutput;

    // The first case's run, which the import case reads too (made once, by whichever asks first);
    // false when the engine failed it (m_liveOutput says how).
    bool liveRun()
    {
        if (!m_live && m_liveOutput.isEmpty()) {
            const ProgramRun run = prepare(m_dir.filePath("live"));
            const ProcessRun engine = runProcess(kEngine, {"run", run.job(), "--session", run.session()});
            m_liveOutput = engine.out + engine.err;
            if (engine.exitCode == 0)
                m_live = run;
            else
                m_liveOutput = QString("meshbench-engine run exited with %1:\n").arg(engine.exitCode) + m_liveOutput;
        }
        return m_live.has_value();
    }

private slots:
    void initTestCase()
    {
        QVERIFY(m_dir.isValid());
        const ProcessRun probe = runProcess(kPython, {"-c", "import torch, torch.distributed, zmq"});
        if (probe.exitCode != 0)
            QSKIP(qPrintable(kPython + " has no torch or zmq (python3-torch, python3-zmq): " + probe.err));
    }

    void aPytorchPipelineReportsLive()
    {
        QVERIFY2(liveRun(), qPrintable(m_liveOutput));
        const ProgramRun& run = *m_live;
        const QString session = run.session();
        QCOMPARE(testing::integrityCheck(session.toStdString()), std::string("ok"));
        store::SessionReader reader(session.toStdString());
        QCOMPARE(reader.outcome().outcome, store::Outcome::Completed);
        QCOMPARE(reader.outcome().failedRank, -1);

        // The engine's mesh: tp innermost, dp next, pp outermost, as the program lays its ranks out.
        std::map<int, int> stageOf;
        for (const auto& r : query(session, "SELECT rank, dp, pp, tp FROM ranks ORDER BY rank").ints) {
            QCOMPARE(r[1], r[0] % kDp);
            QCOMPARE(r[2], r[0] / kDp);
            QCOMPARE(r[3], std::int64_t(0));
            stageOf[int(r[0])] = int(r[2]);
        }
        QCOMPARE(int(stageOf.size()), kWorld);

        // Every rank's ops: an F and a B for each step and micro-batch, on the rank's stage.
        const std::map<OpKey, Span> spans = spansOf(session);
        for (int rank = 0; rank < kWorld; ++rank) {
            int ops = 0;
            for (const auto& [key, span] : spans) {
                const auto [r, step, stage, microbatch, kind] = key;
                if (r != rank)
                    continue;
                QCOMPARE(stage, stageOf[rank]);
                QVERIFY2(span.end >= span.begin, "a span ends before it begins");
                if (kind == int(wire::SpanKind::Forward) || kind == int(wire::SpanKind::Backward)) {
                    QVERIFY(step >= 1 && step <= kSteps && microbatch >= 0 && microbatch < kMicrobatches);
                    ++ops;
                }
            }
            QCOMPARE(ops, kSteps * kMicrobatches * 2);
        }

        // The measured bubble: what the engine printed for each step (overall, to its 0.1 %) and what
        // its aggregator makes of the stored session (per stage, as the Monitor shows it) are this
        // test's own figures from the stored spans.
        const std::map<int, Bubble> bubbles = recomputedBubbles(spans, stageOf);
        QCOMPARE(int(bubbles.size()), kSteps);
        std::map<int, double> printed;
        const QRegularExpression stepLine(QStringLiteral("^step\\s+(\\d+)/\\d+ .* bubble ([0-9.]+)% \\(plan"),
                                          QRegularExpression::MultilineOption);
        for (auto it = stepLine.globalMatch(m_liveOutput); it.hasNext();) {
            const QRegularExpressionMatch m = it.next();
            printed[m.captured(1).toInt()] = m.captured(2).toDouble() / 100;
        }
        QCOMPARE(int(printed.size()), kSteps);
        std::map<int, live::StepAggregate> aggregated;
        const live::SessionReplay replay(reader, session.toStdString());
        live::SessionReplay::Handlers handlers;
        handlers.steps = [&aggregated](std::vector<live::StepAggregate> steps, bool) {
            for (live::StepAggregate& s : steps)
                aggregated[s.step] = std::move(s);
        };
        replay.play(handlers);
        QCOMPARE(int(aggregated.size()), kSteps);
        for (const auto& [step, ours] : bubbles) {
            QVERIFY2(
                std::abs(printed.at(step) - ours.overall) <= 0.0005 + 1e-12,
                qPrintable(
                    QString("step %1: printed %2, recomputed %3").arg(step).arg(printed.at(step)).arg(ours.overall)));
            const live::StepAggregate& a = aggregated.at(step);
            QVERIFY(!a.partial);
            QCOMPARE(a.ranksReporting, kWorld);
            QVERIFY(a.bubble.has_value());
            QVERIFY2(
                std::abs(*a.bubble - ours.overall) <= 1e-12,
                qPrintable(QString("step %1: engine %2, recomputed %3").arg(step).arg(*a.bubble).arg(ours.overall)));
            QCOMPARE(int(a.stages.size()), kPp);
            for (int s = 0; s < kPp; ++s) {
                QVERIFY(a.stages[std::size_t(s)].measured.has_value());
                QCOMPARE(a.stages[std::size_t(s)].ranks, kDp);
                const double engine = *a.stages[std::size_t(s)].measured;
                QVERIFY2(std::abs(engine - ours.stages[std::size_t(s)]) <= 1e-12,
                         qPrintable(QString("step %1 stage %2: engine %3, recomputed %4")
                                        .arg(step)
                                        .arg(s)
                                        .arg(engine)
                                        .arg(ours.stages[std::size_t(s)])));
            }
        }

        // The expert loads: each stage's layer, reported by its first replica, summed over both; the
        // counts the program logged.
        std::map<std::pair<int, int>, std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> stored;
        std::map<std::pair<int, int>, std::set<int>> reporters;
        for (const auto& r :
             query(session, "SELECT step, layer, expert, routed, dropped, rank FROM expert_loads ORDER BY step, "
                            "layer, expert")
                 .ints) {
            auto& [routed, dropped] = stored[{int(r[0]), int(r[1])}];
            QCOMPARE(r[2], std::int64_t(routed.size()));
            routed.push_back(r[3]);
            dropped.push_back(r[4]);
            reporters[{int(r[0]), int(r[1])}].insert(int(r[5]));
        }
        QCOMPARE(int(stored.size()), kSteps * kPp);
        std::vector<json> logs;
        for (int rank = 0; rank < kWorld; ++rank) {
            logs.push_back(run.log(rank));
            QCOMPARE(int(logs.back()["steps"].size()), kSteps);
        }
        for (int step = 1; step <= kSteps; ++step) {
            for (int layer = 0; layer < kPp; ++layer) {
                const int reporter = layer * kDp;  // dp 0 of the layer's stage
                const std::set<int> reportedBy = reporters[{step, layer}];
                QCOMPARE(reportedBy, std::set<int>{reporter});
                const json& logged = logs[std::size_t(reporter)]["steps"][std::size_t(step - 1)];
                QCOMPARE(logged["step"].get<int>(), step);
                const auto& [routed, dropped] = stored[{step, layer}];
                QCOMPARE(routed, logged["routed"].get<std::vector<std::int64_t>>());
                QCOMPARE(dropped, logged["dropped"].get<std::vector<std::int64_t>>());
                std::vector<std::int64_t> sum(kExperts, 0), sumDropped(kExperts, 0);
                std::int64_t tokens = 0;
                for (int d = 0; d < kDp; ++d) {
                    const json& own = logs[static_cast<std::size_t>(layer) * kDp + static_cast<std::size_t>(d)]["steps"]
                                          [std::size_t(step - 1)];
                    for (int e = 0; e < kExperts; ++e) {
                        sum[std::size_t(e)] += own["routed_local"][std::size_t(e)].get<std::int64_t>();
                        sumDropped[std::size_t(e)] += own["dropped_local"][std::size_t(e)].get<std::int64_t>();
                    }
                }
                for (std::int64_t n : routed)
                    tokens += n;
                QCOMPARE(routed, sum);
                QCOMPARE(dropped, sumDropped);
                QCOMPARE(tokens,
                         std::int64_t(kDp * kMicrobatches * kMicroBatchSize * kSeq));  // top-1: every token once
            }
        }

        // The loss: rank 0 speaks for the job, with the loss of the last stage that every rank logged.
        const Rows metrics = query(session, "SELECT step, loss, tokens, rank FROM step_metrics ORDER BY step");
        QCOMPARE(int(metrics.ints.size()), kSteps);
        for (std::size_t i = 0; i < metrics.ints.size(); ++i) {
            const int step = int(metrics.ints[i][0]);
            QCOMPARE(step, int(i) + 1);
            QCOMPARE(metrics.ints[i][3], std::int64_t(0));
            QCOMPARE(metrics.ints[i][2], std::int64_t(kDp * kMicrobatches * kMicroBatchSize * kSeq));
            for (int rank = 0; rank < kWorld; ++rank)
                QCOMPARE(metrics.reals[i][1], logs[std::size_t(rank)]["steps"][i]["loss"].get<double>());
            // The last stage's replicas' own losses, averaged.
            double mean = 0;
            for (int d = 0; d < kDp; ++d)
                mean += logs[static_cast<std::size_t>(kPp - 1) * kDp + static_cast<std::size_t>(d)]["steps"][i]
                            ["local_loss"]
                                .get<double>();
            QVERIFY(std::abs(metrics.reals[i][1] - mean / kDp) <= 1e-6 * std::abs(mean));
        }

        // Nothing lost on the way.
        const Rows traffic = query(session, "SELECT rank, received, lost, dropped FROM traffic ORDER BY rank");
        QCOMPARE(int(traffic.ints.size()), kWorld);
        for (const auto& r : traffic.ints) {
            QVERIFY(r[1] > 0);
            QCOMPARE(r[2], std::int64_t(0));
            QCOMPARE(r[3], std::int64_t(0));
        }
        QVERIFY2(m_liveOutput.contains(QRegularExpression("records \\d+ stored, 0 lost")), qPrintable(m_liveOutput));
    }

    void aRankKilledMidRunFailsTheRunAndNamesIt()
    {
        // Rank 3 (stage 1, dp 1) kills itself in step 2 after its first forward: its peers' send, recv
        // and all-reduce then fail, each saying so, but the cause is rank 3.
        const ProgramRun run = prepare(m_dir.filePath("killed"), {"--die-rank", "3", "--die-step", "2"});
        const ProcessRun engine = runProcess(kEngine, {"run", run.job(), "--session", run.session()});
        QVERIFY2(engine.exitCode == 3, qPrintable(QString::number(engine.exitCode) + "\n" + engine.out + engine.err));
        const store::SessionOutcome outcome = store::SessionReader(run.session().toStdString()).outcome();
        QCOMPARE(outcome.outcome, store::Outcome::Failed);
        QVERIFY2(outcome.failedRank == 3, outcome.cause.c_str());
        QVERIFY2(QString::fromStdString(outcome.cause).startsWith("rank 3 "), outcome.cause.c_str());
        QCOMPARE(testing::integrityCheck(run.session().toStdString()), std::string("ok"));
        // It got as far as step 2 and no further.
        QCOMPARE(int(run.log(3)["steps"].size()), 1);

        // The engine ended with the job: no process of it is left (none mentions the run's folder).
        const std::vector<int> left = processesMentioning(run.dir.toStdString());
        QVERIFY2(left.empty(), qPrintable(QString("%1 processes of the job are left, e.g. pid %2")
                                              .arg(left.size())
                                              .arg(left.empty() ? 0 : left.front())));
        for (const auto& h : store::SessionReader(run.session().toStdString()).heartbeats())
            QVERIFY2(!QDir(QString("/proc/%1").arg(h.record.pid)).exists() ||
                         readFile("/proc/" + std::to_string(h.record.pid) + "/cmdline").find("pipeline_program") ==
                             std::string::npos,
                     qPrintable(QString("rank %1 (pid %2) is still there").arg(h.rank).arg(h.record.pid)));
    }

    void theProfilerTracesImportToTheLiveSpans()
    {
        QVERIFY2(liveRun(), qPrintable(m_liveOutput));
        const ProgramRun& run = *m_live;
        const QString imported = m_dir.filePath("imported.meshbench");
        const ProcessRun import = runProcess(kEngine, {"import", run.traces(), "--job", run.job(), "--rank-from",
                                                       "rank([0-9]+)\\.step", "--session", imported});
        QVERIFY2(import.exitCode == 0, qPrintable(import.out + import.err));
        QCOMPARE(testing::integrityCheck(imported.toStdString()), std::string("ok"));

        // Steps: the profiler's first step is its warm-up, whose ops it does not record, so the trace
        // holds live steps 2..4. Its ProfilerStep#N ranges are numbered by torch, differently by
        // version (1.13's step() names the range it opens after the step it closes: live step k is
        // ProfilerStep#(k-2); 2.x names it ProfilerStep#(k-1)), so imported steps are matched to live
        // steps in order.
        const std::map<OpKey, Span> importedSpans = spansOf(imported);
        std::set<int> importedSteps;
        for (const auto& [key, span] : importedSpans)
            importedSteps.insert(std::get<1>(key));
        QCOMPARE(int(importedSteps.size()), kTracedSteps);
        std::map<int, int> liveStep;
        for (int step : importedSteps)
            liveStep[step] = kFirstTracedStep + int(liveStep.size());

        // The importer keeps each PP: range of the trace as it is: [ts, ts + dur] in microseconds,
        // moved by one constant per rank at most (the clock alignment, none here: no collective on a
        // CPU trace).
        std::map<int, std::vector<std::pair<std::string, Span>>> ranges;  // per rank, in trace order
        for (int rank = 0; rank < kWorld; ++rank) {
            QVERIFY2(!run.trace(rank).isEmpty(), qPrintable(QString("rank %1 wrote no one trace").arg(rank)));
            const json trace = json::parse(readFile(run.trace(rank).toStdString()));
            QVERIFY(trace.is_array());
            for (const json& event : trace) {
                const std::string name = event.value("name", "");
                if (name.rfind("PP:", 0) == 0)
                    ranges[rank].push_back(
                        {name,
                         {event["ts"].get<std::int64_t>() * 1000,
                          (event["ts"].get<std::int64_t>() + event["dur"].get<std::int64_t>()) * 1000}});
            }
        }

        // Live spans of the traced steps, of the kinds the trace names (F, B and the sends and receives).
        std::map<OpKey, Span> liveSpans;
        for (const auto& [key, span] : spansOf(run.session(), "step BETWEEN " + std::to_string(kFirstTracedStep) +
                                                                  " AND " + std::to_string(kLastTracedStep)))
            if (isPipelineKind(std::get<4>(key)))
                liveSpans.emplace(key, span);

        for (int rank = 0; rank < kWorld; ++rank) {
            std::vector<std::pair<OpKey, Span>> mine;  // imported, keyed by live step, in begin order
            for (const auto& [key, span] : importedSpans)
                if (std::get<0>(key) == rank) {
                    OpKey live = key;
                    std::get<1>(live) = liveStep.at(std::get<1>(key));
                    mine.push_back({live, span});
                }
            std::sort(mine.begin(), mine.end(),
                      [](const auto& a, const auto& b) { return a.second.begin < b.second.begin; });
            QCOMPARE(mine.size(), ranges[rank].size());
            const std::int64_t shift = mine.front().second.begin - ranges[rank].front().second.begin;
            for (std::size_t i = 0; i < mine.size(); ++i) {
                QCOMPARE(mine[i].second.begin - shift, ranges[rank][i].second.begin);
                QCOMPARE(mine[i].second.end - shift, ranges[rank][i].second.end);
            }

            // The same ops as live, each once.
            std::set<OpKey> liveKeys, importedKeys;
            for (const auto& [key, span] : liveSpans)
                if (std::get<0>(key) == rank)
                    liveKeys.insert(key);
            for (const auto& [key, span] : mine)
                importedKeys.insert(key);
            QCOMPARE(importedKeys.size(), mine.size());
            QCOMPARE(importedKeys, liveKeys);
            QCOMPARE(int(std::count_if(liveKeys.begin(), liveKeys.end(),
                                       [](const OpKey& k) {
                                           return std::get<4>(k) == int(wire::SpanKind::Forward) ||
                                                  std::get<4>(k) == int(wire::SpanKind::Backward);
                                       })),
                     kTracedSteps * kMicrobatches * 2);

            // What "the same span" means here. The live client reads its clock (monotonic, put on the
            // wall clock once) and the profiler its own (the wall clock, relative to the profiler's
            // start), so the two differ by one constant per rank, C. Each op is wrapped in
            // record_function (outside) and mb.op (inside): the profiler's range opens before the live
            // span and closes after it, by the instrumentation between the two readings (microseconds;
            // more when the rank is preempted there, 4 ranks sharing this machine's cores). So for
            // every op, live begin - trace begin >= C >= live end - trace end. The check: one C fits
            // every op of the rank, to the trace's resolution (whole microseconds: begin within 1 us,
            // end within 2 us). An op given another op's range, or a range stretched or moved, breaks
            // it; durations are then equal to within the instrumentation's time.
            constexpr std::int64_t kResolutionNs = 3000;
            std::int64_t atMost = INT64_MAX, atLeast = INT64_MIN;
            std::vector<std::int64_t> slack;
            for (const auto& [key, span] : mine) {
                const Span& live = liveSpans.at(key);
                atMost = std::min(atMost, live.begin - span.begin);
                atLeast = std::max(atLeast, live.end - span.end);
                slack.push_back((span.end - span.begin) - (live.end - live.begin));
            }
            std::sort(slack.begin(), slack.end());
            qInfo("rank %d: %zu ops; trace duration - live duration: median %.1f us, max %.1f us", rank, slack.size(),
                  double(slack[slack.size() / 2]) / 1e3, double(slack.back()) / 1e3);
            QVERIFY2(atLeast <= atMost + kResolutionNs,
                     qPrintable(QString("rank %1: no one clock offset puts every live span inside its profiler range: "
                                        "it is at least %2 ns and at most %3 ns")
                                    .arg(rank)
                                    .arg(atLeast)
                                    .arg(atMost)));
        }
    }

    void handedOverTracesAreImportedLive()
    {
        QVERIFY2(liveRun(), qPrintable(m_liveOutput));
        const ProgramRun& run = *m_live;
        const store::SessionReader reader(run.session().toStdString());

        // Rank 0's two paths the engine must not read are refused, each saying why; the run went on.
        std::vector<std::string> engineLines;
        for (const auto& log : reader.logs())
            if (log.rank == store::kEngineRank)
                engineLines.push_back(log.record.text);
        const auto said = [&](const std::string& a, const std::string& b) {
            return std::any_of(engineLines.begin(), engineLines.end(), [&](const std::string& line) {
                return line.find(a) != std::string::npos && line.find(b) != std::string::npos;
            });
        };
        QVERIFY(said("rank 0's trace relative/rank0.json was not imported", "not absolute"));
        QVERIFY(said("absent/rank0.json was not imported", "no such file on the engine's host"));

        // Each rank's trace, once, as the file is (its digest as the offline import takes it).
        std::map<std::string, std::string> digests;
        const QString offline = m_dir.filePath("digests.meshbench");
        QVERIFY(runProcess(kEngine, {"import", run.traces(), "--job", run.job(), "--rank-from", "rank([0-9]+)\\.step",
                                     "--session", offline})
                    .exitCode == 0);
        for (const store::ImportSource& source : store::SessionReader(offline.toStdString()).importSources())
            digests[source.path] = source.digest;
        const std::vector<store::ImportSource> sources = reader.importSources();
        QCOMPARE(int(sources.size()), kWorld);
        std::map<int, const store::ImportSource*> byRank;
        for (const store::ImportSource& source : sources)
            QVERIFY(byRank.emplace(source.rank, &source).second);

        // Placed by the live ops: the steps the profiler's schedule traced, and one clock offset that puts
        // each of its ops on its own live op, nearer to it than to the same op of a neighbouring step.
        const std::map<OpKey, Span> live = spansOf(run.session());
        const QRegularExpression placed(QString("steps (\\d+)-(\\d+) and clock offset (-?[0-9.]+) us"));
        for (int rank = 0; rank < kWorld; ++rank) {
            QVERIFY(byRank.count(rank));
            const store::ImportSource& source = *byRank[rank];
            QCOMPARE(QString::fromStdString(source.path), run.trace(rank));
            QCOMPARE(source.format, std::string("kineto-array"));
            QCOMPARE(source.digest, digests.at(source.path));
            const QRegularExpressionMatch match = placed.match(QString::fromStdString(source.inferred));
            QVERIFY2(match.hasMatch(), source.inferred.c_str());
            QCOMPARE(match.captured(1).toInt(), kFirstTracedStep);
            QCOMPARE(match.captured(2).toInt(), kLastTracedStep);
            const auto offset = std::int64_t(std::llround(match.captured(3).toDouble() * 1000));

            // The trace's PP: ranges in order, and the rank's live ops of the traced steps in order:
            // the same ops (theProfilerTracesImportToTheLiveSpans checks the names).
            std::vector<Span> ranges;
            for (const json& event : json::parse(readFile(source.path)))
                if (event.value("name", "").rfind("PP:", 0) == 0)
                    ranges.push_back({event["ts"].get<std::int64_t>() * 1000,
                                      (event["ts"].get<std::int64_t>() + event["dur"].get<std::int64_t>()) * 1000});
            std::vector<std::pair<Span, OpKey>> mine;
            for (const auto& [key, span] : live)
                if (std::get<0>(key) == rank && isPipelineKind(std::get<4>(key)) &&
                    std::get<1>(key) >= kFirstTracedStep && std::get<1>(key) <= kLastTracedStep)
                    mine.push_back({span, key});
            std::sort(mine.begin(), mine.end(),
                      [](const auto& a, const auto& b) { return a.first.begin < b.first.begin; });
            QCOMPARE(ranges.size(), mine.size());
            for (std::size_t i = 0; i < mine.size(); ++i) {
                const auto& [span, key] = mine[i];
                const std::int64_t distance = std::llabs(span.begin - (ranges[i].begin + offset));
                for (int neighbour : {std::get<1>(key) - 1, std::get<1>(key) + 1}) {
                    OpKey other = key;
                    std::get<1>(other) = neighbour;
                    if (const auto at = live.find(other); at != live.end())
                        QVERIFY2(distance < std::llabs(at->second.begin - (ranges[i].begin + offset)),
                                 qPrintable(QString("rank %1: op %2 of the trace is placed nearer step %3's")
                                                .arg(rank)
                                                .arg(i)
                                                .arg(neighbour)));
                }
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestPytorchLive)
#include "tst_pytorch_live.moc"
