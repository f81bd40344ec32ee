#include "agent/runtime/nccl_communicator.h"

#include "agent/runtime/host_staged_communicator.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/shared_library.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <exception>
#include <thread>

namespace meshbench::agent {
namespace {

// The entry points used, resolved from libnccl.so.2 once per process. nccl.h gives their types;
// nothing is linked.
struct NcclLibrary {
    bool loaded = false;
    std::string description;
    decltype(&ncclGetVersion) getVersion = nullptr;
    decltype(&ncclGetUniqueId) getUniqueId = nullptr;
    decltype(&ncclCommInitRank) commInitRank = nullptr;
    decltype(&ncclCommDestroy) commDestroy = nullptr;
    decltype(&ncclCommAbort) commAbort = nullptr;
    decltype(&ncclCommGetAsyncError) commGetAsyncError = nullptr;
    decltype(&ncclGetErrorString) getErrorString = nullptr;
    decltype(&ncclGroupStart) groupStart = nullptr;
    decltype(&ncclGroupEnd) groupEnd = nullptr;
    decltype(&ncclAllReduce) allReduce = nullptr;
    decltype(&ncclReduceScatter) reduceScatter = nullptr;
    decltype(&ncclReduce) reduce = nullptr;
    decltype(&ncclAllGather) allGather = nullptr;
    decltype(&ncclBroadcast) broadcast = nullptr;
    decltype(&ncclSend) send = nullptr;
    decltype(&ncclRecv) recv = nullptr;

