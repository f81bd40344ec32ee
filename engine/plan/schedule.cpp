#include "schedule.h"

#include <algorithm>
#include <array>
#include <deque>
#include <limits>

namespace meshbench::plan {

namespace {

struct ScheduleName {
    std::string_view name;
    ScheduleKind kind;
};

constexpr ScheduleName kScheduleNames[] = {{"gpipe", ScheduleKind::GPipe},
                                           {"1f1b", ScheduleKind::OneFOneB},
                                           {"interleaved", ScheduleKind::Interleaved},
                                           {"zb-h1", ScheduleKind::ZeroBubbleH1},
                                           {"zb-v", ScheduleKind::ZeroBubbleV},
                                           {"dualpipev", ScheduleKind::DualPipeV}};

constexpr auto kScheduleKinds = [] {
    std::array<ScheduleKind, std::size(kScheduleNames)> kinds{};
    for (std::size_t i = 0; i < kinds.size(); ++i)
        kinds[i] = kScheduleNames[i].kind;
    return kinds;
}();

// Megatron's micro-batch group size per virtual stage; 0 selects its default, p.
int groupSizeOf(const ScheduleShape& shape) { return shape.groupSize > 0 ? shape.groupSize : shape.stages; }

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

// Appends compute ops with the transfers around them. A virtual stage's neighbours are the
// virtual stages before and after it in model order, wherever ScheduleShape places them; a
// neighbour on this same stage (the V schedules' turn) takes the tensor without a transfer.
class StageBuilder {
public:
    StageBuilder(const ScheduleShape& shape, int stage, std::vector<Op>& ops)
        : m_shape(shape), m_stage(stage), m_ops(ops)
    {
    }

    void forward(int mb, int chunk)
    {
        receiveActivation(mb, chunk);
        compute(OpKind::Forward, mb, chunk);
        sendActivation(mb, chunk);
    }

    void backward(int mb, int chunk)
    {
        receiveGradient(mb, chunk);
        compute(OpKind::Backward, mb, chunk);
        sendGradient(mb, chunk);
    }

    void weightGrad(int mb, int chunk) { compute(OpKind::WeightGrad, mb, chunk); }

    // A backward that runs B and W back to back before sending its gradient on (DualPipeV's
    // backward without zero-bubble splitting).
    void wholeBackward(int mb, int chunk)
    {
        receiveGradient(mb, chunk);
        compute(OpKind::Backward, mb, chunk);
        compute(OpKind::WeightGrad, mb, chunk);
        sendGradient(mb, chunk);
    }

    // DualPipeV's F&B: both receives, then the forward and the whole backward, then both sends.
    void overlappedPair(int forwardMb, int forwardChunk, int backwardMb, int backwardChunk)
    {
        receiveActivation(forwardMb, forwardChunk);
        receiveGradient(backwardMb, backwardChunk);
        compute(OpKind::Forward, forwardMb, forwardChunk, true);
        compute(OpKind::Backward, backwardMb, backwardChunk, true);
        compute(OpKind::WeightGrad, backwardMb, backwardChunk, true);
        sendActivation(forwardMb, forwardChunk);
        sendGradient(backwardMb, backwardChunk);
    }

private:
    int virtualStage(int chunk) const { return m_shape.virtualStageOf(m_stage, chunk); }
    int lastVirtualStage() const { return m_shape.stages * m_shape.virtualStages - 1; }

    // The stage holding virtual stage vs, or -1 when it is this one or off the pipeline's ends.
    int remote(int vs) const
    {
        if (vs < 0 || vs > lastVirtualStage())
            return -1;
        const int stage = m_shape.stageOf(vs);
        return stage == m_stage ? -1 : stage;
    }

