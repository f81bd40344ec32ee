#include "agent/parallel/data_parallel.h"

#include <algorithm>

namespace meshbench::agent {

GradientBuckets::GradientBuckets(kernels::Backend& backend, const ParameterLayout& layout, const ZeroShards& shards,
                                 kernels::DevPtr grads, kernels::DevPtr gradShard, const BucketSettings& settings,
                                 Measurements* measurements, int stage)
    : m_backend(backend), m_layout(layout), m_shards(shards), m_grads(grads), m_gradShard(gradShard),
      m_settings(settings), m_measurements(measurements), m_stage(stage), m_bucketOf(layout.views().size(), -1),
      m_held(layout.views().size(), false), m_ready(layout.views().size(), false)
{
    // Per range, views from the last to the first (the backward's order): consecutive in the flat
    // buffer, so each bucket is one span of it, closed once it holds bucketMb.
    const double capElements = settings.bucketMb * 1024.0 * 1024.0 / double(kernels::dtypeSize(grads.dtype));
    for (std::size_t r = 0; r < shards.regions().size(); ++r) {
        const ShardRegion& region = shards.regions()[r];
        std::vector<int> order;
        for (int v = 0; v < int(layout.views().size()); ++v)
            if (layout.at(v).offset >= region.begin && layout.at(v).offset < region.end)
                order.push_back(v);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return layout.at(a).offset > layout.at(b).offset; });
        for (int v : order) {
            const TensorView& view = layout.at(v);
            const bool open = !m_buckets.empty() && m_buckets.back().region == int(r) &&
                              double(m_buckets.back().end - m_buckets.back().begin) < capElements;
            if (!open)
                m_buckets.push_back({int(r), view.offset, view.offset + view.size, {}});
            Bucket& bucket = m_buckets.back();
            bucket.begin = view.offset;
            bucket.views.push_back(v);
            m_bucketOf[std::size_t(v)] = int(m_buckets.size()) - 1;
        }
    }
}

void GradientBuckets::begin(int step)
{
    m_step = step;
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
    poll();
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
    flight.beginNs = Measurements::nowNs();
    if (!region.group)
        return;   // one member: nothing to reduce
    m_started.push_back(b);
    const kernels::DevPtr range = kernels::offset(m_grads, bucket.begin);
    if (m_shards.stage() == 0) {
        flight.pending = region.group->startAllReduce(range, bucket.end - bucket.begin);
        return;
    }
    const std::vector<std::size_t> counts = region.ownedCounts(bucket.begin, bucket.end);
    flight.share = DeviceBuffer(m_backend, std::max<std::size_t>(counts[std::size_t(region.member)], 1),
                                MemoryCategory::Grads);
    flight.pending = region.group->startReduceScatter(range, flight.share.ptr(), counts);
}

void GradientBuckets::poll()
{
    // In the order started: the reductions run one after another on the rank's queue.
    while (m_recorded < m_started.size() && m_inFlight[m_started[m_recorded]].pending.done())
        recordSpan(m_started[m_recorded++]);
    for (const ShardRegion& region : m_shards.regions())
        if (region.group)
            region.group->progress();
}

void GradientBuckets::finish()
{
    for (std::size_t b = 0; b < m_buckets.size(); ++b)
        if (!m_inFlight[b].started)
            start(b);
    for (; m_recorded < m_started.size(); ++m_recorded) {
        m_inFlight[m_started[m_recorded]].pending.wait();
        recordSpan(m_started[m_recorded]);
    }
    if (m_shards.stage() > 0)
        for (std::size_t b = 0; b < m_buckets.size(); ++b)
            addShare(b);
    m_inFlight.clear();
    m_started.clear();
    m_recorded = 0;
}

void GradientBuckets::addShare(std::size_t b)
{
    // This rank's part of the bucket, into its place in the shard buffer: the reduce-scatter's
    // share, or for a range one rank holds alone (an expert-data group of one) the gradients.
    const Bucket& bucket = m_buckets[b];
    const ShardRegion& region = m_shards.regions()[std::size_t(bucket.region)];
    const std::size_t first = std::max(bucket.begin, region.ownedBegin());
    const std::size_t last = std::min(bucket.end, region.ownedEnd());
    if (first < last)
        m_backend.add(region.group ? kernels::ConstDevPtr(m_inFlight[b].share.ptr()) : kernels::offset(m_grads, first),
                      kernels::offset(m_gradShard, region.shardOffset + (first - region.ownedBegin())), last - first);
}

void GradientBuckets::recordSpan(std::size_t b)
{
    // A reduction runs once it is started and the one before it on the queue is done.
    const std::int64_t begin = std::max(m_inFlight[b].beginNs, m_queueFreeNs);
    m_queueFreeNs = Measurements::nowNs();
    if (!m_measurements)
        return;
    const Bucket& bucket = m_buckets[b];
    m_measurements->addSpan({m_step, std::int16_t(m_stage), 0, -1, wire::SpanKind::DataParallelReduce, -1, begin,
                             m_queueFreeNs, (bucket.end - bucket.begin) * kernels::dtypeSize(m_grads.dtype)});
}

}  // namespace meshbench::agent
