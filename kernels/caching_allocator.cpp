#include "kernels/caching_allocator.h"

#include "kernels/backend.h"

#include <algorithm>
#include <string>

namespace meshbench::kernels {
namespace {

constexpr std::size_t kSmallStep = 512;
constexpr std::size_t kLargeStep = std::size_t(2) << 20;
constexpr std::size_t kSmallLimit = std::size_t(1) << 20;

std::string mib(std::int64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; }

}  // namespace

std::size_t CachingAllocator::roundedSize(std::size_t bytes)
{
    const std::size_t step = bytes < kSmallLimit ? kSmallStep : kLargeStep;
    return (bytes + step - 1) / step * step;
}

CachingAllocator::CachingAllocator(RawAllocate allocate, RawFree free)
    : m_allocate(std::move(allocate)), m_free(std::move(free))
{
}

CachingAllocator::~CachingAllocator()
{
    emptyCacheLocked();
    for (const auto& [block, size] : m_inUse)
        m_free(block);
}

void* CachingAllocator::allocate(std::size_t bytes)
{
    if (bytes == 0)
        return nullptr;
    const std::size_t size = roundedSize(bytes);
    std::lock_guard lock(m_mutex);
    void* block = nullptr;
    std::size_t blockSize = size;
    // The smallest cached block that fits, if it is no more than twice the request.
    if (auto it = m_cached.lower_bound(size); it != m_cached.end() && it->first <= 2 * size) {
        block = it->second;
        blockSize = it->first;
        m_cached.erase(it);
        ++m_stats.cacheHits;
    } else {
        block = m_allocate(size);
        if (!block && !m_cached.empty()) {
            emptyCacheLocked();
            block = m_allocate(size);
        }
        if (!block)
            throw KernelError("out of device memory: a block of " + mib(std::int64_t(size)) + " with " +
                              mib(m_stats.inUseBytes) +
                              " in use; use a smaller micro_batch_size, recompute, ZeRO, or "
                              "more pipeline or tensor parallel ranks");
        ++m_stats.deviceAllocations;
        m_stats.reservedBytes += std::int64_t(size);
        m_stats.peakReservedBytes = std::max(m_stats.peakReservedBytes, m_stats.reservedBytes);
    }
    m_inUse.emplace(block, blockSize);
    m_stats.inUseBytes += std::int64_t(blockSize);
    m_stats.peakInUseBytes = std::max(m_stats.peakInUseBytes, m_stats.inUseBytes);
    return block;
}

void CachingAllocator::release(void* block)
{
    if (!block)
        return;
    std::lock_guard lock(m_mutex);
    const auto it = m_inUse.find(block);
    if (it == m_inUse.end())
        throw KernelError("caching allocator: a block it did not hand out was released");
    m_stats.inUseBytes -= std::int64_t(it->second);
    m_cached.emplace(it->second, block);
    m_inUse.erase(it);
}

void CachingAllocator::emptyCache()
{
    std::lock_guard lock(m_mutex);
    emptyCacheLocked();
}

void CachingAllocator::emptyCacheLocked()
{
    for (const auto& [size, block] : m_cached) {
        m_free(block);
        m_stats.reservedBytes -= std::int64_t(size);
    }
    m_cached.clear();
}

CachingAllocator::Stats CachingAllocator::stats() const
{
    std::lock_guard lock(m_mutex);
    return m_stats;
}

}  // namespace meshbench::kernels
