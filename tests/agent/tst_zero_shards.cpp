// agent/distributed/zero_shards: ZeRO's regions and pieces over a small MoE model's flat buffer, on
// in-process data and expert-data groups of threads (dp 2 and 3 with ep 1, where the experts'
// range has an expert-data group of all members; dp 2 x ep 2, where it has none; dp 4 x ep 2,
// expert-data groups of 2). Expected values are worked here densely: which member owns an element
// is recomputed from the rule in the header (ceil(S / g) rounded up to 16 elements), sums are the
// member-order sums the in-process group promises, so every comparison is exact. The update test
// runs ShardedAdamW per owned piece on reduce-scattered gradients, then allGatherParameters, against
// ShardedAdamW over the whole buffer with the summed gradients: AdamW is elementwise, so the same
// inputs give the same bits (tst_sharded_adamw checks shards of one buffer bit for bit likewise).

#include "agent/distributed/zero_shards.h"
#include "agent/optimizer/adamw.h"
#include "agent/runtime/in_process_communicator.h"

#include "kernels/cpu/cpu_backend.h"

#include "parallel_test_support.h"

#include <QtTest>

#include <functional>
#include <memory>
#include <random>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using namespace meshbench::agent::testing;

namespace {

constexpr std::size_t kAlign = 16;

// The rule of the header, written again: member m of g owns [m P, min(S, (m + 1) P)) of a range of
// S elements, P = ceil(ceil(S / g) / 16) x 16.
std::size_t pieceOf(std::size_t size, int members)
{
    return ((size + members - 1) / members + kAlign - 1) / kAlign * kAlign;
}
int ownerOf(std::size_t begin, std::size_t size, int members, std::size_t at)
{
    return int((at - begin) / pieceOf(size, members));
}

// Distinct values: a replicated dense tensor has the same values everywhere, an expert block its
// EP rank's.
float baseValue(std::size_t i, bool experts, int epRank)
{
    return 0.001f * float(i % 997) + (experts ? 0.25f * float(epRank + 1) : -0.5f);
}
std::vector<float> wholeBufferOf(const ParameterLayout& layout, int epRank)
{
    std::vector<float> whole(layout.totalSize());
    for (std::size_t i = 0; i < whole.size(); ++i)
        whole[i] = baseValue(i, i >= layout.expertBegin(), epRank);
    return whole;
}

const std::vector<DataMesh> kMeshes{{2, 1}, {3, 1}, {2, 2}, {4, 2}};

QString meshName(const DataMesh& m) { return QStringLiteral("dp%1 ep%2").arg(m.dp).arg(m.ep); }

const AdamWSettings kSettings{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};

}  // namespace

