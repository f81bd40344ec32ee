#pragma once
// An owning fp32 device allocation of a kernels::Backend, freed on destruction.

#include "kernels/backend.h"
#include "wire/telemetry.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>
#include <utility>

namespace meshbench::agent {

// What a device allocation holds, for the per-rank memory report: the telemetry's categories.
using wire::kMemoryCategories;
using wire::MemoryCategory;
using wire::memoryCategoryName;

struct MemoryUsage {
    std::array<std::int64_t, kMemoryCategories> current{};
    std::array<std::int64_t, kMemoryCategories> peak{};
};

// The process's own count of device bytes by category, kept by DeviceBuffer: current and peak.
class MemoryLedger {
public:
    static MemoryLedger& instance();
    void allocated(MemoryCategory category, std::int64_t bytes);
    void released(MemoryCategory category, std::int64_t bytes);
    MemoryUsage usage() const;
    void resetPeaks();  // peaks restart from the current values

private:
    std::array<std::atomic<std::int64_t>, kMemoryCategories> m_current{};
    std::array<std::atomic<std::int64_t>, kMemoryCategories> m_peak{};
};

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(kernels::Backend& backend, std::size_t elements, MemoryCategory category = MemoryCategory::Workspace)
        : m_backend(&backend), m_ptr(backend.allocate(elements, kernels::DType::F32)), m_size(elements),
          m_category(category)
    {
        MemoryLedger::instance().allocated(m_category, bytes());
    }
    DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept
    {
        DeviceBuffer(std::move(other)).swap(*this);
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer()
    {
        if (m_backend && m_ptr.data) {
            m_backend->release(m_ptr);
            MemoryLedger::instance().released(m_category, bytes());
        }
    }

    kernels::DevPtr ptr() const { return m_ptr; }
    // The same buffer at an element offset.
    kernels::DevPtr at(std::size_t offset) const { return kernels::offset(m_ptr, offset); }
    std::size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }

private:
    std::int64_t bytes() const { return std::int64_t(m_size * kernels::dtypeSize(m_ptr.dtype)); }
    void swap(DeviceBuffer& other) noexcept
    {
        std::swap(m_backend, other.m_backend);
        std::swap(m_ptr, other.m_ptr);
        std::swap(m_size, other.m_size);
        std::swap(m_category, other.m_category);
    }

    kernels::Backend* m_backend = nullptr;
    kernels::DevPtr m_ptr;
    std::size_t m_size = 0;
    MemoryCategory m_category = MemoryCategory::Workspace;
};

}  // namespace meshbench::agent
