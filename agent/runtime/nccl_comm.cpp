#include "agent/runtime/nccl_comm.h"

#include <exception>
#include <thread>

namespace meshbench::agent {
namespace {

bool failed(ncclResult_t result) { return result != ncclSuccess && result != ncclInProgress; }

std::string durationText(std::chrono::milliseconds t)
{
    return t.count() % 1000 == 0 ? std::to_string(t.count() / 1000) + " s" : std::to_string(t.count()) + " ms";
}

// A configuration for a communicator whose calls never block the host.
ncclConfig_t nonBlocking()
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    return config;
}

}  // namespace

void NcclGroupCalls::operator()(ncclResult_t result, const char* call)
{
    if (failed(result) && m_failure.empty())
        m_failure = std::string(call) + ": " + m_library.getErrorString(result);
}

std::unique_ptr<NcclComm> NcclComm::initRank(const NcclLibrary& library, int nranks, const ncclUniqueId& id, int rank,
                                             std::chrono::milliseconds timeout)
{
    ncclConfig_t config = nonBlocking();
    ncclComm_t comm = nullptr;
    const ncclResult_t result = library.commInitRankConfig(&comm, nranks, id, rank, &config);
    if (!comm)
        throw CommError(std::string("NCCL: ncclCommInitRankConfig failed: ") + library.getErrorString(result));
    std::unique_ptr<NcclComm> created(new NcclComm(library, comm, timeout));
    created->enqueued(result, "ncclCommInitRankConfig");
    return created;
}

std::unique_ptr<NcclComm> NcclComm::split(int color, int key)
{
    usable("ncclCommSplit");
    ncclConfig_t config = nonBlocking();
    ncclComm_t child = nullptr;
    const ncclResult_t result = m_library.commSplit(m_comm, color, key, &child, &config);
    if (failed(result))
        fail("ncclCommSplit: " + errorText(result));
    if (!child)
        fail("ncclCommSplit gave no communicator for colour " + std::to_string(color));
    // The new communicator's state says when the split is done; the parent's is polled too, so
    // that the next split starts from a parent that is ready again whichever of the two NCCL marks.
    std::unique_ptr<NcclComm> created(new NcclComm(m_library, child, m_timeout));
    created->enqueued(result, "ncclCommSplit");
    enqueued(result, "ncclCommSplit");
    return created;
}

NcclComm::~NcclComm()
{
    if (m_aborted)
        return;
    if (std::uncaught_exceptions() > 0) {
        m_library.commAbort(m_comm);
        return;
    }
    // Finalising flushes the work issued and reports ncclInProgress until the communicator is
    // quiescent; destroying is then local (nccl.h).
    ncclResult_t state = m_library.commFinalize(m_comm);
    if (state == ncclInProgress)
        pollUntil(
            [&] { return m_library.commGetAsyncError(m_comm, &state) != ncclSuccess || state != ncclInProgress; });
    if (state == ncclSuccess)
        m_library.commDestroy(m_comm);
    else
        m_library.commAbort(m_comm);
}

void NcclComm::usable(const char* what) const
{
    if (m_aborted)
        throw CommError(std::string("NCCL: ") + what + ": the communicator was aborted after an earlier failure");
}

void NcclComm::enqueued(ncclResult_t result, const char* what)
{
    if (result == ncclSuccess)
        return;
    if (failed(result))
        fail(std::string(what) + ": " + errorText(result));
    if (!pollUntil([&] { return state(what) == ncclSuccess; }))
        fail(std::string(what) + " did not finish within " + durationText(m_timeout) +
             " (a peer never joined it: it stopped, or took another path)");
}

void NcclComm::group(const char* what, const std::function<void(NcclGroupCalls&)>& calls)
{
    usable(what);
    const ncclResult_t start = m_library.groupStart();
    if (start != ncclSuccess)
        fail("ncclGroupStart: " + errorText(start));
    NcclGroupCalls results(m_library);
    try {
        calls(results);
    } catch (...) {
        m_library.groupEnd();
        throw;
    }
    // Ended before any abort: the open group refers to this communicator, and ending it after an
    // abort would hand NCCL a freed one. A group with a failed call ends with an error and queues
    // nothing.
    const ncclResult_t end = m_library.groupEnd();
    if (!results.failure().empty())
        fail(std::string(what) + ": " + results.failure());
    enqueued(end, what);
}

bool NcclComm::poll(const std::function<bool()>& reached, const char* what)
{
    usable(what);
    if (reached())
        return true;
    state(what);
    return false;
}

void NcclComm::waitUntil(const std::function<bool()>& reached, const char* what)
{
    if (!pollUntil([&] { return poll(reached, what); }))
        fail(std::string(what) + " did not finish within " + durationText(m_timeout) +
             " (a peer stopped, or MESHBENCH_NCCL_TIMEOUT_S is too short for this message)");
}

ncclResult_t NcclComm::state(const char* what)
{
    usable(what);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = m_library.commGetAsyncError(m_comm, &state);
    if (query != ncclSuccess)
        fail(std::string("ncclCommGetAsyncError (") + what + "): " + errorText(query));
    if (failed(state))
        fail(std::string(what) + ": " + errorText(state));
    return state;
}

bool NcclComm::pollUntil(const std::function<bool()>& done)
{
    const auto deadline = std::chrono::steady_clock::now() + m_timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline)
            return false;
        if (m_progress)
            m_progress();
        // The CPU is not needed while NCCL works; ranks may outnumber cores.
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
}

std::string NcclComm::errorText(ncclResult_t result) const { return m_library.getErrorString(result); }

void NcclComm::fail(const std::string& message)
{
    // Abort frees NCCL's resources and unblocks its kernels, so the process can end.
    if (!m_aborted) {
        m_aborted = true;
        m_library.commAbort(m_comm);
    }
    throw CommError("NCCL: " + message);
}

}  // namespace meshbench::agent
