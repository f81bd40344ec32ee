#include "agent/distributed/data_parallel.h"

#include "plan/grad_buckets.h"

#include <algorithm>

namespace meshbench::agent {

GradientBuckets::GradientBuckets(kernels::Backend& backend, const ParameterLayout& layout, const ZeroShards& shards,
                                 kernels::DevPtr grads, kernels::DevPtr gradShard, const BucketSettings& settings,
                                 Measurements* measurements, int stage)
    : m_backend(backend), m_shards(shards), m_grads(grads), m_gradShard(gradShard), m_settings(settings),
      m_queue(measurements, stage), m_bucketOf(layout.views().size(), -1), m_held(layout.views().size(), false),
      m_ready(layout.views().size(), false)
{
    // Per region, views from the last to the first (the backward's order): consecutive in the flat
    // buffer, so each bucket is one span of it; where one closes is plan::cutIntoBuckets's rule.
    for (std::size_t r = 0; r < shards.regions().size(); ++r) {
        const ShardRegion& region = shards.regions()[r];
        std::vector<int> order;
        for (int v = 0; v < int(layout.views().size()); ++v)
            if (layout.at(v).offset >= region.begin && layout.at(v).offset < region.end)
                order.push_back(v);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return layout.at(a).offset > layout.at(b).offset; });
        std::vector<double> bytes;
        bytes.reserve(order.size());
        for (int v : order)
            bytes.push_back(double(layout.at(v).size * kernels::dtypeSize(grads.dtype)));
        const std::vector<int> bucketOf = plan::cutIntoBuckets(bytes, settings.bucketBytes);
        const std::size_t first = m_buckets.size();
        for (std::size_t i = 0; i < order.size(); ++i) {
            const TensorView& view = layout.at(order[i]);
            if (first + std::size_t(bucketOf[i]) == m_buckets.size())
                m_buckets.push_back({int(r), view.offset, view.offset + view.size, {}});
            Bucket& bucket = m_buckets.back();
            bucket.begin = view.offset;
            bucket.views.push_back(order[i]);
            m_bucketOf[std::size_t(order[i])] = int(m_buckets.size()) - 1;
        }
    }
}

void GradientBuckets::begin(int step)
{
    m_queue.setStep(step);
    std::fill(m_ready.begin(), m_ready.end(), false);
    m_inFlight.clear();
    m_inFlight.resize(m_buckets.size());
    for (std::size_t b = 0; b < m_buckets.size(); ++b)
        m_inFlight[b].waiting = int(m_buckets[b].views.size());
}

void GradientBuckets::gradientsReady(const std::vector<int>& views)
{
    for (int v : views)
        if (!m_held[std::size_t(v)])
            release(v);
    m_queue.poll();
    for (const ShardRegion& region : m_shards.regions())
        if (region.group)
            region.group->progress();
}

void GradientBuckets::release(int view)
{
    if (m_ready[std::size_t(view)])
        return;
    m_ready[std::size_t(view)] = true;
    const std::size_t bucket = std::size_t(m_bucketOf[std::size_t(view)]);
    if (--m_inFlight[bucket].waiting == 0 && m_settings.overlap)
        start(bucket);
}

void GradientBuckets::start(std::size_t b)
{
    const Bucket& bucket = m_buckets[b];
    const ShardRegion& region = m_shards.regions()[std::size_t(bucket.region)];
    InFlight& flight = m_inFlight[b];
    flight.started = true;
    const kernels::DevPtr range = kernels::offset(m_grads, bucket.begin);
    const std::size_t bytes = (bucket.end - bucket.begin) * kernels::dtypeSize(m_grads.dtype);
    if (!region.group) {
        // One member: nothing to reduce; with ZeRO its gradients are its share.
        if (m_shards.stage() > 0)
            addShare(b, range);
        return;
    }
    if (m_shards.stage() == 0) {
        m_queue.push(region.group->startAllReduce(range, bucket.end - bucket.begin), bytes);
        return;
    }
    const std::vector<std::size_t> counts = region.ownedCounts(bucket.begin, bucket.end);
    flight.share =
        DeviceBuffer(m_backend, std::max<std::size_t>(counts[std::size_t(region.member)], 1), MemoryCategory::Grads);
    m_queue.push(region.group->startReduceScatter(range, flight.share.ptr(), counts), bytes,
                 [this, b] { addShare(b, m_inFlight[b].share.ptr()); });
}

void GradientBuckets::finish()
{
    for (std::size_t b = 0; b < m_buckets.size(); ++b)
        if (!m_inFlight[b].started)
            start(b);
    m_queue.waitAll();
    m_inFlight.clear();
}

void GradientBuckets::addShare(std::size_t b, kernels::ConstDevPtr share)
{
    // This rank's part of the bucket (`share` begins at its first owned element), into its place
    // in the shard buffer.
    const Bucket& bucket = m_buckets[b];
    const ShardRegion& region = m_shards.regions()[std::size_t(bucket.region)];
    const std::size_t first = std::max(bucket.begin, region.ownedBegin());
    const std::size_t last = std::min(bucket.end, region.ownedEnd());
    if (first < last)
        m_backend.add(region.group ? share : kernels::offset(share, first - bucket.begin),
                      kernels::offset(m_gradShard, region.shardOffset + (first - region.ownedBegin())), last - first);
}

}  // namespace meshbench::agent
