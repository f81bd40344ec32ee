#pragma once
// The collective-communication interface the parallel training stack is written against, and
// the process groups of a rank. Buffers are kernels::DevPtr: device memory of the backend, typed
// (fp32 now; bf16 moves as bytes already, its sums come with NCCL). Implemented over MPI (the CPU
// collective layer, non-blocking collectives) and in-process (ranks as threads, for unit tests);
// the CUDA issue adds NCCL behind the same interface.
//
// Operations start and finish apart: a start returns a PendingComm at once, and the buffers it was
// given stay untouched (inputs) and unread (outputs) until its wait() returns, so a data-parallel
// reduction can run under the backward. Each communicator has one queue, in which its operations
// run in the order they were started; every member starts the same operations in the same order.
// On MPI the queue advances inside MPI calls, which progress() makes during a long computation;
// with NCCL it will be a CUDA stream ordered after the compute queued before the start.

#include "kernels/backend.h"
#include "plan/mesh.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace meshbench::agent {

// A peer died or a collective failed; names the group and the operation.
class CommError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// An operation under way. Waiting twice, or on a default-constructed (already complete) one, is a
// no-op; one dropped unwaited is waited for, so that no buffer is freed under a transfer.
class PendingComm {
public:
    class Operation {
    public:
        virtual ~Operation() = default;
        virtual void wait() = 0;
        virtual bool test() = 0;  // complete? (advances it a little)
    };

    PendingComm() = default;
    explicit PendingComm(std::unique_ptr<Operation> operation) : m_operation(std::move(operation)) {}
    PendingComm(PendingComm&&) noexcept = default;
    PendingComm& operator=(PendingComm&& other) noexcept;
    PendingComm(const PendingComm&) = delete;
    PendingComm& operator=(const PendingComm&) = delete;
    ~PendingComm();

    void wait();
    bool done();

private:
    void finishQuietly() noexcept;
    std::unique_ptr<Operation> m_operation;
};

// One process group. Counts are in elements of the buffers' dtype. The v-forms take one count per
// member, blocks laid end to end in member order.
class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;

    // Sum over the members, in place.
    virtual PendingComm startAllReduce(kernels::DevPtr data, std::size_t n) = 0;
    // in holds every member's block; member r receives the sum of block r (counts[r] elements).
    virtual PendingComm startReduceScatter(kernels::ConstDevPtr in, kernels::DevPtr out,
                                           const std::vector<std::size_t>& counts) = 0;
    // in holds counts[rank()] elements; out receives every member's block. in may be this member's
    // own block inside out.
    virtual PendingComm startAllGather(kernels::ConstDevPtr in, kernels::DevPtr out,
                                       const std::vector<std::size_t>& counts) = 0;
    virtual PendingComm startBroadcast(kernels::DevPtr data, std::size_t n, int root) = 0;
    // Block r of in (sendCounts[r] elements) goes to member r; out receives member r's block for
    // us at block r (recvCounts[r] elements).
    virtual PendingComm startAllToAll(kernels::ConstDevPtr in, const std::vector<std::size_t>& sendCounts,
                                      kernels::DevPtr out, const std::vector<std::size_t>& recvCounts) = 0;
    // Point to point. Messages between two members with the same tag arrive in the order sent.
    virtual PendingComm startSend(kernels::ConstDevPtr data, std::size_t n, int peer, int tag) = 0;
    virtual void recv(kernels::DevPtr data, std::size_t n, int peer, int tag) = 0;

    // Small host-side values (loss sums, norms, token counts, split sizes): blocking, and after
    // everything this member started before.
    virtual void allReduceSum(double* data, std::size_t n) = 0;
    virtual void allReduceMax(double* data, std::size_t n) = 0;
    // An all-to-all of perMember counts per pair of members, as a dispatcher exchanges its split
    // sizes: block r of in goes to member r, block r of out comes from member r.
    virtual void exchangeCounts(const std::int64_t* in, std::int64_t* out, std::size_t perMember) = 0;

    // Lets operations under way advance while this member computes.
    virtual void progress() {}

    // Blocking forms.
    void allReduceSum(kernels::DevPtr data, std::size_t n) { startAllReduce(data, n).wait(); }
    void reduceScatterSum(kernels::ConstDevPtr in, kernels::DevPtr out, std::size_t perRank)
    {
        startReduceScatter(in, out, equalCounts(perRank)).wait();
    }
    void allGather(kernels::ConstDevPtr in, kernels::DevPtr out, std::size_t perRank)
    {
        startAllGather(in, out, equalCounts(perRank)).wait();
    }
    void broadcast(kernels::DevPtr data, std::size_t n, int root) { startBroadcast(data, n, root).wait(); }
    void allToAll(kernels::ConstDevPtr in, kernels::DevPtr out, std::size_t perRank)
    {
        startAllToAll(in, equalCounts(perRank), out, equalCounts(perRank)).wait();
    }
    // A send kept until waitSends().
    void send(kernels::ConstDevPtr data, std::size_t n, int peer, int tag)
    {
        m_sends.push_back(startSend(data, n, peer, tag));
    }
    void waitSends();

    std::vector<std::size_t> equalCounts(std::size_t perRank) const
    {
        return std::vector<std::size_t>(std::size_t(size()), perRank);
    }

private:
    std::vector<PendingComm> m_sends;
};

// A communicator that moves buffers its own way over another one (`host`), which keeps the
// members, the host-side values and progress.
class LayeredCommunicator : public Communicator {
public:
    int rank() const override { return m_host->rank(); }
    int size() const override { return m_host->size(); }
    void allReduceSum(double* data, std::size_t n) override { m_host->allReduceSum(data, n); }
    void allReduceMax(double* data, std::size_t n) override { m_host->allReduceMax(data, n); }
    void exchangeCounts(const std::int64_t* in, std::int64_t* out, std::size_t perMember) override
    {
        m_host->exchangeCounts(in, out, perMember);
    }
    void progress() override { m_host->progress(); }
    using Communicator::allReduceSum;

protected:
    explicit LayeredCommunicator(std::unique_ptr<Communicator> host) : m_host(std::move(host)) {}
    Communicator& host() { return *m_host; }

private:
    std::unique_ptr<Communicator> m_host;
};

// The world communicator and the groups of one rank, built from engine/plan's mesh (the same
// mapping the planner and the GUI use).
struct ProcessGroups {
    plan::Mesh mesh;
    int worldRank = 0;
    plan::MeshCoord coord;
    std::unique_ptr<Communicator> world;
    std::unique_ptr<Communicator> tensor;
    std::unique_ptr<Communicator> pipeline;
    std::unique_ptr<Communicator> data;
    std::unique_ptr<Communicator> expert;
    std::unique_ptr<Communicator> expertData;
};

}  // namespace meshbench::agent
