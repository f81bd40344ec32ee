// agent/distributed/data_parallel: GradientBuckets on in-process data groups of 2 and 4 threads (with
// ep 1 and ep 2: experts reduced over the expert-data group, or not at all when it is one member),
// ZeRO stage 0 (all-reduce in place) and 1/2 (reduce-scatter added into a shard buffer that already
// holds values), buckets of 1/1024 MiB (256 fp32 elements, so a small MoE model has several),
// overlap on and off. Views are marked ready in the backward's order (highest offset first), the
// embedding held and released last. Results are compared exactly with the member-order sums the
// in-process group promises, worked here element by element. The bucket list is checked for its
// shape; spans for count, bytes, their order on the rank's queue and, with overlap, that the first
// bucket started before finish() (its span's begin is not after a timestamp taken before the held
// view's release: an ordering, not a timing). The planner's bucket count (plan::gradientBucketCount)
// must equal the agent's.

#include "agent/distributed/data_parallel.h"
#include "agent/runtime/in_process_communicator.h"

#include "kernels/cpu/cpu_backend.h"

#include "plan/grad_buckets.h"

#include "parallel_test_support.h"

#include <QtTest>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using namespace meshbench::agent::testing;

namespace {

constexpr double kBucketBytes = 1024;  // 256 fp32 gradients
constexpr std::size_t kCapElements = 256;

struct RankResult {
    std::vector<float> grads, shard, startShard;
    std::vector<GradientBuckets::Bucket> buckets;
    std::vector<Span> spans;
    std::int64_t beforeFinish = 0;   // just before finish()
    std::int64_t beforeRelease = 0;  // after every view but the held one was marked, before release()
    std::vector<ShardRegion> regions;
};

}  // namespace

class TestDataParallel : public QObject {
    Q_OBJECT

private slots:
    void bucketsReduceToTheDenseSum_data()
    {
        QTest::addColumn<int>("dp");
        QTest::addColumn<int>("ep");
        QTest::addColumn<int>("stage");
        QTest::addColumn<bool>("overlap");
        for (auto [dp, ep] : {std::pair{2, 1}, std::pair{2, 2}, std::pair{4, 1}, std::pair{4, 2}})
            for (int stage : {0, 1, 2})
                for (bool overlap : {true, false})
                    QTest::addRow("dp%d ep%d stage %d overlap %s", dp, ep, stage, overlap ? "on" : "off")
                        << dp << ep << stage << overlap;
    }

