#pragma once
// A library loaded at run time (dlopen) rather than linked, so that one binary starts on machines
// without it (cuBLASLt, NCCL, NVML): its entry points are resolved by name, and the first one
// missing is remembered for the message. Failures are reported, not thrown, so each user phrases
// them its way.

#include <dlfcn.h>

#include <string>
#include <type_traits>
#include <vector>

namespace meshbench::kernels {

class SharedLibrary {
public:
    explicit SharedLibrary(const std::string& name) : SharedLibrary(std::vector<std::string>{name}) {}
    // The first of `candidates` (a soname first, then fixed paths) that loads; the error kept is the
    // first candidate's.
    explicit SharedLibrary(const std::vector<std::string>& candidates)
    {
        for (const std::string& name : candidates) {
            m_handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (m_handle)
                return;
            // Names the library, and why it could not be loaded. glibc keeps dlerror's message per
            // thread, so no other thread's dlopen can replace it.
            const char* error = dlerror();  // NOLINT(concurrency-mt-unsafe)
            if (m_loadError.empty())
                m_loadError = error ? error : name + ": dlopen failed";
        }
    }
    ~SharedLibrary()
    {
        if (m_handle && !m_keepLoaded)
            dlclose(m_handle);
    }
    SharedLibrary(const SharedLibrary&) = delete;
    SharedLibrary& operator=(const SharedLibrary&) = delete;

    bool loaded() const { return m_handle != nullptr; }
    const std::string& loadError() const { return m_loadError; }

    // Sets `function` to the entry point `symbol` (null when absent, the first such name kept).
    template <typename Function>
    void resolve(const char* symbol, Function& function)
    {
        static_assert(std::is_pointer_v<Function>);
        // POSIX guarantees that dlsym's object pointer converts to a function pointer.
        function = m_handle ? reinterpret_cast<Function>(dlsym(m_handle, symbol)) : nullptr;
        if (!function && m_missing.empty())
            m_missing = symbol;
    }
    // The first entry point resolve() did not find; empty when all were.
    const std::string& missing() const { return m_missing; }

    // The entry points stay valid after this object goes (a library kept for the process).
    void keepLoaded() { m_keepLoaded = true; }

private:
    void* m_handle = nullptr;
    std::string m_loadError;
    std::string m_missing;
    bool m_keepLoaded = false;
};

}  // namespace meshbench::kernels
