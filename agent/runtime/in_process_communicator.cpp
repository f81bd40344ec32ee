#include "agent/runtime/in_process_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace meshbench::agent {

struct InProcessGroup::Shared {
    explicit Shared(int n) : size(n), slots(std::size_t(n), nullptr), counts(std::size_t(n), nullptr) {}

    // Every member arrives before any leaves; reusable, counted by generation.
    void barrier()
    {
        std::unique_lock lock(mutex);
        const std::uint64_t generation = barrierGeneration;
        if (++arrived == size) {
            arrived = 0;
            ++barrierGeneration;
            changed.notify_all();
            return;
        }
        changed.wait(lock, [&] { return barrierGeneration != generation; });
    }

    const int size;
    std::vector<const void*> slots;                       // each member's buffer for the collective under way
    std::vector<const std::vector<std::size_t>*> counts;  // each member's send counts in an all-to-all
    std::mutex mutex;
    std::condition_variable changed;
    int arrived = 0;
    std::uint64_t barrierGeneration = 0;
    // Point to point: (from, to, tag) -> messages in the order sent.
    std::map<std::tuple<int, int, int>, std::deque<std::vector<char>>> mailboxes;
};

namespace {

std::size_t offsetOf(const std::vector<std::size_t>& counts, int member)
{
    std::size_t offset = 0;
    for (int r = 0; r < member; ++r)
        offset += counts[std::size_t(r)];
    return offset;
}

template <typename T>
T* typed(kernels::DevPtr p)
{
    return static_cast<T*>(p.data);
}
template <typename T>
const T* typed(kernels::ConstDevPtr p)
{
    return static_cast<const T*>(p.data);
}

void requireF32(kernels::DType dtype, const char* operation)
{
    if (dtype != kernels::DType::F32)
        throw CommError(std::string("the in-process ") + operation + " sums fp32 only, not " +
                        std::string(kernels::dtypeName(dtype)));
}

class Member final : public Communicator {
public:
    Member(InProcessGroup::Shared& shared, int rank) : m_shared(shared), m_rank(rank) {}

    int rank() const override { return m_rank; }
    int size() const override { return m_shared.size; }

    PendingComm startAllReduce(kernels::DevPtr data, std::size_t n) override
    {
        requireF32(data.dtype, "all-reduce");
        return queue([this, data, n] { reduceAll(typed<float>(data), n, [](auto a, auto b) { return a + b; }); });
    }

    PendingComm startReduceScatter(kernels::ConstDevPtr in, kernels::DevPtr out,
                                   const std::vector<std::size_t>& counts) override
    {
        requireF32(in.dtype, "reduce-scatter");
        return queue([this, in, out, counts] {
            const std::size_t offset = offsetOf(counts, m_rank);
            meet(in.data, [&] {
                for (std::size_t i = 0; i < counts[std::size_t(m_rank)]; ++i) {
                    float sum = 0;
                    for (int r = 0; r < size(); ++r)
                        sum += slot<float>(r)[offset + i];
                    typed<float>(out)[i] = sum;
                }
            });
        });
    }

    PendingComm startAllGather(kernels::ConstDevPtr in, kernels::DevPtr out,
                               const std::vector<std::size_t>& counts) override
    {
        return queue([this, in, out, counts] {
            const std::size_t bytes = kernels::dtypeSize(out.dtype);
            char* base = typed<char>(out);
            // A member's block may be its own output's: each copies the others' blocks only.
            meet(in.data, [&] {
                for (int r = 0; r < size(); ++r) {
                    char* block = base + offsetOf(counts, r) * bytes;
                    if (block != slot<char>(r))
                        std::memmove(block, slot<char>(r), counts[std::size_t(r)] * bytes);
                }
            });
        });
    }

    PendingComm startBroadcast(kernels::DevPtr data, std::size_t n, int root) override
    {
        return queue([this, data, n, root] {
            meet(data.data, [&] {
                if (m_rank != root)
                    std::memcpy(data.data, slot<char>(root), n * kernels::dtypeSize(data.dtype));
            });
        });
    }

