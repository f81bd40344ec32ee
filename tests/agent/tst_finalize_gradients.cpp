// agent/distributed/finalize_gradients on in-process groups of threads: the tied embedding's two copies
// summed over a pipeline group of 2 (both stages get a + b, the same bits); the sequence-parallel
// norms' gradients summed over a tensor group of 2, on the shard buffer of a ZeRO-1 data group of 2
// (tp2 x dp2, four threads): exactly the 1-D views' owned parts change, to the member-order sum;
// and a rank's sums of squares by split kind against sums over the owned elements worked here in
// double, the skipped view left out.
//
// Tolerance for the squares: the backend sums fp32 squares in double (exact products, four lanes),
// the reference sums them in double one by one; the two orders differ by a few double roundings,
// far under 1e-12 relative.

#include "agent/distributed/finalize_gradients.h"
#include "agent/runtime/in_process_communicator.h"

#include "kernels/cpu/cpu_backend.h"

#include "parallel_test_support.h"

#include <QtTest>

#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using namespace meshbench::agent::testing;

class TestFinalizeGradients : public QObject {
    Q_OBJECT

private slots:
    void tiedEmbeddingCopiesGetTheSameSum()
    {
        constexpr std::size_t kElements = 20 * 8 + 3;
        const std::vector<std::vector<float>> copies{randomValues(kElements, 1), randomValues(kElements, 2)};
        std::vector<std::vector<float>> got(2);
        InProcessGroup pipeline(2);
        std::vector<std::unique_ptr<Communicator>> members;
        members.reserve(2);
        for (int s = 0; s < 2; ++s)
            members.push_back(pipeline.member(s));
        onThreads(2, [&](int stage) {
            kernels::CpuBackend backend;
            DeviceBuffer grad(backend, kElements);
            backend.upload(grad.ptr(), copies[std::size_t(stage)].data(), kElements);
            sumTiedEmbeddingCopies(backend, *members[std::size_t(stage)], 1 - stage, grad.ptr(), kElements);
            got[std::size_t(stage)].resize(kElements);
            backend.download(got[std::size_t(stage)].data(), grad.ptr(), kElements);
        });
        for (std::size_t i = 0; i < kElements; ++i) {
            const float sum = copies[0][i] + copies[1][i];
            QCOMPARE(got[0][i], sum);
            QCOMPARE(std::bit_cast<std::uint32_t>(got[0][i]), std::bit_cast<std::uint32_t>(got[1][i]));
        }
    }

    void sequenceParallelNormsSumOverTheTensorGroup()
    {
        // Rank r = (tp r % 2, dp r / 2). Tensor groups {0, 1}, {2, 3}; data groups {0, 2}, {1, 3}.
        const plan::ModelSpec model = tinyMoeModel();
        InProcessGroup tensor0(2), tensor1(2), data0(2), data1(2);
        std::vector<std::unique_ptr<Communicator>> tensors, datas;
        for (int r = 0; r < 4; ++r) {
            tensors.push_back((r / 2 == 0 ? tensor0 : tensor1).member(r % 2));
            datas.push_back((r % 2 == 0 ? data0 : data1).member(r / 2));
        }
        auto sliceOf = [&](int r) {
            ModelSlice slice = ModelSlice::whole(model);
            slice.tensorShards = 2;
            slice.tensorShard = r % 2;
            return slice;
        };
        std::vector<std::vector<float>> before(4), after(4);
        std::vector<std::vector<ShardRegion>> regions(4);
        for (int stage : {0, 1}) {
            onThreads(4, [&](int r) {
                kernels::CpuBackend backend;
                const ParameterLayout layout(model, sliceOf(r));
                const ZeroShards shards(layout, stage, stage ? datas[std::size_t(r)].get() : nullptr,
                                        stage ? datas[std::size_t(r)].get() : nullptr);
                before[std::size_t(r)] = randomValues(shards.shardElements(), 40 + std::uint32_t(r));
                DeviceBuffer shard(backend, shards.shardElements());
                backend.upload(shard.ptr(), before[std::size_t(r)].data(), shards.shardElements());
                regions[std::size_t(r)] = shards.regions();
                sumSequenceParallelNormGradients(*tensors[std::size_t(r)], layout, shards, shard.ptr());
                after[std::size_t(r)].resize(shards.shardElements());
                backend.download(after[std::size_t(r)].data(), shard.ptr(), shards.shardElements());
            });
            for (int r = 0; r < 4; ++r) {
                const ParameterLayout layout(model, sliceOf(r));
                const int peer = r ^ 1;  // the other member of r's tensor group (same dp rank)
                // Which shard elements are 1-D views' (regions as tst_zero_shards checks them).
                std::vector<int> oneD(after[std::size_t(r)].size(), 0);
                int oneDViews = 0;
                for (const TensorView& v : layout.views()) {
                    oneDViews += v.shape.size() == 1;
                    const ShardRegion& region = regions[std::size_t(r)][v.offset >= layout.expertBegin() ? 1 : 0];
                    for (std::size_t i = std::max(v.offset, region.ownedBegin());
                         i < std::min(v.offset + v.size, region.ownedEnd()); ++i)
                        if (v.shape.size() == 1)
                            oneD[region.shardOffset + (i - region.ownedBegin())] = 1;
                }
                QVERIFY(oneDViews >= 5);  // two norms per layer and the final norm, with biases
                int summedElements = 0;
                for (std::size_t at = 0; at < oneD.size(); ++at) {
                    // Member order within the tensor group: tp rank 0 first.
                    const float sum = r % 2 == 0 ? before[std::size_t(r)][at] + before[std::size_t(peer)][at]
                                                 : before[std::size_t(peer)][at] + before[std::size_t(r)][at];
                    const float expected = oneD[at] ? sum : before[std::size_t(r)][at];
                    summedElements += oneD[at];
                    QVERIFY2(after[std::size_t(r)][at] == expected,
                             qPrintable(QStringLiteral("stage %1 rank %2 shard[%3]: %4 vs %5")
                                            .arg(stage)
                                            .arg(r)
                                            .arg(at)
                                            .arg(after[std::size_t(r)][at])
                                            .arg(expected)));
                }
                QVERIFY(summedElements > 0);
            }
        }
    }

