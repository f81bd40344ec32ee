#pragma once
// One rank's trace as the readers leave it, in the rank's own clock (nanoseconds): the host ranges
// the analysis needs (steps and pipeline ops), the launches that link host to device, and every
// device event. Compact, so that a file of millions of kernels fits in memory while it is analysed.

#include "store/imported_trace.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace meshbench::import {

// Kernel and range names, each stored once for all ranks, with the class each kernel name says
// (worked out once per name: a trace repeats a few thousand names millions of times).
class NameTable {
public:
    std::int32_t id(std::string_view name);
    const std::string& name(std::int32_t id) const { return m_names.at(static_cast<std::size_t>(id)); }
    const std::vector<std::string>& names() const { return m_names; }
    store::DeviceClass kernelClass(std::int32_t id) const { return m_classes.at(static_cast<std::size_t>(id)); }

private:
    struct Hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>()(text); }
    };
    std::vector<std::string> m_names;
    std::vector<store::DeviceClass> m_classes;
    std::unordered_map<std::string, std::int32_t, Hash, std::equal_to<>> m_ids;
};

// A host-side range: a profiler step, a pipeline op's annotation or an NVTX range.
struct HostRange {
    std::int32_t nameId = 0;
    std::int64_t beginNs = 0;
    std::int64_t endNs = 0;
    std::int64_t thread = 0;
};

// A host call that put work on the device (cudaLaunchKernel, cudaMemcpyAsync, ...).
struct Launch {
    std::int64_t correlation = 0;
    std::int64_t ns = 0;
    std::int64_t thread = 0;
};

// What a communication kernel says of itself (torch's NCCL kernel arguments, or NCCL's own NVTX
// range around its launch in an nsys export). Empty fields are unknown.
struct CollectiveInfo {
    std::string name;        // "allreduce", "send", "recv", "all_to_all", ...
    std::string group;       // Process Group Name
    std::string groupDesc;   // Process Group Description, e.g. TENSOR_MODEL_PARALLEL_GROUP, mesh_tp
    std::string groupRanks;  // Process Group Ranks, as written: "[0, 1]"
    std::int64_t seq = -1;
    std::int64_t inElems = -1;
    std::int64_t outElems = -1;
    std::string dtype;
    std::int32_t groupSize = -1;
    std::int32_t srcRank = -1;
    std::int32_t dstRank = -1;
    std::string communicator;  // NCCL's communicator hash, the same on every member
    std::int32_t peer = -1;    // send/recv: the peer's rank within the communicator
};

struct DeviceEvent {
    std::int64_t beginNs = 0;
    std::int64_t endNs = 0;
    std::int32_t device = 0;
    std::int32_t stream = 0;
    std::int64_t correlation = -1;
    std::int32_t nameId = 0;
    store::DeviceClass deviceClass = store::DeviceClass::OtherCompute;  // communication: CommOther until placed
    std::int32_t collective = -1;                                       // into RankTrace::collectives
};

// A process group as a trace's distributedInfo.pg_config describes it.
struct ProcessGroup {
    std::string name;
    std::string desc;
    std::vector<int> ranks;
};

struct RankTrace {
    std::string path;
    std::string format;  // as store::ImportSource::format
    std::string digest;  // as store::ImportSource::digest
    std::optional<int> rank;
    std::optional<int> worldSize;
    std::vector<ProcessGroup> groups;
    std::string host;
    std::vector<HostRange> ranges;  // in begin order once read
    std::vector<Launch> launches;   // in time order once read
    std::vector<DeviceEvent> device;
    std::vector<CollectiveInfo> collectives;
    std::uint64_t events = 0;  // events read, of every kind
    bool hasDeviceEvents() const { return !device.empty(); }
};

// The class a kernel's name says (GEMM, attention, communication, other compute); copies and
// memsets are told by their event's category, not their name.
store::DeviceClass classifyKernel(std::string_view name);

// The ranks a text lists, in order: "[0, 1, 2]" (torch writes process groups' ranks so) or "0,1,2".
std::vector<int> ranksListed(std::string_view text);

// Orders ranges by begin, launches by time and device events by begin, as the analysis expects.
void sortTrace(RankTrace& trace);

}  // namespace meshbench::import
