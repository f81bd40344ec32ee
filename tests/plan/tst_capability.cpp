// The agent's capability rule (plan::agentCanRun) on hand-picked specs: each clause refuses on its
// own key, a supported layout (ZeRO with ep included) passes, and parseJobSpec reports the refusals
// beside a valid layout.

#include "plan/capability.h"

#include "common/demo_spec.h"

#include <QtTest>

using namespace meshbench::plan;
using meshbench::testing::demoSpec;
using nlohmann::json;

namespace {

LoadResult loadExample(const char* name)
{
    QFile f(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/") + name);
    if (!f.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", name);
    return parseJobSpec(f.readAll().toStdString());
}

// The one key the rule refuses `spec` on; both forms of the rule must say no.
QString refusedKey(const JobSpec& spec, QString* message = nullptr)
{
    const std::vector<SpecError> refusals = agentRefusals(spec);
    if (agentCanRun(spec) || refusals.size() != 1)
        return QStringLiteral("<%1 refusals, agentCanRun %2>").arg(refusals.size()).arg(agentCanRun(spec));
    if (message)
        *message = QString::fromStdString(refusals.front().message);
    return QString::fromStdString(refusals.front().path);
}

}  // namespace

class TestCapability : public QObject {
    Q_OBJECT
private slots:
    void theDemoRuns();
    void zeroWithExpertParallelismRuns();
    void cudaIsTheAgentsToRefuse();
    void oddHeadDimensionIsRefused();
    void pipelineTagsAreBounded();
    void everyReasonIsReportedAtOnce();
    void oneDeviceRunsWhatTheMeshDoesNot();
    void loadingReportsTheRefusalsBesideAValidLayout();
};

void TestCapability::theDemoRuns()
{
    const JobSpec spec = demoSpec();  // dp2 x pp2 x tp2, ep 2, zero 0, cpu
    QVERIFY(validateLayout(spec).empty());
    QVERIFY(agentCanRun(spec));
    QVERIFY(agentRefusals(spec).empty());
    // ZeRO without expert parallelism, every stage the layout allows, runs.
    JobSpec dense = spec;
    dense.parallel.ep = 1;
    dense.parallel.zero = 1;
    QVERIFY(validateLayout(dense).empty());
    QVERIFY(agentCanRun(dense));
    dense.parallel.pp = 1;
    dense.parallel.dp = 4;
    for (int zero = 0; zero <= 3; ++zero) {
        dense.parallel.zero = zero;
        QVERIFY(validateLayout(dense).empty());
        QVERIFY2(agentCanRun(dense), qPrintable(QStringLiteral("zero %1").arg(zero)));
    }
}

void TestCapability::zeroWithExpertParallelismRuns()
{
    // The agent shards expert state over the expert-data group (agent/parallel/zero_shards), so
    // ZeRO 1-3 with ep 2 is run, not refused.
    JobSpec spec = demoSpec();
    QCOMPARE(spec.parallel.ep, 2);
    for (int zero = 1; zero <= 3; ++zero) {
        spec.parallel.zero = zero;
        spec.parallel.pp = zero >= 2 ? 1 : 2;  // ZeRO-2/3 need pp 1 (validateLayout)
        spec.parallel.dp = zero >= 2 ? 4 : 2;
        QVERIFY(validateLayout(spec).empty());
        QVERIFY2(agentCanRun(spec), qPrintable(QStringLiteral("zero %1").arg(zero)));
        QVERIFY2(agentRefusals(spec).empty(), qPrintable(QStringLiteral("zero %1").arg(zero)));
    }
    // Still refused there for another reason: the rule keeps its other clauses with ep and ZeRO on.
    spec.model.hidden = 3 * spec.model.heads;  // a head dimension of 3
    QCOMPARE(refusedKey(spec), QString("model.hidden"));
}

void TestCapability::cudaIsTheAgentsToRefuse()
{
    // Whether a GPU is there is known on the agent's host only: the agent refuses backend cuda
    // without one (tst_agent_cli), the planner does not.
    JobSpec spec = demoSpec();
    for (BackendKind backend : {BackendKind::Cuda, BackendKind::Auto, BackendKind::Cpu}) {
        spec.backend = backend;
        QVERIFY(agentCanRun(spec));
        QVERIFY(agentRefusals(spec).empty());
    }
}

void TestCapability::oddHeadDimensionIsRefused()
{
    // hidden 96 over 32 heads: head dimension 3, which rotary embeddings cannot pair.
    JobSpec spec = demoSpec();
    spec.model.hidden = 96;
    spec.model.heads = 32;
    spec.model.kvHeads = 32;
    QVERIFY(validateLayout(spec).empty());
    QString message;
    QCOMPARE(refusedKey(spec, &message), QString("model.hidden"));
    QVERIFY2(message.contains("head dimension of 3") && message.contains("multiple of 64"), qPrintable(message));
    spec.model.hidden = 128;  // head dimension 4
    QVERIFY(agentCanRun(spec));
}

void TestCapability::pipelineTagsAreBounded()
{
    // 2 x m x pp x v tags: pp 2, v 1 allows m up to 8191 (32,764 tags); 8192 needs 32,768.
    JobSpec spec = demoSpec();
    spec.parallel.microbatches = 8191;
    QVERIFY(validateLayout(spec).empty());
    QVERIFY(agentCanRun(spec));
    spec.parallel.microbatches = 8192;
    QVERIFY(validateLayout(spec).empty());
    QString message;
    QCOMPARE(refusedKey(spec, &message), QString("parallel.microbatches"));
    QVERIFY2(message.contains("needs 32768 pipeline message tags"), qPrintable(message));
    // Interleaving multiplies the messages: pp 2 x v 2 x m 4096 is 32,768 again.
    spec.parallel.microbatches = 4096;
    spec.parallel.schedule = ScheduleKind::Interleaved;
    spec.parallel.virtualStages = 2;
    QVERIFY(validateLayout(spec).empty());
    QCOMPARE(refusedKey(spec), QString("parallel.microbatches"));
    // Without a pipeline no message is sent between stages, however many micro-batches.
    spec.parallel.schedule = ScheduleKind::OneFOneB;
    spec.parallel.virtualStages = 1;
    spec.parallel.pp = 1;
    spec.parallel.dp = 4;
    spec.parallel.microbatches = 20000;
    QVERIFY(validateLayout(spec).empty());
    QVERIFY(agentCanRun(spec));
}

void TestCapability::everyReasonIsReportedAtOnce()
{
    JobSpec spec = demoSpec();
    spec.model.hidden = 96;
    spec.model.heads = 32;
    spec.model.kvHeads = 32;
    spec.parallel.microbatches = 8192;
    spec.parallel.zero = 1;  // with ep 2: no longer a reason
    QVERIFY(validateLayout(spec).empty());
    QVERIFY(!agentCanRun(spec));
    const std::vector<SpecError> refusals = agentRefusals(spec);
    QCOMPARE(refusals.size(), std::size_t(2));
    QCOMPARE(QString::fromStdString(refusals[0].path), QString("model.hidden"));
    QCOMPARE(QString::fromStdString(refusals[1].path), QString("parallel.microbatches"));
}

void TestCapability::oneDeviceRunsWhatTheMeshDoesNot()
{
    // The agent asks about the layout as it runs: mpirun's ranks, or the one-device collapse.
    // Pipeline tags only bound a pipeline: the demo's pp 2 with 8192 micro-batches names 32,768
    // messages across its ranks, and none on one device (pp 1, 16,384 micro-batches of the same size).
    JobSpec spec = demoSpec();
    spec.parallel.microbatches = 8192;
    QVERIFY(validateLayout(spec).empty());
    QCOMPARE(refusedKey(specAsRun(spec, 8)), QString("parallel.microbatches"));
    QVERIFY(agentCanRun(specAsRun(spec, 1)));
    QVERIFY(agentCanRun(singleDeviceSpec(spec)));
    QCOMPARE(singleDeviceSpec(spec).parallel.microbatches, 16384);
    // What no layout changes stays refused on one device.
    spec.model.hidden = 3 * spec.model.heads;
    QCOMPARE(refusedKey(singleDeviceSpec(spec)), QString("model.hidden"));
}

void TestCapability::loadingReportsTheRefusalsBesideAValidLayout()
{
    const LoadResult demo = loadExample("demo.json");
    QVERIFY(demo.valid());
    QVERIFY(demo.runnable());
    QVERIFY(demo.refusals.empty());

    // Mixtral and DeepSeek-MoE use ZeRO-1 with ep 8, which the agent now runs.
    for (const char* name : {"mixtral-8x7b.json", "deepseek-moe.json"}) {
        const LoadResult moe = loadExample(name);
        QVERIFY2(moe.valid(), name);
        QCOMPARE(moe.spec->parallel.zero, 1);
        QCOMPARE(moe.spec->parallel.ep, 8);
        QVERIFY2(moe.runnable(), name);
        QVERIFY2(moe.refusals.empty(), name);
    }

    // The same example asking for the cuda backend: valid, priced and run.
    QFile mixtral(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/mixtral-8x7b.json"));
    QVERIFY(mixtral.open(QIODevice::ReadOnly));
    json cuda = json::parse(mixtral.readAll().toStdString());
    cuda["backend"] = "cuda";
    const LoadResult onCuda = loadJobSpec(cuda);
    QVERIFY(onCuda.valid());
    QVERIFY(onCuda.runnable());
    QVERIFY(onCuda.refusals.empty());

    // A layout error is reported as such; the refusals wait for a valid layout.
    json document = json::parse(R"({"model": {"layers": 4, "hidden": 96, "heads": 32, "vocab": 128, "seq_len": 16},
                                    "parallel": {"dp": 1, "pp": 3},
                                    "cluster": {"nodes": 1, "devices_per_node": 3, "device": "cpu"}})");
    LoadResult odd = loadJobSpec(document);
    QVERIFY(odd.spec);
    QVERIFY(!odd.errors.empty());
    QVERIFY(odd.refusals.empty());
    document["parallel"]["pp"] = 1;
    document["cluster"]["devices_per_node"] = 1;
    odd = loadJobSpec(document);
    QVERIFY(odd.valid());
    QCOMPARE(odd.refusals.size(), std::size_t(1));
    QCOMPARE(QString::fromStdString(odd.refusals.front().path), QString("model.hidden"));
}

QTEST_APPLESS_MAIN(TestCapability)
#include "tst_capability.moc"
