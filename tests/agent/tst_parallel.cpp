// Data and pipeline parallelism under mpirun against one device: the same losses step by step and
// the same parameters afterwards; wrong launches and dying ranks end the job with a message.

#include "agent/checkpoint/safetensors.h"
#include "common/process_run.h"
#include "plan/simulator.h"

#include "layout_equivalence.h"
#include <QElapsedTimer>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>

#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <csignal>
#include <limits>

using namespace meshbench;
using nlohmann::json;
using namespace meshbench::agent::testing;

namespace {

struct Layout {
    int dp = 1;
    int pp = 1;
    int zero = 0;
    const char* schedule = "1f1b";
    int virtualStages = 1;
    bool moe = false;
    const char* recompute = "selective";
    int ep = 1;
    int tp = 1;
    bool sequenceParallel = false;
    bool overlap = true;  // the data-parallel buckets reduce during the backward
    int layers = 4;       // the V schedules over 4 stages need 8 (two chunks of one layer each)
    int microbatches = 4;
    int ranks() const { return dp * pp * tp; }
};

// pp 4 with a V schedule: 8 layers in 8 chunks, and dualpipev's 2p = 8 micro-batches.
Layout fourStageV(Layout l)
{
    l.layers = 8;
    l.microbatches = 8;
    return l;
}

json job(const Layout& l)
{
    json doc = equivalenceJob(l.moe,
                              {{"dp", l.dp},
                               {"pp", l.pp},
                               {"ep", l.ep},
                               {"tp", l.tp},
                               {"sequence_parallel", l.sequenceParallel},
                               {"zero", l.zero},
                               {"overlap_grad_reduce", l.overlap},
                               {"schedule", l.schedule},
                               {"virtual_stages", l.virtualStages},
                               {"recompute", l.recompute}},
                              l.ranks(), 10, 0.003);
    doc["model"]["layers"] = l.layers;
    doc["parallel"]["microbatches"] = l.microbatches;
    return doc;
}

QStringList mpirun(int ranks, const QStringList& agentArgs)
{
    return QStringList{"--oversubscribe", "-np", QString::number(ranks), QStringLiteral(MESHBENCH_AGENT)} + agentArgs;
}

std::vector<json> readMetrics(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        qFatal("no metrics at %s", qPrintable(path));
    std::vector<json> lines;
    for (const QByteArray& line : f.readAll().trimmed().split('\n'))
        lines.push_back(json::parse(line.toStdString()));
    return lines;
}

}  // namespace

Q_DECLARE_METATYPE(Layout)

class TestParallel : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void layoutEqualsOneDevice_data();
    void layoutEqualsOneDevice();
    void spansReproduceTheSchedule_data();
    void spansReproduceTheSchedule();
    void activationMemoryFollowsTheSchedule_data();
    void activationMemoryFollowsTheSchedule();
    void checkpointMovesBetweenLayouts();
    void demoEqualsOneDevice_data();
    void demoEqualsOneDevice();
    void zero3KeepsAShardOfTheParameters();
    void bucketsReduceUnderTheBackward();
    void wrongRankCountIsRefused();
    void aDyingRankEndsTheJob();
    void aFailingRankNamesItselfAndTheCause();

private:
    QString write(const QString& name, const json& content);
    void compareRuns(const QString& single, const QString& parallel, int ranks, double adamReach);
    // Runs the layout under mpirun with --spans and returns every rank's records of step `step`.
    std::vector<std::vector<json>> spansOfStep(const Layout& layout, const QString& tag, int step,
                                               QString* out = nullptr);
    QTemporaryDir m_dir;
};

void TestParallel::initTestCase() { QVERIFY(m_dir.isValid()); }

QString TestParallel::write(const QString& name, const json& content)
{
    QString path = m_dir.filePath(name);
    QFile f(path);
    const QByteArray bytes = QByteArray::fromStdString(content.dump());
    if (!f.open(QIODevice::WriteOnly) || f.write(bytes) != bytes.size())
        qFatal("cannot write %s", qPrintable(path));
    return path;
}

