#include "agent/runtime/device_buffer.h"

#include <algorithm>

namespace meshbench::agent {

MemoryLedger& MemoryLedger::instance()
{
    static MemoryLedger ledger;
    return ledger;
}

void MemoryLedger::allocated(MemoryCategory category, std::int64_t bytes)
{
    const int i = int(category);
    const std::int64_t now = m_current[std::size_t(i)] += bytes;
    std::int64_t peak = m_peak[std::size_t(i)].load();
    while (now > peak && !m_peak[std::size_t(i)].compare_exchange_weak(peak, now)) {
    }
}

void MemoryLedger::released(MemoryCategory category, std::int64_t bytes) { m_current[std::size_t(category)] -= bytes; }

MemoryUsage MemoryLedger::usage() const
{
    MemoryUsage usage;
    for (std::size_t i = 0; i < std::size_t(kMemoryCategories); ++i) {
        usage.current[i] = m_current[i].load();
        usage.peak[i] = m_peak[i].load();
    }
    return usage;
}

void MemoryLedger::resetPeaks()
{
    for (std::size_t i = 0; i < std::size_t(kMemoryCategories); ++i)
        m_peak[i] = m_current[i].load();
}

}  // namespace meshbench::agent
