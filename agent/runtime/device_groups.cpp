#include "agent/runtime/device_groups.h"

#include "agent/runtime/host_staged_communicator.h"
#if MESHBENCH_HAVE_CUDA
#include "agent/runtime/nccl_communicator.h"
#endif

#include <chrono>
#include <cstdlib>
#include <iterator>

namespace meshbench::agent {
namespace {

void stage(std::unique_ptr<Communicator>& group, kernels::Backend& backend)
{
    group = std::make_unique<HostStagedCommunicator>(std::move(group), backend);
}

// Why the job cannot take NCCL, the same text on every rank's view of it ("" if it can). Each
// reason is reduced over the world as the highest rank that has it, plus one (0: none): a rank's
// own view is not enough (5 ranks on 4 GPUs: local ranks 0 and 4 share a GPU, 1-3 do not; a node
// without NCCL beside one with it).
std::string agreedObstacle(Communicator& world, bool hostMemory, bool sharesDevice, bool ncclLoaded,
                           const std::string& ncclDescription)
{
    const double mine = double(world.rank() + 1);
    double reasons[] = {hostMemory ? mine : 0.0, sharesDevice ? mine : 0.0, ncclLoaded ? 0.0 : mine};
    world.allReduceMax(reasons, std::size(reasons));
    const auto rankWith = [&](int reason) { return std::to_string(int(reasons[reason]) - 1); };
    if (reasons[0] > 0)
        return "rank " + rankWith(0) + " computes in host memory";
    if (reasons[1] > 0)
        return "ranks share a GPU, which NCCL refuses";
    if (reasons[2] > 0)
        return ncclLoaded ? "rank " + rankWith(2) + " cannot use NCCL, and every rank must" : ncclDescription;
    return "";
}

std::string attach(ProcessGroups& groups, kernels::Backend& backend, bool sharesDevice, const NcclContext* nccl)
{
#if MESHBENCH_HAVE_CUDA
    const bool loaded = nccl->library.loaded;
    const std::string description = nccl->library.description;
#else
    (void)nccl;
    const bool loaded = false;
    const std::string description = "this build has no NCCL";
#endif
    // Every rank takes part, whatever its own backend: the choice is made together.
    const std::string obstacle =
        agreedObstacle(*groups.world, backend.hostAddressable(), sharesDevice, loaded, description);
    if (backend.hostAddressable())
        return "mpi";
#if MESHBENCH_HAVE_CUDA
    if (obstacle.empty()) {
        attachNcclGroups(groups, backend, *nccl);
        stage(groups.world, backend);  // host values only
        return "nccl (" + description + "; pipeline messages over MPI, host-staged)";
    }
#endif
    for (std::unique_ptr<Communicator>* group :
         {&groups.world, &groups.tensor, &groups.pipeline, &groups.data, &groups.expert, &groups.expertData})
        stage(*group, backend);
    return "mpi, host-staged (" + obstacle + ")";
}

#if MESHBENCH_HAVE_CUDA
// How long an NCCL wait may take before the job is ended: MESHBENCH_NCCL_TIMEOUT_S, 60 s unless set.
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
#if MESHBENCH_HAVE_CUDA
    const NcclContext nccl = deviceNcclContext(backend, ncclTimeout());
    return attach(groups, backend, sharesDevice, &nccl);
#else
    return attach(groups, backend, sharesDevice, nullptr);
#endif
}

#if MESHBENCH_HAVE_CUDA
std::string attachDeviceCommunicators(ProcessGroups& groups, kernels::Backend& backend, bool sharesDevice,
                                      const NcclContext& nccl)
{
    return attach(groups, backend, sharesDevice, &nccl);
}
#endif

}  // namespace meshbench::agent
