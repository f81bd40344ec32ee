#pragma once
// A caching allocator over a device's raw allocation calls (cudaMalloc and cudaFree on a GPU):
// released blocks are kept and handed out again, so a training step's thousands of short-lived
// activations cost no device calls after the first step (cudaMalloc and cudaFree synchronise the
// device). Sizes are rounded up as PyTorch's CUDA caching allocator does (512 bytes below 1 MiB,
// 2 MiB steps above), and a cached block serves a request of at least half its size. Blocks are not
// split. When the device is out of memory the cache is emptied and the call retried once. It keeps
// the figures a memory report needs: bytes in use, bytes reserved (in use plus cached), their peaks.
//
// Safe for reuse in stream order only: the owner frees a block after the work that uses it has
// been queued on the one stream that will use it next (the backend's compute stream).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

namespace meshbench::kernels {

class CachingAllocator {
public:
    // `allocate` returns nullptr when the device is out of memory.
    using RawAllocate = std::function<void*(std::size_t bytes)>;
    using RawFree = std::function<void(void*)>;

    struct Stats {
        std::int64_t inUseBytes = 0;     // in blocks handed out (rounded sizes)
        std::int64_t reservedBytes = 0;  // in use plus cached
        std::int64_t peakInUseBytes = 0;
        std::int64_t peakReservedBytes = 0;
        std::int64_t deviceAllocations = 0;  // raw calls made
        std::int64_t cacheHits = 0;
    };

    CachingAllocator(RawAllocate allocate, RawFree free);
    ~CachingAllocator();  // returns every block to the device
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;

    // Throws KernelError naming the sizes when the device cannot give the block even with the
    // cache emptied. Zero bytes gives nullptr.
    void* allocate(std::size_t bytes);
    void release(void* block);
    // Returns the cached blocks to the device.
    void emptyCache();
    Stats stats() const;

    static std::size_t roundedSize(std::size_t bytes);

private:
    void emptyCacheLocked();

    RawAllocate m_allocate;
    RawFree m_free;
    mutable std::mutex m_mutex;
    std::multimap<std::size_t, void*> m_cached;      // by size
    std::unordered_map<void*, std::size_t> m_inUse;  // block -> rounded size
    Stats m_stats;
};

}  // namespace meshbench::kernels
