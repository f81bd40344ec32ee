#include "mpi_runtime.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <vector>

namespace meshbench::agent {
namespace {

void check(int status, const char* operation)
{
    if (status != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int length = 0;
        MPI_Error_string(status, text, &length);
        throw CommError(std::string(operation) + " failed: " + std::string(text, std::size_t(length)));
    }
}

int count(std::size_t n)
{
    if (n > std::size_t(std::numeric_limits<int>::max()))
        throw CommError("a message of " + std::to_string(n) + " elements exceeds MPI's int counts");
    return int(n);
}

// bf16 travels as 16-bit words; only its sums wait for NCCL.
MPI_Datatype typeOf(kernels::DType dtype) { return dtype == kernels::DType::F32 ? MPI_FLOAT : MPI_UINT16_T; }

MPI_Datatype summableTypeOf(kernels::DType dtype, const char* operation)
{
    if (dtype != kernels::DType::F32)
        throw CommError(std::string(operation) + " of " + std::string(kernels::dtypeName(dtype)) +
                        " is not in the MPI layer: bf16 sums run on NCCL (the CUDA backend)");
    return MPI_FLOAT;
}

// A non-blocking MPI operation and the count arrays MPI reads until it completes.
class MpiOperation final : public PendingComm::Operation {
public:
    explicit MpiOperation(const char* name) : m_name(name) {}
    MPI_Request* request() { return &m_request; }
    std::vector<int> counts, displacements, recvCounts, recvDisplacements;

    void wait() override { check(MPI_Wait(&m_request, MPI_STATUS_IGNORE), m_name); }
    bool test() override
    {
        int flag = 0;
        check(MPI_Test(&m_request, &flag, MPI_STATUS_IGNORE), m_name);
        return flag != 0;
    }

private:
    const char* m_name;
    MPI_Request m_request = MPI_REQUEST_NULL;
};

// Counts and offsets of blocks laid end to end.
void layOut(const std::vector<std::size_t>& sizes, std::vector<int>& counts, std::vector<int>& displacements)
{
    std::size_t offset = 0;
    for (std::size_t size : sizes) {
        counts.push_back(count(size));
        displacements.push_back(count(offset));
        offset += size;
    }
}

class MpiCommunicator final : public Communicator {
public:
    explicit MpiCommunicator(MPI_Comm comm) : m_comm(comm)
    {
        MPI_Comm_rank(comm, &m_rank);
        MPI_Comm_size(comm, &m_size);
        // Errors come back as codes (turned into CommError) instead of aborting inside MPI.
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    }
    ~MpiCommunicator() override
    {
        if (m_comm != MPI_COMM_WORLD)
            MPI_Comm_free(&m_comm);
    }

    int rank() const override { return m_rank; }
    int size() const override { return m_size; }

    PendingComm startAllReduce(kernels::DevPtr data, std::size_t n) override
    {
        auto op = std::make_unique<MpiOperation>("MPI_Iallreduce");
        check(MPI_Iallreduce(MPI_IN_PLACE, data.data, count(n), summableTypeOf(data.dtype, "MPI_Iallreduce"), MPI_SUM,
                             m_comm, op->request()),
              "MPI_Iallreduce");
        return PendingComm(std::move(op));
    }
    PendingComm startReduceScatter(kernels::ConstDevPtr in, kernels::DevPtr out,
                                   const std::vector<std::size_t>& counts) override
    {
        auto op = std::make_unique<MpiOperation>("MPI_Ireduce_scatter");
        layOut(counts, op->counts, op->displacements);
        check(MPI_Ireduce_scatter(in.data, out.data, op->counts.data(), summableTypeOf(in.dtype, "MPI_Ireduce_scatter"),
                                  MPI_SUM, m_comm, op->request()),
              "MPI_Ireduce_scatter");
        return PendingComm(std::move(op));
    }
    PendingComm startAllGather(kernels::ConstDevPtr in, kernels::DevPtr out,
                               const std::vector<std::size_t>& counts) override
    {
        auto op = std::make_unique<MpiOperation>("MPI_Iallgatherv");
        layOut(counts, op->counts, op->displacements);
        // A member whose block already sits in place in the output gathers in place.
        const std::size_t elementSize = kernels::dtypeSize(out.dtype);
        const void* mine =
            static_cast<const char*>(out.data) + std::size_t(op->displacements[std::size_t(m_rank)]) * elementSize;
        const void* send = in.data == mine ? MPI_IN_PLACE : in.data;
        check(MPI_Iallgatherv(send, op->counts[std::size_t(m_rank)], typeOf(in.dtype), out.data, op->counts.data(),
                              op->displacements.data(), typeOf(out.dtype), m_comm, op->request()),
              "MPI_Iallgatherv");
        return PendingComm(std::move(op));
    }
    PendingComm startBroadcast(kernels::DevPtr data, std::size_t n, int root) override
    {
        auto op = std::make_unique<MpiOperation>("MPI_Ibcast");
        check(MPI_Ibcast(data.data, count(n), typeOf(data.dtype), root, m_comm, op->request()), "MPI_Ibcast");
        return PendingComm(std::move(op));
    }
    PendingComm startAllToAll(kernels::ConstDevPtr in, const std::vector<std::size_t>& sendCounts, kernels::DevPtr out,
                              const std::vector<std::size_t>& recvCounts) override
    {
        auto op = std::make_unique<MpiOperation>("MPI_Ialltoallv");
        layOut(sendCounts, op->counts, op->displacements);
        layOut(recvCounts, op->recvCounts, op->recvDisplacements);
        check(MPI_Ialltoallv(in.data, op->counts.data(), op->displacements.data(), typeOf(in.dtype), out.data,
                             op->recvCounts.data(), op->recvDisplacements.data(), typeOf(out.dtype), m_comm,
                             op->request()),
              "MPI_Ialltoallv");
        return PendingComm(std::move(op));
    }
    PendingComm startSend(kernels::ConstDevPtr data, std::size_t n, int peer, int tag) override
    {
        auto op = std::make_unique<MpiOperation>("MPI_Isend");
        check(MPI_Isend(data.data, count(n), typeOf(data.dtype), peer, tag, m_comm, op->request()), "MPI_Isend");
        return PendingComm(std::move(op));
    }
    void recv(kernels::DevPtr data, std::size_t n, int peer, int tag) override
    {
        check(MPI_Recv(data.data, count(n), typeOf(data.dtype), peer, tag, m_comm, MPI_STATUS_IGNORE), "MPI_Recv");
    }