    void compute(OpKind kind, int mb, int chunk, bool overlapped = false)
    {
        m_ops.push_back({kind, mb, chunk, -1, overlapped});
    }
    // A transfer with the virtual stage `step` (+1 or -1) away from this chunk's, when that one is
    // on another stage.
    void transfer(OpKind kind, int mb, int chunk, int step)
    {
        if (const int peer = remote(virtualStage(chunk) + step); peer >= 0)
            m_ops.push_back({kind, mb, chunk, peer});
    }
    // Activations come from the previous virtual stage and go to the next; gradients the other way.
    void receiveActivation(int mb, int chunk) { transfer(OpKind::RecvActivation, mb, chunk, -1); }
    void sendActivation(int mb, int chunk) { transfer(OpKind::SendActivation, mb, chunk, +1); }
    void receiveGradient(int mb, int chunk) { transfer(OpKind::RecvGradient, mb, chunk, +1); }
    void sendGradient(int mb, int chunk) { transfer(OpKind::SendGradient, mb, chunk, -1); }

    const ScheduleShape& m_shape;
    int m_stage;
    std::vector<Op>& m_ops;
};

// Hands out each chunk's micro-batches in order, one counter per op kind: a schedule written as
// a sequence of (kind, chunk) steps, as the V schedules' papers write them. Micro-batches past
// m are dropped, so a schedule built for more micro-batches than there are keeps its order.
class ChunkCounters {
public:
    ChunkCounters(StageBuilder& builder, int microbatches) : m_builder(builder), m_m(microbatches) {}

    void forward(int chunk)
    {
        run(m_forward[chunk], [&](int mb) { m_builder.forward(mb, chunk); });
    }
    void backward(int chunk)
    {
        run(m_backward[chunk], [&](int mb) { m_builder.backward(mb, chunk); });
    }
    void weightGrad(int chunk)
    {
        run(m_weightGrad[chunk], [&](int mb) { m_builder.weightGrad(mb, chunk); });
    }
    int weightGradsLeft(int chunk) const { return std::max(0, m_m - m_weightGrad[chunk]); }

private:
    template <typename Emit>
    void run(int& counter, Emit emit)
    {
        const int mb = counter++;
        if (mb < m_m)
            emit(mb);
    }

    StageBuilder& m_builder;
    int m_m;
    int m_forward[2] = {0, 0};
    int m_backward[2] = {0, 0};
    int m_weightGrad[2] = {0, 0};
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

// ZB-V (Qi et al. 2024, arXiv 2401.10241 Sec. 6; sail-sg/zero-bubble-pipeline-parallelism):
// two chunks per stage in a V, every backward split into B and W. Written for n = max(m, 2p - 1)
// micro-batches (the warm-up needs 2p - 1 of them; fewer keep the order with the missing ones
// dropped). Stage r: 2(p - r) - 1 forwards of chunk 0; r times (F1, F0); p - r times
// (F1, B1, W1); n - p times (F0, B0, W0, F1, B1, W1), the last p - r - 1 without their F0;
// r times (B0, B1) with their W's left for later; p - r times (B0, W0); the W1's, then the W0's
// still owed. With F = B = W no stage idles between its first op and its last, and each stage
// holds at most 2p chunks of activations, 1F1B's p micro-batches (checked in tst_simulator).
void buildZeroBubbleV(const ScheduleShape& shape, int stage, StageBuilder& builder)
{
    const int p = shape.stages, r = stage;
    const int n = std::max(shape.microbatches, 2 * p - 1);
    ChunkCounters next(builder, shape.microbatches);
    for (int i = 0; i < 2 * (p - r) - 1; ++i)
        next.forward(0);
    for (int i = 0; i < r; ++i) {
        next.forward(1);
        next.forward(0);
    }
    for (int i = 0; i < p - r; ++i) {
        next.forward(1);
        next.backward(1);
        next.weightGrad(1);
    }
    for (int i = 0; i < n - p; ++i) {
        if (i < n - p - (p - r - 1))
            next.forward(0);
        next.backward(0);
        next.weightGrad(0);
        next.forward(1);
        next.backward(1);
        next.weightGrad(1);
    }
    for (int i = 0; i < r; ++i) {
        next.backward(0);
        next.backward(1);
    }
    for (int i = 0; i < p - r; ++i) {
        next.backward(0);
        next.weightGrad(0);
    }
    for (int chunk : {1, 0})
        while (next.weightGradsLeft(chunk) > 0)
            next.weightGrad(chunk);
}

// DualPipeV (DeepSeek-AI, deepseek-ai/DualPipe dualpipev.py; "cut-in-half" DualPipe, Sea AI Lab):
// two chunks per stage in a V, m >= 2p. A split backward leaves its W in a first-in, first-out
// queue that later W steps drain; a whole backward runs its W at once. Stage r of p:
//  1. 2(p - r - 1) x F0
//  2. r + 1 x (F0, F1)
//  3. p - r - 1 x (B1 split, W, F1)
//  4. m - 2p + r + 1 x ([F0 & B1], [F1 & B0]) — overlapped pairs; on the last stage the first
//     F0 and B1 run one after the other, as DualPipeV does, since they hand on to each other
//  5. p - r - 1 x (B1, [F1 & B0])
//  6. r + 1 x (B1, B0), split from the middle one on (B1 first on odd stages, B0 on even)
//  7. p - r - 1 x (W, B0 split)
//  8. r + 1 x W
// With unit F, B and W (a whole backward 2, an F&B 3) each stage idles
// (p - 1)(F&B + B - 3W) = 2(p - 1), DualPipe's README table, and holds at most 2p + 1 chunks of
// activations ("PP + 1" there, PP = 2p virtual stages); checked in tst_simulator.
class DualPipeVBuilder {
public:
    DualPipeVBuilder(const ScheduleShape& shape, int stage, StageBuilder& builder)
        : m_p(shape.stages), m_m(shape.microbatches), m_r(stage), m_builder(builder)
    {
    }

