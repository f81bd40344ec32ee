// `meshbench-engine import` against traces whose answers are known: tests/import/make_gpu_traces.py
// writes a simulated 8-GPU run (pp 2 x tp 2 x dp 2) as torch.profiler (Kineto) traces and nsys
// exports, with clock skews it injected, and the true timeline, bubble and communication it built
// them from. Every bad input of issue 29 gets its own case: a message naming the file and the
// event, and no session written.

#include "common/process_run.h"

#include "import/import_error.h"
#include "import/live_alignment.h"
#include "import/rank_file.h"
#include "import/trace_import.h"
#include "live/session_measurements.h"
#include "live/steady_state.h"
#include "plan/job_spec.h"
#include "plan/measured_bubble.h"
#include "store/session_store.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

using nlohmann::json;
using namespace meshbench;

namespace {

// How far the clock alignment may be off (issue 29's bound), and with it every aligned time.
constexpr std::int64_t kClockBoundNs = 5000;

std::string readText(const std::string& path)
{
    std::ifstream file(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(file), {});
}

void writeText(const std::string& path, const std::string& text)
{
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << text;
}

// The generator's output for one case, in a folder of its own.
struct Generated {
    explicit Generated(std::string folder) : dir(std::move(folder)) {}
    std::string dir;
    json answers;
    std::vector<std::string> kineto, nsys;
    std::string job() const { return dir + "/job.json"; }
};

}  // namespace

