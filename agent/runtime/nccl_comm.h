#pragma once
// One NCCL communicator and the rules for every NCCL call on it, on the host side only (no CUDA
// runtime call), so that tests drive it through tests/agent's fake library.
//
// Communicators are non-blocking (ncclConfig_t::blocking = 0). NCCL's documentation of that mode
// (ncclCommInitRankConfig, ncclCommSplit, "Fault tolerance"): a call may return ncclInProgress
// and finish in the background, and ncclCommGetAsyncError reports ncclInProgress until it has;
// ncclCommAbort may be called at any time. So every wait here - creation, split, a collective's
// first connection, completion, finalisation - polls that state against a deadline: a peer that
// never comes ends the job with CommError within the timeout instead of blocking the host for ever.
// Any failure aborts the communicator, which frees it; nothing touches it afterwards.

#include "agent/runtime/communicator.h"
#include "agent/runtime/nccl_library.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace meshbench::agent {

// The results of the calls of one group: the first failure is kept until the group is closed.
class NcclGroupCalls {
public:
    explicit NcclGroupCalls(const NcclLibrary& library) : m_library(library) {}
    void operator()(ncclResult_t result, const char* call);
    const std::string& failure() const { return m_failure; }

private:
    const NcclLibrary& m_library;
    std::string m_failure;
};

class NcclComm {
public:
    // Collective over the nranks ranks that pass the same id (one ncclGetUniqueId).
    static std::unique_ptr<NcclComm> initRank(const NcclLibrary& library, int nranks, const ncclUniqueId& id, int rank,
                                              std::chrono::milliseconds timeout);
    // Collective over this communicator's members, in the same order on each: the members passing
    // the same colour make a new communicator, ranked by key.
    std::unique_ptr<NcclComm> split(int color, int key);
    // Finalises and destroys within the timeout; aborts instead after a failure, while unwinding
    // (a peer may be gone, and finalising would wait for it), or when finalising does not finish.
    ~NcclComm();
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    ncclComm_t handle() const { return m_comm; }
    const NcclLibrary& library() const { return m_library; }

    // Throws if an earlier failure aborted the communicator.
    void usable(const char* what) const;
    // What a call on the communicator returned: returns once NCCL has taken the call (its work
    // queued on the stream), polling while it is in progress.
    void enqueued(ncclResult_t result, const char* what);
    // `calls` between ncclGroupStart and ncclGroupEnd, each result given to the NcclGroupCalls; a
    // failure ends the group before the communicator is aborted, since NCCL's open group (per
    // thread) still refers to it.
    void group(const char* what, const std::function<void(NcclGroupCalls&)>& calls);
    // Whether `reached` (the device has done the work) holds; throws if the communicator failed.
    bool poll(const std::function<bool()>& reached, const char* what);
    // Polls until `reached`, a failure, or the deadline.
    void waitUntil(const std::function<bool()>& reached, const char* what);
    // Called at each poll of a wait: MPI moves messages only inside MPI calls, and a peer may need
    // one of this rank's before it joins the NCCL call this rank waits in.
    void whilePolling(std::function<void()> progress) { m_progress = std::move(progress); }

private:
    NcclComm(const NcclLibrary& library, ncclComm_t comm, std::chrono::milliseconds timeout)
        : m_library(library), m_comm(comm), m_timeout(timeout)
    {
    }
    // The communicator's state: ncclSuccess or ncclInProgress (failures throw).
    ncclResult_t state(const char* what);
    // Polls `done` until it holds (true) or the deadline passes (false).
    bool pollUntil(const std::function<bool()>& done);
    std::string errorText(ncclResult_t result) const;
    [[noreturn]] void fail(const std::string& message);

    const NcclLibrary& m_library;
    ncclComm_t m_comm;
    std::chrono::milliseconds m_timeout;
    std::function<void()> m_progress;
    bool m_aborted = false;
};

}  // namespace meshbench::agent
