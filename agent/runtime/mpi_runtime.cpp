#include "mpi_runtime.h"

#include <mpi.h>

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

    void allReduceSum(float* data, std::size_t n) override
    {
        check(MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_FLOAT, MPI_SUM, m_comm), "MPI_Allreduce");
    }
    void allReduceSum(double* data, std::size_t n) override
    {
        check(MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_DOUBLE, MPI_SUM, m_comm), "MPI_Allreduce");
    }
    void allReduceMax(double* data, std::size_t n) override
    {
        check(MPI_Allreduce(MPI_IN_PLACE, data, count(n), MPI_DOUBLE, MPI_MAX, m_comm), "MPI_Allreduce");
    }
    void reduceScatterSum(const float* in, float* out, std::size_t perRank) override
    {
        check(MPI_Reduce_scatter_block(in, out, count(perRank), MPI_FLOAT, MPI_SUM, m_comm), "MPI_Reduce_scatter_block");
    }
    void allGather(const float* in, float* out, std::size_t perRank) override
    {
        // A member whose block already sits in place in the output gathers in place.
        const void* send = in == out + std::size_t(m_rank) * perRank ? MPI_IN_PLACE : in;
        check(MPI_Allgather(send, count(perRank), MPI_FLOAT, out, count(perRank), MPI_FLOAT, m_comm), "MPI_Allgather");
    }
    void broadcast(float* data, std::size_t n, int root) override
    {
        check(MPI_Bcast(data, count(n), MPI_FLOAT, root, m_comm), "MPI_Bcast");
    }
    void allToAll(const float* in, float* out, std::size_t perRank) override
    {
        check(MPI_Alltoall(in, count(perRank), MPI_FLOAT, out, count(perRank), MPI_FLOAT, m_comm), "MPI_Alltoall");
    }
    void send(const float* data, std::size_t n, int peer, int tag) override
    {
        MPI_Request request;
        check(MPI_Isend(data, count(n), MPI_FLOAT, peer, tag, m_comm, &request), "MPI_Isend");
        m_sends.push_back(request);
    }
    void recv(float* data, std::size_t n, int peer, int tag) override
    {
        check(MPI_Recv(data, count(n), MPI_FLOAT, peer, tag, m_comm, MPI_STATUS_IGNORE), "MPI_Recv");
    }
    void waitSends() override
    {
        check(MPI_Waitall(int(m_sends.size()), m_sends.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
        m_sends.clear();
    }

private:
    MPI_Comm m_comm;
    int m_rank = 0;
    int m_size = 1;
    std::vector<MPI_Request> m_sends;
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
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &m_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m_size);
}

MpiRuntime::~MpiRuntime() { MPI_Finalize(); }

ProcessGroups MpiRuntime::createGroups(const plan::Mesh& mesh) const
{
    if (mesh.worldSize() != m_size)
        throw CommError("the layout needs dp x pp x tp = " + std::to_string(mesh.worldSize()) + " ranks but mpirun started " +
                        std::to_string(m_size) + "; run mpirun -np " + std::to_string(mesh.worldSize()));
    ProcessGroups groups{mesh, m_rank, mesh.coordOf(m_rank), std::make_unique<MpiCommunicator>(MPI_COMM_WORLD),
                         split(mesh, plan::GroupKind::Tensor, m_rank), split(mesh, plan::GroupKind::Pipeline, m_rank),
                         split(mesh, plan::GroupKind::Data, m_rank), split(mesh, plan::GroupKind::Expert, m_rank),
                         split(mesh, plan::GroupKind::ExpertData, m_rank)};
    return groups;
}

void MpiRuntime::abortJob(int exitCode)
{
    MPI_Abort(MPI_COMM_WORLD, exitCode);
    std::_Exit(exitCode);
}

}  // namespace meshbench::agent
