#pragma once
// An owning fp32 device allocation of a kernels::Backend, freed on destruction.

#include "kernels/backend.h"

#include <utility>

namespace meshbench::agent {

class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(kernels::Backend& backend, std::size_t elements)
        : m_backend(&backend), m_ptr(backend.allocate(elements, kernels::DType::F32)), m_size(elements)
    {
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
        if (m_backend && m_ptr.data)
            m_backend->release(m_ptr);
    }

    kernels::DevPtr ptr() const { return m_ptr; }
    // The same buffer at an element offset.
    kernels::DevPtr at(std::size_t offset) const { return {static_cast<float*>(m_ptr.data) + offset, m_ptr.dtype}; }
    std::size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }

private:
    void swap(DeviceBuffer& other) noexcept
    {
        std::swap(m_backend, other.m_backend);
        std::swap(m_ptr, other.m_ptr);
        std::swap(m_size, other.m_size);
    }

    kernels::Backend* m_backend = nullptr;
    kernels::DevPtr m_ptr;
    std::size_t m_size = 0;
};

}  // namespace meshbench::agent
