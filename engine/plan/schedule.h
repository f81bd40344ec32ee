#pragma once
// Pipeline schedules as per-stage op lists. These lists are the single source of truth for
// pipeline execution: the planner simulates them and meshbench-agent executes them op by op.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::plan {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved, ZeroBubbleH1 };

std::string_view scheduleName(ScheduleKind kind);               // "gpipe", "1f1b", "interleaved", "zb-h1"
bool parseScheduleName(std::string_view name, ScheduleKind& out);

enum class OpKind : std::uint8_t {
    Forward,          // F
    Backward,         // B: the whole backward, or only the input gradient when the schedule splits W off
    WeightGrad,       // W: weight gradient (zb-h1 only)
    SendActivation,   // after F, to the next virtual stage (non-blocking on the sender)
    RecvActivation,   // before F, from the previous virtual stage (blocking)
    SendGradient,     // after B, to the previous virtual stage (non-blocking on the sender)
    RecvGradient,     // before B, from the next virtual stage (blocking)
};

std::string_view opKindName(OpKind kind);   // "F", "B", "W", "send-act", "recv-act", "send-grad", "recv-grad"
bool isCompute(OpKind kind);

struct Op {
    OpKind kind;
    int microbatch;   // 0 .. m-1
    int chunk;        // model chunk on this stage, 0 .. v-1 (virtual stage = chunk * p + stage)
    int peerStage;    // for send/recv: the physical stage on the other side; -1 for compute ops
};

// The most (stage, micro-batch, chunk) slots a schedule may have, so that building and
// simulating its op lists stays within memory and a fraction of a second.
constexpr long long kMaxScheduleSlots = 1'000'000;

struct ScheduleShape {
    ScheduleKind kind = ScheduleKind::OneFOneB;
    int stages = 1;           // p
    int microbatches = 1;     // m
    int virtualStages = 1;    // v (chunks per stage); 1 unless interleaved
    int groupSize = 0;        // interleaved micro-batch group size G; 0 means Megatron's default p

    long long slotCount() const { return 1LL * stages * microbatches * virtualStages; }
};

struct Schedule {
    ScheduleShape shape;
    std::vector<std::vector<Op>> stages;   // stages[s] = ordered op list of physical stage s
    bool splitBackward() const { return shape.kind == ScheduleKind::ZeroBubbleH1; }
};

// Builds the op lists. The shape must already be valid (see validateScheduleShape).
Schedule buildSchedule(const ScheduleShape& shape);

// Empty when the shape can be scheduled; otherwise why not (Megatron's interleaving rules etc.).
std::string validateScheduleShape(const ScheduleShape& shape);

// Megatron's warm-up forward count for a stage (1F1B: min(p - r - 1, m); interleaved:
// 2(p - r - 1) + (v - 1)G capped at m*v, all of m*v when m == p).
int warmupCount(const ScheduleShape& shape, int stage);

}  // namespace meshbench::plan
