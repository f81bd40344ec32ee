#pragma once
// Pipeline schedules as per-stage op lists. These lists are the single source of truth for
// pipeline execution: the planner simulates them and meshbench-agent executes them op by op.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::plan {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved, ZeroBubbleH1, ZeroBubbleV, DualPipeV };

// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"
std::string_view scheduleName(ScheduleKind kind);
bool parseScheduleName(std::string_view name, ScheduleKind& out);
// Every schedule, in the order of its names above.
std::span<const ScheduleKind> scheduleKinds();

enum class OpKind : std::uint8_t {
    Forward,         // F
    Backward,        // B: the whole backward, or only the input gradient when the schedule splits W off
    WeightGrad,      // W: weight gradient (schedules that split the backward)
    SendActivation,  // after F, to the next virtual stage (non-blocking on the sender)
    RecvActivation,  // before F, from the previous virtual stage (blocking)
    SendGradient,    // after B, to the previous virtual stage (non-blocking on the sender)
    RecvGradient,    // before B, from the next virtual stage (blocking)
};

std::string_view opKindName(OpKind kind);  // "F", "B", "W", "send-act", "recv-act", "send-grad", "recv-grad"
bool isCompute(OpKind kind);

struct Op {
    OpKind kind;
    int microbatch;  // 0 .. m-1
    int chunk;       // model chunk on this stage, 0 .. v-1 (ScheduleShape::virtualStageOf places it)
    int peerStage;   // for send/recv: the physical stage on the other side; -1 for compute ops
    // DualPipeV's F&B pairs: the forward of one chunk and the whole backward (B and W) of the
    // other, run as one unit between their receives and their sends so that one's compute hides
    // the other's communication. Set on the pair's F, B and W.
    bool overlapped = false;
};

// The most (stage, micro-batch, chunk) slots a schedule may have, so that building and
// simulating its op lists stays within memory and a fraction of a second.
constexpr long long kMaxScheduleSlots = 1'000'000;

struct ScheduleShape {
    ScheduleKind kind = ScheduleKind::OneFOneB;
    int stages = 1;         // p
    int microbatches = 1;   // m
    int virtualStages = 1;  // v (chunks per stage); 1, or 2 for the V schedules, unless interleaved
    int groupSize = 0;      // interleaved micro-batch group size G; 0 means Megatron's default p

    long long slotCount() const { return 1LL * stages * microbatches * virtualStages; }

    // Where the p v virtual stages (model chunks, in model order) sit. Interleaved (Megatron):
    // virtual stage c p + s on stage s, chunk c. V schedules (zb-v, dualpipev; Qi et al. 2024):
    // stage s holds virtual stages s and 2p - 1 - s, so stage 0 holds the model's first and last
    // chunks and stage p - 1 hands chunk 0 on to chunk 1 without a transfer.
    bool vShaped() const { return kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV; }
    int virtualStageOf(int stage, int chunk) const
    {
        return vShaped() && chunk == 1 ? 2 * stages - 1 - stage : chunk * stages + stage;
    }
    int stageOf(int virtualStage) const
    {
        return vShaped() && virtualStage >= stages ? 2 * stages - 1 - virtualStage : virtualStage % stages;
    }
    int chunkOf(int virtualStage) const { return virtualStage / stages; }
};

// Whether the schedule splits each backward into B (input gradient) and W (weight gradient).
bool splitsBackward(ScheduleKind kind);

struct Schedule {
    ScheduleShape shape;
    std::vector<std::vector<Op>> stages;  // stages[s] = ordered op list of physical stage s
    bool splitBackward() const { return splitsBackward(shape.kind); }
};

// Builds the op lists. The shape must already be valid (see validateScheduleShape).
Schedule buildSchedule(const ScheduleShape& shape);
// One stage's op list, as buildSchedule builds it, for a caller that needs only that stage.
std::vector<Op> buildStageOps(const ScheduleShape& shape, int stage);

// Empty when the shape can be scheduled; otherwise why not (Megatron's interleaving rules etc.).
// It checks validateVirtualStages first.
std::string validateScheduleShape(const ScheduleShape& shape);
// Empty when the kind takes the shape's chunks per stage: 1 for 1f1b, gpipe and zb-h1, 2 for the
// V schedules, at least 2 for interleaved; otherwise why not.
std::string validateVirtualStages(const ScheduleShape& shape);

// The fewest micro-batches, at least shape.microbatches, with which the shape passes
// validateScheduleShape; 0 when no count does (a wrong chunk count for the kind, say).
int admittedMicrobatches(const ScheduleShape& shape);

// Megatron's warm-up forward count for a stage (1F1B: min(p - r - 1, m); interleaved:
// 2(p - r - 1) + (v - 1)G capped at m*v, all of m*v when m == p); for the V schedules the chunk
// forwards before the stage's first backward.
int warmupCount(const ScheduleShape& shape, int stage);

}  // namespace meshbench::plan