void TestParallel::layoutEqualsOneDevice_data()
{
    QTest::addColumn<Layout>("layout");
    QTest::newRow("dp2") << Layout{2};
    QTest::newRow("dp2 moe") << Layout{2, 1, 0, "1f1b", 1, true};
    QTest::newRow("dp4 moe") << Layout{4, 1, 0, "1f1b", 1, true};
    QTest::newRow("dp2 zero-1") << Layout{2, 1, 1};
    QTest::newRow("dp2 zero-2") << Layout{2, 1, 2};
    QTest::newRow("dp4 moe zero-2") << Layout{4, 1, 2, "1f1b", 1, true};
    QTest::newRow("pp2 gpipe") << Layout{1, 2, 0, "gpipe"};
    QTest::newRow("pp2 1f1b") << Layout{1, 2, 0, "1f1b"};
    QTest::newRow("pp4 gpipe") << Layout{1, 4, 0, "gpipe"};
    QTest::newRow("pp4 1f1b") << Layout{1, 4, 0, "1f1b"};
    QTest::newRow("pp2 interleaved v2") << Layout{1, 2, 0, "interleaved", 2};
    QTest::newRow("pp2 zb-h1") << Layout{1, 2, 0, "zb-h1"};
    QTest::newRow("pp4 zb-h1") << Layout{1, 4, 0, "zb-h1"};
    QTest::newRow("pp2 1f1b moe") << Layout{1, 2, 0, "1f1b", 1, true};
    QTest::newRow("dp2 pp2 zero-1") << Layout{2, 2, 1, "1f1b"};
    QTest::newRow("dp2 ep2 moe") << Layout{2, 1, 0, "1f1b", 1, true, "selective", 2};
    QTest::newRow("dp4 ep2 moe") << Layout{4, 1, 0, "1f1b", 1, true, "selective", 2};
    QTest::newRow("dp4 ep4 moe") << Layout{4, 1, 0, "1f1b", 1, true, "selective", 4};
    QTest::newRow("dp2 pp2 ep2 moe zb-h1") << Layout{2, 2, 0, "zb-h1", 1, true, "selective", 2};
    QTest::newRow("tp2") << Layout{1, 1, 0, "1f1b", 1, false, "selective", 1, 2};
    QTest::newRow("tp2 moe") << Layout{1, 1, 0, "1f1b", 1, true, "selective", 1, 2};
    QTest::newRow("dp2 tp2 zero-1") << Layout{2, 1, 1, "1f1b", 1, false, "selective", 1, 2};
    QTest::newRow("dp2 pp2 tp2 ep2 moe interleaved") << Layout{2, 2, 0, "interleaved", 2, true, "none", 2, 2};
    QTest::newRow("tp2 sp") << Layout{1, 1, 0, "1f1b", 1, false, "selective", 1, 2, true};
    QTest::newRow("tp2 sp moe full-recompute") << Layout{1, 1, 0, "1f1b", 1, true, "full", 1, 2, true};
    QTest::newRow("dp2 tp2 sp zero-2") << Layout{2, 1, 2, "1f1b", 1, false, "selective", 1, 2, true};
    QTest::newRow("dp2 pp2 tp2 ep2 sp moe zb-h1") << Layout{2, 2, 0, "zb-h1", 1, true, "selective", 2, 2, true};
    QTest::newRow("dp2 zero-3") << Layout{2, 1, 3};
    QTest::newRow("dp4 moe zero-3 full-recompute") << Layout{4, 1, 3, "1f1b", 1, true, "full"};
    QTest::newRow("dp2 tp2 sp zero-3") << Layout{2, 1, 3, "1f1b", 1, false, "selective", 1, 2, true};
    // ZeRO with expert parallelism: dense state sharded over the data group, experts' over the
    // expert-data group.
    QTest::newRow("dp2 ep2 moe zero-1") << Layout{2, 1, 1, "1f1b", 1, true, "selective", 2};
    QTest::newRow("dp2 ep2 moe zero-2") << Layout{2, 1, 2, "1f1b", 1, true, "selective", 2};
    QTest::newRow("dp2 ep2 moe zero-3") << Layout{2, 1, 3, "1f1b", 1, true, "selective", 2};
    QTest::newRow("dp4 ep2 moe zero-1") << Layout{4, 1, 1, "1f1b", 1, true, "selective", 2};
    QTest::newRow("dp4 ep2 moe zero-3") << Layout{4, 1, 3, "1f1b", 1, true, "selective", 2};
    QTest::newRow("dp4 pp2 ep2 moe zero-1") << Layout{4, 2, 1, "1f1b", 1, true, "selective", 2};
    // The V schedules: two chunks per stage, stage 0 holding the model's first and last (the loss
    // and the tied embedding's both uses).
    QTest::newRow("pp2 zb-v") << Layout{1, 2, 0, "zb-v", 2};
    QTest::newRow("pp4 zb-v") << fourStageV(Layout{1, 4, 0, "zb-v", 2});
    QTest::newRow("pp2 dualpipev") << Layout{1, 2, 0, "dualpipev", 2};
    QTest::newRow("pp4 dualpipev") << fourStageV(Layout{1, 4, 0, "dualpipev", 2});
    QTest::newRow("pp4 tp2 sp zb-v") << fourStageV(Layout{1, 4, 0, "zb-v", 2, false, "selective", 1, 2, true});
    QTest::newRow("pp4 tp2 dualpipev") << fourStageV(Layout{1, 4, 0, "dualpipev", 2, false, "full", 1, 2});
    QTest::newRow("dp2 pp4 ep2 moe zb-v") << fourStageV(Layout{2, 4, 0, "zb-v", 2, true, "none", 2});
    QTest::newRow("dp2 pp4 ep2 moe dualpipev") << fourStageV(Layout{2, 4, 1, "dualpipev", 2, true, "selective", 2});
    QTest::newRow("dp2 pp2 tp2 ep2 sp moe zb-v") << Layout{2, 2, 0, "zb-v", 2, true, "selective", 2, 2, true};
    QTest::newRow("dp2 pp2 tp2 ep2 moe dualpipev") << Layout{2, 2, 1, "dualpipev", 2, true, "none", 2, 2};
}

