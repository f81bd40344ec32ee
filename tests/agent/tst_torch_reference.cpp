// meshbench-agent against an independent fp32 PyTorch re-implementation (tests/agent/torch_reference.py),
// which was written from the "Training on one device" manual (docs/agent.md) alone. Both start from the checkpoint
// the agent saves before its first step and train 6 steps on the same token file; every step's mean
// cross-entropy, load-balancing loss, gradient norm and learning rate must agree to 1e-4 relative.

#include <nlohmann/json.hpp>

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

using nlohmann::json;

namespace {

constexpr int steps = 6;
constexpr int vocab = 64;
constexpr double gradClip = 0.5;

struct Run {
    int exitCode = -1;
    QString output;
};

Run run(const QString& program, const QStringList& args)
{
    QProcess process;
    process.setProcessChannelMode(QProcess::MergedChannels);
    process.start(program, args);
    Run result;
    if (!process.waitForStarted(30000)) {
        result.output = QStringLiteral("could not start %1: %2").arg(program, process.errorString());
        return result;
    }
    process.waitForFinished(500000);
    result.output = QString::fromUtf8(process.readAll());
    result.exitCode = process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -100;
    return result;
}

std::uint64_t splitmix64(std::uint64_t& state)
{
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// A mostly predictable stream (next = 7·prev + 3 + noise in [0, 4)) with an occasional random jump. 203
// tokens, so that the step's samples wrap around the file (offset (g·s) mod (N − s)).
void writeTokens(const QString& path)
{
    std::uint64_t state = 20240611;
    std::vector<std::uint16_t> ids{0};
    while (ids.size() < 203) {
        const std::uint64_t r = splitmix64(state);
        const std::uint64_t next = r % 16 == 0 ? (r >> 8) % vocab : (ids.back() * 7ULL + 3 + (r >> 4) % 4) % vocab;
        ids.push_back(static_cast<std::uint16_t>(next));
    }
    std::ofstream out(path.toStdString(), std::ios::binary);
    for (const std::uint16_t id : ids) {
        const char bytes[2] = {static_cast<char>(id & 0xFF), static_cast<char>(id >> 8)};
        out.write(bytes, 2);
    }
}

json job(const json& modelOverrides, const QString& tokens)
{
    json model = {{"layers", 2}, {"hidden", 32}, {"heads", 4}, {"ffn_hidden", 64}, {"vocab", vocab}, {"seq_len", 16}};
    model.update(modelOverrides);
    return {{"model", model},
            {"parallel", {{"dp", 1}, {"micro_batch_size", 2}, {"microbatches", 2}}},
            {"cluster", {{"nodes", 1}, {"devices_per_node", 1}, {"device", "cpu"}}},
            {"train",
             {{"lr", 3e-3},
              {"warmup_steps", 2},
              {"decay_steps", 6},
              {"min_lr", 1e-4},
              {"weight_decay", 0.1},
              {"beta1", 0.9},
              {"beta2", 0.95},
              {"eps", 1e-8},
              {"grad_clip", gradClip},
              {"seed", 1234},
              {"data", {{"source", "file"}, {"path", tokens.toStdString()}, {"dtype", "uint16"}}}}}};
}

// One JSON object per non-empty line.
std::vector<json> jsonLines(const std::string& text)
{
    std::vector<json> lines;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty() && line.front() == '{')
            lines.push_back(json::parse(line));
    return lines;
}

bool agrees(double ours, double torch) { return std::abs(ours - torch) <= std::max(1e-4 * std::abs(torch), 1e-7); }

}  // namespace

class TestTorchReference : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void matchesPyTorch_data();
    void matchesPyTorch();
};

void TestTorchReference::initTestCase()
{
    const Run probe =
        run(QStringLiteral(MESHBENCH_TORCH_PYTHON), {QStringLiteral("-c"), QStringLiteral("import torch, numpy")});
    if (probe.exitCode != 0)
        QFAIL(qPrintable(QStringLiteral("python3-torch is needed: apt-get install python3-torch (%1 could not "
                                        "import torch and numpy: %2)")
                             .arg(QStringLiteral(MESHBENCH_TORCH_PYTHON), probe.output.trimmed())));
}

