#pragma once
// NCCL's entry points, resolved at run time from a shared library, so that one build runs where
// NCCL is absent: libnccl.so.2 for the agent, tests/agent's fake for the tests. nccl.h gives their
// types; nothing is linked.

#include <nccl.h>

#include <string>

namespace meshbench::agent {

struct NcclLibrary {
    bool loaded = false;
    std::string description;  // "NCCL 2.28.9", or why it could not be used
    decltype(&ncclGetVersion) getVersion = nullptr;
    decltype(&ncclGetUniqueId) getUniqueId = nullptr;
    decltype(&ncclCommInitRankConfig) commInitRankConfig = nullptr;
    decltype(&ncclCommSplit) commSplit = nullptr;
    decltype(&ncclCommFinalize) commFinalize = nullptr;
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

    // The library `name` (a soname or a path), kept loaded for the process once it is usable.
    static NcclLibrary load(const std::string& name);
    // libnccl.so.2, loaded once per process.
    static const NcclLibrary& process();
};

}  // namespace meshbench::agent