class TestZeroShards : public QObject {
    Q_OBJECT

private slots:
    void regionsAndPiecesFollowTheRule()
    {
        const plan::ModelSpec model = tinyMoeModel();
        for (const DataMesh& mesh : kMeshes)
            for (int stage = 0; stage <= 3; ++stage) {
                std::vector<std::vector<ShardRegion>> regions(std::size_t(mesh.dp));
                std::vector<std::size_t> shardElements(std::size_t(mesh.dp));
                std::vector<std::size_t> totals(std::size_t(mesh.dp)), expertBegins(std::size_t(mesh.dp));
                std::vector<char> regionOfRight(std::size_t(mesh.dp), 0);
                onDataMesh(mesh, [&](const DataRank& c) {
                    const ParameterLayout layout(model, expertSlice(model, mesh, c.rank));
                    const ZeroShards shards(layout, stage, c.data, c.expertData);
                    regions[std::size_t(c.rank)] = shards.regions();
                    shardElements[std::size_t(c.rank)] = shards.shardElements();
                    totals[std::size_t(c.rank)] = layout.totalSize();
                    expertBegins[std::size_t(c.rank)] = layout.expertBegin();
                    // regionOf: the dense region below expertBegin, the experts' from it.
                    regionOfRight[std::size_t(c.rank)] =
                        shards.stage() == stage && shards.regionOf(0).begin == 0 &&
                        shards.regionOf(layout.expertBegin() - 1).begin == 0 &&
                        shards.regionOf(layout.expertBegin()).begin == layout.expertBegin() &&
                        shards.regionOf(layout.totalSize() - 1).begin == layout.expertBegin();
                });
                for (int r = 0; r < mesh.dp; ++r) {
                    QVERIFY(regionOfRight[std::size_t(r)]);
                    const auto& rs = regions[std::size_t(r)];
                    const std::size_t total = totals[std::size_t(r)], expertBegin = expertBegins[std::size_t(r)];
                    QVERIFY(expertBegin > 0 && expertBegin < total);
                    QCOMPARE(rs.size(), std::size_t(2));
                    QCOMPARE(rs[0].begin, std::size_t(0));
                    QCOMPARE(rs[0].end, expertBegin);
                    QCOMPARE(rs[1].begin, expertBegin);
                    QCOMPARE(rs[1].end, total);
                    std::size_t shardOffset = 0;
                    for (std::size_t k = 0; k < 2; ++k) {
                        const ShardRegion& region = rs[k];
                        const std::vector<int> group = groupRanks(mesh, k == 1, r);
                        const int g = int(group.size());
                        const std::size_t size = region.end - region.begin;
                        QCOMPARE(region.group != nullptr, g > 1);
                        QCOMPARE(int(region.counts.size()), g);
                        QCOMPARE(int(region.owned.size()), g);
                        QCOMPARE(region.member, int(std::find(group.begin(), group.end(), r) - group.begin()));
                        QCOMPARE(region.shardOffset, shardOffset);
                        if (stage == 0) {
                            // Every member owns the whole range.
                            for (int m = 0; m < g; ++m) {
                                QCOMPARE(region.owned[std::size_t(m)], region.begin);
                                QCOMPARE(region.counts[std::size_t(m)], size);
                            }
                        } else {
                            // The pieces tile the range once, in member order, 16-aligned, of
                            // P elements each but the last (shorter, or equal).
                            const std::size_t piece = pieceOf(size, g);
                            std::size_t at = region.begin;
                            for (int m = 0; m < g; ++m) {
                                QCOMPARE(region.owned[std::size_t(m)], std::min(at, region.end));
                                QCOMPARE(region.owned[std::size_t(m)] % kAlign, std::size_t(0));
                                const std::size_t expected = std::min(piece, region.end - std::min(at, region.end));
                                QCOMPARE(region.counts[std::size_t(m)], expected);
                                at += region.counts[std::size_t(m)];
                            }
                            QCOMPARE(at, region.end);
                            QVERIFY(region.counts.back() <= region.counts.front());
                            if (g > 1 && size % piece != 0)
                                QVERIFY(region.counts.back() < piece);
                        }
                        QCOMPARE(region.ownedBegin(), region.owned[std::size_t(region.member)]);
                        QCOMPARE(region.ownedSize(), region.counts[std::size_t(region.member)]);
                        shardOffset += region.ownedSize();
                    }
                    QCOMPARE(shardElements[std::size_t(r)], shardOffset);
                    if (stage == 0)
                        QCOMPARE(shardOffset, total);
                }
            }
    }

    void ownedCountsCountEachMembersElements()
    {
        const plan::ModelSpec model = tinyMoeModel();
        for (const DataMesh& mesh : {DataMesh{3, 1}, DataMesh{4, 2}}) {
            std::vector<int> wrong(std::size_t(mesh.dp), 0), tried(std::size_t(mesh.dp), 0);
            onDataMesh(mesh, [&](const DataRank& c) {
                const ParameterLayout layout(model, expertSlice(model, mesh, c.rank));
                const ZeroShards shards(layout, 1, c.data, c.expertData);
                std::mt19937 engine(std::uint32_t(7 + c.rank));
                for (const ShardRegion& region : shards.regions()) {
                    const int g = int(region.counts.size());
                    std::uniform_int_distribution<std::size_t> pick(region.begin, region.end);
                    for (int trial = 0; trial < 200; ++trial) {
                        std::size_t first = pick(engine), last = pick(engine);
                        if (first > last)
                            std::swap(first, last);
                        if (trial == 0)
                            first = region.begin, last = region.end;  // the whole range: the counts
                        std::vector<std::size_t> expected(std::size_t(g), 0);
                        for (std::size_t i = first; i < last; ++i)
                            ++expected[std::size_t(ownerOf(region.begin, region.end - region.begin, g, i))];
                        wrong[std::size_t(c.rank)] += region.ownedCounts(first, last) != expected;
                        ++tried[std::size_t(c.rank)];
                    }
                }
            });
            for (int r = 0; r < mesh.dp; ++r) {
                QCOMPARE(tried[std::size_t(r)], 400);
                QCOMPARE(wrong[std::size_t(r)], 0);
            }
        }
    }