    void shardSquaresBySplitKind()
    {
        // tp2 x ep2 slices, ZeRO-1 over a data group of 2 (rank r = tp r % 2 ... here just dp 2 with
        // the slice of tp rank 0, ep rank r): the dense range over the data group, the experts' held
        // by each rank alone (an expert-data group of one).
        const plan::ModelSpec model = tinyMoeModel();
        for (int stage : {0, 1}) {
            InProcessGroup data(2);
            std::vector<std::unique_ptr<Communicator>> members;
            members.push_back(data.member(0));
            members.push_back(data.member(1));
            std::vector<GradientSquares> got(2), expected(2);
            onThreads(2, [&](int r) {
                kernels::CpuBackend backend;
                ModelSlice slice = ModelSlice::whole(model);
                slice.tensorShards = 2;
                slice.tensorShard = 1;
                slice.expertShards = 2;
                slice.expertShard = r;
                const ParameterLayout layout(model, slice);
                const ZeroShards shards(layout, stage, stage ? members[std::size_t(r)].get() : nullptr, nullptr);
                const std::vector<float> values = randomValues(shards.shardElements(), 90 + std::uint32_t(r));
                DeviceBuffer shard(backend, shards.shardElements());
                backend.upload(shard.ptr(), values.data(), values.size());
                const int skip = layout.embedding();
                got[std::size_t(r)] = shardGradientSquares(backend, layout, shards, shard.ptr(), skip);
                GradientSquares sums{};
                int kinds[4] = {};
                for (int i = 0; i < int(layout.views().size()); ++i) {
                    if (i == skip)
                        continue;
                    const TensorView& v = layout.at(i);
                    const std::size_t kind = (v.tensorCount > 1 ? 1 : 0) | (v.shardCount > 1 ? 2 : 0);
                    ++kinds[kind];
                    const ShardRegion& region = shards.regions()[v.offset >= layout.expertBegin() ? 1 : 0];
                    for (std::size_t e = v.offset; e < v.offset + v.size; ++e)
                        if (e >= region.ownedBegin() && e < region.ownedEnd()) {
                            const double x = values[region.shardOffset + (e - region.ownedBegin())];
                            sums[kind] += x * x;
                        }
                }
                // Every kind is present: replicated norms and router, TP-split dense linears, expert
                // blocks split by TP (there are no unsplit expert tensors: experts' linears are TP-split).
                if (kinds[0] == 0 || kinds[1] == 0 || kinds[3] == 0)
                    sums[0] = -1;  // fails the comparison below
                expected[std::size_t(r)] = sums;
            });
            for (int r = 0; r < 2; ++r)
                for (std::size_t k = 0; k < 4; ++k) {
                    QVERIFY2(std::abs(got[std::size_t(r)][k] - expected[std::size_t(r)][k]) <=
                                 1e-12 * std::max(1.0, expected[std::size_t(r)][k]),
                             qPrintable(QStringLiteral("stage %1 rank %2 kind %3: %4 vs %5")
                                            .arg(stage)
                                            .arg(r)
                                            .arg(k)
                                            .arg(got[std::size_t(r)][k], 0, 'g', 17)
                                            .arg(expected[std::size_t(r)][k], 0, 'g', 17)));
                }
        }
    }
};

QTEST_APPLESS_MAIN(TestFinalizeGradients)
#include "tst_finalize_gradients.moc"
