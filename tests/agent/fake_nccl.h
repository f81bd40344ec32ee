#pragma once
// The test side of tests/agent/fake_nccl.cpp, a stand-in for libnccl.so.2 whose ranks are threads
// (or handles) of the test process: the library loaded the way the agent loads NCCL, and the
// fake's controls (failures to inject) and counts (calls, communicators, misuses) by name.

#include "agent/runtime/nccl_library.h"
#if MESHBENCH_HAVE_CUDA
#include "agent/runtime/nccl_communicator.h"
#endif

#include <dlfcn.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace meshbench::agent::testing {

#if MESHBENCH_HAVE_CUDA
// Streams whose work is always done, for the communicators over the fake: it moves no data.
class HostStream final : public NcclStream {
public:
    cudaStream_t handle() const override { return nullptr; }
    void afterCompute() override {}
    std::unique_ptr<Mark> mark() override { return std::make_unique<Done>(); }

private:
    struct Done final : Mark {
        bool reached() override { return true; }
    };
};
#endif

class FakeNccl {
public:
    FakeNccl() : library(NcclLibrary::load(MESHBENCH_FAKE_NCCL)), m_handle(dlopen(MESHBENCH_FAKE_NCCL, RTLD_NOW))
    {
        if (!library.loaded || !m_handle)
            throw std::runtime_error(std::string("cannot load the fake NCCL: ") + library.description);
        reset();
    }
    ~FakeNccl() { dlclose(m_handle); }
    FakeNccl(const FakeNccl&) = delete;
    FakeNccl& operator=(const FakeNccl&) = delete;

    // Forgets the counts and the failures still to come.
    void reset() { control<void (*)()>("fakeNcclReset")(); }
    // The next call of `function` on a communicator of rank `rank` returns `result`.
    void failNext(const char* function, int rank, ncclResult_t result)
    {
        control<void (*)(const char*, int, int)>("fakeNcclFailNext")(function, rank, int(result));
    }
    // Every live communicator of rank `rank` reports `result` from now on, as after a peer died.
    void setAsyncError(int rank, ncclResult_t result)
    {
        control<void (*)(int, int)>("fakeNcclSetAsyncError")(rank, int(result));
    }
    int calls(const char* function) const { return control<int (*)(const char*)>("fakeNcclCalls")(function); }
    int live() const { return control<int (*)()>("fakeNcclLive")(); }
    int aborted() const { return control<int (*)()>("fakeNcclAborted")(); }
    // Calls NCCL forbids: on a freed communicator, on one not ready yet, a group ended twice.
    int misuses() const { return control<int (*)()>("fakeNcclMisuses")(); }
    // The calling thread's open groups.
    int groupDepth() const { return control<int (*)()>("fakeNcclGroupDepth")(); }

    const NcclLibrary library;

private:
    template <typename Function>
    Function control(const char* name) const
    {
        // POSIX guarantees that dlsym's object pointer converts to a function pointer.
        auto function = reinterpret_cast<Function>(dlsym(m_handle, name));
        if (!function)
            throw std::runtime_error(std::string("the fake NCCL lacks ") + name);
        return function;
    }

    void* m_handle;
};

}  // namespace meshbench::agent::testing