void TestParallel::layoutEqualsOneDevice()
{
    // Gradients are summed by MPI and micro-batches run on other ranks, so only the order of fp32
    // additions differs from one device: ~1e-7 relative per step, far inside the 1e-5 asked for.
    QFETCH(Layout, layout);
    const QString tag = QString::fromLatin1(QTest::currentDataTag()).replace(' ', '-');
    const QString jobFile = write(tag + ".json", job(layout));
    const QString single = m_dir.filePath(tag + "-single"), parallel = m_dir.filePath(tag + "-parallel");
    const ProcessRun one = runProcess(QStringLiteral(MESHBENCH_AGENT),
                                      {"--job", jobFile, "--metrics", single + ".jsonl", "--save", single});
    QVERIFY2(one.exitCode == 0, qPrintable(one.err));
    const ProcessRun many =
        runProcess(QStringLiteral(MESHBENCH_MPIRUN),
                   mpirun(layout.ranks(), {"--job", jobFile, "--metrics", parallel + ".jsonl", "--save", parallel}));
    QVERIFY2(many.exitCode == 0, qPrintable(many.err));
    QVERIFY(many.out.contains(QStringLiteral("data parallel %1, pipeline %2").arg(layout.dp).arg(layout.pp)));
    QVERIFY(many.out.contains(QStringLiteral("tensor parallel %1").arg(layout.tp)));
    compareRuns(single, parallel, layout.ranks(), 0.003 * 10);
    if (layout.dp == 1)
        return;  // no data-parallel reduction to overlap
    // The same with every bucket reduced after the backward.
    json off = job(layout);
    off["parallel"]["overlap_grad_reduce"] = false;
    const QString plain = m_dir.filePath(tag + "-no-overlap");
    const ProcessRun noOverlap = runProcess(QStringLiteral(MESHBENCH_MPIRUN),
                                            mpirun(layout.ranks(), {"--job", write(tag + "-no-overlap.json", off),
                                                                    "--metrics", plain + ".jsonl", "--save", plain}));
    QVERIFY2(noOverlap.exitCode == 0, qPrintable(noOverlap.err));
    compareRuns(single, plain, layout.ranks(), 0.003 * 10);
}

