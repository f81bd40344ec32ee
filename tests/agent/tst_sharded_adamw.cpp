// agent/optimizer: AdamW over a shard of the flat parameter buffer equals AdamW over the whole buffer
// (ZeRO's promise: each rank updating its own shard gives the same model), also with the shards'
// gradients reduce-scattered and the parameters all-gathered over a data group of threads; both
// equal a scalar AdamW written here from Loshchilov & Hutter's update, weight decay reaches only
// the tensors the layout marks, and clipping's scale is torch.nn.utils.clip_grad_norm_'s.

#include "agent/optimizer/adamw.h"
#include "agent/runtime/in_process_communicator.h"

#include "kernels/cpu/cpu_backend.h"

#include "parallel_test_support.h"

#include <QtTest>

#include <cmath>
#include <random>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using meshbench::agent::testing::randomValues;

namespace {

plan::ModelSpec smallModel()
{
    plan::ModelSpec m;
    m.layers = 2;
    m.hidden = 8;
    m.heads = 2;
    m.kvHeads = 2;
    m.ffnHidden = 32;
    m.vocab = 16;
    m.seqLen = 4;
    return m;
}

const AdamWSettings kSettings{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};

}  // namespace

class TestShardedAdamW : public QObject {
    Q_OBJECT

private slots:
    void shardsUpdateAsTheWholeBufferDoes()
    {
        kernels::CpuBackend backend;
        const ParameterLayout layout(smallModel());
        const std::size_t total = layout.totalSize();
        const std::vector<float> start = randomValues(total, 1, 0.02f);
        std::vector<std::vector<float>> grads;
        grads.reserve(3);
        for (int step = 0; step < 3; ++step)
            grads.push_back(randomValues(total, 10 + std::uint32_t(step), 1.0f));

        // The whole buffer at once.
        DeviceBuffer whole(backend, total), wholeGrads(backend, total);
        backend.upload(whole.ptr(), start.data(), total);
        ShardedAdamW all(backend, layout, 0, total);
        for (int step = 1; step <= 3; ++step) {
            backend.upload(wholeGrads.ptr(), grads[std::size_t(step - 1)].data(), total);
            all.step(whole.ptr(), wholeGrads.ptr(), kSettings, step, 0.5f);
        }
        std::vector<float> expected(total), expectedM(total);
        backend.download(expected.data(), whole.ptr(), total);
        backend.download(expectedM.data(), all.firstMoment().ptr(), total);

        // Three shards whose borders fall inside tensors, each with its own parameters and moments.
        const std::vector<std::size_t> borders{0, total / 3 + 5, 2 * total / 3 + 1, total};
        for (std::size_t s = 0; s + 1 < borders.size(); ++s) {
            const std::size_t begin = borders[s], size = borders[s + 1] - begin;
            DeviceBuffer params(backend, size), shardGrads(backend, size);
            backend.upload(params.ptr(), start.data() + begin, size);
            ShardedAdamW shard(backend, layout, begin, size);
            for (int step = 1; step <= 3; ++step) {
                backend.upload(shardGrads.ptr(), grads[std::size_t(step - 1)].data() + begin, size);
                shard.step(params.ptr(), shardGrads.ptr(), kSettings, step, 0.5f);
            }
            std::vector<float> got(size), gotM(size);
            backend.download(got.data(), params.ptr(), size);
            backend.download(gotM.data(), shard.firstMoment().ptr(), size);
            for (std::size_t i = 0; i < size; ++i) {
                QCOMPARE(got[i], expected[begin + i]);  // the same arithmetic, element by element
                QCOMPARE(gotM[i], expectedM[begin + i]);
            }
        }
    }

