#include "measurements.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <ostream>

namespace meshbench::agent {

std::int64_t Measurements::nowNs()
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

void Measurements::writeJsonLines(std::ostream& out) const
{
    for (const Span& s : m_spans)
        out << nlohmann::json{{"type", "span"}, {"rank", m_rank}, {"step", s.step}, {"stage", s.stage},
                              {"chunk", s.chunk}, {"mb", s.microbatch}, {"kind", s.kind}, {"begin_ns", s.beginNs},
                              {"end_ns", s.endNs}, {"bytes", s.bytes}}
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

}  // namespace meshbench::agent