    void extractThenGatherGivesTheWholeBuffer()
    {
        const plan::ModelSpec model = tinyMoeModel();
        for (const DataMesh& mesh : kMeshes)
            for (int stage = 0; stage <= 3; ++stage) {
                std::vector<std::vector<float>> gathered(std::size_t(mesh.dp)), expected(std::size_t(mesh.dp));
                onDataMesh(mesh, [&](const DataRank& c) {
                    kernels::CpuBackend backend;
                    const ParameterLayout layout(model, expertSlice(model, mesh, c.rank));
                    const ZeroShards shards(layout, stage, c.data, c.expertData);
                    const std::vector<float> whole = wholeBufferOf(layout, c.rank % mesh.ep);
                    std::vector<float> shard(shards.shardElements(), -7.0f);
                    shards.extract(whole.data(), shard.data());
                    DeviceBuffer onDevice(backend, shard.size());
                    backend.upload(onDevice.ptr(), shard.data(), shard.size());
                    gathered[std::size_t(c.rank)] = shards.gather(backend, onDevice.ptr());
                    expected[std::size_t(c.rank)] = whole;
                });
                for (int r = 0; r < mesh.dp; ++r) {
                    QVERIFY2(gathered[std::size_t(r)] == expected[std::size_t(r)],
                             qPrintable(meshName(mesh) + QStringLiteral(" stage %1 rank %2").arg(stage).arg(r)));
                }
            }
    }

    void allGatherParametersSpreadsEachOwnersPieces()
    {
        const plan::ModelSpec model = tinyMoeModel();
        // Member r rewrites only the elements it owns, to a value naming r; afterwards every member
        // holds, at each element, its owner's value.
        auto newValue = [](int rank, std::size_t i) { return 10.0f * float(rank + 1) + 0.001f * float(i % 991); };
        for (const DataMesh& mesh : kMeshes)
            for (int stage = 1; stage <= 2; ++stage) {
                std::vector<std::vector<float>> after(std::size_t(mesh.dp));
                std::vector<std::size_t> expertBegins(std::size_t(mesh.dp));
                onDataMesh(mesh, [&](const DataRank& c) {
                    kernels::CpuBackend backend;
                    const ParameterLayout layout(model, expertSlice(model, mesh, c.rank));
                    const ZeroShards shards(layout, stage, c.data, c.expertData);
                    std::vector<float> whole = wholeBufferOf(layout, c.rank % mesh.ep);
                    for (const ShardRegion& region : shards.regions())
                        for (std::size_t i = region.ownedBegin(); i < region.ownedEnd(); ++i)
                            whole[i] = newValue(c.rank, i);
                    DeviceBuffer params(backend, whole.size());
                    backend.upload(params.ptr(), whole.data(), whole.size());
                    shards.allGatherParameters(params.ptr());
                    after[std::size_t(c.rank)].resize(whole.size());
                    backend.download(after[std::size_t(c.rank)].data(), params.ptr(), whole.size());
                    expertBegins[std::size_t(c.rank)] = layout.expertBegin();
                });
                for (int r = 0; r < mesh.dp; ++r) {
                    const std::vector<float>& got = after[std::size_t(r)];
                    const std::size_t expertBegin = expertBegins[std::size_t(r)];
                    for (std::size_t i = 0; i < got.size(); ++i) {
                        const bool experts = i >= expertBegin;
                        const std::vector<int> group = groupRanks(mesh, experts, r);
                        const std::size_t begin = experts ? expertBegin : 0, end = experts ? got.size() : expertBegin;
                        const int owner = group[std::size_t(ownerOf(begin, end - begin, int(group.size()), i))];
                        QVERIFY2(got[i] == newValue(owner, i),
                                 qPrintable(meshName(mesh) + QStringLiteral(" stage %1 rank %2 element %3: %4 vs %5")
                                                                 .arg(stage)
                                                                 .arg(r)
                                                                 .arg(i)
                                                                 .arg(got[i])
                                                                 .arg(newValue(owner, i))));
                    }
                }
            }
    }

