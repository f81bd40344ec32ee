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

}  // namespace meshbench::agent
