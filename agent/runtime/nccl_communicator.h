#pragma once
// NCCL behind the Communicator interface, for ranks that each have a GPU of their own. NCCL is
// loaded at run time (libnccl.so.2, from LD_LIBRARY_PATH or the system), so one build runs on
// machines without it. Collectives run on a stream of the communicator's own, ordered after the
// compute queued before they start (an event), so that a bucket's reduction runs under the rest of
// the backward. Point-to-point messages, which the pipeline matches by tag (NCCL has no tags), and
// the host-side values go through `host` (MPI, host-staged), which also carries NCCL's unique id.
//
// A wait polls the operation's event and the communicator's asynchronous error: a peer that died
// or a collective that does not finish within the timeout aborts the communicator
// (ncclCommAbort) and throws CommError, so the job ends in seconds instead of hanging.

#include "agent/runtime/communicator.h"

#include <chrono>
#include <memory>
#include <string>

namespace meshbench::agent {

// Whether NCCL can be loaded here, and if not, why (for the agent's first lines).
struct NcclAvailability {
    bool available = false;
    std::string description;   // "NCCL 2.28.9" or "libnccl.so.2 not found: ..."
};
NcclAvailability ncclAvailability();

// Collective over the members of `host`'s group: every member calls it at the same point. The
// backend must be the CUDA backend of this rank's own device.
std::unique_ptr<Communicator> makeNcclCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& backend,
                                                   std::chrono::seconds timeout);

}  // namespace meshbench::agent