    void shardedParametersGatherAndReduceScatter()
    {
        const plan::ModelSpec model = tinyMoeModel();
        for (const DataMesh& mesh : kMeshes) {
            const int dp = mesh.dp;
            // Rank r's gradient of every flat element (as if its backward wrote them).
            std::vector<std::vector<float>> grads;
            grads.reserve(std::size_t(dp));
            for (int r = 0; r < dp; ++r)
                grads.push_back(randomValues(ParameterLayout(model, expertSlice(model, mesh, r)).totalSize(),
                                             100 + std::uint32_t(r)));
            std::vector<std::vector<float>> gotShard(static_cast<std::size_t>(dp)),
                startShard(static_cast<std::size_t>(dp));
            std::vector<int> paramMismatches(std::size_t(dp), 0);
            onDataMesh(mesh, [&](const DataRank& c) {
                kernels::CpuBackend backend;
                const ParameterLayout layout(model, expertSlice(model, mesh, c.rank));
                const ZeroShards shards(layout, 3, c.data, c.expertData);
                const std::vector<float> whole = wholeBufferOf(layout, c.rank % mesh.ep);
                std::vector<float> shard(shards.shardElements());
                shards.extract(whole.data(), shard.data());
                DeviceBuffer paramShard(backend, shard.size()), gradShard(backend, shard.size());
                backend.upload(paramShard.ptr(), shard.data(), shard.size());
                // Gradients already in the shard (an earlier micro-batch's): release adds to them.
                startShard[std::size_t(c.rank)] = randomValues(shard.size(), 50 + std::uint32_t(c.rank));
                backend.upload(gradShard.ptr(), startShard[std::size_t(c.rank)].data(), shard.size());
                // Overlapped, with at most 256 bytes in flight: several reductions wait for room.
                ShardedParameters gatherer(backend, layout, shards, paramShard.ptr(), gradShard.ptr(), 256, true,
                                           nullptr, 0);
                gatherer.begin(1);
                std::vector<int> all;
                all.reserve(layout.views().size());
                for (int v = 0; v < int(layout.views().size()); ++v)
                    all.push_back(v);
                gatherer.acquire(all, true);
                for (int v : all) {
                    const TensorView& view = layout.at(v);
                    std::vector<float> got(view.size);
                    backend.download(got.data(), gatherer.param(v), view.size);
                    if (!std::equal(got.begin(), got.end(), whole.begin() + std::ptrdiff_t(view.offset)))
                        ++paramMismatches[std::size_t(c.rank)];
                    backend.upload(gatherer.grad(v), grads[std::size_t(c.rank)].data() + view.offset, view.size);
                }
                // Released in two calls, as the model releases layer by layer.
                const std::vector<int> firstHalf(all.begin(), all.begin() + std::ptrdiff_t(all.size() / 2));
                const std::vector<int> secondHalf(all.begin() + std::ptrdiff_t(all.size() / 2), all.end());
                gatherer.release(secondHalf, true);
                gatherer.release(firstHalf, true);
                gatherer.finish();
                gotShard[std::size_t(c.rank)].resize(shard.size());
                backend.download(gotShard[std::size_t(c.rank)].data(), gradShard.ptr(), shard.size());
            });
            for (int r = 0; r < dp; ++r) {
                QCOMPARE(paramMismatches[std::size_t(r)], 0);
                const ParameterLayout layout(model, expertSlice(model, mesh, r));
                // The shard's element at flat position i: its start plus the member-order sum of the
                // group's gradients, for every element of a view (padding is nobody's tensor).
                for (const TensorView& view : layout.views()) {
                    const bool experts = view.offset >= layout.expertBegin();
                    const std::vector<int> group = groupRanks(mesh, experts, r);
                    const int g = int(group.size());
                    const std::size_t begin = experts ? layout.expertBegin() : 0;
                    const std::size_t size = (experts ? layout.totalSize() : layout.expertBegin()) - begin;
                    const int member = int(std::find(group.begin(), group.end(), r) - group.begin());
                    const std::size_t ownedBegin = begin + std::size_t(member) * pieceOf(size, g);
                    const std::size_t ownedEnd = std::min(begin + size, ownedBegin + pieceOf(size, g));
                    const std::size_t shardOffset =
                        experts ? std::min(pieceOf(layout.expertBegin(), dp),
                                           layout.expertBegin() -
                                               std::min(layout.expertBegin(),
                                                        std::size_t(r) * pieceOf(layout.expertBegin(), dp)))
                                : 0;
                    for (std::size_t i = std::max(view.offset, ownedBegin);
                         i < std::min(view.offset + view.size, ownedEnd); ++i) {
                        float sum = 0.0f;
                        for (int q : group)
                            sum += grads[std::size_t(q)][i];
                        const std::size_t at = shardOffset + (i - ownedBegin);
                        const float expected = sum + startShard[std::size_t(r)][at];
                        QVERIFY2(gotShard[std::size_t(r)][at] == expected,
                                 qPrintable(meshName(mesh) + QStringLiteral(" rank %1 %2[%3]: %4 vs %5")
                                                                 .arg(r)
                                                                 .arg(QString::fromStdString(view.name))
                                                                 .arg(i - view.offset)
                                                                 .arg(gotShard[std::size_t(r)][at])
                                                                 .arg(expected)));
                    }
                }
            }
        }
    }