    PendingComm startAllToAll(kernels::ConstDevPtr in, const std::vector<std::size_t>& sendCounts, kernels::DevPtr out,
                              const std::vector<std::size_t>& recvCounts) override
    {
        return queue([this, in, sendCounts, out, recvCounts] {
            const std::size_t bytes = kernels::dtypeSize(out.dtype);
            // Every member shows its send counts too, so each finds its block in the others' input.
            m_shared.counts[std::size_t(m_rank)] = &sendCounts;
            std::string mismatch;  // thrown only after the meeting, which no member may leave early
            meet(in.data, [&] {
                for (int r = 0; r < size(); ++r) {
                    const std::vector<std::size_t>& theirs = *m_shared.counts[std::size_t(r)];
                    if (theirs[std::size_t(m_rank)] != recvCounts[std::size_t(r)]) {
                        mismatch = "all-to-all: member " + std::to_string(r) + " sends " +
                                   std::to_string(theirs[std::size_t(m_rank)]) + " elements to member " +
                                   std::to_string(m_rank) + ", which expects " +
                                   std::to_string(recvCounts[std::size_t(r)]);
                        continue;
                    }
                    std::memcpy(typed<char>(out) + offsetOf(recvCounts, r) * bytes,
                                slot<char>(r) + offsetOf(theirs, m_rank) * bytes, recvCounts[std::size_t(r)] * bytes);
                }
            });
            if (!mismatch.empty())
                throw CommError(mismatch);
        });
    }

    // A send copies at once: nothing of the caller's is in flight.
    PendingComm startSend(kernels::ConstDevPtr data, std::size_t n, int peer, int tag) override
    {
        const char* bytes = typed<char>(data);
        std::lock_guard lock(m_shared.mutex);
        m_shared.mailboxes[{m_rank, peer, tag}].emplace_back(bytes, bytes + n * kernels::dtypeSize(data.dtype));
        m_shared.changed.notify_all();
        return PendingComm();
    }

    void recv(kernels::DevPtr data, std::size_t n, int peer, int tag) override
    {
        drain();
        std::unique_lock lock(m_shared.mutex);
        auto& box = m_shared.mailboxes[{peer, m_rank, tag}];
        m_shared.changed.wait(lock, [&] { return !box.empty(); });
        const std::size_t bytes = n * kernels::dtypeSize(data.dtype);
        if (box.front().size() != bytes)
            throw CommError("recv from member " + std::to_string(peer) + " (tag " + std::to_string(tag) +
                            ") expected " + std::to_string(bytes) + " bytes, got " +
                            std::to_string(box.front().size()));
        std::copy(box.front().begin(), box.front().end(), typed<char>(data));
        box.pop_front();
    }

    void allReduceSum(double* data, std::size_t n) override
    {
        drain();
        reduceAll(data, n, [](auto a, auto b) { return a + b; });
    }
    void allReduceMax(double* data, std::size_t n) override
    {
        drain();
        reduceAll(data, n, [](auto a, auto b) { return std::max(a, b); });
    }
    void exchangeCounts(const std::int64_t* in, std::int64_t* out, std::size_t perMember) override
    {
        drain();
        meet(in, [&] {
            for (int r = 0; r < size(); ++r)
                std::copy_n(slot<std::int64_t>(r) + std::size_t(m_rank) * perMember, perMember,
                            out + std::size_t(r) * perMember);
        });
    }

    // Runs the queue up to and including operation `sequence`.
    void runThrough(std::uint64_t sequence)
    {
        while (m_done < sequence) {
            std::function<void()> next = std::move(m_queue.front());
            m_queue.pop_front();
            ++m_done;
            next();
        }
    }
    bool finished(std::uint64_t sequence) const { return m_done >= sequence; }

private:
    // Operations run in the order started, when waited on (or before a blocking call): all
    // members then meet in the same order, as MPI's matching of collectives requires.
    class Queued final : public PendingComm::Operation {
    public:
        Queued(Member& member, std::uint64_t sequence) : m_member(member), m_sequence(sequence) {}
        void wait() override { m_member.runThrough(m_sequence); }
        bool test() override { return m_member.finished(m_sequence); }

    private:
        Member& m_member;
        std::uint64_t m_sequence;
    };

    PendingComm queue(std::function<void()> operation)
    {
        m_queue.push_back(std::move(operation));
        return PendingComm(std::make_unique<Queued>(*this, m_done + m_queue.size()));
    }
    void drain() { runThrough(m_done + m_queue.size()); }

    template <typename T>
    const T* slot(int r) const
    {
        return static_cast<const T*>(m_shared.slots[std::size_t(r)]);
    }

