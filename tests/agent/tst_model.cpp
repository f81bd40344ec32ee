// The whole model and trainer: gradients against finite differences, recompute modes against
// each other, the activations it allocates against the planner's table of them, checkpoints resume
// bit for bit, and training on the Markov source approaches its entropy floor.

#include "agent/checkpoint/safetensors.h"
#include "agent/data/markov_source.h"
#include "agent/train/trainer.h"

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/openblas_core.h"
#include "plan/agent_activations.h"
#include "plan/cost_model.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <random>

using namespace meshbench;
using namespace meshbench::agent;
using nlohmann::json;

namespace {

// With topK < experts, a perturbation can flip which experts a token picks and the loss jumps;
// gradient checks therefore route every token to every expert (topK = experts), which keeps the
// softmax weights, permutation and combine on the path. The kernel tests check top-k selection
// and dropping under fixed routing.
json tinyJob(bool moe, const char* norm, const char* activation, bool tied, int topK = 2)
{
    json model = {{"layers", 2},
                  {"hidden", 16},
                  {"heads", 4},
                  {"kv_heads", 2},
                  {"ffn_hidden", 24},
                  {"vocab", 32},
                  {"seq_len", 8},
                  {"norm", norm},
                  {"activation", activation},
                  {"tied_embeddings", tied}};
    if (moe)
        model["moe"] = {{"experts", 4},        {"top_k", topK},          {"moe_ffn_hidden", 12},
                        {"every_n_layers", 1}, {"capacity_factor", 4.0}, {"aux_loss_coef", 0.01}};
    return {{"model", model},
            {"parallel", {{"microbatches", 2}, {"micro_batch_size", 2}, {"recompute", "none"}}},
            {"cluster", {{"nodes", 1}, {"devices_per_node", 1}, {"device", "cpu"}}},
            {"train", {{"steps", 3}, {"lr", 0.01}, {"seed", 7}}}};
}

plan::JobSpec specOf(const json& doc)
{
    plan::LoadResult loaded = plan::loadJobSpec(doc);
    if (!loaded.valid())
        qFatal("test job does not load: %s", loaded.errors.front().message.c_str());
    return *loaded.spec;
}

// Loss of one micro-batch (mean cross-entropy + load-balancing loss) at the model's current parameters.
double lossOf(GptModel& model, const std::vector<std::int32_t>& tokens, int batch, bool keepGradients)
{
    const float lossScale = float(1.0 / double(batch * model.spec().seqLen));
    ForwardResult result;
    auto activations = model.forward({tokens.data(), batch}, lossScale, 1.0f, result);
    if (keepGradients) {
        model.zeroGradients();
        model.backward(*activations);
    }
    return result.lossSum * lossScale + result.auxLoss;
}

}  // namespace

class TestModel : public QObject {
    Q_OBJECT
private slots:
    void parameterCountMatchesThePlanner();
    void gradientsMatchFiniteDifferences_data();
    void gradientsMatchFiniteDifferences();
    void recomputeModesGiveIdenticalGradients();
    void activationsAreThePlannersTable_data();
    void activationsAreThePlannersTable();
    void checkpointResumesBitForBit();
    void checkpointFromAnotherModelIsRefused();
    void demoModelApproachesEntropyFloor();
};