    void build()
    {
        const int p = m_p, r = m_r;
        const bool lastStage = r == p - 1;
        for (int i = 0; i < 2 * (p - r - 1); ++i)
            forward(0);
        for (int i = 0; i < r + 1; ++i) {
            forward(0);
            forward(1);
        }
        for (int i = 0; i < p - r - 1; ++i) {
            backward(1, true);
            weightGrad();
            forward(1);
        }
        for (int i = 0; i < m_m - 2 * p + r + 1; ++i) {
            if (i == 0 && lastStage) {
                forward(0);
                backward(1, false);
            } else {
                pair(0, 1);
            }
            pair(1, 0);
        }
        for (int i = 0; i < p - r - 1; ++i) {
            backward(1, false);
            pair(1, 0);
        }
        bool split = false;
        for (int i = 0; i < r + 1; ++i) {
            split = split || (i == (r + 1) / 2 && r % 2 == 1);
            backward(1, split);
            split = split || (i == (r + 1) / 2 && r % 2 == 0);
            backward(0, split);
        }
        for (int i = 0; i < p - r - 1; ++i) {
            weightGrad();
            backward(0, true);
        }
        while (!m_deferred.empty())
            weightGrad();
    }

private:
    void forward(int chunk) { m_builder.forward(m_forward[chunk]++, chunk); }

    void backward(int chunk, bool split)
    {
        const int mb = m_backward[chunk]++;
        if (split) {
            m_builder.backward(mb, chunk);
            m_deferred.push_back({mb, chunk});
        } else {
            m_builder.wholeBackward(mb, chunk);
        }
    }

    void weightGrad()
    {
        const auto [mb, chunk] = m_deferred.front();
        m_deferred.pop_front();
        m_builder.weightGrad(mb, chunk);
    }

    void pair(int forwardChunk, int backwardChunk)
    {
        m_builder.overlappedPair(m_forward[forwardChunk]++, forwardChunk, m_backward[backwardChunk]++, backwardChunk);
    }