void TestTorchReference::matchesPyTorch_data()
{
    QTest::addColumn<QString>("model");
    QTest::addColumn<bool>("moe");
    QTest::newRow("dense layernorm gelu tied MHA")
        << QStringLiteral(R"({"norm": "layernorm", "activation": "gelu", "tied_embeddings": true, "kv_heads": 4})")
        << false;
    QTest::newRow("dense rmsnorm swiglu untied GQA")
        << QStringLiteral(R"({"norm": "rmsnorm", "activation": "swiglu", "tied_embeddings": false, "kv_heads": 2})")
        << false;
    QTest::newRow("MoE every layer top-2 capacity 1.0")
        << QStringLiteral(R"({"norm": "rmsnorm", "activation": "swiglu", "tied_embeddings": true, "kv_heads": 2,
                              "moe": {"experts": 4, "top_k": 2, "capacity_factor": 1.0, "every_n_layers": 1}})")
        << true;
    QTest::newRow("MoE every 2 layers top-1")
        << QStringLiteral(R"({"norm": "layernorm", "activation": "gelu", "tied_embeddings": false,
                              "moe": {"experts": 4, "top_k": 1, "capacity_factor": 1.1, "every_n_layers": 2,
                                      "moe_ffn_hidden": 32, "aux_loss_coef": 0.02}})")
        << true;
}

void TestTorchReference::matchesPyTorch()
{
    QFETCH(QString, model);
    QFETCH(bool, moe);

    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString tokens = dir.filePath(QStringLiteral("tokens.bin"));
    const QString jobPath = dir.filePath(QStringLiteral("job.json"));
    const QString checkpoints = dir.filePath(QStringLiteral("checkpoints"));
    const QString metrics = dir.filePath(QStringLiteral("metrics.jsonl"));
    writeTokens(tokens);
    std::ofstream(jobPath.toStdString()) << job(json::parse(model.toStdString()), tokens).dump(2);

    const Run agent = run(QStringLiteral(MESHBENCH_AGENT),
                          {QStringLiteral("--job"), jobPath, QStringLiteral("--steps"), QString::number(steps),
                           QStringLiteral("--save"), checkpoints, QStringLiteral("--metrics"), metrics});
    QVERIFY2(agent.exitCode == 0, qPrintable(agent.output));
    std::ifstream metricsFile(metrics.toStdString());
    const std::string metricsText{std::istreambuf_iterator<char>(metricsFile), std::istreambuf_iterator<char>()};
    const std::vector<json> ours = jsonLines(metricsText);

    const Run reference =
        run(QStringLiteral(MESHBENCH_TORCH_PYTHON),
            {QStringLiteral(MESHBENCH_SOURCE_DIR "/tests/agent/torch_reference.py"), QStringLiteral("--job"), jobPath,
             QStringLiteral("--checkpoint"), checkpoints + QStringLiteral("/step-000000.safetensors"),
             QStringLiteral("--steps"), QString::number(steps)});
    QVERIFY2(reference.exitCode == 0, qPrintable(reference.output));
    const std::vector<json> torch = jsonLines(reference.output.toStdString());

    QCOMPARE(ours.size(), std::size_t{steps});
    QCOMPARE(torch.size(), std::size_t{steps});
    bool clipped = false;
    double worst = 0.0;
    for (int i = 0; i < steps; ++i) {
        const json& a = ours[static_cast<std::size_t>(i)];
        const json& b = torch[static_cast<std::size_t>(i)];
        QCOMPARE(a.at("step").get<int>(), i + 1);
        QCOMPARE(b.at("step").get<int>(), i + 1);
        for (const char* key : {"loss", "aux_loss", "grad_norm", "lr"}) {
            const double x = a.at(key).get<double>();
            const double y = b.at(key).get<double>();
            worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1e-30) * (y != 0.0 ? 1.0 : 0.0));
            QVERIFY2(agrees(x, y), qPrintable(QStringLiteral("step %1 %2: meshbench-agent %3, PyTorch %4 (relative %5)")
                                                  .arg(i + 1)
                                                  .arg(QString::fromLatin1(key))
                                                  .arg(x, 0, 'g', 10)
                                                  .arg(y, 0, 'g', 10)
                                                  .arg(std::abs(x - y) / std::max(std::abs(y), 1e-30), 0, 'g', 3)));
        }
        qInfo("step %d  loss %.9f / %.9f  aux %.9f / %.9f  grad-norm %.7f / %.7f  (meshbench-agent / PyTorch)", i + 1,
              a.at("loss").get<double>(), b.at("loss").get<double>(), a.at("aux_loss").get<double>(),
              b.at("aux_loss").get<double>(), a.at("grad_norm").get<double>(), b.at("grad_norm").get<double>());
        QCOMPARE(b.at("aux_loss").get<double>() > 0.0, moe);
        clipped = clipped || b.at("grad_norm").get<double>() > gradClip;
    }
    qInfo("largest relative difference %.2g", worst);
    QVERIFY2(clipped, "grad_clip never took effect: lower it so that clipping is tested");
}

QTEST_APPLESS_MAIN(TestTorchReference)
#include "tst_torch_reference.moc"
