#pragma once
// A rank's data-parallel reductions under way, in the order started. They run one after another,
// as on NCCL's one communication stream, so each is a dp-reduce span from when it could run
// (started, and the one before it done) to when it was seen complete; then its continuation runs
// (adding a reduce-scattered share into the shard, freeing the buffers). Used by the gradient
// buckets and by ZeRO-3's per-tensor reductions.

#include "agent/runtime/communicator.h"
#include "agent/telemetry/measurements.h"

#include <cstdint>
#include <deque>
#include <functional>

namespace meshbench::agent {

class ReductionQueue {
public:
    // Spans go to `measurements` (none when null) as pipeline stage `stage`.
    ReductionQueue(Measurements* measurements, int stage) : m_measurements(measurements), m_stage(stage) {}

    void setStep(int step) { m_step = step; }
    void push(PendingComm pending, std::size_t bytes, std::function<void()> whenDone = {});
    // Finishes the reductions at the head of the queue that are complete.
    void poll();
    // Waits for the oldest until at most `bytes` are in flight (all of them for 0).
    void waitUntilAtMost(std::size_t bytes);
    void waitAll() { waitUntilAtMost(0); }
    std::size_t bytesInFlight() const { return m_bytesInFlight; }

private:
    struct Entry {
        PendingComm pending;
        std::size_t bytes = 0;
        std::int64_t startNs = 0;
        std::function<void()> whenDone;
    };
    void finishFront();

    Measurements* m_measurements;
    int m_stage;
    int m_step = 0;
    std::deque<Entry> m_entries;
    std::size_t m_bytesInFlight = 0;
    std::int64_t m_freeNs = 0;  // when the last finished reduction ended
};

}  // namespace meshbench::agent
