#include "agent/runtime/nccl_communicator.h"

#include "agent/runtime/host_staged_communicator.h"
#include "agent/runtime/nccl_comm.h"
#include "kernels/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace meshbench::agent {
namespace {

void checkCuda(cudaError_t status, const char* what)
{
    if (status != cudaSuccess)
        throw CommError(std::string("NCCL communicator: ") + what + ": " + cudaGetErrorString(status));
}

ncclDataType_t typeOf(kernels::DType dtype) { return dtype == kernels::DType::F32 ? ncclFloat32 : ncclBfloat16; }

bool allEqual(const std::vector<std::size_t>& counts)
{
    return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

// A CUDA stream of the group's own on the backend's device, and events as its marks.
class CudaStream final : public NcclStream {
public:
    explicit CudaStream(cudaStream_t compute) : m_compute(compute)
    {
        checkCuda(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    // Reached after the communicator has gone (finalised, or aborted, which ends its kernels).
    ~CudaStream() override
    {
        cudaStreamSynchronize(m_stream);
        cudaStreamDestroy(m_stream);
    }
    CudaStream(const CudaStream&) = delete;
    CudaStream& operator=(const CudaStream&) = delete;

    cudaStream_t handle() const override { return m_stream; }
    void afterCompute() override
    {
        cudaEvent_t ready = nullptr;
        checkCuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
        checkCuda(cudaEventRecord(ready, m_compute), "cudaEventRecord");
        checkCuda(cudaStreamWaitEvent(m_stream, ready, 0), "cudaStreamWaitEvent");
        cudaEventDestroy(ready);
    }
    std::unique_ptr<Mark> mark() override { return std::make_unique<Event>(m_stream); }

private:
    class Event final : public Mark {
    public:
        explicit Event(cudaStream_t stream)
        {
            checkCuda(cudaEventCreateWithFlags(&m_event, cudaEventDisableTiming), "cudaEventCreate");
            checkCuda(cudaEventRecord(m_event, stream), "cudaEventRecord");
        }
        ~Event() override { cudaEventDestroy(m_event); }
        Event(const Event&) = delete;
        Event& operator=(const Event&) = delete;
        bool reached() override
        {
            const cudaError_t status = cudaEventQuery(m_event);
            if (status != cudaErrorNotReady)
                checkCuda(status, "cudaEventQuery");
            return status == cudaSuccess;
        }

    private:
        cudaEvent_t m_event = nullptr;
    };

    cudaStream_t m_compute;
    cudaStream_t m_stream = nullptr;
};

class NcclOperation final : public PendingComm::Operation {
public:
    NcclOperation(NcclComm& comm, std::unique_ptr<NcclStream::Mark> done, const char* name)
        : m_comm(comm), m_done(std::move(done)), m_name(name)
    {
    }
    void wait() override
    {
        m_comm.waitUntil([this] { return m_done->reached(); }, m_name);
    }
    bool test() override
    {
        return m_comm.poll([this] { return m_done->reached(); }, m_name);
    }

private:
    NcclComm& m_comm;
    std::unique_ptr<NcclStream::Mark> m_done;
    const char* m_name;
};

class NcclCommunicator final : public LayeredCommunicator {
public:
    NcclCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<NcclStream> stream,
                     std::unique_ptr<NcclComm> comm)
        : LayeredCommunicator(std::move(host)), m_stream(std::move(stream)), m_comm(std::move(comm))
    {
        m_comm->whilePolling([this] { this->host().progress(); });
    }

    PendingComm startAllReduce(kernels::DevPtr data, std::size_t n) override
    {
        return launch("ncclAllReduce", [&](ncclComm_t c, cudaStream_t s) {
            return lib().allReduce(data.data, data.data, n, typeOf(data.dtype), ncclSum, c, s);
        });
    }
    PendingComm startReduceScatter(kernels::ConstDevPtr in, kernels::DevPtr out,
                                   const std::vector<std::size_t>& counts) override
    {
        if (allEqual(counts))
            return launch("ncclReduceScatter", [&](ncclComm_t c, cudaStream_t s) {
                return lib().reduceScatter(in.data, out.data, counts.front(), typeOf(in.dtype), ncclSum, c, s);
            });
        // Uneven shards: one reduce per owner, grouped into one launch.
        return grouped("ncclReduce (uneven reduce-scatter)", [&](NcclGroupCalls& record, ncclComm_t c, cudaStream_t s) {
            std::size_t offset = 0;
            for (int r = 0; r < size(); ++r) {
                const std::size_t n = counts[std::size_t(r)];
                const kernels::ConstDevPtr block = kernels::offset(in, offset);
                void* target = r == rank() ? out.data : const_cast<void*>(block.data);  // read at the root only
                record(lib().reduce(block.data, target, n, typeOf(in.dtype), ncclSum, r, c, s), "ncclReduce");
                offset += n;
            }
        });
    }
    PendingComm startAllGather(kernels::ConstDevPtr in, kernels::DevPtr out,
                               const std::vector<std::size_t>& counts) override
    {
        if (allEqual(counts))
            return launch("ncclAllGather", [&](ncclComm_t c, cudaStream_t s) {
                return lib().allGather(in.data, out.data, counts.front(), typeOf(in.dtype), c, s);
            });
        return grouped("ncclBroadcast (uneven all-gather)", [&](NcclGroupCalls& record, ncclComm_t c, cudaStream_t s) {
            std::size_t offset = 0;
            for (int r = 0; r < size(); ++r) {
                const std::size_t n = counts[std::size_t(r)];
                const kernels::DevPtr block = kernels::offset(out, offset);
                const void* source = r == rank() ? in.data : block.data;  // read at the root only
                record(lib().broadcast(source, block.data, n, typeOf(out.dtype), r, c, s), "ncclBroadcast");
                offset += n;
            }
        });
    }
    PendingComm startBroadcast(kernels::DevPtr data, std::size_t n, int root) override
    {
        return launch("ncclBroadcast", [&](ncclComm_t c, cudaStream_t s) {
            return lib().broadcast(data.data, data.data, n, typeOf(data.dtype), root, c, s);
        });
    }
    PendingComm startAllToAll(kernels::ConstDevPtr in, const std::vector<std::size_t>& sendCounts, kernels::DevPtr out,
                              const std::vector<std::size_t>& recvCounts) override
    {
        // All-to-all-v as grouped point-to-point, the way NCCL's own documentation composes it.
        return grouped("ncclSend/ncclRecv (all-to-all)", [&](NcclGroupCalls& record, ncclComm_t c, cudaStream_t s) {
            std::size_t sendOffset = 0, recvOffset = 0;
            for (int r = 0; r < size(); ++r) {
                const std::size_t sends = sendCounts[std::size_t(r)], recvs = recvCounts[std::size_t(r)];
                if (sends > 0)
                    record(lib().send(kernels::offset(in, sendOffset).data, sends, typeOf(in.dtype), r, c, s),
                           "ncclSend");
                if (recvs > 0)
                    record(lib().recv(kernels::offset(out, recvOffset).data, recvs, typeOf(out.dtype), r, c, s),
                           "ncclRecv");
                sendOffset += sends;
                recvOffset += recvs;
            }
        });
    }
    PendingComm startSend(kernels::ConstDevPtr data, std::size_t n, int peer, int tag) override
    {
        return host().startSend(data, n, peer, tag);
    }
    void recv(kernels::DevPtr data, std::size_t n, int peer, int tag) override { host().recv(data, n, peer, tag); }

private:
    const NcclLibrary& lib() const { return m_comm->library(); }

    template <typename Call>
    PendingComm launch(const char* name, Call call)
    {
        m_comm->usable(name);
        m_stream->afterCompute();
        m_comm->enqueued(call(m_comm->handle(), m_stream->handle()), name);
        return recorded(name);
    }
    template <typename Calls>
    PendingComm grouped(const char* name, Calls calls)
    {
        m_comm->usable(name);
        m_stream->afterCompute();
        m_comm->group(name, [&](NcclGroupCalls& record) { calls(record, m_comm->handle(), m_stream->handle()); });
        return recorded(name);
    }
    PendingComm recorded(const char* name)
    {
        return PendingComm(std::make_unique<NcclOperation>(*m_comm, m_stream->mark(), name));
    }

    // Declared first, so that it goes after the communicator, whose work runs on it.
    std::unique_ptr<NcclStream> m_stream;
    std::unique_ptr<NcclComm> m_comm;
};

}  // namespace

NcclAvailability ncclAvailability()
{
    const NcclLibrary& library = NcclLibrary::process();
    return {library.loaded, library.description};
}

NcclContext deviceNcclContext(kernels::Backend& backend, std::chrono::milliseconds timeout)
{
    return {NcclLibrary::process(),
            [&backend] {
                return std::make_unique<CudaStream>(static_cast<cudaStream_t>(kernels::cuda::computeStream(backend)));
            },
            timeout};
}

void attachNcclGroups(ProcessGroups& groups, kernels::Backend& backend, const NcclContext& context)
{
    const NcclLibrary& library = context.library;
    if (!library.loaded)
        throw CommError("NCCL: " + library.description);
    Communicator& world = *groups.world;
    // Rank 0 makes the id and the others receive its bytes from the world (host memory, as 16-bit
    // words), with whether it could: a rank that threw alone would leave the others waiting here.
    struct {
        ncclUniqueId id;
        std::uint16_t made;
    } message{};
    static_assert(sizeof(message) % 2 == 0);
    if (world.rank() == 0)
        message.made = library.getUniqueId(&message.id) == ncclSuccess;
    world.broadcast({&message, kernels::DType::BF16}, sizeof(message) / 2, 0);
    if (!message.made)
        throw CommError("NCCL: ncclGetUniqueId failed on rank 0");
    const std::unique_ptr<NcclComm> all =
        NcclComm::initRank(library, world.size(), message.id, world.rank(), context.timeout);

    // Split in the same order on every rank (ncclCommSplit is collective over the parent); a kind's
    // groups are all of one size, so every rank skips the same ones. The children share nothing
    // with the parent (splitShare unset), which goes when this returns.
    const std::pair<plan::GroupKind, std::unique_ptr<Communicator>*> summing[] = {
        {plan::GroupKind::Tensor, &groups.tensor},
        {plan::GroupKind::Data, &groups.data},
        {plan::GroupKind::Expert, &groups.expert},
        {plan::GroupKind::ExpertData, &groups.expertData}};
    for (const auto& [kind, group] : summing) {
        auto staged = std::make_unique<HostStagedCommunicator>(std::move(*group), backend);
        if (staged->size() == 1) {
            *group = std::move(staged);
            continue;
        }
        // Colour and order as the MPI groups': the group's first member, the index in it.
        std::unique_ptr<NcclComm> comm = all->split(groups.mesh.groupOf(kind, groups.worldRank).front(),
                                                    groups.mesh.indexInGroup(kind, groups.worldRank));
        *group = std::make_unique<NcclCommunicator>(std::move(staged), context.streams(), std::move(comm));
    }
    groups.pipeline = std::make_unique<HostStagedCommunicator>(std::move(groups.pipeline), backend);
}

}  // namespace meshbench::agent
