// A stand-in for libnccl.so.2, for the tests of agent/runtime's NCCL groups without a GPU: the
// ranks are threads (or handles) of one process, and no data moves. It keeps what the tests
// check, as NCCL's documentation states it:
// - a communicator is ready once every rank has joined it (ncclCommInitRankConfig with one id, or
//   every member of the parent has called its ncclCommSplit); a clique is connected once every
//   member has issued its first operation. Until then a non-blocking communicator
//   (ncclConfig_t::blocking = 0) reports ncclInProgress from its calls and ncclCommGetAsyncError,
//   and a blocking one waits - for ever, if a peer never comes, as NCCL's does;
// - calls inside ncclGroupStart/ncclGroupEnd are deferred; a failed one fails ncclGroupEnd;
// - ncclCommAbort and ncclCommDestroy free the communicator. Freed communicators are kept, so
//   that a later use - a call, or a group ended that still holds one - is counted as a misuse
//   instead of touching freed memory; so is a call on a communicator not ready yet.
// Controls and counts for the tests are the fakeNccl* functions (tests/agent/fake_nccl.h).

#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

struct Clique;

// The fake's communicator, behind nccl.h's opaque ncclComm_t.
struct ncclComm {
    Clique* clique = nullptr;  // none until a split has formed it
    int rank = -1;
    bool blocking = true;
    bool freed = false;
    int issued = 0;  // operations issued (a group's count once)
    int splits = 0;  // ncclCommSplit calls on it
    ncclResult_t asyncError = ncclSuccess;
};

namespace {

struct SplitCall {
    bool called = false;
    int color = 0, key = 0;
    ncclComm* child = nullptr;
};

struct Failure {
    std::string function;
    int rank;
    ncclResult_t result;
};

}  // namespace

struct Clique {
    explicit Clique(int n) : members(std::size_t(n), nullptr) {}
    std::vector<ncclComm*> members;
    int joined = 0;
    std::map<int, std::vector<SplitCall>> splitRounds;

    bool ready() const { return joined == int(members.size()); }
    bool connected() const
    {
        return std::all_of(members.begin(), members.end(), [](const ncclComm* c) { return c && c->issued > 0; });
    }
};

