#pragma once
// NCCL behind the Communicator interface, for ranks that each have a GPU of their own. NCCL is
// loaded at run time (libnccl.so.2, from LD_LIBRARY_PATH or the system), so one build runs on
// machines without it. One communicator spans the world and the groups that sum device buffers
// are split from it (ncclCommSplit). Collectives run on a stream of each group's own, ordered
// after the compute queued before they start, so that a bucket's reduction runs under the rest of
// the backward. Point-to-point messages, which the pipeline matches by tag (NCCL has no tags), and
// the host-side values go through MPI, host-staged: the pipeline group gets no NCCL communicator.
//
// Every wait has a deadline (nccl_comm.h): a peer that died or never came, or a collective that
// does not finish within the timeout, aborts the communicator and throws CommError, so the job
// ends in seconds instead of hanging.

#include "agent/runtime/communicator.h"
#include "agent/runtime/nccl_library.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace meshbench::agent {

// Whether NCCL can be loaded here, and if not, why (for the agent's first lines).
struct NcclAvailability {
    bool available = false;
    std::string description;  // "NCCL 2.28.9" or "libnccl.so.2 not found: ..."
};
NcclAvailability ncclAvailability();

// The device side of a group's NCCL operations: the stream they run on, ordered after the
// backend's compute, and marks that tell when the work queued on it so far is done. The agent's
// are CUDA streams on the backend's device; tests give host ones, so that the NCCL calls run
// without a device.
class NcclStream {
public:
    class Mark {
    public:
        virtual ~Mark() = default;
        virtual bool reached() = 0;
    };
    virtual ~NcclStream() = default;
    virtual cudaStream_t handle() const = 0;
    // Work queued from now on waits for the compute queued so far.
    virtual void afterCompute() = 0;
    virtual std::unique_ptr<Mark> mark() = 0;
};

// What a rank's NCCL groups are made of.
struct NcclContext {
    const NcclLibrary& library;
    std::function<std::unique_ptr<NcclStream>()> streams;  // one per group
    std::chrono::milliseconds timeout;                     // for each wait
};

// The agent's: libnccl.so.2 and CUDA streams on the device of `backend` (the CUDA backend).
NcclContext deviceNcclContext(kernels::Backend& backend, std::chrono::milliseconds timeout);

// Collective over the world: every rank calls it at the same point, with groups.world still a
// host communicator (it carries NCCL's unique id). The tensor, data, expert and expert-data groups
// of more than one member take NCCL communicators split from one over the world; the pipeline
// group and single-member groups are host-staged over `backend`. The world is left as it is.
void attachNcclGroups(ProcessGroups& groups, kernels::Backend& backend, const NcclContext& context);

}  // namespace meshbench::agent