    // Every member shows its buffer, all read what they need, and none leaves before all have read.
    template <typename Work>
    void meet(const void* buffer, Work&& work)
    {
        m_shared.slots[std::size_t(m_rank)] = buffer;
        m_shared.barrier();
        work();
        m_shared.barrier();
    }

    template <typename T, typename Combine>
    void reduceAll(T* data, std::size_t n, Combine combine)
    {
        std::vector<T> result(n);
        meet(data, [&] {
            for (std::size_t i = 0; i < n; ++i) {
                T value = slot<T>(0)[i];
                for (int r = 1; r < size(); ++r)
                    value = combine(value, slot<T>(r)[i]);
                result[i] = value;
            }
        });
        // Written only once every member has read every input: the buffers are also the outputs.
        std::copy(result.begin(), result.end(), data);
    }

    InProcessGroup::Shared& m_shared;
    int m_rank;
    std::deque<std::function<void()>> m_queue;
    std::uint64_t m_done = 0;  // operations run so far
};

}  // namespace

InProcessGroup::InProcessGroup(int size) : m_shared(std::make_unique<Shared>(size)) {}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const { return m_shared->size; }

std::unique_ptr<Communicator> InProcessGroup::member(int rank)
{
    if (rank < 0 || rank >= m_shared->size)
        throw CommError("no member " + std::to_string(rank) + " in an in-process group of " +
                        std::to_string(m_shared->size));
    return std::make_unique<Member>(*m_shared, rank);
}

InProcessMesh::InProcessMesh(const plan::Mesh& mesh)
{
    const int world = mesh.worldSize();
    m_groups.push_back(std::make_unique<InProcessGroup>(world));
    InProcessGroup& worldGroup = *m_groups.back();
    for (int rank = 0; rank < world; ++rank)
        m_ranks.push_back(ProcessGroups{mesh, rank, mesh.coordOf(rank), worldGroup.member(rank), {}, {}, {}, {}, {}});
    const std::pair<plan::GroupKind, std::unique_ptr<Communicator> ProcessGroups::*> kinds[] = {
        {plan::GroupKind::Tensor, &ProcessGroups::tensor},
        {plan::GroupKind::Pipeline, &ProcessGroups::pipeline},
        {plan::GroupKind::Data, &ProcessGroups::data},
        {plan::GroupKind::Expert, &ProcessGroups::expert},
        {plan::GroupKind::ExpertData, &ProcessGroups::expertData}};
    for (const auto& [kind, member] : kinds) {
        // As mpi_runtime.cpp's split: colour = the group's first member, key = the index in it.
        // MPI_Comm_split ranks a colour's members by key, then by world rank; so does this.
        std::vector<int> color(static_cast<std::size_t>(world)), key(static_cast<std::size_t>(world));
        for (int rank = 0; rank < world; ++rank) {
            key[std::size_t(rank)] = mesh.indexInGroup(kind, rank);
            color[std::size_t(rank)] = rank - key[std::size_t(rank)] * mesh.groupStride(kind);
        }
        std::map<int, InProcessGroup*> byColor;
        for (int rank = 0; rank < world; ++rank) {
            const int c = color[std::size_t(rank)];
            if (byColor.count(c))
                continue;
            const int size = int(std::count(color.begin(), color.end(), c));
            m_groups.push_back(std::make_unique<InProcessGroup>(size));
            byColor[c] = m_groups.back().get();
        }
        for (int rank = 0; rank < world; ++rank) {
            int position = 0;
            for (int other = 0; other < world; ++other)
                if (color[std::size_t(other)] == color[std::size_t(rank)] &&
                    std::pair{key[std::size_t(other)], other} < std::pair{key[std::size_t(rank)], rank})
                    ++position;
            m_ranks[std::size_t(rank)].*member = byColor[color[std::size_t(rank)]]->member(position);
        }
    }
}

InProcessMesh::~InProcessMesh()
{
    // The members refer to their groups: they go first.
    m_ranks.clear();
}

ProcessGroups& InProcessMesh::groups(int rank)
{
    if (rank < 0 || rank >= worldSize())
        throw CommError("no rank " + std::to_string(rank) + " in an in-process mesh of " + std::to_string(worldSize()));
    return m_ranks[std::size_t(rank)];
}

}  // namespace meshbench::agent