    void allReduceSum(double* data, std::size_t n) override
    {
        check(MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_DOUBLE, MPI_SUM, m_comm), "MPI_Allreduce");
    }
    void allReduceMax(double* data, std::size_t n) override
    {
        check(MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_DOUBLE, MPI_MAX, m_comm), "MPI_Allreduce");
    }
    void exchangeCounts(const std::int64_t* in, std::int64_t* out, std::size_t perMember) override
    {
        check(MPI_Alltoall(in, count(perMember), MPI_INT64_T, out, count(perMember), MPI_INT64_T, m_comm),
              "MPI_Alltoall");
    }

    // Open MPI's non-blocking collectives advance only inside MPI calls; a probe is the cheapest
    // such call, and it receives nothing.
    void progress() override
    {
        int flag = 0;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m_comm, &flag, MPI_STATUS_IGNORE);
    }

private:
    MPI_Comm m_comm;
    int m_rank = 0;
    int m_size = 1;
};

std::unique_ptr<Communicator> split(const plan::Mesh& mesh, plan::GroupKind kind, int worldRank)
{
    // Members of a group share its first member as colour and are ordered by their index in it.
    const int index = mesh.indexInGroup(kind, worldRank);
    const int color = worldRank - index * mesh.groupStride(kind);
    MPI_Comm comm;
    check(MPI_Comm_split(MPI_COMM_WORLD, color, index, &comm), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace

MpiRuntime::MpiRuntime(int& argc, char**& argv)
{
    // Before MPI or any thread of ours starts: nothing reads the environment concurrently.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);  // NOLINT(concurrency-mt-unsafe)
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &m_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m_size);
    auto* local = new MPI_Comm(MPI_COMM_SELF);
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m_rank, MPI_INFO_NULL, local) == MPI_SUCCESS)
        MPI_Comm_rank(*local, &m_localRank);
    else
        *local = MPI_COMM_SELF;
    m_local = local;
}

MpiRuntime::~MpiRuntime()
{
    auto* local = static_cast<MPI_Comm*>(m_local);
    if (*local != MPI_COMM_SELF)
        MPI_Comm_free(local);
    delete local;
    MPI_Finalize();
}

bool MpiRuntime::localRankShares(const std::string& key) const
{
    // Fixed-width keys over the machine's ranks (a UUID is 32 hex digits).
    constexpr int kWidth = 64;
    const MPI_Comm local = *static_cast<const MPI_Comm*>(m_local);
    int size = 1;
    MPI_Comm_size(local, &size);
    std::vector<char> mine(kWidth, '\0'), all(std::size_t(kWidth) * std::size_t(size));
    std::copy_n(key.begin(), std::min<std::size_t>(key.size(), kWidth), mine.begin());
    check(MPI_Allgather(mine.data(), kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, local), "MPI_Allgather");
    if (key.empty())
        return false;
    int same = 0;
    for (int r = 0; r < size; ++r)
        same += std::equal(mine.begin(), mine.end(), all.begin() + std::ptrdiff_t(r) * kWidth);
    return same > 1;
}

ProcessGroups MpiRuntime::createGroups(const plan::Mesh& mesh) const
{
    if (mesh.worldSize() != m_size)
        throw CommError("the layout needs dp x pp x tp = " + std::to_string(mesh.worldSize()) +
                        " ranks but mpirun started " + std::to_string(m_size) + "; run mpirun -np " +
                        std::to_string(mesh.worldSize()));
    ProcessGroups groups{mesh,
                         m_rank,
                         mesh.coordOf(m_rank),
                         std::make_unique<MpiCommunicator>(MPI_COMM_WORLD),
                         split(mesh, plan::GroupKind::Tensor, m_rank),
                         split(mesh, plan::GroupKind::Pipeline, m_rank),
                         split(mesh, plan::GroupKind::Data, m_rank),
                         split(mesh, plan::GroupKind::Expert, m_rank),
                         split(mesh, plan::GroupKind::ExpertData, m_rank)};
    return groups;
}

void MpiRuntime::abortJob(int exitCode)
{
    MPI_Abort(MPI_COMM_WORLD, exitCode);
    std::_Exit(exitCode);
}

}  // namespace meshbench::agent
