#pragma once
// A Communicator for device memory over one that moves host memory only (MPI without CUDA
// awareness, which is what Debian's Open MPI is): each operation copies its inputs to host
// buffers when it starts, runs on them, and copies its outputs back to the device when it is
// waited for. It is the path when ranks share a GPU, which NCCL refuses, and for point-to-point
// messages matched by tag.

#include "agent/runtime/communicator.h"

#include <memory>

namespace meshbench::agent {

class HostStagedCommunicator final : public LayeredCommunicator {
public:
    // `host` runs the operations on host buffers; `device` owns the memory the callers pass in.
    HostStagedCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& device);

    PendingComm startAllReduce(kernels::DevPtr data, std::size_t n) override;
    PendingComm startReduceScatter(kernels::ConstDevPtr in, kernels::DevPtr out,
                                   const std::vector<std::size_t>& counts) override;
    PendingComm startAllGather(kernels::ConstDevPtr in, kernels::DevPtr out,
                               const std::vector<std::size_t>& counts) override;
    PendingComm startBroadcast(kernels::DevPtr data, std::size_t n, int root) override;
    PendingComm startAllToAll(kernels::ConstDevPtr in, const std::vector<std::size_t>& sendCounts, kernels::DevPtr out,
                              const std::vector<std::size_t>& recvCounts) override;
    PendingComm startSend(kernels::ConstDevPtr data, std::size_t n, int peer, int tag) override;
    void recv(kernels::DevPtr data, std::size_t n, int peer, int tag) override;

private:
    kernels::Backend& m_device;
};

}  // namespace meshbench::agent