    void bucketsReduceToTheDenseSum()
    {
        QFETCH(int, dp);
        QFETCH(int, ep);
        QFETCH(int, stage);
        QFETCH(bool, overlap);
        const DataMesh mesh{dp, ep};
        const plan::ModelSpec model = tinyMoeModel();
        constexpr int kStep = 3, kPipelineStage = 1;
        std::vector<std::vector<float>> inputs;
        inputs.reserve(std::size_t(dp));
        for (int r = 0; r < dp; ++r)
            inputs.push_back(
                randomValues(ParameterLayout(model, expertSlice(model, mesh, r)).totalSize(), 30 + std::uint32_t(r)));
        std::vector<RankResult> results(static_cast<std::size_t>(dp));
        onDataMesh(mesh, [&](const DataRank& self) {
            const int r = self.rank;
            Communicator* data = self.data;
            Communicator* expertData = self.expertData;
            RankResult& out = results[std::size_t(r)];
            kernels::CpuBackend backend;
            const ParameterLayout layout(model, expertSlice(model, mesh, r));
            const ZeroShards shards(layout, stage, data, expertData);
            DeviceBuffer grads(backend, layout.totalSize()),
                shard(backend, std::max<std::size_t>(shards.shardElements(), 1));
            backend.upload(grads.ptr(), inputs[std::size_t(r)].data(), layout.totalSize());
            out.startShard = randomValues(shards.shardElements(), 70 + std::uint32_t(r));
            backend.upload(shard.ptr(), out.startShard.data(), shards.shardElements());
            Measurements measurements(r);
            GradientBuckets buckets(backend, layout, shards, grads.ptr(), shard.ptr(), {kBucketBytes, overlap},
                                    &measurements, kPipelineStage);
            const int held = layout.embedding();
            buckets.holdUntilReleased(held);
            buckets.begin(kStep);
            // The backward's order: from the highest offset down, two views at a time.
            std::vector<int> order;
            order.reserve(layout.views().size());
            for (int v = 0; v < int(layout.views().size()); ++v)
                order.push_back(v);
            std::sort(order.begin(), order.end(),
                      [&](int a, int b) { return layout.at(a).offset > layout.at(b).offset; });
            for (std::size_t i = 0; i < order.size(); i += 2) {
                std::vector<int> ready{order[i]};
                if (i + 1 < order.size())
                    ready.push_back(order[i + 1]);
                buckets.gradientsReady(ready);
            }
            out.beforeRelease = Measurements::nowNs();
            buckets.release(held);
            out.beforeFinish = Measurements::nowNs();
            buckets.finish();
            out.grads.resize(layout.totalSize());
            backend.download(out.grads.data(), grads.ptr(), layout.totalSize());
            out.shard.resize(shards.shardElements());
            backend.download(out.shard.data(), shard.ptr(), shards.shardElements());
            out.buckets = buckets.buckets();
            out.spans = measurements.spans();
            out.regions = shards.regions();
        });

        for (int r = 0; r < dp; ++r) {
            const RankResult& got = results[std::size_t(r)];
            const ParameterLayout layout(model, expertSlice(model, mesh, r));
            auto summed = [&](std::size_t i) {
                float sum = 0.0f;
                for (int q : groupRanks(mesh, i >= layout.expertBegin(), r))
                    sum += inputs[std::size_t(q)][i];
                return sum;
            };
            // The reduction: the whole gradient buffer (stage 0) or the owned part added into the shard.
            for (const TensorView& v : layout.views()) {
                const ShardRegion& region = got.regions[v.offset >= layout.expertBegin() ? 1 : 0];
                for (std::size_t i = v.offset; i < v.offset + v.size; ++i) {
                    if (stage == 0) {
                        QVERIFY2(got.grads[i] == summed(i), qPrintable(QStringLiteral("rank %1 %2[%3]: %4 vs %5")
                                                                           .arg(r)
                                                                           .arg(QString::fromStdString(v.name))
                                                                           .arg(i - v.offset)
                                                                           .arg(got.grads[i])
                                                                           .arg(summed(i))));
                    } else if (i >= region.ownedBegin() && i < region.ownedEnd()) {
                        const std::size_t at = region.shardOffset + (i - region.ownedBegin());
                        const float expected = summed(i) + got.startShard[at];
                        QVERIFY2(got.shard[at] == expected, qPrintable(QStringLiteral("rank %1 %2[%3]: %4 vs %5")
                                                                           .arg(r)
                                                                           .arg(QString::fromStdString(v.name))
                                                                           .arg(i - v.offset)
                                                                           .arg(got.shard[at])
                                                                           .arg(expected)));
                    }
                }
            }

            // The bucket list: each view once; each bucket one span of the flat buffer inside one
            // range, buckets in the backward's order (descending), closed once they reach the cap.
            std::vector<int> seen(layout.views().size(), 0);
            std::size_t previousBegin = layout.totalSize();
            int previousRegion = -1;
            QVERIFY(got.buckets.size() >= 4);
            for (std::size_t b = 0; b < got.buckets.size(); ++b) {
                const GradientBuckets::Bucket& bucket = got.buckets[b];
                QVERIFY(!bucket.views.empty());
                const std::size_t rangeBegin = bucket.region == 1 ? layout.expertBegin() : 0;
                const std::size_t rangeEnd = bucket.region == 1 ? layout.totalSize() : layout.expertBegin();
                QVERIFY(bucket.begin >= rangeBegin && bucket.end <= rangeEnd);
                QVERIFY(bucket.end <= previousBegin);      // descending, no overlap, within a range
                QVERIFY(bucket.region >= previousRegion);  // the dense range's buckets, then the experts'
                std::size_t lowest = layout.totalSize(), highest = 0;
                for (int v : bucket.views) {
                    ++seen[std::size_t(v)];
                    lowest = std::min(lowest, layout.at(v).offset);
                    highest = std::max(highest, layout.at(v).offset + layout.at(v).size);
                    QCOMPARE(layout.at(v).offset >= layout.expertBegin(), bucket.region == 1);
                }
                QCOMPARE(bucket.begin, lowest);
                QCOMPARE(bucket.end, highest);
                // No other bucket's view lies inside this one's span.
                for (int v = 0; v < int(layout.views().size()); ++v)
                    if (layout.at(v).offset >= bucket.begin && layout.at(v).offset < bucket.end)
                        QVERIFY(std::find(bucket.views.begin(), bucket.views.end(), v) != bucket.views.end());
                // Near the cap, counting the tensors' elements (not the alignment between them):
                // under it before its last (lowest) view joined; at least it unless the range's last
                // bucket.
                const TensorView& last = layout.at(bucket.views.back());
                QCOMPARE(last.offset, bucket.begin);
                std::size_t held = 0;
                for (int v : bucket.views)
                    held += layout.at(v).size;
                QVERIFY(held - last.size < kCapElements || bucket.views.size() == 1);
                const bool lastOfRange = b + 1 == got.buckets.size() || got.buckets[b + 1].region != bucket.region;
                if (!lastOfRange)
                    QVERIFY(held >= kCapElements);
                previousRegion = bucket.region;
                previousBegin = bucket.begin;
                if (b + 1 < got.buckets.size() && got.buckets[b + 1].region != bucket.region)
                    previousBegin = layout.totalSize();  // the experts' range starts from its top
            }
            for (std::size_t v = 0; v < seen.size(); ++v)
                QCOMPARE(seen[v], 1);
            // The planner counts the same buckets from its table of the agent's tensors.
            QCOMPARE(int(got.buckets.size()),
                     plan::gradientBucketCount(model, expertSlice(model, mesh, r), 4.0, kBucketBytes));

            // Spans: one per bucket over a group of more than one member, with its bytes, this
            // step and stage.
            std::vector<std::size_t> expectedBytes, gotBytes;
            std::size_t heldBytes = 0;
            for (const GradientBuckets::Bucket& bucket : got.buckets) {
                const bool reduced = groupRanks(mesh, bucket.region == 1, r).size() > 1;
                if (reduced)
                    expectedBytes.push_back((bucket.end - bucket.begin) * sizeof(float));
                if (std::find(bucket.views.begin(), bucket.views.end(), layout.embedding()) != bucket.views.end())
                    heldBytes = (bucket.end - bucket.begin) * sizeof(float);
            }
            for (const Span& span : got.spans) {
                QCOMPARE(span.kind, wire::SpanKind::DataParallelReduce);
                QCOMPARE(int(span.step), kStep);
                QCOMPARE(int(span.stage), kPipelineStage);
                QVERIFY(span.beginNs <= span.endNs);
                gotBytes.push_back(std::size_t(span.bytes));
            }
            std::sort(expectedBytes.begin(), expectedBytes.end());
            std::sort(gotBytes.begin(), gotBytes.end());
            QCOMPARE(gotBytes, expectedBytes);
            const bool heldBytesUnique = std::count(expectedBytes.begin(), expectedBytes.end(), heldBytes) == 1;
            // The reductions run one after another on the rank's queue: each span begins once the
            // one before it has ended. (In-process, a started operation runs when it is waited on,
            // so only the first can begin before finish() waits.)
            for (std::size_t i = 1; i < got.spans.size(); ++i)
                QVERIFY(got.spans[i].beginNs >= got.spans[i - 1].endNs);
            if (overlap && !got.spans.empty()) {
                // The first bucket started as soon as its views were ready, before the held view's
                // release and finish(); the held view's bucket only after release().
                QVERIFY(got.spans.front().beginNs <= got.beforeRelease);
                for (const Span& span : got.spans)
                    if (heldBytesUnique && std::size_t(span.bytes) == heldBytes)
                        QVERIFY(span.beginNs >= got.beforeRelease);
            }
            if (!overlap)
                for (const Span& span : got.spans)
                    QVERIFY(span.beginNs >= got.beforeFinish);
        }
    }

    void withoutMeasurementsOrAGroupOfOne()
    {
        // One member: no group, nothing reduced, no spans; at stage 0 the buffer is untouched.
        const plan::ModelSpec model = tinyMoeModel();
        kernels::CpuBackend backend;
        const ParameterLayout layout(model);
        const ZeroShards shards(layout, 0, nullptr, nullptr);
        const std::vector<float> values = randomValues(layout.totalSize(), 5);
        DeviceBuffer grads(backend, layout.totalSize());
        backend.upload(grads.ptr(), values.data(), values.size());
        Measurements measurements(0);
        GradientBuckets buckets(backend, layout, shards, grads.ptr(), {}, {kBucketBytes, true}, &measurements, 0);
        buckets.begin(1);
        std::vector<int> all;
        for (int v = int(layout.views().size()) - 1; v >= 0; --v)
            all.push_back(v);
        buckets.gradientsReady(all);
        buckets.finish();
        std::vector<float> got(values.size());
        backend.download(got.data(), grads.ptr(), got.size());
        QVERIFY(got == values);
        QVERIFY(measurements.spans().empty());
    }
};

QTEST_APPLESS_MAIN(TestDataParallel)
#include "tst_data_parallel.moc"