    int m_p, m_m, m_r;
    StageBuilder& m_builder;
    int m_forward[2] = {0, 0};
    int m_backward[2] = {0, 0};
    std::deque<std::pair<int, int>> m_deferred;  // (micro-batch, chunk) whose W is owed
};

}  // namespace

std::string_view scheduleName(ScheduleKind kind)
{
    for (const auto& entry : kScheduleNames)
        if (entry.kind == kind)
            return entry.name;
    return "?";
}

std::span<const ScheduleKind> scheduleKinds() { return kScheduleKinds; }

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

bool splitsBackward(ScheduleKind kind)
{
    return kind == ScheduleKind::ZeroBubbleH1 || kind == ScheduleKind::ZeroBubbleV || kind == ScheduleKind::DualPipeV;
}

bool isCompute(OpKind kind)
{
    return kind == OpKind::Forward || kind == OpKind::Backward || kind == OpKind::WeightGrad;
}

std::string validateVirtualStages(const ScheduleShape& shape)
{
    const int v = shape.virtualStages;
    const std::string name(scheduleName(shape.kind));
    if (shape.vShaped()) {
        if (v != 2)
            return name + " places two model chunks on every stage, in a V: set virtual stages to 2 (got " +
                   std::to_string(v) + ")";
        return "";
    }
    if (shape.kind == ScheduleKind::Interleaved) {
        if (v < 2)
            return "interleaved schedule needs at least 2 virtual stages per pipeline stage (got " + std::to_string(v) +
                   "); set virtual stages to 2 or more, or use \"1f1b\"";
        return "";
    }
    if (v != 1)
        return "virtual stages = " + std::to_string(v) + " needs the interleaved schedule (or 2 with \"zb-v\" or " +
               "\"dualpipev\"); set virtual stages to 1 or choose \"interleaved\" instead of \"" + name + "\"";
    return "";
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
    if (std::string why = validateVirtualStages(shape); !why.empty())
        return why;
    if (shape.vShaped()) {
        if (p < 2)
            return name + " needs at least 2 pipeline stages (got " + std::to_string(p) +
                   "); use \"1f1b\" with 1 stage";
        if (shape.kind == ScheduleKind::DualPipeV && m < 2 * p)
            return "dualpipev needs at least 2 x pipeline stages = " + std::to_string(2 * p) + " micro-batches (got " +
                   std::to_string(m) + "); use " + std::to_string(2 * p) + " or more micro-batches, or \"zb-v\"";
        return "";
    }
    if (shape.kind != ScheduleKind::Interleaved)
        return "";
    if (p < 2)
        return "interleaved schedule needs at least 2 pipeline stages (got " + std::to_string(p) +
               "); use \"1f1b\" with 1 stage";
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

int admittedMicrobatches(const ScheduleShape& shape)
{
    // Every rule asks for at least G (interleaved) or 2p micro-batches, or a multiple of p, or a
    // last group of at least p: from the least of those, 2p more counts hold any admitted one.
    long long from = std::max(shape.microbatches, 1);
    if (shape.kind == ScheduleKind::Interleaved)
        from = std::max<long long>(from, shape.groupSize);
    const long long last = std::min<long long>(from + 2LL * std::max(shape.stages, 1), std::numeric_limits<int>::max());
    ScheduleShape candidate = shape;
    for (long long m = from; m <= last; ++m) {
        candidate.microbatches = int(m);
        if (validateScheduleShape(candidate).empty())
            return int(m);
    }
    return 0;
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
    case ScheduleKind::ZeroBubbleV:
    case ScheduleKind::DualPipeV: {
        // Read off the stage's op list (2p, and 2p + 1 on dualpipev's last stage, once m >= 2p).
        const std::vector<Op> ops = buildStageOps(shape, stage);
        const auto firstBackward =
            std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::Backward; });
        return int(std::count_if(ops.begin(), firstBackward, [](const Op& op) { return op.kind == OpKind::Forward; }));
    }
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

std::vector<Op> buildStageOps(const ScheduleShape& shape, int stage)
{
    std::vector<Op> ops;
    StageBuilder builder(shape, stage, ops);
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
    case ScheduleKind::ZeroBubbleV:
        buildZeroBubbleV(shape, stage, builder);
        break;
    case ScheduleKind::DualPipeV:
        DualPipeVBuilder(shape, stage, builder).build();
        break;
    }
    return ops;
}

Schedule buildSchedule(const ScheduleShape& shape)
{
    Schedule schedule;
    schedule.shape = shape;
    schedule.stages.resize(static_cast<std::size_t>(shape.stages));
    for (int stage = 0; stage < shape.stages; ++stage)
        schedule.stages[std::size_t(stage)] = buildStageOps(shape, stage);
    return schedule;
}

}  // namespace meshbench::plan