class TestImport : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    std::map<std::string, Generated> m_cases;

    std::string file(const std::string& name) const { return (m_dir.path() + "/").toStdString() + name; }

    const Generated& generated(const std::string& name)
    {
        if (auto found = m_cases.find(name); found != m_cases.end())
            return found->second;
        Generated& g = m_cases.try_emplace(name, file("case-" + name)).first->second;  // filled in place
        // "CASE-neutral": the case with kernel names that say no direction (--neutral-kernel-names).
        const bool neutral = name.ends_with("-neutral");
        QStringList args = {QStringLiteral(MESHBENCH_SOURCE_DIR "/tests/import/make_gpu_traces.py"),
                            QString::fromStdString(g.dir),
                            "--case",
                            QString::fromStdString(neutral ? name.substr(0, name.size() - 8) : name),
                            "--seed",
                            "1"};
        if (neutral)
            args << "--neutral-kernel-names";
        const ProcessRun run = runProcess("python3", args);
        if (run.exitCode != 0)
            qFatal("make_gpu_traces.py failed: %s", qPrintable(run.err));
        g.answers = json::parse(readText(g.dir + "/answers.json"));
        for (int r = 0; r < g.answers["world"].get<int>(); ++r) {
            g.kineto.push_back(g.dir + "/rank" + std::to_string(r) + "_trace.json.gz");
            g.nsys.push_back(g.dir + "/report." + std::to_string(r) + ".sqlite");
        }
        return g;
    }

    std::string importInto(const std::vector<std::string>& paths, const std::optional<std::string>& job,
                           const std::string& session, const std::string& rankFrom = {})
    {
        import::ImportRequest request;
        request.paths = paths;
        request.jobPath = job;
        request.sessionPath = file(session);
        request.rankFrom = rankFrom;
        import::importTraces(request);
        return request.sessionPath;
    }

    // The message an import fails with; fails the test when it succeeds, and checks that it left
    // no session and no partial file behind.
    std::string refusal(const std::vector<std::string>& paths, const std::optional<std::string>& job = {},
                        const std::string& rankFrom = {})
    {
        const std::string session = file("refused.meshbench");
        try {
            importInto(paths, job, "refused.meshbench", rankFrom);
        } catch (const import::ImportError& e) {
            if (std::filesystem::exists(session) || std::filesystem::exists(session + ".importing"))
                return "a session was left behind: " + std::string(e.what());
            return e.what();
        }
        return "accepted";
    }

    static bool mentions(const std::string& text, std::initializer_list<std::string> parts)
    {
        for (const std::string& part : parts)
            if (text.find(part) == std::string::npos) {
                qWarning("'%s' does not mention '%s'", text.c_str(), part.c_str());
                return false;
            }
        return true;
    }

    // A small trace of torch.profiler's object form around `events`, as rank 0 of 1.
    std::string objectTrace(const std::string& name, const std::string& events)
    {
        std::string path = file(name);
        writeText(path, R"({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
                        "baseTimeNanoseconds": 1700000000000000000, "traceEvents": [)" +
                            events + "]}");
        return path;
    }

    // The bubble of `step` from a session's stored spans, by the planner's definition, as the Monitor
    // measures it, over the ranks the answers list.
    static plan::MeasuredBubble storedBubble(const store::SessionReader& reader, const json& answers, int step)
    {
        std::vector<plan::RankPipelinePhase> phases;
        for (const auto& [rank, info] : answers["ranks"].items()) {
            std::vector<wire::SpanRecord> spans;
            const std::uint32_t r = std::uint32_t(std::stoi(rank));
            reader.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(),
                         std::span(&r, 1), [&](const store::StoredSpan& s) {
                             if (s.span.step == step)
                                 spans.push_back(s.span);
                         });
            phases.push_back(plan::rankPipelinePhase(info["stage"].get<int>(), spans));
        }
        return plan::measuredBubble(phases, answers["pp"].get<int>());
    }

    // Checks a session imported from the case's Kineto traces against its answers.
    void checkAgainstAnswers(const Generated& g, const std::string& session, bool aligned)
    {
        const json& a = g.answers;
        const int pp = a["pp"].get<int>();
        store::SessionReader reader(session);

        if (aligned) {
            std::map<std::uint32_t, std::int64_t> offsets;
            for (const auto& o : reader.clockOffsets())
                offsets[o.rank] = o.record.offsetNs;
            QCOMPARE(int(offsets.size()), a["world"].get<int>());
            for (const auto& [rank, info] : a["ranks"].items()) {
                const std::int64_t expected = info["clock_offset_ns"].get<std::int64_t>();
                QVERIFY2(std::llabs(offsets.at(std::uint32_t(std::stoi(rank))) - expected) <= kClockBoundNs,
                         qPrintable(QString("rank %1: offset %2 ns, injected %3 ns")
                                        .arg(rank.c_str())
                                        .arg(offsets.at(std::uint32_t(std::stoi(rank))))
                                        .arg(expected)));
            }
        }

        // Every op, with its stage, chunk, micro-batch and device span.
        using Key = std::tuple<int, int, int, int, int>;  // rank, step, chunk, microbatch, kind
        std::map<Key, std::pair<std::int64_t, std::int64_t>> stored;
        reader.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                     [&](const store::StoredSpan& s) {
                         if (!wire::isComputeKind(s.span.kind))
                             return;
                         const Key key{int(s.rank), s.span.step, s.span.chunk, s.span.microbatch, int(s.span.kind)};
                         QVERIFY(stored.emplace(key, std::pair{s.span.beginNs, s.span.endNs}).second);
                     });
        QCOMPARE(stored.size(), a["ops"].size());
        for (const json& op : a["ops"]) {
            const int stage = op["stage"].get<int>();
            const int kind = int(op["kind"] == "F" ? wire::SpanKind::Forward : wire::SpanKind::Backward);
            const Key key{op["rank"].get<int>(), op["step"].get<int>(), stage / pp, op["microbatch"].get<int>(), kind};
            const auto found = stored.find(key);
            QVERIFY2(found != stored.end(), qPrintable(QString::fromStdString("no op " + op.dump())));
            const std::int64_t shift = aligned ? kClockBoundNs : std::numeric_limits<std::int64_t>::max() / 4;
            QVERIFY2(std::llabs(found->second.first - op["begin_ns"].get<std::int64_t>()) <= shift,
                     qPrintable(QString::fromStdString(op.dump())));
            QVERIFY2(found->second.second - found->second.first ==
                         op["end_ns"].get<std::int64_t>() - op["begin_ns"].get<std::int64_t>(),
                     qPrintable(QString("op %1 lasts %2 ns")
                                    .arg(QString::fromStdString(op.dump()))
                                    .arg(found->second.second - found->second.first)));
        }

        // The bubble per stage from the stored spans, by the planner's definition, as the Monitor
        // measures it; the overall one also in the step's metrics.
        std::map<int, std::vector<wire::SpanRecord>> spansOf;  // by rank, for one step at a time
        std::set<int> steps;
        for (const auto& m : reader.stepMetrics()) {
            steps.insert(m.record.step);
            const json& expected = a["bubble"][std::to_string(m.record.step)];
            const plan::MeasuredBubble bubble = storedBubble(reader, a, m.record.step);
            if (!aligned)
                continue;
            for (int stage = 0; stage < pp; ++stage)
                QVERIFY2(std::abs(bubble.stages[std::size_t(stage)].value() -
                                  expected["per_stage"][stage].get<double>()) <= 0.001,
                         qPrintable(QString("step %1 stage %2: bubble %3, expected %4")
                                        .arg(m.record.step)
                                        .arg(stage)
                                        .arg(bubble.stages[std::size_t(stage)].value())
                                        .arg(expected["per_stage"][stage].get<double>())));
            QVERIFY(std::abs(m.record.bubbleRatio - expected["overall"].get<double>()) <= 0.001);
        }
        std::set<int> expectedSteps;
        for (const json& s : a["steps"])
            expectedSteps.insert(s.get<int>());
        QCOMPARE(steps, expectedSteps);
    }

    // Communication per dimension against the answers' (busy and exposed per rank and step).
    void checkCommunication(const Generated& g, const std::string& session)
    {
        store::SessionReader reader(session);
        std::map<std::tuple<int, int, std::string>, store::DeviceTimeRow> rows;
        for (const store::DeviceTimeRow& row : reader.deviceTime())
            rows[{row.rank, row.step, std::string(store::deviceClassName(row.deviceClass))}] = row;
        int checked = 0;
        for (const auto& [step, ranks] : g.answers["comm"].items())
            for (const auto& [rank, comm] : ranks.items())
                for (const std::string dim : {"tp", "pp", "dp"}) {
                    const auto found = rows.find({std::stoi(rank), std::stoi(step), "comm-" + dim});
                    const std::int64_t busy = found == rows.end() ? 0 : found->second.busyNs;
                    const std::int64_t exposed = found == rows.end() ? 0 : found->second.exposedNs;
                    QCOMPARE(busy, comm[dim].get<std::int64_t>());
                    QCOMPARE(exposed, comm[dim + "_exposed"].get<std::int64_t>());
                    ++checked;
                }
        QVERIFY(checked > 0);
    }