void TestParallel::compareRuns(const QString& single, const QString& parallel, int ranks, double adamReach)
{
    const std::vector<json> a = readMetrics(single + ".jsonl"), b = readMetrics(parallel + ".jsonl");
    QCOMPARE(a.size(), std::size_t(10));
    QCOMPARE(b.size(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
        for (const char* key : {"loss", "aux_loss", "grad_norm"})
            QVERIFY2(agrees(b[i][key].get<double>(), a[i][key].get<double>(), 1e-5),
                     qPrintable(QStringLiteral("step %1 %2: one device %3, %4 ranks %5")
                                    .arg(i + 1)
                                    .arg(key)
                                    .arg(a[i][key].get<double>(), 0, 'g', 10)
                                    .arg(ranks)
                                    .arg(b[i][key].get<double>(), 0, 'g', 10)));
    const QString mismatch =
        checkpointMismatch(single + "/step-000010.safetensors", parallel + "/step-000010.safetensors", adamReach);
    QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
}

std::vector<std::vector<json>> TestParallel::spansOfStep(const Layout& layout, const QString& tag, int step,
                                                         QString* out)
{
    json doc = job(layout);
    doc["train"]["steps"] = 2;
    const QString spans = m_dir.filePath(tag + ".spans");
    const ProcessRun r = runProcess(QStringLiteral(MESHBENCH_MPIRUN),
                                    mpirun(layout.ranks(), {"--job", write(tag + ".json", doc), "--spans", spans}));
    if (r.exitCode != 0)
        qFatal("%s", qPrintable(r.err));
    if (out)
        *out = r.out;
    std::vector<std::vector<json>> ranks;
    for (int rank = 0; rank < layout.ranks(); ++rank) {
        QFile f(spans + ".rank" + QString::number(rank));
        if (!f.open(QIODevice::ReadOnly))
            qFatal("no spans for rank %d", rank);
        std::vector<json> records;
        for (const QByteArray& line : f.readAll().trimmed().split('\n')) {
            json j = json::parse(line.toStdString());
            if (j["step"] == step)
                records.push_back(std::move(j));
        }
        ranks.push_back(std::move(records));
    }
    return ranks;
}

void TestParallel::spansReproduceTheSchedule_data()
{
    QTest::addColumn<Layout>("layout");
    QTest::newRow("pp2 1f1b") << Layout{1, 2, 0, "1f1b"};
    QTest::newRow("pp4 gpipe") << Layout{1, 4, 0, "gpipe"};
    QTest::newRow("pp2 interleaved v2") << Layout{1, 2, 0, "interleaved", 2};
    QTest::newRow("pp4 zb-h1") << Layout{1, 4, 0, "zb-h1"};
    QTest::newRow("pp2 zb-v") << Layout{1, 2, 0, "zb-v", 2};
    QTest::newRow("pp4 dualpipev") << fourStageV(Layout{1, 4, 0, "dualpipev", 2});
}

void TestParallel::spansReproduceTheSchedule()
{
    // Every stage runs exactly the op list engine/plan builds (and simulates), op for op.
    QFETCH(Layout, layout);
    QString out;
    const auto ranks = spansOfStep(layout, QString::fromLatin1(QTest::currentDataTag()).replace(' ', '-'), 2, &out);
    plan::ScheduleShape shape{plan::ScheduleKind::OneFOneB, layout.pp, layout.microbatches, layout.virtualStages, 0};
    QVERIFY(plan::parseScheduleName(layout.schedule, shape.kind));
    const plan::Schedule expected = plan::buildSchedule(shape);
    for (int rank = 0; rank < layout.ranks(); ++rank) {
        QStringList executed, planned;
        for (const json& s : ranks[std::size_t(rank)])
            if (s["type"] == "span" && s["mb"].get<int>() >= 0)
                executed << QStringLiteral("%1(%2,%3)")
                                .arg(QString::fromStdString(s["kind"]))
                                .arg(s["mb"].get<int>())
                                .arg(s["chunk"].get<int>());
        for (const plan::Op& op : expected.stages[std::size_t(rank)])
            planned << QStringLiteral("%1(%2,%3)")
                           .arg(QString::fromStdString(std::string(plan::opKindName(op.kind))))
                           .arg(op.microbatch)
                           .arg(op.chunk);
        QCOMPARE(executed, planned);
    }
    // The measured bubble is reported beside the planner's.
    QVERIFY2(out.contains(QRegularExpression("bubble \\d+\\.\\d% \\(plan \\d+\\.\\d%\\)")), qPrintable(out));
}

void TestParallel::activationMemoryFollowsTheSchedule_data()
{
    QTest::addColumn<int>("pp");
    QTest::newRow("pp2") << 2;
    QTest::newRow("pp4") << 4;
}

void TestParallel::activationMemoryFollowsTheSchedule()
{
    // GPipe keeps all m = 4 micro-batches' activations, so its peak on a stage over m is one
    // micro-batch's worth there; 1F1B's peak must then be that times the micro-batches the
    // schedule keeps in flight on the stage (min(p - r, m)), as the simulator counts them.
    // Without recompute every activation buffer lives from its forward to its backward; selective
    // recompute would add a one-layer transient (core attention) to both peaks.
    QFETCH(int, pp);
    auto peaks = [&](const char* schedule) {
        const auto ranks = spansOfStep(Layout{1, pp, 0, schedule, 1, false, "none"},
                                       QStringLiteral("mem-%1-%2").arg(pp).arg(schedule), 2);
        std::vector<double> peak;
        for (const auto& records : ranks)
            for (const json& r : records)
                if (r["type"] == "memory")
                    peak.push_back(r["bytes"]["activations"]["peak"].get<double>());
        return peak;
    };
    const std::vector<double> gpipe = peaks("gpipe"), oneF = peaks("1f1b");
    QCOMPARE(int(gpipe.size()), pp);
    QCOMPARE(int(oneF.size()), pp);
    const plan::ScheduleShape shape{plan::ScheduleKind::OneFOneB, pp, 4, 1, 0};
    const plan::Schedule schedule = plan::buildSchedule(shape);
    const plan::SimulationResult sim = plan::simulate(schedule, plan::OpCosts::uniform(shape, 1, 2, 0));
    for (int r = 0; r < pp; ++r) {
        const double perMicrobatch = gpipe[std::size_t(r)] / 4;
        QVERIFY(perMicrobatch > 0);
        QCOMPARE(oneF[std::size_t(r)], perMicrobatch * sim.peakInFlight[std::size_t(r)]);
        QCOMPARE(sim.peakInFlight[std::size_t(r)], std::min(pp - r, 4));
    }
}

void TestParallel::checkpointMovesBetweenLayouts()
{
    // Five steps on one device, five more on dp2 x pp2 x ep2 from that checkpoint: the same ten
    // losses as ten steps on one device (each rank loads its slice: its stage, its experts).
    const Layout layout{2, 2, 0, "1f1b", 1, true, "selective", 2};
    const QString jobFile = write("move.json", job(layout));
    const QString dir = m_dir.filePath("move");
    const ProcessRun straight =
        runProcess(QStringLiteral(MESHBENCH_AGENT),
                   {"--job", jobFile, "--metrics", dir + "-straight.jsonl", "--save", dir, "--save-every", "5"});
    QVERIFY2(straight.exitCode == 0, qPrintable(straight.err));
    const ProcessRun resumed =
        runProcess(QStringLiteral(MESHBENCH_MPIRUN),
                   mpirun(layout.ranks(), {"--job", jobFile, "--steps", "5", "--load", dir + "/step-000005.safetensors",
                                           "--metrics", dir + "-resumed.jsonl"}));
    QVERIFY2(resumed.exitCode == 0, qPrintable(resumed.err));
    const std::vector<json> a = readMetrics(dir + "-straight.jsonl"), b = readMetrics(dir + "-resumed.jsonl");
    QCOMPARE(b.size(), std::size_t(5));
    for (std::size_t i = 0; i < b.size(); ++i) {
        QCOMPARE(b[i]["step"].get<int>(), a[5 + i]["step"].get<int>());
        QVERIFY2(agrees(b[i]["loss"].get<double>(), a[5 + i]["loss"].get<double>(), 1e-5),
                 qPrintable(QStringLiteral("step %1").arg(b[i]["step"].get<int>())));
    }
}

void TestParallel::bucketsReduceUnderTheBackward()
{
    // The parameter bytes of this model, from a one-device checkpoint's tensors.
    const QString jobFile = write("buckets.json", job(Layout{2}));
    const QString dir = m_dir.filePath("buckets-single");
    const ProcessRun one =
        runProcess(QStringLiteral(MESHBENCH_AGENT), {"--job", jobFile, "--steps", "1", "--save", dir});
    QVERIFY2(one.exitCode == 0, qPrintable(one.err));
    const agent::SafetensorsFile checkpoint =
        agent::SafetensorsFile::open((dir + "/step-000001.safetensors").toStdString());
    std::uint64_t parameterBytes = 0, tensors = 0;
    for (const std::string& name : checkpoint.names()) {
        if (name.rfind("optimizer.", 0) == 0)
            continue;
        std::uint64_t n = 1;
        for (std::int64_t d : checkpoint.shape(name))
            n *= std::uint64_t(d);
        parameterBytes += 4 * n;
        ++tensors;
    }

    for (const bool overlap : {true, false}) {
        Layout layout{2};
        layout.overlap = overlap;
        const auto ranks = spansOfStep(layout, QStringLiteral("buckets-%1").arg(overlap), 2);
        for (const std::vector<json>& spans : ranks) {
            std::int64_t lastBackwardEnd = 0, firstReduceBegin = std::numeric_limits<std::int64_t>::max();
            std::uint64_t bytes = 0;
            int buckets = 0;
            for (const json& s : spans) {
                if (s["kind"] == "B")
                    lastBackwardEnd = std::max(lastBackwardEnd, s["end_ns"].get<std::int64_t>());
                if (s["kind"] == "dp-reduce") {
                    firstReduceBegin = std::min(firstReduceBegin, s["begin_ns"].get<std::int64_t>());
                    bytes += s["bytes"].get<std::uint64_t>();
                    ++buckets;
                }
            }
            // 10 KiB buckets over this model's ~150 KB: a dozen or more, each parameter in one,
            // with at most 15 floats of alignment after each tensor.
            QVERIFY2(buckets >= 8, qPrintable(QString::number(buckets)));
            QVERIFY2(bytes >= parameterBytes && bytes <= parameterBytes + 60 * tensors,
                     qPrintable(QStringLiteral("%1 bytes reduced, %2 of parameters").arg(bytes).arg(parameterBytes)));
            // With overlap the first bucket starts inside the last backward (the agent starts it
            // before that backward returns and its span is closed); without, after it.
            if (overlap)
                QVERIFY(firstReduceBegin < lastBackwardEnd);
            else
                QVERIFY(firstReduceBegin >= lastBackwardEnd);
        }
    }
}

void TestParallel::wrongRankCountIsRefused()
{
    const ProcessRun r =
        runProcess(QStringLiteral(MESHBENCH_MPIRUN), mpirun(3, {"--job", write("np.json", job(Layout{2}))}));
    QVERIFY(r.exitCode != 0);
    QVERIFY2((r.out + r.err).contains("the layout needs dp x pp x tp = 2 ranks but mpirun started 3"),
             qPrintable(r.err));
}

void TestParallel::zero3KeepsAShardOfTheParameters()
{
    // ZeRO-3 holds 1/dp of the flat parameter buffer between steps and gathers one tensor group at
    // a time, so its parameter bytes are half of plain data parallelism's on dp = 2 (up to the
    // shards' 64-byte padding), and its peak stays below the whole model.
    auto paramBytes = [&](int zero) {
        const auto ranks = spansOfStep(Layout{2, 1, zero}, QStringLiteral("zero3-mem-%1").arg(zero), 2);
        for (const json& r : ranks[0])
            if (r["type"] == "memory")
                return std::pair{r["bytes"]["params"]["current"].get<double>(),
                                 r["bytes"]["params"]["peak"].get<double>()};
        qFatal("no memory sample");
    };
    const auto [whole, wholePeak] = paramBytes(0);
    const auto [shard, shardPeak] = paramBytes(3);
    QVERIFY(whole > 0);
    QVERIFY2(shard >= whole / 2 && shard <= whole / 2 + 64,
             qPrintable(QStringLiteral("%1 vs %2").arg(shard).arg(whole)));
    QVERIFY(shardPeak < wholePeak);
    QCOMPARE(wholePeak, whole);
}

void TestParallel::demoEqualsOneDevice_data()
{
    QTest::addColumn<int>("zero");
    QTest::newRow("zero-0") << 0;
    QTest::newRow("zero-1") << 1;
}

void TestParallel::demoEqualsOneDevice()
{
    // The demo job itself, dp2 x pp2 x tp2 x ep2 on 8 ranks, against one device for 10 steps. Its
    // MoE layers route top-2 with a capacity of 1.25, so a last-bit difference could flip a
    // near-tie; the losses must still agree to 1e-5 (they agree to all printed digits here).
    // With ZeRO-1 the dense optimizer state is sharded over dp 2, the experts' not at all (ep 2
    // leaves one rank per expert-data group).
    QFETCH(int, zero);
    QFile file(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"));
    QVERIFY(file.open(QIODevice::ReadOnly));
    json doc = json::parse(file.readAll().toStdString());
    doc["parallel"]["zero"] = zero;
    const QString tag = QStringLiteral("demo-zero%1").arg(zero);
    const QString demo = write(tag + ".json", doc);
    const QString one = m_dir.filePath(tag + "-one.jsonl"), eight = m_dir.filePath(tag + "-eight.jsonl");
    const QString oneDir = m_dir.filePath(tag + "-one"), eightDir = m_dir.filePath(tag + "-eight");
    const ProcessRun single = runProcess(QStringLiteral(MESHBENCH_AGENT),
                                         {"--job", demo, "--steps", "10", "--metrics", one, "--save", oneDir});
    QVERIFY2(single.exitCode == 0, qPrintable(single.err));
    QElapsedTimer clock;
    clock.start();
    const ProcessRun parallel =
        runProcess(QStringLiteral(MESHBENCH_MPIRUN),
                   mpirun(8, {"--job", demo, "--steps", "10", "--metrics", eight, "--save", eightDir}));
    QVERIFY2(parallel.exitCode == 0, qPrintable(parallel.err));
    qInfo("the demo's 10 steps on 8 ranks took %lld ms", static_cast<long long>(clock.elapsed()));
    const std::vector<json> a = readMetrics(one), b = readMetrics(eight);
    QCOMPARE(b.size(), a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
        for (const char* key : {"loss", "aux_loss", "grad_norm"})
            QVERIFY2(agrees(b[i][key].get<double>(), a[i][key].get<double>(), 1e-5),
                     qPrintable(QStringLiteral("step %1 %2").arg(i + 1).arg(key)));
    // The step line's expert figures cover the whole model (both stages' MoE layers, every data
    // rank's tokens): the same routed and kept counts as one device, so the same figures, and the
    // same words on the console.
    const QRegularExpression expertText(QStringLiteral("experts max/mean \\S+ dropped \\S+"));
    const auto expertLines = [&](const QString& out) {
        QStringList lines;
        for (const QString& line : out.split(QLatin1Char('\n')))
            if (line.startsWith(QLatin1String("step ")))
                lines << expertText.match(line).captured(0);
        return lines;
    };
    QCOMPARE(expertLines(parallel.out), expertLines(single.out));
    QCOMPARE(expertLines(single.out).size(), 10);
    QVERIFY(!expertLines(single.out).front().isEmpty());
    for (std::size_t i = 0; i < a.size(); ++i)
        for (const char* key : {"expert_imbalance", "expert_dropped"})
            QVERIFY2(b[i][key].get<double>() == a[i][key].get<double>(),
                     qPrintable(QStringLiteral("step %1 %2: one device %3, 8 ranks %4")
                                    .arg(i + 1)
                                    .arg(key)
                                    .arg(a[i][key].get<double>())
                                    .arg(b[i][key].get<double>())));
    // The model line names the whole model's parameters, and rank 0's share as its share.
    const QRegularExpression modelLine(QStringLiteral("^model (\\d+) parameters( \\(this rank holds (\\d+)\\))?,"),
                                       QRegularExpression::MultilineOption);
    const QRegularExpressionMatch whole = modelLine.match(single.out), ranked = modelLine.match(parallel.out);
    QVERIFY2(whole.hasMatch() && ranked.hasMatch(), qPrintable(single.out.left(300) + parallel.out.left(300)));
    QCOMPARE(ranked.captured(1), whole.captured(1));
    QVERIFY(whole.captured(3).isEmpty());
    QVERIFY(ranked.captured(3).toLongLong() > 0 && ranked.captured(3).toLongLong() < whole.captured(1).toLongLong());
    // The demo warms its learning rate up over 10 steps: Adam's reach is lr x (1 + ... + 10) / 10.
    const QString mismatch =
        checkpointMismatch(oneDir + "/step-000010.safetensors", eightDir + "/step-000010.safetensors", 0.003 * 5.5);
    QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
}

void TestParallel::aDyingRankEndsTheJob()
{
    // One rank killed mid-run: the job must end within seconds, non-zero, naming the rank.
    json doc = job(Layout{2, 1, 0, "1f1b", 1, true});
    doc["train"]["steps"] = 1000000;
    QProcess launcher;
    launcher.start(QStringLiteral(MESHBENCH_MPIRUN), mpirun(2, {"--job", write("long.json", doc)}));
    QVERIFY(launcher.waitForStarted());
    // Wait until training runs, then kill the second rank.
    QElapsedTimer clock;
    clock.start();
    QByteArray out;
    while (!out.contains("step ") && clock.elapsed() < 60000) {
        launcher.waitForReadyRead(1000);
        out += launcher.readAllStandardOutput();
    }
    QVERIFY2(out.contains("step "), "the job never started training");
    QProcess pgrep;
    pgrep.start("pgrep", {"-P", QString::number(launcher.processId()), "meshbench-agent"});
    QVERIFY(pgrep.waitForFinished());
    const QList<QByteArray> pids = pgrep.readAllStandardOutput().trimmed().split('\n');
    QCOMPARE(pids.size(), 2);
    QVERIFY(::kill(pid_t(pids.back().toLongLong()), SIGKILL) == 0);
    clock.restart();
    QVERIFY2(launcher.waitForFinished(20000), "the job outlived its dead rank by 20 s");
    qInfo("the job ended %lld ms after a rank was killed", static_cast<long long>(clock.elapsed()));
    QVERIFY(launcher.exitCode() != 0 || launcher.exitStatus() != QProcess::NormalExit);
    const QString all = QString::fromUtf8(out + launcher.readAllStandardOutput() + launcher.readAllStandardError());
    QVERIFY2(all.contains("rank 1"), qPrintable(all.right(2000)));
}

void TestParallel::aFailingRankNamesItselfAndTheCause()
{
    // Bad input met by the ranks (a truncated checkpoint): each says which rank it is and why,
    // and the job ends at once with a non-zero status.
    const QString file = m_dir.filePath("truncated.safetensors");
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":", 13));
    f.close();
    QElapsedTimer clock;
    clock.start();
    const ProcessRun r = runProcess(QStringLiteral(MESHBENCH_MPIRUN),
                                    mpirun(2, {"--job", write("bad-load.json", job(Layout{2})), "--load", file}));
    QVERIFY(r.exitCode != 0);
    QVERIFY(clock.elapsed() < 20000);
    QVERIFY2(QRegularExpression("meshbench-agent: rank [01]: checkpoint: ").match(r.err).hasMatch(), qPrintable(r.err));
}

QTEST_APPLESS_MAIN(TestParallel)
#include "tst_parallel.moc"
