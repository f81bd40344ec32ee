#include "agent/runtime/nccl_library.h"

#include "kernels/shared_library.h"

namespace meshbench::agent {

NcclLibrary NcclLibrary::load(const std::string& name)
{
    NcclLibrary l;
    kernels::SharedLibrary library(name);
    if (!library.loaded()) {
        l.description = name + " not found (" + library.loadError() + "); put NCCL's lib folder on LD_LIBRARY_PATH";
        return l;
    }
    library.resolve("ncclGetVersion", l.getVersion);
    library.resolve("ncclGetUniqueId", l.getUniqueId);
    library.resolve("ncclCommInitRankConfig", l.commInitRankConfig);
    library.resolve("ncclCommSplit", l.commSplit);
    library.resolve("ncclCommFinalize", l.commFinalize);
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
        // ncclCommSplit came with 2.18, bf16 reductions with 2.10; 2.19 is the oldest tried.
        l.description = name + " lacks " + library.missing() + "; NCCL 2.19 or newer is needed";
        return l;
    }
    library.keepLoaded();  // for the process: the communicators call into it until exit
    int version = 0;
    l.getVersion(&version);
    // NCCL 2.9 on encodes the version as major x 10000 + minor x 100 + patch.
    l.description = "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
                    std::to_string(version % 100);
    l.loaded = true;
    return l;
}

const NcclLibrary& NcclLibrary::process()
{
    static const NcclLibrary library = load("libnccl.so.2");
    return library;
}

}  // namespace meshbench::agent
