#pragma once
// Which communicator a rank's groups run on when its backend's memory is a GPU's: NCCL where
// every rank of the job has a device of its own and NCCL loads, MPI with host staging otherwise
// (NCCL refuses two ranks on one GPU). The CPU backend keeps plain MPI. The ranks decide together:
// one that chose NCCL alone would wait in its creation for peers that never come.

#include "agent/runtime/communicator.h"

#include <string>

namespace meshbench::agent {

struct NcclContext;  // agent/runtime/nccl_communicator.h, in a build with CUDA

// Replaces the groups' communicators as needed and says what they are and why ("nccl (NCCL 2.28.9;
// ...)", "mpi, host-staged (ranks share a GPU, which NCCL refuses)"). Collective over the world:
// every rank calls it at the same point, with its own view (`sharesDevice`: another rank of its
// machine has its GPU), and all of them come out with the same choice.
std::string attachDeviceCommunicators(ProcessGroups& groups, kernels::Backend& backend, bool sharesDevice);
// The same with the given NCCL in place of libnccl.so.2 and the backend's streams (tests give a
// fake library and host streams). Only in a build with CUDA.
std::string attachDeviceCommunicators(ProcessGroups& groups, kernels::Backend& backend, bool sharesDevice,
                                      const NcclContext& nccl);

}  // namespace meshbench::agent
