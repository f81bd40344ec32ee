#include "agent/runtime/in_process_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace meshbench::agent {

struct InProcessGroup::Shared {
    explicit Shared(int n) : size(n), slots(std::size_t(n), nullptr) {}

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
    std::vector<const void*> slots;   // each member's buffer for the collective under way
    std::mutex mutex;
    std::condition_variable changed;
    int arrived = 0;
    std::uint64_t barrierGeneration = 0;
    // Point to point: (from, to, tag) -> messages in the order sent.
    std::map<std::tuple<int, int, int>, std::deque<std::vector<float>>> mailboxes;
};

namespace {

class Member final : public Communicator {
public:
    Member(InProcessGroup::Shared& shared, int rank) : m_shared(shared), m_rank(rank) {}

    int rank() const override { return m_rank; }
    int size() const override { return m_shared.size; }

    void allReduceSum(float* data, std::size_t n) override { reduceAll(data, n, [](auto a, auto b) { return a + b; }); }
    void allReduceSum(double* data, std::size_t n) override { reduceAll(data, n, [](auto a, auto b) { return a + b; }); }
    void allReduceMax(double* data, std::size_t n) override
    {
        reduceAll(data, n, [](auto a, auto b) { return std::max(a, b); });
    }

    void reduceScatterSum(const float* in, float* out, std::size_t perRank) override
    {
        meet(in, [&] {
            for (std::size_t i = 0; i < perRank; ++i) {
                float sum = 0;
                for (int r = 0; r < size(); ++r)
                    sum += slot<float>(r)[std::size_t(m_rank) * perRank + i];
                out[i] = sum;
            }
        });
    }

    void allGather(const float* in, float* out, std::size_t perRank) override
    {
        // A member's block may be its own output's: each copies the others' blocks only.
        meet(in, [&] {
            for (int r = 0; r < size(); ++r)
                if (out + std::size_t(r) * perRank != slot<float>(r))
                    std::memmove(out + std::size_t(r) * perRank, slot<float>(r), perRank * sizeof(float));
        });
    }

    void broadcast(float* data, std::size_t n, int root) override
    {
        meet(data, [&] {
            if (m_rank != root)
                std::memcpy(data, slot<float>(root), n * sizeof(float));
        });
    }

    void allToAll(const float* in, float* out, std::size_t perRank) override
    {
        meet(in, [&] {
            for (int r = 0; r < size(); ++r)
                std::memcpy(out + std::size_t(r) * perRank, slot<float>(r) + std::size_t(m_rank) * perRank,
                            perRank * sizeof(float));
        });
    }

    void send(const float* data, std::size_t n, int peer, int tag) override
    {
        std::lock_guard lock(m_shared.mutex);
        m_shared.mailboxes[{m_rank, peer, tag}].emplace_back(data, data + n);
        m_shared.changed.notify_all();
    }

    void recv(float* data, std::size_t n, int peer, int tag) override
    {
        std::unique_lock lock(m_shared.mutex);
        auto& box = m_shared.mailboxes[{peer, m_rank, tag}];
        m_shared.changed.wait(lock, [&] { return !box.empty(); });
        if (box.front().size() != n)
            throw CommError("recv from member " + std::to_string(peer) + " (tag " + std::to_string(tag) + ") expected " +
                            std::to_string(n) + " elements, got " + std::to_string(box.front().size()));
        std::copy(box.front().begin(), box.front().end(), data);
        box.pop_front();
    }

    void waitSends() override {}   // send copies: nothing is in flight

private:
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

}  // namespace meshbench::agent
