#pragma once
// One rank's trace turned into what a session stores: its steps, its pipeline ops as spans (device
// time where the trace has a device), its kernels placed by step and class (communication by the
// parallel dimension whose group ran it), its device time per step and class, and the ends of its
// collectives for the clock alignment. Times stay on the rank's own clock; the import shifts them.

#include "op_names.h"
#include "rank_trace.h"

#include "plan/job_spec.h"
#include "plan/mesh.h"
#include "store/imported_trace.h"
#include "wire/telemetry.h"

#include <optional>
#include <string>
#include <vector>

namespace meshbench::import {

// What the job spec (--job) says of the run, when the user gave one.
struct JobContext {
    std::optional<plan::JobSpec> spec;
    std::optional<plan::Mesh> mesh;
    int pp() const { return spec ? spec->parallel.pp : 0; }  // 0: unknown
};

struct StepWindow {
    int step = 0;
    std::int64_t hostBeginNs = 0, hostEndNs = 0;
    std::int64_t deviceBeginNs = 0, deviceEndNs = -1;  // the span of its device work; host span without
    int ops = 0;
    std::size_t kernels = 0;
};

// The end of one collective on this rank, under a key every member gives it: its process group and
// sequence number, or its group and its place among the group's collectives on this rank.
struct CollectiveEnd {
    std::string key;
    std::int64_t endNs = 0;
};

// A communication kernel that names its NCCL communicator but not the ranks in it (nsys: NCCL's
// NVTX payload), placed once every rank is read (placeCommunicators).
struct CommunicatorUse {
    std::size_t kernel = 0;  // into RankAnalysis::kernels
    std::string communicator;
    std::string call;        // "allreduce", "send", "recv", ...
    std::int32_t peer = -1;  // send/recv: the peer's rank within the communicator
    std::int64_t launchNs = 0;
};

struct RankAnalysis {
    int rank = 0;
    int stage = -1;  // pipeline coordinate; -1 unknown
    std::vector<StepWindow> steps;
    std::vector<wire::SpanRecord> spans;
    std::vector<store::KernelRow> kernels;
    std::vector<store::DeviceTimeRow> deviceTime;
    std::vector<CollectiveEnd> collectives;
    std::vector<CommunicatorUse> communicatorUses;  // in launch order
    std::vector<std::string> recognised;
    std::vector<std::string> inferred;
    std::vector<std::pair<int, std::string>> warnings;  // by step: said only for steps kept
};

// Throws ImportError when the trace contradicts the job (a stage the mesh does not have).
RankAnalysis analyseRank(const RankTrace& trace, int rank, const NameTable& names, const JobContext& job,
                         const StepMarker& steps);

// The communicators that NCCL kernels name without their ranks (nsys exports), placed across ranks:
// a communicator's members are the ranks whose traces use it, matched against the job's mesh for
// the parallel dimension (without --job they stay comm-other). Every member issues a
// communicator's calls in one order (NCCL requires it), so the k-th call of a step on one
// communicator is the same collective on each member (the trace's first step, cut at its start,
// is counted from its end), and the k-th send from a to b meets the k-th receive on b from a:
// each gets a key for the clock alignment. The ranks' device time is measured again with the
// placed classes. Returns what it did, for the import's summary; nothing when no kernel names a
// communicator.
std::vector<std::string> placeCommunicators(const std::vector<RankAnalysis*>& ranks, const JobContext& job);

// Steps that are partial on some rank at either end of its trace: fewer pipeline ops than the
// rank's fullest step between the ends, or fewer device events than the median one. A step dropped
// on one rank is dropped on all.
std::vector<int> partialSteps(const std::vector<const RankAnalysis*>& ranks);

// Keeps only the steps in `kept` (sorted): spans and device time of other steps go, and kernels of
// other steps keep their place on the timeline with step -1.
void keepSteps(RankAnalysis& rank, const std::vector<int>& kept);

}  // namespace meshbench::import