    void zeroOverADataGroupEqualsTheWholeUpdate()
    {
        // ZeRO-1 over a data group of two threads: each member's gradients are reduce-scattered, it
        // updates its shard, and the shards are gathered back. The whole update of the summed
        // gradients on one rank must come out bit for bit (the same sums, in member order).
        constexpr int kMembers = 2;
        kernels::CpuBackend backend;
        const ParameterLayout layout(smallModel());
        const std::size_t shard = (layout.totalSize() + kMembers - 1) / kMembers;
        const std::size_t padded = shard * kMembers;  // the flat buffer, padded to whole shards
        std::vector<float> start = randomValues(layout.totalSize(), 4, 0.02f);
        start.resize(padded, 0.0f);
        std::vector<std::vector<float>> grads;
        for (int r = 0; r < kMembers; ++r) {
            grads.push_back(randomValues(layout.totalSize(), 20 + std::uint32_t(r), 1.0f));
            grads.back().resize(padded, 0.0f);
        }

        std::vector<float> summed(padded), dense(start);
        for (std::size_t i = 0; i < padded; ++i)
            summed[i] = grads[0][i] + grads[1][i];
        {
            DeviceBuffer params(backend, padded), g(backend, padded);
            backend.upload(params.ptr(), dense.data(), padded);
            backend.upload(g.ptr(), summed.data(), padded);
            ShardedAdamW whole(backend, layout, 0, padded);
            whole.step(params.ptr(), g.ptr(), kSettings, 1, 1.0f);
            backend.download(dense.data(), params.ptr(), padded);
        }

        InProcessGroup group(kMembers);
        std::vector<std::vector<float>> gathered(kMembers, std::vector<float>(padded));
        std::vector<std::thread> members;
        members.reserve(std::size_t(kMembers));
        for (int r = 0; r < kMembers; ++r)
            members.emplace_back([&, r, comm = group.member(r)] {
                kernels::CpuBackend own;
                std::vector<float> mine(shard);
                comm->reduceScatterSum(meshbench::kernels::f32(grads[std::size_t(r)].data()),
                                       meshbench::kernels::f32(mine.data()), shard);
                const std::size_t begin = shard * std::size_t(r);
                DeviceBuffer params(own, shard), g(own, shard);
                own.upload(params.ptr(), start.data() + begin, shard);
                own.upload(g.ptr(), mine.data(), shard);
                ShardedAdamW optimizer(own, layout, begin, shard);
                optimizer.step(params.ptr(), g.ptr(), kSettings, 1, 1.0f);
                std::vector<float>& out = gathered[std::size_t(r)];
                own.download(out.data() + begin, params.ptr(), shard);
                comm->allGather(meshbench::kernels::f32(out.data() + begin), meshbench::kernels::f32(out.data()),
                                shard);
            });
        for (std::thread& t : members)
            t.join();
        for (int r = 0; r < kMembers; ++r)
            for (std::size_t i = 0; i < layout.totalSize(); ++i)
                QCOMPARE(gathered[std::size_t(r)][i], dense[i]);
    }

    void theUpdateIsAdamWWithDecayOnMarkedTensors()
    {
        kernels::CpuBackend backend;
        const ParameterLayout layout(smallModel());
        const std::size_t total = layout.totalSize();
        const std::vector<float> start = randomValues(total, 2, 0.5f);
        const std::vector<float> grad = randomValues(total, 3, 1.0f);
        DeviceBuffer params(backend, total), grads(backend, total);
        backend.upload(params.ptr(), start.data(), total);
        backend.upload(grads.ptr(), grad.data(), total);
        ShardedAdamW optimizer(backend, layout, 0, total);
        const float scale = 0.25f;
        optimizer.step(params.ptr(), grads.ptr(), kSettings, 1, scale);
        std::vector<float> got(total);
        backend.download(got.data(), params.ptr(), total);

        // Step 1 from zero moments, in double: m = (1-b1) g, v = (1-b2) g^2, the bias corrections
        // 1-b1 and 1-b2, then p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p) on decayed tensors.
        int decayed = 0, plain = 0;
        for (const TensorView& v : layout.views()) {
            (v.decay ? decayed : plain) += 1;
            for (std::size_t i = v.offset; i < v.offset + v.size; ++i) {
                const double g = double(grad[i]) * scale;
                const double m = (1 - 0.9) * g, second = (1 - 0.95) * g * g;
                const double update = (m / (1 - 0.9)) / (std::sqrt(second / (1 - 0.95)) + 1e-8);
                const double expected = start[i] - 3e-3 * (update + (v.decay ? 0.1 : 0.0) * double(start[i]));
                QVERIFY2(std::abs(got[i] - expected) <= 1e-6 * std::max(1.0, std::abs(expected)),
                         qPrintable(QStringLiteral("%1[%2]: %3 vs %4")
                                        .arg(QString::fromStdString(v.name))
                                        .arg(i - v.offset)
                                        .arg(got[i])
                                        .arg(expected)));
            }
        }
        // The small model has both kinds: matrices decay, norms and biases do not.
        QVERIFY(decayed > 0 && plain > 0);
    }

    void clippingScalesAsTorchDoes()
    {
        QCOMPARE(clipScale(0.5, 1.0), 1.0f);
        QCOMPARE(clipScale(4.0, 1.0), float(1.0 / (4.0 + 1e-6)));
        QCOMPARE(clipScale(1e9, 0.0), 1.0f);  // 0 turns clipping off
    }
};

QTEST_APPLESS_MAIN(TestShardedAdamW)
#include "tst_sharded_adamw.moc"