namespace {

std::mutex mutex;
std::condition_variable changed;
std::vector<ncclComm*> created;  // since the last reset; never deleted
std::map<std::string, Clique*> cliques;
std::map<std::string, int> calls;
std::vector<Failure> failures;
int aborted = 0;
int misuses = 0;
unsigned long long ids = 0;

thread_local int groupDepth = 0;
thread_local std::vector<ncclComm*> groupComms;
thread_local ncclResult_t groupError = ncclSuccess;

using Lock = std::unique_lock<std::mutex>;

ncclComm* make(Clique* clique, int rank, bool blocking)
{
    auto* comm = new ncclComm;
    comm->clique = clique;
    comm->rank = rank;
    comm->blocking = blocking;
    created.push_back(comm);
    return comm;
}

bool blockingOf(const ncclConfig_t* config) { return !config || config->blocking != 0; }

// Counts a use of a freed or missing communicator.
bool usable(const ncclComm* comm)
{
    if (comm && !comm->freed)
        return true;
    ++misuses;
    return false;
}

ncclResult_t stateOf(const ncclComm* comm)
{
    if (comm->asyncError != ncclSuccess)
        return comm->asyncError;
    if (!comm->clique || !comm->clique->ready())
        return ncclInProgress;
    return comm->issued > 0 && !comm->clique->connected() ? ncclInProgress : ncclSuccess;
}

// What a call returns once the communicator has taken it: a blocking one waits for its state.
ncclResult_t settle(Lock& lock, ncclComm* comm)
{
    if (comm->blocking)
        changed.wait(lock, [comm] { return comm->freed || stateOf(comm) != ncclInProgress; });
    return stateOf(comm);
}

// An injected failure for this call, if there is one.
ncclResult_t injected(const char* function, const ncclComm* comm)
{
    const auto found = std::find_if(failures.begin(), failures.end(),
                                    [&](const Failure& f) { return f.function == function && f.rank == comm->rank; });
    if (found == failures.end())
        return ncclSuccess;
    const ncclResult_t result = found->result;
    failures.erase(found);
    return result;
}

// One operation (collective or point-to-point) on `comm`.
ncclResult_t issue(const char* function, ncclComm* comm)
{
    Lock lock(mutex);
    ++calls[function];
    if (!usable(comm))
        return ncclInvalidArgument;
    if (stateOf(comm) != ncclSuccess) {
        ++misuses;  // a non-blocking communicator used before it said it was ready
        return ncclInvalidUsage;
    }
    if (const ncclResult_t failure = injected(function, comm); failure != ncclSuccess) {
        if (groupDepth > 0 && groupError == ncclSuccess)
            groupError = failure;
        return failure;
    }
    if (groupDepth > 0) {
        groupComms.push_back(comm);
        return ncclSuccess;
    }
    ++comm->issued;
    changed.notify_all();
    return settle(lock, comm);
}

// Forms the communicators of a split round once every member of the parent has called it.
void formSplit(std::vector<SplitCall>& round)
{
    if (!std::all_of(round.begin(), round.end(), [](const SplitCall& c) { return c.called; }))
        return;
    std::map<int, std::vector<int>> byColor;  // parent ranks
    for (int r = 0; r < int(round.size()); ++r)
        if (round[std::size_t(r)].child)
            byColor[round[std::size_t(r)].color].push_back(r);
    for (auto& [color, ranks] : byColor) {
        std::stable_sort(ranks.begin(), ranks.end(),
                         [&](int a, int b) { return round[std::size_t(a)].key < round[std::size_t(b)].key; });
        auto* clique = new Clique(int(ranks.size()));
        for (std::size_t i = 0; i < ranks.size(); ++i) {
            ncclComm* child = round[std::size_t(ranks[i])].child;
            child->clique = clique;
            child->rank = int(i);
            clique->members[i] = child;
        }
        clique->joined = int(ranks.size());
    }
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version)
{
    *version = 29900;  // "NCCL 2.99.0": no real release, so a test can tell the fake was loaded
    return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "fake: no error";
    case ncclUnhandledCudaError:
        return "fake: unhandled cuda error";
    case ncclSystemError:
        return "fake: unhandled system error";
    case ncclInternalError:
        return "fake: internal error";
    case ncclInvalidArgument:
        return "fake: invalid argument";
    case ncclInvalidUsage:
        return "fake: invalid usage";
    case ncclRemoteError:
        return "fake: remote process exited or there was a network error";
    case ncclInProgress:
        return "fake: operation in progress";
    default:
        return "fake: unknown result";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id)
{
    Lock lock(mutex);
    ++calls["ncclGetUniqueId"];
    std::memset(id->internal, 0, sizeof(id->internal));
    const std::string text = "fake-nccl-" + std::to_string(++ids);
    std::memcpy(id->internal, text.data(), text.size());
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config)
{
    Lock lock(mutex);
    ++calls["ncclCommInitRankConfig"];
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks || (config && config->magic != 0xcafebeef))
        return ncclInvalidArgument;
    Clique*& clique = cliques[std::string(commId.internal, sizeof(commId.internal))];
    if (!clique)
        clique = new Clique(nranks);
    if (int(clique->members.size()) != nranks || clique->members[std::size_t(rank)])
        return ncclInvalidArgument;
    ncclComm* made = make(clique, rank, blockingOf(config));
    clique->members[std::size_t(rank)] = made;
    ++clique->joined;
    *comm = made;
    changed.notify_all();
    return settle(lock, made);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)
{
    Lock lock(mutex);
    ++calls["ncclCommSplit"];
    if (!usable(comm) || !newcomm)
        return ncclInvalidArgument;
    if (stateOf(comm) != ncclSuccess) {
        ++misuses;
        return ncclInvalidUsage;
    }
    if (const ncclResult_t failure = injected("ncclCommSplit", comm); failure != ncclSuccess)
        return failure;
    std::vector<SplitCall>& round = comm->clique->splitRounds[comm->splits++];
    round.resize(comm->clique->members.size());
    ncclComm* child =
        color == NCCL_SPLIT_NOCOLOR ? nullptr : make(nullptr, -1, config ? blockingOf(config) : comm->blocking);
    round[std::size_t(comm->rank)] = {true, color, key, child};
    formSplit(round);
    *newcomm = child;
    changed.notify_all();
    return child ? settle(lock, child) : ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError)
{
    Lock lock(mutex);
    ++calls["ncclCommGetAsyncError"];
    if (!usable(comm))
        return ncclInvalidArgument;
    *asyncError = stateOf(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    Lock lock(mutex);
    ++calls["ncclCommFinalize"];
    return usable(comm) ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    Lock lock(mutex);
    ++calls["ncclCommDestroy"];
    if (!usable(comm))
        return ncclInvalidArgument;
    comm->freed = true;
    changed.notify_all();
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    Lock lock(mutex);
    ++calls["ncclCommAbort"];
    if (!usable(comm))
        return ncclInvalidArgument;
    comm->freed = true;
    ++aborted;
    changed.notify_all();
    return ncclSuccess;
}

ncclResult_t ncclGroupStart()
{
    Lock lock(mutex);
    ++calls["ncclGroupStart"];
    ++groupDepth;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd()
{
    Lock lock(mutex);
    ++calls["ncclGroupEnd"];
    if (groupDepth == 0) {
        ++misuses;
        return ncclInvalidUsage;
    }
    if (--groupDepth > 0)
        return ncclSuccess;
    std::vector<ncclComm*> comms;
    comms.swap(groupComms);
    const ncclResult_t error = groupError;
    groupError = ncclSuccess;
    // NCCL would now touch every communicator the group holds.
    if (std::any_of(comms.begin(), comms.end(), [](const ncclComm* c) { return c->freed; })) {
        ++misuses;
        return ncclInvalidUsage;
    }
    if (error != ncclSuccess)
        return error;
    std::sort(comms.begin(), comms.end());
    comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
    for (ncclComm* comm : comms)
        ++comm->issued;
    changed.notify_all();
    ncclResult_t result = ncclSuccess;
    for (ncclComm* comm : comms)
        if (const ncclResult_t r = settle(lock, comm); r != ncclSuccess)
            result = r;
    return result;
}

ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t comm, cudaStream_t)
{
    return issue("ncclAllReduce", comm);
}

ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t comm, cudaStream_t)
{
    return issue("ncclReduceScatter", comm);
}

ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t comm, cudaStream_t)
{
    return issue("ncclReduce", comm);
}

ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t comm, cudaStream_t)
{
    return issue("ncclAllGather", comm);
}

ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t)
{
    return issue("ncclBroadcast", comm);
}

ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t)
{
    return issue("ncclSend", comm);
}

ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t)
{
    return issue("ncclRecv", comm);
}

// The tests' controls and counts.

void fakeNcclReset()
{
    Lock lock(mutex);
    created.clear();
    calls.clear();
    failures.clear();
    aborted = 0;
    misuses = 0;
}

void fakeNcclFailNext(const char* function, int rank, int result)
{
    Lock lock(mutex);
    failures.push_back({function, rank, ncclResult_t(result)});
}

void fakeNcclSetAsyncError(int rank, int result)
{
    Lock lock(mutex);
    for (ncclComm* comm : created)
        if (!comm->freed && comm->rank == rank)
            comm->asyncError = ncclResult_t(result);
    changed.notify_all();
}

int fakeNcclCalls(const char* function)
{
    Lock lock(mutex);
    const auto found = calls.find(function);
    return found == calls.end() ? 0 : found->second;
}

int fakeNcclLive()
{
    Lock lock(mutex);
    return int(std::count_if(created.begin(), created.end(), [](const ncclComm* c) { return !c->freed; }));
}

int fakeNcclAborted()
{
    Lock lock(mutex);
    return aborted;
}

int fakeNcclMisuses()
{
    Lock lock(mutex);
    return misuses;
}

int fakeNcclGroupDepth() { return groupDepth; }

}  // extern "C"
