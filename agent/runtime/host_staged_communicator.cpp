#include "agent/runtime/host_staged_communicator.h"

#include <numeric>
#include <vector>

namespace meshbench::agent {
namespace {

// A host copy of (part of) a device buffer, in the buffer's own dtype.
class HostBuffer {
public:
    HostBuffer(kernels::DType dtype, std::size_t elements)
        : m_bytes(elements * kernels::dtypeSize(dtype)), m_dtype(dtype)
    {
    }
    kernels::DevPtr ptr() { return {m_bytes.data(), m_dtype}; }

private:
    std::vector<unsigned char> m_bytes;
    kernels::DType m_dtype;
};

std::size_t total(const std::vector<std::size_t>& counts)
{
    return std::accumulate(counts.begin(), counts.end(), std::size_t(0));
}

HostBuffer stageIn(kernels::Backend& device, kernels::ConstDevPtr src, std::size_t n)
{
    HostBuffer host(src.dtype, n);
    device.copyToHost(host.ptr().data, src, n);
    return host;
}

// The host operation and the buffers it reads and writes, which it owns until it completes; the
// output goes back to the device once.
class StagedOperation final : public PendingComm::Operation {
public:
    StagedOperation(kernels::Backend& device, std::vector<HostBuffer> buffers)
        : m_device(device), m_buffers(std::move(buffers))
    {
    }
    // The operation on the buffers, and where (if anywhere) buffer `outputIndex` goes afterwards.
    void start(PendingComm host, kernels::DevPtr deviceOut = {}, std::size_t outputIndex = 0, std::size_t n = 0)
    {
        m_host = std::move(host);
        m_deviceOut = deviceOut;
        m_outputIndex = outputIndex;
        m_outputElements = n;
    }
    HostBuffer& buffer(std::size_t i) { return m_buffers[i]; }

    void wait() override
    {
        m_host.wait();
        copyBack();
    }
    bool test() override
    {
        if (!m_host.done())
            return false;
        copyBack();
        return true;
    }

private:
    void copyBack()
    {
        if (m_deviceOut.data && !m_copiedBack)
            m_device.copyFromHost(m_deviceOut, m_buffers[m_outputIndex].ptr().data, m_outputElements);
        m_copiedBack = true;
    }

    kernels::Backend& m_device;
    std::vector<HostBuffer> m_buffers;
    PendingComm m_host;
    kernels::DevPtr m_deviceOut;
    std::size_t m_outputIndex = 0;
    std::size_t m_outputElements = 0;
    bool m_copiedBack = false;
};

template <typename... Buffers>
std::unique_ptr<StagedOperation> staged(kernels::Backend& device, Buffers&&... buffers)
{
    std::vector<HostBuffer> list;
    (list.push_back(std::forward<Buffers>(buffers)), ...);
    return std::make_unique<StagedOperation>(device, std::move(list));
}

}  // namespace

HostStagedCommunicator::HostStagedCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& device)
    : LayeredCommunicator(std::move(host)), m_device(device)
{
}

PendingComm HostStagedCommunicator::startAllReduce(kernels::DevPtr data, std::size_t n)
{
    auto op = staged(m_device, stageIn(m_device, data, n));
    op->start(host().startAllReduce(op->buffer(0).ptr(), n), data, 0, n);
    return PendingComm(std::move(op));
}

PendingComm HostStagedCommunicator::startReduceScatter(kernels::ConstDevPtr in, kernels::DevPtr out,
                                                       const std::vector<std::size_t>& counts)
{
    const std::size_t mine = counts[std::size_t(rank())];
    auto op = staged(m_device, stageIn(m_device, in, total(counts)), HostBuffer(out.dtype, mine));
    op->start(host().startReduceScatter(op->buffer(0).ptr(), op->buffer(1).ptr(), counts), out, 1, mine);
    return PendingComm(std::move(op));
}

PendingComm HostStagedCommunicator::startAllGather(kernels::ConstDevPtr in, kernels::DevPtr out,
                                                   const std::vector<std::size_t>& counts)
{
    auto op =
        staged(m_device, stageIn(m_device, in, counts[std::size_t(rank())]), HostBuffer(out.dtype, total(counts)));
    op->start(host().startAllGather(op->buffer(0).ptr(), op->buffer(1).ptr(), counts), out, 1, total(counts));
    return PendingComm(std::move(op));
}

PendingComm HostStagedCommunicator::startBroadcast(kernels::DevPtr data, std::size_t n, int root)
{
    // Only the root's copy is read; the others are written over.
    auto op = staged(m_device, rank() == root ? stageIn(m_device, data, n) : HostBuffer(data.dtype, n));
    op->start(host().startBroadcast(op->buffer(0).ptr(), n, root), data, 0, n);
    return PendingComm(std::move(op));
}

PendingComm HostStagedCommunicator::startAllToAll(kernels::ConstDevPtr in, const std::vector<std::size_t>& sendCounts,
                                                  kernels::DevPtr out, const std::vector<std::size_t>& recvCounts)
{
    auto op = staged(m_device, stageIn(m_device, in, total(sendCounts)), HostBuffer(out.dtype, total(recvCounts)));
    op->start(host().startAllToAll(op->buffer(0).ptr(), sendCounts, op->buffer(1).ptr(), recvCounts), out, 1,
              total(recvCounts));
    return PendingComm(std::move(op));
}

PendingComm HostStagedCommunicator::startSend(kernels::ConstDevPtr data, std::size_t n, int peer, int tag)
{
    auto op = staged(m_device, stageIn(m_device, data, n));
    op->start(host().startSend(op->buffer(0).ptr(), n, peer, tag));
    return PendingComm(std::move(op));
}

void HostStagedCommunicator::recv(kernels::DevPtr data, std::size_t n, int peer, int tag)
{
    HostBuffer staging(data.dtype, n);
    host().recv(staging.ptr(), n, peer, tag);
    m_device.copyFromHost(data, staging.ptr().data, n);
}

}  // namespace meshbench::agent
