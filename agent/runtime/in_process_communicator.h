#pragma once
// Ranks as threads of one process: a Communicator for the parallel modules' unit tests, which then
// run in milliseconds without mpirun. Each member is used from a thread of its own; collectives meet
// at a rendezvous where every member reads the others' buffers directly and sums in member order, so
// every member gets bit-identical results (as a deterministic all-reduce would give). A started
// operation runs when it is waited on, or before the member's next blocking call (recv, host
// reductions), in the order started: so a module that reads an output before waiting sees stale
// data here, as it would on a real network.

#include "agent/runtime/communicator.h"

#include <memory>
#include <vector>

namespace meshbench::agent {

class InProcessGroup {
public:
    explicit InProcessGroup(int size);
    ~InProcessGroup();
    InProcessGroup(const InProcessGroup&) = delete;
    InProcessGroup& operator=(const InProcessGroup&) = delete;

    int size() const;
    // Member `rank`'s communicator; the group must outlive it.
    std::unique_ptr<Communicator> member(int rank);

    struct Shared;

private:
    std::unique_ptr<Shared> m_shared;
};

// Every rank's ProcessGroups of a mesh, as threads of one process: what MpiRuntime::createGroups
// builds on each rank, here for all of them at once, so that the trainer and the parallel modules
// can be unit-tested on a whole layout without mpirun. The rank -> group mapping is the MPI one
// exactly (a group's members share its first member, world rank - index x stride, and are ordered
// by their index in it). Rank r's groups are used from one thread of its own, as the ranks'
// processes would; this object owns the groups and must outlive every use of them.
class InProcessMesh {
public:
    explicit InProcessMesh(const plan::Mesh& mesh);
    ~InProcessMesh();
    InProcessMesh(const InProcessMesh&) = delete;
    InProcessMesh& operator=(const InProcessMesh&) = delete;

    int worldSize() const { return int(m_ranks.size()); }
    ProcessGroups& groups(int rank);

private:
    std::vector<std::unique_ptr<InProcessGroup>> m_groups;  // the world and every group of every kind
    std::vector<ProcessGroups> m_ranks;
};

}  // namespace meshbench::agent
