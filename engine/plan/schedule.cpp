#include "schedule.h"

#include <algorithm>

namespace meshbench::plan {

namespace {

struct ScheduleName {
    std::string_view name;
    ScheduleKind kind;
};

constexpr ScheduleName kScheduleNames[] = {{"gpipe", ScheduleKind::GPipe},
                                           {"1f1b", ScheduleKind::OneFOneB},
                                           {"interleaved", ScheduleKind::Interleaved},
                                           {"zb-h1", ScheduleKind::ZeroBubbleH1}};

// Megatron's micro-batch group size per virtual stage; 0 selects its default, p.
int groupSizeOf(const ScheduleShape& shape)
{
    return shape.groupSize > 0 ? shape.groupSize : shape.stages;
}

struct MicrobatchChunk {
    int microbatch;
    int chunk;
};

// Megatron get_schedule_table: micro-batches in groups of G, chunk-major inside a group; the
// last group takes whatever micro-batches remain.
std::vector<MicrobatchChunk> interleavedTable(const ScheduleShape& shape)
{
    const int m = shape.microbatches;
    const int v = shape.virtualStages;
    const int group = groupSizeOf(shape);
    std::vector<MicrobatchChunk> table;
    table.reserve(static_cast<std::size_t>(m) * v);
    for (int first = 0; first < m; first += group) {
        const int last = first + group >= m ? m : first + group;
        for (int chunk = 0; chunk < v; ++chunk)
            for (int mb = first; mb < last; ++mb)
                table.push_back({mb, chunk});
    }
    return table;
}

// Appends compute ops with the transfers around them. Virtual stage = chunk * p + stage; its
// successor is the next physical stage, wrapping to stage 0 and the next chunk.
class StageBuilder {
public:
    StageBuilder(const ScheduleShape& shape, int stage, std::vector<Op>& ops)
        : m_p(shape.stages), m_v(shape.virtualStages), m_stage(stage), m_ops(ops)
    {
    }

    void forward(int mb, int chunk)
    {
        const int vs = chunk * m_p + m_stage;
        if (vs > 0)
            m_ops.push_back({OpKind::RecvActivation, mb, chunk, previousStage()});
        m_ops.push_back({OpKind::Forward, mb, chunk, -1});
        if (vs < m_p * m_v - 1)
            m_ops.push_back({OpKind::SendActivation, mb, chunk, nextStage()});
    }

    void backward(int mb, int chunk)
    {
        const int vs = chunk * m_p + m_stage;
        if (vs < m_p * m_v - 1)
            m_ops.push_back({OpKind::RecvGradient, mb, chunk, nextStage()});
        m_ops.push_back({OpKind::Backward, mb, chunk, -1});
        if (vs > 0)
            m_ops.push_back({OpKind::SendGradient, mb, chunk, previousStage()});
    }

    void weightGrad(int mb, int chunk) { m_ops.push_back({OpKind::WeightGrad, mb, chunk, -1}); }

private:
    int nextStage() const { return (m_stage + 1) % m_p; }
    int previousStage() const { return (m_stage + m_p - 1) % m_p; }

