#include "agent/telemetry/measurements.h"

#include <nlohmann/json.hpp>

#include <ostream>
#include <utility>

namespace meshbench::agent {

Measurements Measurements::take()
{
    Measurements taken(m_rank);
    std::swap(taken.m_spans, m_spans);
    std::swap(taken.m_memory, m_memory);
    return taken;
}

void Measurements::writeJsonLines(std::ostream& out) const
{
    for (const Span& s : m_spans)
        out << nlohmann::json{{"type", "span"}, {"rank", m_rank}, {"step", s.step}, {"stage", s.stage},
                              {"chunk", s.chunk}, {"mb", s.microbatch}, {"kind", wire::spanKindName(s.kind)},
                              {"peer", s.peerRank}, {"begin_ns", s.beginNs}, {"end_ns", s.endNs}, {"bytes", s.bytes}}
                   .dump()
            << "\n";
    for (const MemorySample& m : m_memory) {
        nlohmann::json categories;
        for (int c = 0; c < kMemoryCategories; ++c)
            categories[std::string(memoryCategoryName(MemoryCategory(c)))] = {
                {"current", m.usage.current[std::size_t(c)]}, {"peak", m.usage.peak[std::size_t(c)]}};
        out << nlohmann::json{{"type", "memory"}, {"rank", m_rank}, {"step", m.step}, {"time_ns", m.timeNs},
                              {"bytes", categories}}
                   .dump()
            << "\n";
    }
}

std::vector<wire::Record> Measurements::toRecords() const
{
    std::vector<wire::Record> records;
    records.reserve(m_spans.size() + m_memory.size() * kMemoryCategories);
    for (const Span& s : m_spans)
        records.emplace_back(s);
    // The ledger's categories are the wire's, in the same order.
    static_assert(kMemoryCategories == wire::kMemoryCategories);
    for (const MemorySample& m : m_memory)
        for (int c = 0; c < kMemoryCategories; ++c)
            records.emplace_back(wire::MemorySampleRecord{m.step, m.timeNs, wire::MemoryCategory(c),
                                                          m.usage.current[std::size_t(c)], m.usage.peak[std::size_t(c)]});
    return records;
}

}  // namespace meshbench::agent
