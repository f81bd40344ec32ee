#pragma once
// Which communicator a rank's groups run on when its backend's memory is a GPU's: NCCL where
// every rank of the machine has a device of its own and NCCL loads, MPI with host staging
// otherwise (NCCL refuses two ranks on one GPU). The CPU backend keeps plain MPI.

#include "agent/runtime/communicator.h"

#include <string>

namespace meshbench::agent {

// Replaces the groups' communicators as needed and says what they are and why ("nccl (NCCL 2.28.9;
// ...)", "mpi, host-staged (2 ranks share a GPU, which NCCL refuses)"). Collective: every rank
// calls it at the same point.
std::string attachDeviceCommunicators(ProcessGroups& groups, kernels::Backend& backend, bool sharesDevice);

}  // namespace meshbench::agent