void TestModel::parameterCountMatchesThePlanner()
{
    // The planner counts parameters with Megatron's formula, which leaves out the router's E x h
    // weights of every MoE layer; the model's tensors must agree with it to the parameter.
    for (const char* file : {"demo.json", "gpt3-175b.json", "llama3-70b.json", "mixtral-8x7b.json"}) {
        QFile f(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/") + file);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const plan::LoadResult loaded = plan::parseJobSpec(f.readAll().toStdString());
        QVERIFY(loaded.valid());
        const plan::ModelSpec& m = loaded.spec->model;
        const ParameterLayout layout(m);  // the index only: no memory is allocated
        const double routers = double(m.moeLayersIn(0, m.layers)) * m.moe.experts * double(m.hidden);
        QCOMPARE(double(layout.parameterCount()), plan::countParameters(m).total + routers);
    }
}

void TestModel::gradientsMatchFiniteDifferences_data()
{
    QTest::addColumn<bool>("moe");
    QTest::addColumn<QString>("norm");
    QTest::addColumn<QString>("activation");
    QTest::addColumn<bool>("tied");
    QTest::newRow("dense layernorm gelu tied") << false << "layernorm"
                                               << "gelu" << true;
    QTest::newRow("dense rmsnorm swiglu untied") << false << "rmsnorm"
                                                 << "swiglu" << false;
    QTest::newRow("moe rmsnorm swiglu") << true << "rmsnorm"
                                        << "swiglu" << true;
    QTest::newRow("moe layernorm gelu untied") << true << "layernorm"
                                               << "gelu" << false;
}

void TestModel::gradientsMatchFiniteDifferences()
{
    // For every tensor, the directional derivative along a random direction u inside that tensor:
    // (L(theta + eps u) - L(theta - eps u)) / (2 eps) against grad . u. The loss is computed in
    // fp32 (about 1e-7 relative, i.e. ~4e-7 absolute at L ~ ln 32); with eps = 1e-2 and |u| = 1
    // the finite difference carries ~2e-5 of rounding noise and O(eps^2) truncation, so we ask for
    // 2% relative agreement, or 2e-4 absolute where the directional derivative is tiny.
    QFETCH(bool, moe);
    QFETCH(QString, norm);
    QFETCH(QString, activation);
    QFETCH(bool, tied);
    const plan::JobSpec spec = specOf(tinyJob(moe, qPrintable(norm), qPrintable(activation), tied, 4));
    kernels::CpuBackend backend;
    Trainer trainer(spec, backend);
    trainer.initialize();
    GptModel& model = trainer.model();
    const int batch = 2;
    std::vector<std::int32_t> tokens(std::size_t(batch) * 9);
    for (int b = 0; b < batch; ++b)
        trainer.sampleTokens(b, tokens.data() + b * 9);

    lossOf(model, tokens, batch, true);
    float* params = static_cast<float*>(model.parameters().data);
    const float* grads = static_cast<const float*>(model.gradients().data);
    const std::vector<float> analytic(grads, grads + model.layout().totalSize());
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    const float eps = 1e-2f;
    for (const TensorView& v : model.layout().views()) {
        std::vector<float> u(v.size);
        double norm2 = 0;
        for (float& x : u) {
            x = normal(rng);
            norm2 += double(x) * x;
        }
        double predicted = 0;
        for (std::size_t i = 0; i < v.size; ++i) {
            u[i] = float(u[i] / std::sqrt(norm2));
            predicted += double(analytic[v.offset + i]) * u[i];
        }
        const std::vector<float> saved(params + v.offset, params + v.offset + v.size);
        for (std::size_t i = 0; i < v.size; ++i)
            params[v.offset + i] = saved[i] + eps * u[i];
        const double up = lossOf(model, tokens, batch, false);
        for (std::size_t i = 0; i < v.size; ++i)
            params[v.offset + i] = saved[i] - eps * u[i];
        const double down = lossOf(model, tokens, batch, false);
        std::copy(saved.begin(), saved.end(), params + v.offset);
        const double numeric = (up - down) / (2 * eps);
        const double tolerance = std::max(2e-4, 0.02 * std::abs(numeric));
        QVERIFY2(std::abs(numeric - predicted) <= tolerance,
                 qPrintable(QStringLiteral("%1: finite difference %2, backward %3")
                                .arg(QString::fromStdString(v.name))
                                .arg(numeric, 0, 'g', 8)
                                .arg(predicted, 0, 'g', 8)));
    }
}

void TestModel::recomputeModesGiveIdenticalGradients()
{
    // Recomputation repeats the same arithmetic, so gradients must agree bit for bit.
    std::vector<std::vector<float>> gradients;
    for (const char* mode : {"none", "selective", "full"}) {
        json doc = tinyJob(true, "rmsnorm", "swiglu", false);
        doc["parallel"]["recompute"] = mode;
        const plan::JobSpec spec = specOf(doc);
        kernels::CpuBackend backend;
        Trainer trainer(spec, backend);
        trainer.initialize();
        std::vector<std::int32_t> tokens(2 * 9);
        trainer.sampleTokens(0, tokens.data());
        trainer.sampleTokens(1, tokens.data() + 9);
        lossOf(trainer.model(), tokens, 2, true);
        const float* g = static_cast<const float*>(trainer.model().gradients().data);
        gradients.emplace_back(g, g + trainer.model().layout().totalSize());
    }
    QVERIFY(gradients[0] == gradients[1]);
    QVERIFY(gradients[0] == gradients[2]);
}

void TestModel::activationsAreThePlannersTable_data()
{
    QTest::addColumn<bool>("moe");
    QTest::addColumn<QString>("recompute");
    for (bool moe : {false, true})
        for (const char* mode : {"none", "selective", "full"})
            QTest::newRow(qPrintable(QStringLiteral("%1 %2").arg(moe ? "moe" : "dense", mode))) << moe << mode;
}

void TestModel::activationsAreThePlannersTable()
{
    // The model allocates every activation from plan/agent_activations.h's table and the planner
    // adds the same entries up: on one device the ledger's Activations category holds the chunk's
    // kept bytes after the forward, and peaks as the planner says in the forward and the backward.
    QFETCH(bool, moe);
    QFETCH(QString, recompute);
    json doc = tinyJob(moe, "layernorm", "swiglu", false);
    if (moe)
        doc["model"]["moe"]["every_n_layers"] = 2;  // a dense layer and an MoE layer
    doc["parallel"]["recompute"] = recompute.toStdString();
    const plan::JobSpec spec = specOf(doc);
    kernels::CpuBackend backend;
    GptModel model(spec.model, spec.parallel.recompute, backend);
    std::vector<float> params(model.layout().totalSize());
    initializeParameters(model.layout(), spec.model, 7, params.data());
    backend.upload(model.parameters(), params.data(), params.size());
    const int batch = spec.parallel.microBatchSize, s = int(spec.model.seqLen);
    std::vector<std::int32_t> tokens(std::size_t(batch) * (s + 1));
    for (std::size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = std::int32_t((i * 7 + 3) % std::size_t(spec.model.vocab));

    MemoryLedger& ledger = MemoryLedger::instance();
    const std::size_t category = std::size_t(MemoryCategory::Activations);
    auto current = [&] { return double(ledger.usage().current[category]); };
    auto peak = [&] { return double(ledger.usage().peak[category]); };
    const double before = current();
    const plan::AgentChunkActivations planned = plan::agentChunkActivations(spec, 0);
    ledger.resetPeaks();
    ForwardResult result;
    GptModel::ActivationsPtr activations = model.forward({tokens.data(), batch}, 1.0f, 1.0f, result);
    QCOMPARE(current() - before, planned.kept);
    QCOMPARE(peak() - before, planned.forwardPeak);
    ledger.resetPeaks();
    model.backward(*activations);
    QCOMPARE(peak() - before, planned.backwardPeak);
    activations.reset();
    QCOMPARE(current(), before);
}

void TestModel::checkpointResumesBitForBit()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = dir.filePath("step-3.safetensors").toStdString();
    const plan::JobSpec spec = specOf(tinyJob(true, "layernorm", "gelu", false));

    std::vector<double> straight;
    {
        kernels::CpuBackend backend;
        Trainer trainer(spec, backend);
        trainer.initialize();
        for (int i = 0; i < 3; ++i)
            trainer.step();
        trainer.save(path);
        for (int i = 0; i < 3; ++i)
            straight.push_back(trainer.step().loss);
    }
    kernels::CpuBackend backend;
    Trainer resumed(spec, backend);
    resumed.load(path);
    QCOMPARE(resumed.completedSteps(), 3);
    for (int i = 0; i < 3; ++i) {
        const StepMetrics m = resumed.step();
        QCOMPARE(m.step, 4 + i);
        QVERIFY2(
            m.loss == straight[std::size_t(i)],
            qPrintable(QStringLiteral("%1 != %2").arg(m.loss, 0, 'g', 17).arg(straight[std::size_t(i)], 0, 'g', 17)));
    }
}

void TestModel::checkpointFromAnotherModelIsRefused()
{
    QTemporaryDir dir;
    const std::string path = dir.filePath("dense.safetensors").toStdString();
    {
        kernels::CpuBackend backend;
        Trainer trainer(specOf(tinyJob(false, "layernorm", "gelu", true)), backend);
        trainer.initialize();
        trainer.save(path);
    }
    json other = tinyJob(false, "layernorm", "gelu", true);
    other["model"]["hidden"] = 32;
    kernels::CpuBackend backend;
    Trainer trainer(specOf(other), backend);
    try {
        trainer.load(path);
        QFAIL("a checkpoint of another model loaded");
    } catch (const CheckpointError& e) {
        QVERIFY2(QString(e.what()).contains("model.hidden = 16 (the job has 32)"), e.what());
    }
}

void TestModel::demoModelApproachesEntropyFloor()
{
    // The demo model on its Markov source (order 1, branching 4, vocab 512): the loss must end
    // within 10% of the source's floor, the entropy rate H(p) (Markov source header).
    QFile f(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    plan::LoadResult loaded = plan::parseJobSpec(f.readAll().toStdString());
    QVERIFY(loaded.valid());
    kernels::CpuBackend backend;
    Trainer trainer(*loaded.spec, backend);
    trainer.initialize();
    const auto* markov = dynamic_cast<const MarkovSource*>(&trainer.data());
    QVERIFY(markov);
    const double floor = markov->lossFloor(int(loaded.spec->model.seqLen));
    // One step's loss is a mean over 1,024 tokens, a few percent noisy: judge the last ten steps.
    const int steps = loaded.spec->train.steps;
    double loss = 0;
    for (int i = 0; i < steps; ++i) {
        const double stepLoss = trainer.step().loss;
        if (i >= steps - 10)
            loss += stepLoss / 10;
    }
    qInfo("after %d steps: loss %.4f (mean of the last 10), entropy floor %.4f (%.1f%% above)", steps, loss, floor,
          100 * (loss / floor - 1));
    QVERIFY(loss < 1.10 * floor);
    QVERIFY(loss > 0.97 * floor);  // clearly below the floor would mean the loss is miscounted
}

int main(int argc, char** argv)
{
    // The demo training run takes a minute on OpenBLAS's generic kernels; use the CPU's own.
    kernels::reexecWithBetterOpenblasCore(argv);
    TestModel test;
    return QTest::qExec(&test, argc, argv);
}
#include "tst_model.moc"