    static const NcclLibrary& process()
    {
        static const NcclLibrary library = load();
        return library;
    }

private:
    static NcclLibrary load()
    {
        NcclLibrary l;
        kernels::SharedLibrary library("libnccl.so.2");
        if (!library.loaded()) {
            l.description = "libnccl.so.2 not found (" + library.loadError() + "); put NCCL's lib folder on LD_LIBRARY_PATH";
            return l;
        }
        library.resolve("ncclGetVersion", l.getVersion);
        library.resolve("ncclGetUniqueId", l.getUniqueId);
        library.resolve("ncclCommInitRank", l.commInitRank);
        library.resolve("ncclCommDestroy", l.commDestroy);
        library.resolve("ncclCommAbort", l.commAbort);
        library.resolve("ncclCommGetAsyncError", l.commGetAsyncError);
        library.resolve("ncclGetErrorString", l.getErrorString);
        library.resolve("ncclGroupStart", l.groupStart);
        library.resolve("ncclGroupEnd", l.groupEnd);
        library.resolve("ncclAllReduce", l.allReduce);
        library.resolve("ncclReduceScatter", l.reduceScatter);
        library.resolve("ncclReduce", l.reduce);
        library.resolve("ncclAllGather", l.allGather);
        library.resolve("ncclBroadcast", l.broadcast);
        library.resolve("ncclSend", l.send);
        library.resolve("ncclRecv", l.recv);
        if (!library.missing().empty()) {
            l.description = "libnccl.so.2 lacks " + library.missing() + "; NCCL 2.19 or newer is needed";
            return l;
        }
        library.keepLoaded();   // for the process: the communicators call into it until exit
        int version = 0;
        l.getVersion(&version);
        // NCCL 2.9 on encodes the version as major x 10000 + minor x 100 + patch.
        l.description = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                        std::to_string(version % 100);
        l.loaded = true;
        return l;
    }
};

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

// One NCCL communicator and its stream; shared by the operations under way, which outlive no
// communicator (PendingComm waits before the owner goes).
class NcclChannel {
public:
    NcclChannel(ncclComm_t comm, cudaStream_t compute, std::chrono::seconds timeout)
        : m_comm(comm), m_compute(compute), m_timeout(timeout)
    {
        checkCuda(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    ~NcclChannel()
    {
        if (m_aborted)
            return;
        // Unwinding from a failure: a peer may be gone, and destroying would wait for it.
        if (std::uncaught_exceptions() > 0) {
            library().commAbort(m_comm);
            return;
        }
        cudaStreamSynchronize(m_stream);
        library().commDestroy(m_comm);
        cudaStreamDestroy(m_stream);
    }
    NcclChannel(const NcclChannel&) = delete;
    NcclChannel& operator=(const NcclChannel&) = delete;

    static const NcclLibrary& library() { return NcclLibrary::process(); }
    ncclComm_t comm() const { return m_comm; }
    cudaStream_t stream() const { return m_stream; }

    void check(ncclResult_t result, const char* what)
    {
        if (result != ncclSuccess && result != ncclInProgress)
            fail(std::string(what) + ": " + library().getErrorString(result));
    }

    // An aborted communicator is freed: nothing may touch it again.
    void usable(const char* what) const
    {
        if (m_aborted)
            throw CommError(std::string("NCCL: ") + what + ": the communicator was aborted after an earlier failure");
    }

    // The communication stream waits for the compute queued so far.
    void afterCompute()
    {
        cudaEvent_t ready = nullptr;
        checkCuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
        checkCuda(cudaEventRecord(ready, m_compute), "cudaEventRecord");
        checkCuda(cudaStreamWaitEvent(m_stream, ready, 0), "cudaStreamWaitEvent");
        cudaEventDestroy(ready);
    }

    // Polls until `done` has been reached, the communicator reports an error, or the timeout.
    void wait(cudaEvent_t done, const char* what)
    {
        const auto deadline = std::chrono::steady_clock::now() + m_timeout;
        for (;;) {
            if (ready(done, what))
                return;
            if (std::chrono::steady_clock::now() > deadline)
                fail(std::string(what) + " did not finish within " + std::to_string(m_timeout.count()) +
                     " s (a peer stopped, or MESHBENCH_NCCL_TIMEOUT_S is too short for this message)");
            // The CPU is not needed while NCCL works; ranks may outnumber cores.
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
    bool ready(cudaEvent_t done, const char* what)
    {
        usable(what);
        const cudaError_t status = cudaEventQuery(done);
        if (status == cudaSuccess)
            return true;
        if (status != cudaErrorNotReady)
            checkCuda(status, what);
        ncclResult_t asyncError = ncclSuccess;
        library().commGetAsyncError(m_comm, &asyncError);
        check(asyncError, what);
        return false;
    }

private:
    [[noreturn]] void fail(const std::string& message)
    {
        // Abort frees NCCL's resources and unblocks its kernels, so the process can end.
        if (!m_aborted) {
            m_aborted = true;
            library().commAbort(m_comm);
        }
        throw CommError("NCCL: " + message);
    }

    ncclComm_t m_comm;
    cudaStream_t m_compute;
    cudaStream_t m_stream = nullptr;
    std::chrono::seconds m_timeout;
    bool m_aborted = false;
};

class NcclOperation final : public PendingComm::Operation {
public:
    NcclOperation(NcclChannel& channel, const char* name) : m_channel(channel), m_name(name) {}
    ~NcclOperation() override { cudaEventDestroy(m_done); }
    void recorded()
    {
        checkCuda(cudaEventCreateWithFlags(&m_done, cudaEventDisableTiming), "cudaEventCreate");
        checkCuda(cudaEventRecord(m_done, m_channel.stream()), "cudaEventRecord");
    }
    void wait() override { m_channel.wait(m_done, m_name); }
    bool test() override { return m_channel.ready(m_done, m_name); }

private:
    NcclChannel& m_channel;
    const char* m_name;
    cudaEvent_t m_done = nullptr;
};

class NcclCommunicator final : public LayeredCommunicator {
public:
    NcclCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<NcclChannel> channel)
        : LayeredCommunicator(std::move(host)), m_channel(std::move(channel))
    {
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
        return grouped("ncclReduce (uneven reduce-scatter)", [&](ncclComm_t c, cudaStream_t s) {
            std::size_t offset = 0;
            for (int r = 0; r < size(); ++r) {
                const std::size_t n = counts[std::size_t(r)];
                const kernels::ConstDevPtr block = kernels::offset(in, offset);
                void* target = r == rank() ? out.data : const_cast<void*>(block.data);   // read at the root only
                m_channel->check(lib().reduce(block.data, target, n, typeOf(in.dtype), ncclSum, r, c, s), "ncclReduce");
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
        return grouped("ncclBroadcast (uneven all-gather)", [&](ncclComm_t c, cudaStream_t s) {
            std::size_t offset = 0;
            for (int r = 0; r < size(); ++r) {
                const std::size_t n = counts[std::size_t(r)];
                const kernels::DevPtr block = kernels::offset(out, offset);
                const void* source = r == rank() ? in.data : block.data;   // read at the root only
                m_channel->check(lib().broadcast(source, block.data, n, typeOf(out.dtype), r, c, s), "ncclBroadcast");
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
        return grouped("ncclSend/ncclRecv (all-to-all)", [&](ncclComm_t c, cudaStream_t s) {
            std::size_t sendOffset = 0, recvOffset = 0;
            for (int r = 0; r < size(); ++r) {
                const std::size_t sends = sendCounts[std::size_t(r)], recvs = recvCounts[std::size_t(r)];
                if (sends > 0)
                    m_channel->check(lib().send(kernels::offset(in, sendOffset).data, sends, typeOf(in.dtype), r, c, s),
                                     "ncclSend");
                if (recvs > 0)
                    m_channel->check(lib().recv(kernels::offset(out, recvOffset).data, recvs, typeOf(out.dtype), r, c, s),
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
    static const NcclLibrary& lib() { return NcclChannel::library(); }

    template <typename Call>
    PendingComm launch(const char* name, Call call)
    {
        m_channel->usable(name);
        m_channel->afterCompute();
        m_channel->check(call(m_channel->comm(), m_channel->stream()), name);
        return recorded(name);
    }
    template <typename Calls>
    PendingComm grouped(const char* name, Calls calls)
    {
        m_channel->usable(name);
        m_channel->afterCompute();
        m_channel->check(lib().groupStart(), "ncclGroupStart");
        // NCCL's group depth is per thread: a failed call must still close the group, or every later
        // NCCL call of this thread would wait for a group end that never comes.
        try {
            calls(m_channel->comm(), m_channel->stream());
        } catch (...) {
            lib().groupEnd();
            throw;
        }
        m_channel->check(lib().groupEnd(), "ncclGroupEnd");
        return recorded(name);
    }
    PendingComm recorded(const char* name)
    {
        auto op = std::make_unique<NcclOperation>(*m_channel, name);
        op->recorded();
        return PendingComm(std::move(op));
    }

    std::unique_ptr<NcclChannel> m_channel;
};

}  // namespace

NcclAvailability ncclAvailability()
{
    const NcclLibrary& library = NcclLibrary::process();
    return {library.loaded, library.description};
}

std::unique_ptr<Communicator> makeNcclCommunicator(std::unique_ptr<Communicator> host, kernels::Backend& backend,
                                                   std::chrono::seconds timeout)
{
    const NcclLibrary& library = NcclLibrary::process();
    if (!library.loaded)
        throw CommError("NCCL: " + library.description);
    // Member 0 makes the id; the others receive its 128 bytes from the host group (which moves
    // host memory), as 16-bit words.
    ncclUniqueId id{};
    if (host->rank() == 0 && library.getUniqueId(&id) != ncclSuccess)
        throw CommError("NCCL: ncclGetUniqueId failed");
    static_assert(sizeof(id) % 2 == 0);
    host->broadcast({&id, kernels::DType::BF16}, sizeof(id) / 2, 0);
    auto staged = std::make_unique<HostStagedCommunicator>(std::move(host), backend);
    ncclComm_t comm = nullptr;
    const ncclResult_t init = library.commInitRank(&comm, staged->size(), id, staged->rank());
    if (init != ncclSuccess)
        throw CommError(std::string("NCCL: ncclCommInitRank failed: ") + library.getErrorString(init));
    auto channel = std::make_unique<NcclChannel>(comm, static_cast<cudaStream_t>(kernels::cuda::computeStream(backend)),
                                                 timeout);
    return std::make_unique<NcclCommunicator>(std::move(staged), std::move(channel));
}

}  // namespace meshbench::agent
