#pragma once
// What a session's device time and kernels (an imported trace's, store/imported_trace.h) say per
// rank and step, reduced to the figures three findings read: how late each rank starts its
// collectives against its group, how much of the step each dimension's communication is exposed,
// and how the device's idle time splits into short gaps (the host launching) and long waits.
// Only the recent steps (firstRecentStep over the steps the device time holds) are kept.

#include "plan/mesh.h"
#include "store/imported_trace.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace meshbench::store {
class SessionReader;
}

namespace meshbench::live {

// An idle gap between two kernels shorter than this is the device waiting for the host's next
// launch rather than for data: cudaLaunchKernel costs a few µs of host time, and PyTorch's eager
// dispatch adds about ten µs per op, so a host that cannot keep ahead leaves gaps of that order
// between consecutive kernels; waits for a transfer, a synchronisation or the data loader are
// longer (a pipeline transfer or an all-reduce takes tens of µs at least, a step's start hundreds).
constexpr std::int64_t kLaunchGapNs = 50'000;

// The collectives a rank takes part in by dimension, matched across its group (see DeviceEvidence).
enum class CollectiveDim { Tensor = 0, Data = 1, Expert = 2 };
constexpr int kCollectiveDims = 3;
store::DeviceClass classOf(CollectiveDim dim);
plan::GroupKind groupKindOf(CollectiveDim dim);

// A rank's collectives of one dimension in one step, medians over the step's collectives.
struct CollectiveTiming {
    std::int64_t latenessNs = 0;  // begin - the median begin of the group's other members
    std::int64_t durationNs = 0;  // the collective's duration: the median over the members' kernels
    int count = 0;                // collectives matched in the step
};

// One rank in one step.
struct RankStepDevice {
    std::int64_t windowNs = 0;  // first kernel begin to last kernel end of the step (the import's window)
    std::array<std::int64_t, store::kDeviceClasses> busyNs{};
    std::array<std::int64_t, store::kDeviceClasses> exposedNs{};
    bool hasTime = false;  // device time rows arrived for it
    int kernels = 0;
    int gaps = 0;       // idle gaps between the union's consecutive intervals
    int shortGaps = 0;  // those under kLaunchGapNs
    std::int64_t shortGapNs = 0;
    std::array<std::optional<CollectiveTiming>, kCollectiveDims> collectives;

    std::int64_t computeBusyNs() const;  // gemm + attention + other compute (their unions' sum)
};

class DeviceEvidence {
public:
    // Keeps the recent steps of those the rows hold; rows of ranks outside the mesh are ignored.
    DeviceEvidence(const plan::Mesh& mesh, std::span<const store::DeviceTimeRow> rows);
    // Kernels of the kept steps; others (another step, a rank outside the mesh, ending before they
    // begin) are ignored. Any order.
    void addKernel(std::uint32_t rank, const store::KernelRow& kernel);
    // Measures windows and gaps and matches collectives; then drops the kernels. Call once, after
    // the last addKernel.
    void finish();

    const plan::Mesh& mesh() const { return m_mesh; }
    // The kept steps, in order.
    const std::vector<std::int32_t>& steps() const { return m_steps; }
    // Empty when nothing of that rank and step arrived.
    const RankStepDevice* at(std::int32_t step, int rank) const;

private:
    void matchCollectives(std::int32_t step, CollectiveDim dim);

    plan::Mesh m_mesh;
    std::vector<std::int32_t> m_steps;
    std::map<std::pair<std::int32_t, int>, RankStepDevice> m_data;                    // by (step, rank)
    std::map<std::pair<std::int32_t, int>, std::vector<store::KernelRow>> m_kernels;  // until finish()
};

// The session's device evidence, or empty when it holds no device time (a session of our own
// agent). Reads the kernels of the recent steps only.
std::optional<DeviceEvidence> readDeviceEvidence(const store::SessionReader& reader, const plan::Mesh& mesh);

}  // namespace meshbench::live