    void aShardUpdateEqualsTheWholeUpdate()
    {
        const plan::ModelSpec model = tinyMoeModel();
        constexpr int kSteps = 2;
        for (const DataMesh& mesh : kMeshes) {
            const int dp = mesh.dp;
            std::vector<std::vector<std::vector<float>>> grads(static_cast<std::size_t>(dp));  // [rank][step]
            for (int r = 0; r < dp; ++r)
                for (int s = 0; s < kSteps; ++s)
                    grads[std::size_t(r)].push_back(
                        randomValues(ParameterLayout(model, expertSlice(model, mesh, r)).totalSize(),
                                     200 + std::uint32_t(10 * r + s)));
            auto startOf = [&](const ParameterLayout& layout, int epRank) {
                std::vector<float> start = wholeBufferOf(layout, epRank);
                for (float& v : start)
                    v *= 0.1f;
                return start;
            };
            std::vector<std::vector<float>> got(static_cast<std::size_t>(dp)), expected(static_cast<std::size_t>(dp));
            onDataMesh(mesh, [&](const DataRank& c) {
                kernels::CpuBackend backend;
                const ParameterLayout layout(model, expertSlice(model, mesh, c.rank));
                const ZeroShards shards(layout, 1, c.data, c.expertData);
                const std::size_t total = layout.totalSize();
                DeviceBuffer params(backend, total), grad(backend, total), shard(backend, shards.shardElements());
                const std::vector<float> start = startOf(layout, c.rank % mesh.ep);
                backend.upload(params.ptr(), start.data(), total);
                std::vector<ShardedAdamW> optimizers;
                for (const ShardRegion& region : shards.regions())
                    optimizers.emplace_back(backend, layout, region.ownedBegin(), region.ownedSize());
                for (int s = 0; s < kSteps; ++s) {
                    backend.upload(grad.ptr(), grads[std::size_t(c.rank)][std::size_t(s)].data(), total);
                    for (std::size_t k = 0; k < shards.regions().size(); ++k) {
                        const ShardRegion& region = shards.regions()[k];
                        const kernels::DevPtr mine = kernels::offset(shard.ptr(), region.shardOffset);
                        if (region.group)
                            region.group
                                ->startReduceScatter(kernels::offset(grad.ptr(), region.begin), mine, region.counts)
                                .wait();
                        else
                            backend.copy(mine, kernels::offset(grad.ptr(), region.begin), region.ownedSize());
                        optimizers[k].step(kernels::offset(params.ptr(), region.ownedBegin()), mine, kSettings, s + 1,
                                           0.75f);
                    }
                    shards.allGatherParameters(params.ptr());
                }
                got[std::size_t(c.rank)].resize(total);
                backend.download(got[std::size_t(c.rank)].data(), params.ptr(), total);
            });
            // The whole buffer on one rank with the groups' member-order sums.
            for (int r = 0; r < dp; ++r) {
                kernels::CpuBackend backend;
                const ParameterLayout layout(model, expertSlice(model, mesh, r));
                const std::size_t total = layout.totalSize();
                DeviceBuffer params(backend, total), grad(backend, total);
                const std::vector<float> start = startOf(layout, r % mesh.ep);
                backend.upload(params.ptr(), start.data(), total);
                ShardedAdamW whole(backend, layout, 0, total);
                for (int s = 0; s < kSteps; ++s) {
                    std::vector<float> summed(total);
                    for (std::size_t i = 0; i < total; ++i) {
                        float sum = 0.0f;
                        for (int q : groupRanks(mesh, i >= layout.expertBegin(), r))
                            sum += grads[std::size_t(q)][std::size_t(s)][i];
                        summed[i] = sum;
                    }
                    backend.upload(grad.ptr(), summed.data(), total);
                    whole.step(params.ptr(), grad.ptr(), kSettings, s + 1, 0.75f);
                }
                expected[std::size_t(r)].resize(total);
                backend.download(expected[std::size_t(r)].data(), params.ptr(), total);
                for (const TensorView& view : layout.views())
                    for (std::size_t i = view.offset; i < view.offset + view.size; ++i)
                        QVERIFY2(got[std::size_t(r)][i] == expected[std::size_t(r)][i],
                                 qPrintable(meshName(mesh) + QStringLiteral(" rank %1 %2[%3]: %4 vs %5")
                                                                 .arg(r)
                                                                 .arg(QString::fromStdString(view.name))
                                                                 .arg(i - view.offset)
                                                                 .arg(got[std::size_t(r)][i])
                                                                 .arg(expected[std::size_t(r)][i])));
            }
        }
    }
};

QTEST_APPLESS_MAIN(TestZeroShards)
#include "tst_zero_shards.moc"
