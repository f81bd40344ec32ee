#include "agent/runtime/device_groups.h"

#include "agent/runtime/host_staged_communicator.h"
#if MESHBENCH_HAVE_CUDA
#include "agent/runtime/nccl_communicator.h"
#endif

#include <chrono>
#include <cstdlib>

namespace meshbench::agent {
namespace {

void stage(std::unique_ptr<Communicator>& group, kernels::Backend& backend)
{
    group = std::make_unique<HostStagedCommunicator>(std::move(group), backend);
}

#if MESHBENCH_HAVE_CUDA
// How long a collective may take before the job is ended: MESHBENCH_NCCL_TIMEOUT_S, 60 s unless set.
std::chrono::seconds ncclTimeout()
{
    const char* text = std::getenv("MESHBENCH_NCCL_TIMEOUT_S");
    const long seconds = text ? std::strtol(text, nullptr, 10) : 0;
    return std::chrono::seconds(seconds > 0 ? seconds : 60);
}
#endif

}  // namespace

std::string attachDeviceCommunicators(ProcessGroups& groups, kernels::Backend& backend, bool sharesDevice)
{
    if (backend.hostAddressable())
        return "mpi";
    // The world group carries host values only; it stays on MPI.
    stage(groups.world, backend);
    std::unique_ptr<Communicator>* const members[] = {&groups.tensor, &groups.pipeline, &groups.data, &groups.expert,
                                                      &groups.expertData};
    std::string why = sharesDevice ? "ranks share a GPU, which NCCL refuses" : "";
#if MESHBENCH_HAVE_CUDA
    const NcclAvailability nccl = ncclAvailability();
    if (why.empty() && !nccl.available)
        why = nccl.description;
    if (why.empty()) {
        for (std::unique_ptr<Communicator>* group : members) {
            if ((*group)->size() > 1)
                *group = makeNcclCommunicator(std::move(*group), backend, ncclTimeout());
            else
                stage(*group, backend);
        }
        return "nccl (" + nccl.description + "; pipeline messages over MPI, host-staged)";
    }
#else
    if (why.empty())
        why = "this build has no NCCL";
#endif
    for (std::unique_ptr<Communicator>* group : members)
        stage(*group, backend);
    return "mpi, host-staged (" + why + ")";
}

}  // namespace meshbench::agent