private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void kinetoTracesMatchTheirAnswers_data()
    {
        QTest::addColumn<QString>("name");
        QTest::newRow("1f1b") << "1f1b";
        QTest::newRow("interleaved") << "interleaved";
        QTest::newRow("unannotated 1f1b") << "unannotated";
        // Kernels named as cuBLAS and fused kernels are, saying no direction: only the launching
        // thread tells a backward's (autograd's own).
        QTest::newRow("unannotated 1f1b, neutral kernel names") << "unannotated-neutral";
    }

    void kinetoTracesMatchTheirAnswers()
    {
        QFETCH(QString, name);
        const Generated& g = generated(name.toStdString());
        const std::string session = importInto(g.kineto, g.job(), "kineto-" + name.toStdString() + ".meshbench");
        checkAgainstAnswers(g, session, true);
        checkCommunication(g, session);
        // Every kernel is kept, on its own table.
        store::SessionReader reader(session);
        std::map<std::uint32_t, int> kernels;
        reader.kernels(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                       [&](std::uint32_t rank, const store::KernelRow& k) {
                           if (k.deviceClass != store::DeviceClass::Memcpy &&
                               k.deviceClass != store::DeviceClass::Memset)
                               ++kernels[rank];
                       });
        for (const auto& [rank, count] : g.answers["kernels"].items())
            QCOMPARE(kernels[std::uint32_t(std::stoi(rank))], count.get<int>());
        // What each file was, and its hash.
        const std::vector<store::ImportSource> sources = reader.importSources();
        QCOMPARE(sources.size(), g.kineto.size());
        QCOMPARE(sources.front().format, std::string("kineto"));
        QVERIFY(sources.front().digest.starts_with("xxh3-128:"));
        QCOMPARE(sources.front().digest.size(), std::size_t(9 + 32));
    }

    // nsys kernels name no communicator; NCCL's own NVTX ranges around their launches do (payload
    // "NCCL communicator ID"), and the ranks using a communicator are its group: the exports are
    // aligned as closely as the Kineto traces, and communication is placed by dimension.
    // What calibrate reads of an imported session (live::measureSession): per stage, the device time
    // per step of each kind of collective, the mean over the stage's ranks of the steps after
    // warm-up, as the generator's answers give it rank by rank.
    void calibrationReadsTheKernelsPerStage()
    {
        const Generated& g = generated("1f1b");
        const std::string session = importInto(g.kineto, g.job(), "calibration.meshbench");
        const plan::MeasuredRun run = live::measureSession(session);
        const json& a = g.answers;
        const int pp = a["pp"].get<int>();
        QCOMPARE(int(run.stageKernels.size()), pp);
        std::vector<int> steps;
        for (const json& step : a["steps"])
            steps.push_back(step.get<int>());
        steps.erase(steps.begin(), steps.begin() + std::ptrdiff_t(live::firstSteadyStep(steps.size())));
        for (int stage = 0; stage < pp; ++stage) {
            double tp = 0, dp = 0;
            int ranks = 0;
            for (const auto& [rank, info] : a["ranks"].items()) {
                if (info["stage"].get<int>() != stage)
                    continue;
                ++ranks;
                for (int step : steps) {
                    const json& comm = a["comm"][std::to_string(step)][rank];
                    tp += comm["tp"].get<double>() * 1e-9;
                    dp += comm["dp"].get<double>() * 1e-9;
                }
            }
            const plan::MeasuredKernels& k = run.stageKernels[std::size_t(stage)];
            QCOMPARE(k.ranks, ranks);
            const double count = double(ranks) * double(steps.size());
            QVERIFY2(std::abs(k.tensorComm - tp / count) <= 1e-12, qPrintable(QString::number(k.tensorComm)));
            QVERIFY2(std::abs(k.dataComm - dp / count) <= 1e-12, qPrintable(QString::number(k.dataComm)));
            QVERIFY(k.gemm > 0 && k.attention >= 0 && k.streaming > 0);
        }
    }

    void nsysExportsGiveTheSameOps()
    {
        const Generated& g = generated("1f1b");
        const std::string session = importInto(g.nsys, g.job(), "nsys.meshbench");
        checkAgainstAnswers(g, session, true);
        checkCommunication(g, session);
        store::SessionReader reader(session);
        QCOMPARE(reader.importSources().front().format, std::string("nsys-sqlite"));
        QCOMPARE(reader.importSources().front().rank, 0);
    }

    // Megatron-LM's --nvtx-ranges (p2p calls and the interleaved schedule's phases) in nsys exports
    // of one node, whose reports share its clock: the ops, their device spans and the bubble per
    // stage as the generator's answers give them, and each transfer's peer on the other stage.
    void megatronNvtxRangesGiveTheOps_data()
    {
        QTest::addColumn<QString>("name");
        QTest::newRow("1f1b") << "megatron";
        QTest::newRow("interleaved") << "megatron-interleaved";
    }

    void megatronNvtxRangesGiveTheOps()
    {
        QFETCH(QString, name);
        const Generated& g = generated(name.toStdString());
        const std::string session = importInto(g.nsys, g.job(), "megatron-" + name.toStdString() + ".meshbench");
        checkAgainstAnswers(g, session, true);
        store::SessionReader reader(session);
        for (const store::ImportSource& source : reader.importSources())
            QVERIFY2(source.recognised.find("pipeline ops from Megatron-LM's NVTX ranges") != std::string::npos,
                     source.recognised.c_str());
        const json& ranks = g.answers["ranks"];
        const bool interleaved = g.answers["virtual"].get<int>() > 1;
        int transfers = 0;
        reader.spans(
            std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
            [&](const store::StoredSpan& s) {
                if (wire::isComputeKind(s.span.kind) || !wire::isPipelineKind(s.span.kind))
                    return;
                ++transfers;
                QVERIFY(s.span.peerRank >= 0);
                const json& self = ranks.at(std::to_string(s.rank));
                const json& peer = ranks.at(std::to_string(s.span.peerRank));
                QCOMPARE(peer["tp"], self["tp"]);
                QCOMPARE(peer["dp"], self["dp"]);
                QVERIFY(peer["stage"] != self["stage"]);
                // In 1F1B the first stage only sends activations and receives gradients.
                const bool first = self["stage"].get<int>() == 0;
                if (!interleaved)
                    QVERIFY(s.span.kind == (first ? wire::SpanKind::SendActivation : wire::SpanKind::SendGradient) ||
                            s.span.kind == (first ? wire::SpanKind::RecvGradient : wire::SpanKind::RecvActivation));
            });
        QVERIFY(transfers > 0);
    }

    void partialStepsAreDroppedAndSaid()
    {
        const Generated& g = generated("1f1b");
        import::ImportRequest request;
        request.paths = g.kineto;
        request.jobPath = g.job();
        request.sessionPath = file("partial.meshbench");
        const import::ImportResult result = import::importTraces(request);
        std::string dropped;
        for (const json& s : g.answers["dropped_partial_steps"])
            dropped += (dropped.empty() ? "" : ", ") + std::to_string(s.get<int>());
        QVERIFY(std::any_of(result.summary.begin(), result.summary.end(), [&](const std::string& line) {
            return line.find("dropped partial steps " + dropped) != std::string::npos;
        }));
    }

    void aTruncatedGzipIsNamed()
    {
        const Generated& g = generated("1f1b");
        const std::string whole = readText(g.kineto[0]);
        const std::string cut = file("rank0_cut.json.gz");
        writeText(cut, whole.substr(0, whole.size() / 2));
        QVERIFY(mentions(refusal({cut}), {cut, "gzip stream is truncated"}));
    }

    void aFileThatIsNoTraceIsNamed()
    {
        const std::string path = file("notes.json");
        writeText(path, "these are my notes\n");
        QVERIFY(mentions(refusal({path}), {path, "is not a torch.profiler trace"}));
        const std::string object = file("config.json");
        writeText(object, R"({"lr": 0.1})");
        QVERIFY(mentions(refusal({object}), {object, "without \"traceEvents\""}));
        const std::string broken = file("broken.json");
        writeText(broken, R"({"traceEvents": [{"name": "x", "ph": "X", "ts": 1, )");
        QVERIFY(mentions(refusal({broken}), {broken, "is not valid JSON at byte"}));
    }

    void aNegativeDurationIsNamed()
    {
        const std::string path =
            objectTrace("negative.json", R"({"name": "a", "ph": "X", "ts": 10.0, "dur": 1.0, "pid": 1, "tid": 1},
                                            {"name": "aten::mm", "ph": "X", "ts": 12.5, "dur": -3.0, "pid": 1, "tid": 1})");
        QVERIFY(mentions(refusal({path}), {path, "event 1 ", "aten::mm", "negative duration"}));
    }

    void aFlowWithoutItsEndIsNamed()
    {
        const std::string path = objectTrace(
            "flow.json", R"({"name": "cudaLaunchKernel", "ph": "X", "cat": "cuda_runtime", "ts": 10.0, "dur": 1.0,
                             "pid": 1, "tid": 1, "args": {"correlation": 7}},
                            {"name": "ac2g", "ph": "s", "cat": "ac2g", "id": 7, "ts": 10.0, "pid": 1, "tid": 1})");
        QVERIFY(mentions(refusal({path}), {path, "flow with id 7", "has no end"}));
    }

    void theWrongRankCountIsNamed()
    {
        const Generated& g = generated("1f1b");
        json job = json::parse(readText(g.job()));
        job["parallel"]["dp"] = 1;
        job["cluster"]["devices_per_node"] = 4;
        const std::string smaller = file("job-dp1.json");
        writeText(smaller, job.dump());
        QVERIFY(mentions(refusal(g.kineto, smaller), {"is a trace of 8 ranks", "the job (--job) has 4"}));
    }

    void aFileWithoutRankIsRefusedNeverRankZero()
    {
        const std::string path = file("bare.json");
        writeText(
            path,
            R"([{"name": "PP:0F0", "ph": "X", "ts": 1, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}}])");
        QVERIFY(mentions(refusal({path}), {path, "says no rank", "--rank-from"}));
        QVERIFY(mentions(refusal({path}, {}, "rank(\\d+)"), {path, "finds no number in its name"}));
    }

    void twoFilesOfOneRankAndMixedWorldsAreNamed()
    {
        const Generated& g = generated("1f1b");
        const std::string copy = file("copy_of_rank0.json.gz");
        std::filesystem::copy_file(g.kineto[0], copy, std::filesystem::copy_options::overwrite_existing);
        QVERIFY(mentions(refusal({g.kineto[0], copy}), {"rank 0 is in two files", g.kineto[0], copy}));
        const std::string other = objectTrace("other_world.json", "");
        // other_world.json is rank 0 of a world of 1; rank 1 of the case is of 8.
        QVERIFY(mentions(refusal({g.kineto[1], other}), {"different runs", g.kineto[1], other}));
    }

    void anUnknownNsysSchemaIsRefusedWithItsVersion()
    {
        const Generated& g = generated("1f1b");
        const std::string path = file("report.0.sqlite");
        std::filesystem::copy_file(g.nsys[0], path, std::filesystem::copy_options::overwrite_existing);
        const ProcessRun run =
            runProcess("sqlite3", {QString::fromStdString(path),
                                   "UPDATE META_DATA_EXPORT SET value = '9.0.1' WHERE name = 'EXPORT_SCHEMA_VERSION'"});
        QCOMPARE(run.exitCode, 0);
        QVERIFY(mentions(refusal({path}), {path, "schema version '9.0.1'"}));
    }

    void anExistingSessionIsKept()
    {
        const Generated& g = generated("1f1b");
        const std::string path = file("kept.meshbench");
        writeText(path, "precious");
        try {
            importInto(g.kineto, g.job(), "kept.meshbench");
            QFAIL("an import overwrote a file");
        } catch (const import::ImportError& e) {
            QVERIFY(mentions(e.what(), {path, "exists already"}));
        }
        QCOMPARE(readText(path), std::string("precious"));
    }

    void theBareArrayFormReadsHostSpans()
    {
        // The shape torch's exporter writes without Kineto: times in us from the profiler's start.
        const std::string path = file("worker_rank3.json");
        // (moc misreads a raw string holding '#' over several lines: ordinary strings here.)
        writeText(path, "[{\"name\": \"ProfilerStep#1\", \"ph\": \"X\", \"ts\": 0, \"dur\": 100, \"tid\": 5,"
                        " \"pid\": \"CPU functions\", \"args\": {}},\n"
                        "{\"name\": \"PP:1F0\", \"ph\": \"X\", \"ts\": 10.5, \"dur\": 20.25, \"tid\": 5,"
                        " \"pid\": \"CPU functions\", \"args\": {}},\n"
                        "{\"name\": \"aten::mm\", \"ph\": \"X\", \"ts\": 11, \"dur\": 5, \"tid\": 5,"
                        " \"pid\": \"CPU functions\", \"args\": {}},\n"
                        "{\"name\": \"PP:1B0\", \"ph\": \"X\", \"ts\": 40, \"dur\": 41.125, \"tid\": 5,"
                        " \"pid\": \"CPU functions\", \"args\": {}}]");
        const std::string session = importInto({path}, {}, "bare.meshbench", "rank(\\d+)");
        store::SessionReader reader(session);
        std::vector<wire::SpanRecord> spans;
        reader.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                     [&](const store::StoredSpan& s) {
                         QCOMPARE(s.rank, 3u);
                         spans.push_back(s.span);
                     });
        QCOMPARE(spans.size(), std::size_t(2));
        QCOMPARE(spans[0].kind, wire::SpanKind::Forward);
        QCOMPARE(spans[0].beginNs, std::int64_t(10500));
        QCOMPARE(spans[0].endNs, std::int64_t(30750));
        QCOMPARE(spans[1].kind, wire::SpanKind::Backward);
        QCOMPARE(spans[1].endNs - spans[1].beginNs, std::int64_t(41125));
        QCOMPARE(reader.importSources().front().format, std::string("kineto-array"));
    }

    // torch 1.13's CPU-only traces have no collectives: their clocks (each counts from its own
    // profiler's start) are aligned by the pipeline's send/recv ranges. Each offset must lie within
    // the bound the import states for it of the injected one, every op likewise, and the bubble
    // per stage within what those bounds allow: the window's ends move by at most the largest
    // bound each, and a stage's bubble (window - busy) / window by at most 2 bound / window.
    void cpuArrayTracesAlignBySendRecvPairs()
    {
        const Generated& g = generated("cpu-array");
        const json& a = g.answers;
        std::vector<std::string> paths;
        paths.reserve(a["world"].get<std::size_t>());
        for (int r = 0; r < a["world"].get<int>(); ++r)
            paths.push_back(g.dir + "/rank-" + std::to_string(r) + ".json");
        import::ImportRequest request;
        request.paths = paths;
        request.jobPath = g.job();
        request.sessionPath = file("cpu-array.meshbench");
        request.rankFrom = "rank-(\\d+)";
        const import::ImportResult result = import::importTraces(request);
        QVERIFY(std::any_of(result.summary.begin(), result.summary.end(), [](const std::string& line) {
            return line.find("rank 3: clock offset") != std::string::npos &&
                   line.find("pipeline send/recv pairs") != std::string::npos;
        }));
        store::SessionReader reader(request.sessionPath);
        std::map<int, std::pair<std::int64_t, std::int64_t>> offsets;  // offset, bound
        for (const auto& o : reader.clockOffsets())
            offsets[int(o.rank)] = {o.record.offsetNs, o.record.roundTripNs};  // an import stores its bound there
        QCOMPARE(int(offsets.size()), a["world"].get<int>());
        std::int64_t widest = 0;
        for (const auto& [rank, info] : a["ranks"].items()) {
            const auto [offset, bound] = offsets.at(std::stoi(rank));
            const std::int64_t injected = info["clock_offset_ns"].get<std::int64_t>();
            QVERIFY2(std::llabs(offset - injected) <= bound,
                     qPrintable(QString("rank %1: offset %2 ns, bound %3 ns, injected %4 ns")
                                    .arg(rank.c_str())
                                    .arg(offset)
                                    .arg(bound)
                                    .arg(injected)));
            QVERIFY(rank == "0" || bound > 0);
            widest = std::max(widest, bound);
        }
        using Key = std::tuple<int, int, int, int>;  // rank, step, microbatch, kind
        std::map<Key, wire::SpanRecord> stored;
        reader.spans(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                     [&](const store::StoredSpan& s) {
                         if (wire::isComputeKind(s.span.kind))
                             stored[{int(s.rank), s.span.step, s.span.microbatch, int(s.span.kind)}] = s.span;
                     });
        QCOMPARE(stored.size(), a["ops"].size());
        for (const json& op : a["ops"]) {
            const int rank = op["rank"].get<int>();
            const int kind = int(op["kind"] == "F" ? wire::SpanKind::Forward : wire::SpanKind::Backward);
            const auto found = stored.find({rank, op["step"].get<int>(), op["microbatch"].get<int>(), kind});
            QVERIFY2(found != stored.end(), qPrintable(QString::fromStdString("no op " + op.dump())));
            QVERIFY2(std::llabs(found->second.beginNs - op["begin_ns"].get<std::int64_t>()) <= offsets.at(rank).second,
                     qPrintable(QString::fromStdString(op.dump())));
            QCOMPARE(found->second.endNs - found->second.beginNs,
                     op["end_ns"].get<std::int64_t>() - op["begin_ns"].get<std::int64_t>());
        }
        const int pp = a["pp"].get<int>();
        int steps = 0;
        for (const auto& m : reader.stepMetrics()) {
            const json& expected = a["bubble"][std::to_string(m.record.step)];
            const plan::MeasuredBubble bubble = storedBubble(reader, a, m.record.step);
            const double window =
                double(expected["window_end_ns"].get<std::int64_t>() - expected["window_begin_ns"].get<std::int64_t>());
            const double allowed = 2.0 * double(widest) / window;
            for (int stage = 0; stage < pp; ++stage)
                QVERIFY2(std::abs(bubble.stages[std::size_t(stage)].value() -
                                  expected["per_stage"][stage].get<double>()) <= allowed,
                         qPrintable(QString("step %1 stage %2: bubble %3, expected %4 within %5")
                                        .arg(m.record.step)
                                        .arg(stage)
                                        .arg(bubble.stages[std::size_t(stage)].value())
                                        .arg(expected["per_stage"][stage].get<double>())
                                        .arg(allowed)));
            ++steps;
        }
        QCOMPARE(steps, int(a["steps"].size()));
    }

    void megatronExpertCountsBecomeExpertLoads()
    {
        const Generated& g = generated("1f1b");
        const std::string counts = file("tokens_per_expert_rank0.jsonl");
        // Two micro-batches, two local experts: 3 + 4 and 10 + 20 tokens.
        writeText(counts, R"({"iter": 12, "block": "decoder", "layer": 1, "tpe": [[3, 10], [4, 20]]}
)");
        std::vector<std::string> paths = g.kineto;
        paths.push_back(counts);
        const std::string session = importInto(paths, {}, "experts.meshbench", "rank_?(\\d+)");
        store::SessionReader reader(session);
        const auto loads = reader.expertLoads(12);
        QCOMPARE(loads.size(), std::size_t(1));
        QCOMPARE(loads[0].rank, 0u);
        QCOMPARE(loads[0].record.layer, 1);
        QCOMPARE(loads[0].record.routed, (std::vector<std::uint32_t>{7, 30}));
    }

    // A trace handed over by a running rank (import/live_alignment.h) lands on the rank's live ops by
    // one step shift and one clock offset: the latest shift under which its last step began before the
    // hand-over. The live ops here are the trace's own, as a run reports them 3 steps on and on a clock
    // 1.5 s ahead, and before them the same steps once more, so that an earlier shift matches every op too.
    void aHandedOverTraceLandsOnTheLiveSteps()
    {
        const Generated& g = generated("1f1b");
        constexpr int kRank = 5;
        import::NameTable names;
        const import::ReadOptions options;
        const import::RankTrace trace = import::readRankTrace(g.kineto[kRank], import::Format::Kineto, names, options);
        import::JobContext job;
        job.spec = plan::parseJobSpec(readText(g.dir + "/job.json")).spec;
        QVERIFY(job.spec);
        job.mesh.emplace(job.spec->parallel);
        const import::RankAnalysis traced = import::analyseRank(trace, kRank, names, job, options.steps);
        QVERIFY(!traced.spans.empty() && !traced.kernels.empty() && !traced.deviceTime.empty());
        std::set<int> steps;
        std::int64_t first = INT64_MAX, last = INT64_MIN;
        for (const wire::SpanRecord& s : traced.spans) {
            steps.insert(s.step);
            first = std::min(first, s.beginNs);
            last = std::max(last, s.endNs);
        }
        constexpr int kShift = 3;
        constexpr std::int64_t kOffset = 1'500'000'123;
        const int repeat = int(steps.size());
        const std::int64_t period = last - first + 1'000'000;
        std::vector<wire::SpanRecord> live;
        for (const wire::SpanRecord& s : traced.spans) {
            wire::SpanRecord now = s;
            now.step += kShift;
            now.beginNs += kOffset;
            now.endNs += kOffset;
            wire::SpanRecord before = now;
            before.step -= repeat;
            before.beginNs -= period;
            before.endNs -= period;
            live.push_back(before);
            live.push_back(now);
        }
        const std::int64_t handed = last + kOffset + 1'000'000;
        const import::LiveAlignment a = import::alignToLive(traced.spans, live, handed);
        QCOMPARE(a.stepShift, kShift);
        QCOMPARE(a.offsetNs, kOffset);
        QCOMPARE(a.residualNs, std::int64_t(0));
        QCOMPARE(a.matchedOps, int(traced.spans.size()));
        QCOMPARE(a.firstStep, *steps.begin() + kShift);
        QCOMPARE(a.lastStep, *steps.rbegin() + kShift);

        // Every kernel moves by the offset and its step by the shift (one outside every step stays
        // outside); the device time moves to the live steps.
        import::RankAnalysis moved = traced;
        import::moveOntoLive(moved, a);
        QCOMPARE(moved.kernels.size(), traced.kernels.size());
        for (std::size_t i = 0; i < traced.kernels.size(); ++i) {
            QCOMPARE(moved.kernels[i].beginNs, traced.kernels[i].beginNs + kOffset);
            QCOMPARE(moved.kernels[i].endNs, traced.kernels[i].endNs + kOffset);
            QCOMPARE(moved.kernels[i].step, traced.kernels[i].step < 0 ? -1 : traced.kernels[i].step + kShift);
        }
        QCOMPARE(moved.deviceTime.size(), traced.deviceTime.size());
        for (std::size_t i = 0; i < traced.deviceTime.size(); ++i) {
            QCOMPARE(moved.deviceTime[i].step, traced.deviceTime[i].step + kShift);
            QCOMPARE(moved.deviceTime[i].busyNs, traced.deviceTime[i].busyNs);
        }

        // Handed over before the later repeat's last step began: the trace is the earlier repeat.
        std::int64_t lastStepBegin = INT64_MAX;
        for (const wire::SpanRecord& s : live)
            if (s.step == *steps.rbegin() + kShift)
                lastStepBegin = std::min(lastStepBegin, s.beginNs);
        const import::LiveAlignment earlier = import::alignToLive(traced.spans, live, lastStepBegin);
        QCOMPARE(earlier.stepShift, kShift - repeat);
        QCOMPARE(earlier.offsetNs, kOffset - period);

        // Refused, saying why: another stage's ops, and a trace that names none.
        std::vector<wire::SpanRecord> otherStage = live;
        for (wire::SpanRecord& s : otherStage)
            s.stage = std::int16_t(1 - s.stage);
        const auto refusedAlignment = [](const std::vector<wire::SpanRecord>& ops,
                                         const std::vector<wire::SpanRecord>& reported, std::int64_t at) {
            try {
                import::alignToLive(ops, reported, at);
            } catch (const import::ImportError& e) {
                return std::string(e.what());
            }
            return std::string("accepted");
        };
        QVERIFY(
            mentions(refusedAlignment(traced.spans, otherStage, handed),
                     {std::to_string(traced.spans.size()) + " pipeline ops", "at most 0 of them", "of another rank"}));
        QVERIFY(mentions(refusedAlignment({}, live, handed), {"names no pipeline op"}));
    }

    void theCommandLineSaysWhatIsWrong()
    {
        const std::string path = file("cli-notes.json");
        writeText(path, "no trace here");
        const ProcessRun bad =
            runProcess(QStringLiteral(MESHBENCH_ENGINE), {"import", QString::fromStdString(path), "--session",
                                                          QString::fromStdString(file("cli.meshbench"))});
        QCOMPARE(bad.exitCode, 1);
        QVERIFY(bad.err.contains("is not a torch.profiler trace"));
        QVERIFY(!QFile::exists(QString::fromStdString(file("cli.meshbench"))));
        // A folder of traces, beside other JSON (the job spec and the answers), which is passed over.
        const Generated& g = generated("1f1b");
        const std::string folder = file("cli-traces");
        std::filesystem::create_directories(folder);
        for (const std::string& trace : g.kineto)
            std::filesystem::copy_file(trace, folder + "/" + std::filesystem::path(trace).filename().string());
        std::filesystem::copy_file(g.dir + "/answers.json", folder + "/answers.json");
        const ProcessRun good =
            runProcess(QStringLiteral(MESHBENCH_ENGINE),
                       {"import", QString::fromStdString(folder), "--job", QString::fromStdString(g.job()), "--session",
                        QString::fromStdString(file("cli.meshbench"))});
        QCOMPARE(good.exitCode, 0);
        QVERIFY2(good.out.contains(QRegularExpression("step 11: [0-9.]+ ms, bubble [0-9.]+% \\(stages .*\\); planned")),
                 qPrintable(good.out + good.err));
        QVERIFY(good.out.contains("passed over " + QString::fromStdString(folder) + "/answers.json"));

        // Without --job the layout is inferred (on DGX H100 nodes with their links), and the findings
        // still have rates to stand on.
        const ProcessRun inferred =
            runProcess(QStringLiteral(MESHBENCH_ENGINE), {"import", QString::fromStdString(folder), "--session",
                                                          QString::fromStdString(file("cli-inferred.meshbench"))});
        QCOMPARE(inferred.exitCode, 0);
        QVERIFY2(!inferred.out.contains("findings unavailable"), qPrintable(inferred.out));
        QVERIFY2(inferred.out.contains("(the layout was inferred: give --job to set it)"), qPrintable(inferred.out));
        QVERIFY2(inferred.out.contains("findings:\n  "), qPrintable(inferred.out));
    }
};

QTEST_GUILESS_MAIN(TestImport)
#include "tst_import.moc"