    int m_p;
    int m_v;
    int m_stage;
    std::vector<Op>& m_ops;
};

void buildGPipe(const ScheduleShape& shape, StageBuilder& builder)
{
    for (int mb = 0; mb < shape.microbatches; ++mb)
        builder.forward(mb, 0);
    for (int mb = 0; mb < shape.microbatches; ++mb)
        builder.backward(mb, 0);
}

void buildOneFOneB(const ScheduleShape& shape, int stage, StageBuilder& builder)
{
    const int m = shape.microbatches;
    const int warmup = warmupCount(shape, stage);
    for (int mb = 0; mb < warmup; ++mb)
        builder.forward(mb, 0);
    for (int i = 0; i < m - warmup; ++i) {
        builder.forward(warmup + i, 0);
        builder.backward(i, 0);
    }
    for (int mb = m - warmup; mb < m; ++mb)
        builder.backward(mb, 0);
}

void buildInterleaved(const ScheduleShape& shape, int stage, StageBuilder& builder)
{
    const std::vector<MicrobatchChunk> table = interleavedTable(shape);
    const int total = static_cast<int>(table.size());
    const int warmup = warmupCount(shape, stage);
    const int lastChunk = shape.virtualStages - 1;
    // Backward virtual micro-batch k is table entry k with the chunks visited in reverse.
    auto forward = [&](int k) { builder.forward(table[k].microbatch, table[k].chunk); };
    auto backward = [&](int k) { builder.backward(table[k].microbatch, lastChunk - table[k].chunk); };
    for (int k = 0; k < warmup; ++k)
        forward(k);
    for (int i = 0; i < total - warmup; ++i) {
        forward(warmup + i);
        backward(i);
    }
    for (int k = total - warmup; k < total; ++k)
        backward(k);
}

// ZB-H1 (Qi et al. 2024, arXiv 2401.10241): 1F1B's F/B order with B reduced to the input
// gradient and W split off. Stage r defers its first min(r, m) W's, then runs the oldest
// deferred W right after every later B, and flushes what is still deferred at the end.
// The last stage defers most, so the chain of B's back to stage 0 is never held up by a W,
// while the W's land in the cool-down slots 1F1B leaves idle. Live activations on stage r
// peak at (p - r) + r = p, 1F1B's peak. With F = B = W and free transfers this gives the
// makespan 3m + p - 1 for m >= p, i.e. a bubble of (p - 1)(F + B - W) per stage (checked by
// simulation for every p <= 8, m in [p, 40) and in tst_simulator).
void buildZeroBubbleH1(const ScheduleShape& shape, int stage, StageBuilder& builder)
{
    const int m = shape.microbatches;
    const int warmup = warmupCount(shape, stage);
    const int deferred = std::min(stage, m);
    int backwards = 0;
    int nextW = 0;
    auto backwardThenW = [&](int mb) {
        builder.backward(mb, 0);
        if (++backwards > deferred)
            builder.weightGrad(nextW++, 0);
    };
    for (int mb = 0; mb < warmup; ++mb)
        builder.forward(mb, 0);
    for (int i = 0; i < m - warmup; ++i) {
        builder.forward(warmup + i, 0);
        backwardThenW(i);
    }
    for (int mb = m - warmup; mb < m; ++mb)
        backwardThenW(mb);
    while (nextW < m)
        builder.weightGrad(nextW++, 0);
}

} // namespace

std::string_view scheduleName(ScheduleKind kind)
{
    for (const auto& entry : kScheduleNames)
        if (entry.kind == kind)
            return entry.name;
    return "?";
}

bool parseScheduleName(std::string_view name, ScheduleKind& out)
{
    for (const auto& entry : kScheduleNames) {
        if (entry.name == name) {
            out = entry.kind;
            return true;
        }
    }
    return false;
}

std::string_view opKindName(OpKind kind)
{
    switch (kind) {
    case OpKind::Forward:
        return "F";
    case OpKind::Backward:
        return "B";
    case OpKind::WeightGrad:
        return "W";
    case OpKind::SendActivation:
        return "send-act";
    case OpKind::RecvActivation:
        return "recv-act";
    case OpKind::SendGradient:
        return "send-grad";
    case OpKind::RecvGradient:
        return "recv-grad";
    }
    return "?";
}

bool isCompute(OpKind kind)
{
    return kind == OpKind::Forward || kind == OpKind::Backward || kind == OpKind::WeightGrad;
}

std::string validateScheduleShape(const ScheduleShape& shape)
{
    const int p = shape.stages;
    const int m = shape.microbatches;
    const int v = shape.virtualStages;
    const std::string name(scheduleName(shape.kind));
    if (p < 1)
        return "pipeline stages must be at least 1 (got " + std::to_string(p) + ")";
    if (m < 1)
        return "micro-batches must be at least 1 (got " + std::to_string(m) + ")";
    if (v < 1)
        return "virtual stages must be at least 1 (got " + std::to_string(v) + ")";
    if (shape.kind != ScheduleKind::Interleaved) {
        if (v != 1)
            return "virtual stages = " + std::to_string(v) + " needs the interleaved schedule; set virtual " +
                   "stages to 1 or choose \"interleaved\" instead of \"" + name + "\"";
        return "";
    }
    if (p < 2)
        return "interleaved schedule needs at least 2 pipeline stages (got " + std::to_string(p) +
               "); use \"1f1b\" with 1 stage";
    if (v < 2)
        return "interleaved schedule needs at least 2 virtual stages per pipeline stage (got " + std::to_string(v) +
               "); set virtual stages to 2 or more, or use \"1f1b\"";
    if (shape.groupSize < 0)
        return "interleaved micro-batch group size must be 0 (default = pipeline stages) or positive (got " +
               std::to_string(shape.groupSize) + ")";
    // Megatron's interleaved schedule requires m divisible by pp when G keeps its default.
    if (shape.groupSize == 0 && m % p != 0) {
        const int lower = m / p * p;
        const std::string fix = lower > 0 ? "use " + std::to_string(lower) + " or " + std::to_string(lower + p)
                                          : "use " + std::to_string(p);
        return "interleaved schedule needs micro-batches (" + std::to_string(m) +
               ") to be a multiple of pipeline stages (" + std::to_string(p) + "); " + fix + " micro-batches";
    }
    const int group = groupSizeOf(shape);
    if (group < p || group > m)
        return "interleaved micro-batch group size " + std::to_string(group) + " must lie between pipeline stages (" +
               std::to_string(p) + ") and micro-batches (" + std::to_string(m) + "); choose a group size in [" +
               std::to_string(p) + ", " + std::to_string(std::max(p, m)) + "]" +
               (m < p ? " and at least " + std::to_string(p) + " micro-batches" : "");
    const int rest = m % group;
    if (rest != 0 && rest < p)
        return "interleaved micro-batches (" + std::to_string(m) + ") leave a last group of " + std::to_string(rest) +
               " with group size " + std::to_string(group) + ", fewer than pipeline stages (" + std::to_string(p) +
               "); make micro-batches a multiple of " + std::to_string(group) + " or leave a remainder of at least " +
               std::to_string(p);
    return "";
}

int warmupCount(const ScheduleShape& shape, int stage)
{
    const int p = shape.stages;
    const int m = shape.microbatches;
    switch (shape.kind) {
    case ScheduleKind::GPipe:
        return m;
    case ScheduleKind::OneFOneB:
    case ScheduleKind::ZeroBubbleH1:
        return std::min(p - stage - 1, m);
    case ScheduleKind::Interleaved: {
        // Megatron forward_backward_pipelining_with_interleaving.
        const int total = m * shape.virtualStages;
        if (m == p)
            return total;
        return std::min(2 * (p - stage - 1) + (shape.virtualStages - 1) * groupSizeOf(shape), total);
    }
    }
    return 0;
}

Schedule buildSchedule(const ScheduleShape& shape)
{
    Schedule schedule;
    schedule.shape = shape;
    schedule.stages.resize(static_cast<std::size_t>(shape.stages));
    for (int stage = 0; stage < shape.stages; ++stage) {
        StageBuilder builder(shape, stage, schedule.stages[stage]);
        switch (shape.kind) {
        case ScheduleKind::GPipe:
            buildGPipe(shape, builder);
            break;
        case ScheduleKind::OneFOneB:
            buildOneFOneB(shape, stage, builder);
            break;
        case ScheduleKind::Interleaved:
            buildInterleaved(shape, stage, builder);
            break;
        case ScheduleKind::ZeroBubbleH1:
            buildZeroBubbleH1(shape, stage, builder);
            break;
        }
    }
    return schedule;
}

} // namespace meshbench::plan
