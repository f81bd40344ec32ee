#include "agent/distributed/zero_shards.h"

#include <algorithm>
#include <memory>

namespace meshbench::agent {
namespace {

constexpr std::size_t kShardAlign = 16;  // elements: pieces start 64-byte aligned

ShardRegion makeRegion(std::size_t begin, std::size_t end, Communicator* group, bool sharded)
{
    ShardRegion region;
    region.begin = begin;
    region.end = end;
    region.group = group && group->size() > 1 ? group : nullptr;
    const int members = region.group ? region.group->size() : 1;
    region.member = region.group ? region.group->rank() : 0;
    const std::size_t size = end - begin;
    const std::size_t piece = sharded ? (size + std::size_t(members) - 1) / std::size_t(members) : size;
    const std::size_t alignedPiece = sharded ? (piece + kShardAlign - 1) / kShardAlign * kShardAlign : piece;
    for (int r = 0; r < members; ++r) {
        // Unsharded, every member owns the whole range.
        const std::size_t first = sharded ? std::min(size, std::size_t(r) * alignedPiece) : 0;
        const std::size_t last = sharded ? std::min(size, first + alignedPiece) : size;
        region.owned.push_back(begin + first);
        region.counts.push_back(last - first);
    }
    return region;
}

}  // namespace

std::vector<std::size_t> ShardRegion::ownedCounts(std::size_t first, std::size_t last) const
{
    std::vector<std::size_t> result(counts.size(), 0);
    for (std::size_t r = 0; r < counts.size(); ++r) {
        const std::size_t from = std::max(first, owned[r]), to = std::min(last, owned[r] + counts[r]);
        result[r] = from < to ? to - from : 0;
    }
    return result;
}

ZeroShards::ZeroShards(const ParameterLayout& layout, int stage, Communicator* data, Communicator* expertData)
    : m_stage(stage)
{
    m_regions.push_back(makeRegion(0, layout.expertBegin(), data, stage > 0));
    if (layout.totalSize() > layout.expertBegin())
        m_regions.push_back(makeRegion(layout.expertBegin(), layout.totalSize(), expertData, stage > 0));
    for (ShardRegion& region : m_regions) {
        region.shardOffset = m_shardElements;
        m_shardElements += region.ownedSize();
    }
}

const ShardRegion& ZeroShards::regionOf(std::size_t at) const
{
    return at < m_regions.front().end || m_regions.size() == 1 ? m_regions.front() : m_regions.back();
}

std::vector<float> ZeroShards::gather(kernels::Backend& backend, kernels::ConstDevPtr shard) const
{
    // On the device: the communicators move device memory.
    DeviceBuffer whole(backend, m_regions.back().end);
    for (const ShardRegion& region : m_regions) {
        const kernels::ConstDevPtr piece = kernels::offset(shard, region.shardOffset);
        if (!region.group || m_stage == 0) {
            backend.copy(whole.at(region.ownedBegin()), piece, region.ownedSize());
            continue;
        }
        region.group->startAllGather(piece, whole.at(region.begin), region.counts).wait();
    }
    std::vector<float> host(whole.size());
    backend.download(host.data(), whole.ptr(), host.size());
    return host;
}

void ZeroShards::extract(const float* whole, float* shard) const
{
    for (const ShardRegion& region : m_regions)
        std::copy_n(whole + region.ownedBegin(), region.ownedSize(), shard + region.shardOffset);
}

void ZeroShards::allGatherParameters(kernels::DevPtr params) const
{
    for (const ShardRegion& region : m_regions)
        if (region.group)
            region.group
                ->startAllGather(kernels::offset(params, region.ownedBegin()), kernels::offset(params, region.begin),
                                 region.counts)
                .wait();
}

ShardedParameters::ShardedParameters(kernels::Backend& backend, const ParameterLayout& layout, const ZeroShards& shards,
                                     kernels::DevPtr paramShard, kernels::DevPtr gradShard, std::size_t bucketBytes,
                                     bool overlap, Measurements* measurements, int stage)
    : m_backend(backend), m_layout(layout), m_shards(shards), m_paramShard(paramShard), m_gradShard(gradShard),
      m_bucketBytes(bucketBytes), m_overlap(overlap), m_queue(measurements, stage), m_gathered(layout.views().size()),
      m_gradients(layout.views().size())
{
}

void ShardedParameters::acquire(const std::vector<int>& views, bool withGradients)
{
    for (int view : views) {
        const TensorView& v = m_layout.at(view);
        const ShardRegion& region = m_shards.regionOf(v.offset);
        DeviceBuffer& buffer = m_gathered[std::size_t(view)];
        buffer = DeviceBuffer(m_backend, v.size, MemoryCategory::Params);
        // Each owner's piece of the tensor, broadcast from it.
        const std::vector<std::size_t> pieces = region.ownedCounts(v.offset, v.offset + v.size);
        std::size_t at = 0;
        for (std::size_t owner = 0; owner < pieces.size(); ++owner) {
            if (pieces[owner] == 0)
                continue;
            const kernels::DevPtr piece = kernels::offset(buffer.ptr(), at);
            if (int(owner) == region.member)
                m_backend.copy(
                    piece, kernels::offset(m_paramShard, region.shardOffset + (v.offset + at - region.ownedBegin())),
                    pieces[owner]);
            if (region.group)
                region.group->broadcast(piece, pieces[owner], int(owner));
            at += pieces[owner];
        }
        if (withGradients)
            m_gradients[std::size_t(view)] = DeviceBuffer(m_backend, v.size, MemoryCategory::Grads);
    }
}

void ShardedParameters::release(const std::vector<int>& views, bool withGradients)
{
    for (int view : views) {
        if (withGradients)
            reduceIntoShard(view);
        m_gathered[std::size_t(view)] = DeviceBuffer();
    }
}

void ShardedParameters::reduceIntoShard(int view)
{
    const TensorView& v = m_layout.at(view);
    const ShardRegion& region = m_shards.regionOf(v.offset);
    const std::vector<std::size_t> pieces = region.ownedCounts(v.offset, v.offset + v.size);
    const std::size_t mine = pieces[std::size_t(region.member)];
    const std::size_t at = region.shardOffset + (std::max(v.offset, region.ownedBegin()) - region.ownedBegin());
    DeviceBuffer gradient = std::move(m_gradients[std::size_t(view)]);
    if (!region.group) {
        if (mine > 0)
            m_backend.add(gradient.ptr(), kernels::offset(m_gradShard, at), mine);
        return;
    }
    // The gradient and this rank's summed piece live until the reduction is done.
    auto buffers = std::make_shared<std::pair<DeviceBuffer, DeviceBuffer>>(
        std::move(gradient), DeviceBuffer(m_backend, std::max<std::size_t>(mine, 1), MemoryCategory::Grads));
    m_queue.push(region.group->startReduceScatter(buffers->first.ptr(), buffers->second.ptr(), pieces),
                 v.size * kernels::dtypeSize(m_gradShard.dtype), [this, buffers, mine, at] {
                     if (mine > 0)
                         m_backend.add(buffers->second.ptr(), kernels::offset(m_gradShard, at), mine);
                 });
    m_queue.waitUntilAtMost(m_overlap ? m_bucketBytes : 0);
    m_queue.poll();
    region.group->progress();
}

}  // namespace meshbench::agent
