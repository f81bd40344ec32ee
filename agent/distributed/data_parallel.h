#pragma once
// Data parallelism's gradient reduction in buckets, overlapped with the backward (PyTorch DDP's
// gradient buckets, Li et al. 2020; Megatron-core's --overlap-grad-reduce): the flat gradient
// buffer is cut into buckets of about `bucketBytes` (grad_bucket_mb, as DDP's bucket_cap_mb), tensors
// taken in the order the backward finishes them (the reverse of the layout's). As soon as the
// backward of a step's last micro-batch has finished every tensor of a bucket, its reduction
// starts - an all-reduce without ZeRO, a reduce-scatter into the owners' shards with it - over
// the bucket's range's group (dense: data, experts: expert-data). finish() waits for them all.
// Without overlap every bucket starts in finish(): the plain reduction, bucketed. Each reduction
// is a dp-reduce span with its bytes (see ReductionQueue).

#include "agent/distributed/reduction_queue.h"
#include "agent/distributed/zero_shards.h"
#include "agent/layout/parameters.h"
#include "agent/model/gradient_listener.h"
#include "agent/runtime/communicator.h"
#include "agent/runtime/device_buffer.h"
#include "agent/telemetry/measurements.h"

#include "kernels/backend.h"

#include <cstdint>
#include <vector>

namespace meshbench::agent {

struct BucketSettings {
    double bucketBytes = 0;  // the spec's parallel.grad_bucket_mb
    bool overlap = true;
};

class GradientBuckets final : public GradientListener {
public:
    // grads: the model's flat gradient buffer; gradShard: where ZeRO's reduce-scattered shares are
    // added (the shard buffer; unused at stage 0). spans go to `measurements` as stage `stage`.
    GradientBuckets(kernels::Backend& backend, const ParameterLayout& layout, const ZeroShards& shards,
                    kernels::DevPtr grads, kernels::DevPtr gradShard, const BucketSettings& settings,
                    Measurements* measurements, int stage);

    // A view that gradientsReady does not finish, only release() (a tied embedding, whose copies on
    // the first and last stages are summed after the backward).
    void holdUntilReleased(int view) { m_held[std::size_t(view)] = true; }
    void release(int view);
    // Starts a pass: a step's reduction (or, at ZeRO-2, a micro-batch's).
    void begin(int step);
    void gradientsReady(const std::vector<int>& views) override;
    // Starts what has not started, waits for everything, and adds ZeRO's shares into the shard.
    void finish();

    struct Bucket {
        int region = 0;
        std::size_t begin = 0, end = 0;  // the flat range
        std::vector<int> views;
    };
    const std::vector<Bucket>& buckets() const { return m_buckets; }

private:
    void start(std::size_t bucket);
    void addShare(std::size_t bucket, kernels::ConstDevPtr share);

    struct InFlight {
        bool started = false;
        int waiting = 0;     // views not yet ready
        DeviceBuffer share;  // ZeRO: this rank's reduce-scattered part
    };

    kernels::Backend& m_backend;
    const ZeroShards& m_shards;
    kernels::DevPtr m_grads;
    kernels::DevPtr m_gradShard;
    BucketSettings m_settings;
    ReductionQueue m_queue;
    std::vector<Bucket> m_buckets;
    std::vector<int> m_bucketOf;  // per view
    std::vector<bool> m_held;
    std::vector<bool> m_ready;  // per view, this pass
    std::vector<InFlight> m_inFlight;
};

}  // namespace meshbench::agent
