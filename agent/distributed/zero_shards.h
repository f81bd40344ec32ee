#pragma once
// ZeRO (Rajbhandari et al. 2020) over the model's flat buffers, as Megatron-core's distributed
// optimizer lays it out with expert parallelism: the dense tensors' range is sharded over the
// data-parallel group and the experts' range over the expert-data-parallel group (the ranks that
// hold the same experts). Within a range of S elements over g members, member r owns the r-th
// contiguous piece of ceil(S / g) (64-byte aligned; the last piece is shorter), so no padding is
// needed. Stage 1 keeps Adam's moments of the owned pieces only, stage 2 also the gradients,
// stage 3 also the parameters, which the ZeRO-3 gatherer below fetches tensor by tensor for use.
// At stage 0 every member owns its ranges whole.
//
// A rank's shard buffer (gradients from stage 1, parameters at stage 3, the moments at every
// stage) is its owned pieces laid end to end: the dense piece, then the experts'.

#include "agent/distributed/reduction_queue.h"
#include "agent/layout/parameters.h"
#include "agent/model/parameter_gatherer.h"
#include "agent/runtime/communicator.h"
#include "agent/runtime/device_buffer.h"

#include "kernels/backend.h"

#include <algorithm>
#include <vector>

namespace meshbench::agent {

struct ShardRegion {
    std::size_t begin = 0;  // the range of the flat buffer
    std::size_t end = 0;
    Communicator* group = nullptr;    // the members it is reduced over; null for one member
    std::vector<std::size_t> counts;  // elements each member owns, in member order
    std::vector<std::size_t> owned;   // where each member's piece begins in the flat buffer
    int member = 0;                   // this rank's index in the group
    std::size_t shardOffset = 0;      // where this rank's piece begins in its shard buffer

    std::size_t ownedBegin() const { return owned[std::size_t(member)]; }
    std::size_t ownedSize() const { return counts[std::size_t(member)]; }
    std::size_t ownedEnd() const { return ownedBegin() + ownedSize(); }
    // Elements of [first, last) each member owns: the counts of a reduce-scatter over that span.
    std::vector<std::size_t> ownedCounts(std::size_t first, std::size_t last) const;
};

class ZeroShards {
public:
    // data and expertData: the groups (null on one device); stage 0 to 3.
    ZeroShards(const ParameterLayout& layout, int stage, Communicator* data, Communicator* expertData);

    int stage() const { return m_stage; }
    const std::vector<ShardRegion>& regions() const { return m_regions; }
    // The region holding flat element `at`.
    const ShardRegion& regionOf(std::size_t at) const;
    std::size_t shardElements() const { return m_shardElements; }
    // Calls f(position in the shard buffer, elements) for the part of a tensor this rank owns.
    template <typename F>
    void forOwnedPart(const TensorView& v, F f) const
    {
        const ShardRegion& region = regionOf(v.offset);
        const std::size_t first = std::max(v.offset, region.ownedBegin());
        const std::size_t last = std::min(v.offset + v.size, region.ownedEnd());
        if (first < last)
            f(region.shardOffset + (first - region.ownedBegin()), last - first);
    }

    // The whole flat buffer on the host from every member's shard buffer (for checkpoints).
    std::vector<float> gather(kernels::Backend& backend, kernels::ConstDevPtr shard) const;
    // This rank's shard buffer's values, taken from the whole flat buffer `whole`.
    void extract(const float* whole, float* shard) const;
    // Stages 1 and 2: every member's updated pieces of the parameters to every member, in place.
    void allGatherParameters(kernels::DevPtr params) const;

private:
    int m_stage;
    std::vector<ShardRegion> m_regions;
    std::size_t m_shardElements = 0;
};

// ZeRO-3: the parameters live in the shard buffers and are gathered for the tensors in use, just
// before use, and freed after; their gradients are reduce-scattered into the shards when the
// tensors are released. With overlap, those reductions run under the rest of the backward, with
// at most a bucket's bytes of gradients kept in flight (DeepSpeed's reduce_bucket_size).
class ShardedParameters final : public ParameterGatherer {
public:
    // bucketBytes: the most gradient bytes reduced at once; overlap off waits for each at release.
    ShardedParameters(kernels::Backend& backend, const ParameterLayout& layout, const ZeroShards& shards,
                      kernels::DevPtr paramShard, kernels::DevPtr gradShard, std::size_t bucketBytes, bool overlap,
                      Measurements* measurements, int stage);

    // A step's reductions begin, and end (all of them added into the shards) before the optimizer.
    void begin(int step) { m_queue.setStep(step); }
    void finish() { m_queue.waitAll(); }

    void acquire(const std::vector<int>& views, bool withGradients) override;
    void release(const std::vector<int>& views, bool withGradients) override;
    kernels::DevPtr param(int view) override { return m_gathered[std::size_t(view)].ptr(); }
    kernels::DevPtr grad(int view) override { return m_gradients[std::size_t(view)].ptr(); }

private:
    void reduceIntoShard(int view);

    kernels::Backend& m_backend;
    const ParameterLayout& m_layout;
    const ZeroShards& m_shards;
    kernels::DevPtr m_paramShard;
    kernels::DevPtr m_gradShard;
    std::size_t m_bucketBytes;
    bool m_overlap;
    ReductionQueue m_queue;
    std::vector<DeviceBuffer> m_gathered;
    std::vector<DeviceBuffer> m_gradients;
};

}  // namespace meshbench::agent
