#pragma once
// MPI bootstrap and the MPI implementation of Communicator. Open MPI starts the ranks (mpirun,
// a hostfile or a Slurm allocation); every rank calls MpiRuntime once.

#include "communicator.h"

#include <string>

namespace meshbench::agent {

class MpiRuntime {
public:
    // Initialises MPI. Before that, asks Open MPI to yield the core while waiting
    // (mpi_yield_when_idle) unless the user set it: ranks usually outnumber cores on a laptop or
    // in CI, and busy-polling ranks would starve the ones doing the work.
    MpiRuntime(int& argc, char**& argv);
    ~MpiRuntime();
    MpiRuntime(const MpiRuntime&) = delete;
    MpiRuntime& operator=(const MpiRuntime&) = delete;

    int worldRank() const { return m_rank; }
    int worldSize() const { return m_size; }
    // This rank among the ranks of its machine (which pick their GPUs by it).
    int localRank() const { return m_localRank; }
    // Whether another rank of this machine gives the same non-empty key (a GPU's UUID). Collective
    // over the machine's ranks, whatever their keys.
    bool localRankShares(const std::string& key) const;

    // Splits the world into the mesh's groups; the mesh's world size must equal the MPI world's.
    ProcessGroups createGroups(const plan::Mesh& mesh) const;

    // Ends every rank of the job at once with this exit code (MPI_Abort): used when one rank fails,
    // so that the others do not wait in a collective until a timeout.
    [[noreturn]] static void abortJob(int exitCode);

private:
    int m_rank = 0;
    int m_size = 1;
    int m_localRank = 0;
    void* m_local = nullptr;  // the machine's ranks (an MPI_Comm, kept out of this header)
};

}  // namespace meshbench::agent
