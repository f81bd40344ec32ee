#include "agent/telemetry/measurements.h"

#include <nlohmann/json.hpp>
#if MESHBENCH_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#include <ostream>
#include <utility>

namespace meshbench::agent {

void Measurements::beginTimeline()
{
    m_pending.clear();
    m_hostMarks.clear();
    if (m_backend) {
        m_backend->synchronize();
        m_backend->forgetTimeMarks();
    }
    m_originNs = nowNs();
    m_origin = mark();
}

kernels::TimeMark Measurements::mark()
{
    if (m_backend)
        return m_backend->markTime();
    m_hostMarks.push_back(nowNs());
    return kernels::TimeMark(m_hostMarks.size() - 1);
}

void Measurements::addSpan(const Span& span, kernels::TimeMark begin, kernels::TimeMark end)
{
    m_pending.push_back({span, begin, end});
}

std::int64_t Measurements::timeOf(kernels::TimeMark mark)
{
    if (!m_backend)
        return m_hostMarks.at(mark);
    return m_originNs + std::int64_t(m_backend->secondsBetween(m_origin, mark) * 1e9);
}

void Measurements::resolveTimeline()
{
    for (PendingSpan& p : m_pending) {
        p.span.beginNs = timeOf(p.begin);
        p.span.endNs = timeOf(p.end);
        m_spans.push_back(p.span);
    }
    m_pending.clear();
}

#if MESHBENCH_HAVE_NVTX
Measurements::Range::Range(const Span& span) { nvtxRangePushA(wire::spanLabel(span).c_str()); }
Measurements::Range::~Range() { nvtxRangePop(); }
#else
Measurements::Range::Range(const Span&) {}
Measurements::Range::~Range() = default;
#endif

Measurements Measurements::take()
{
    Measurements taken(m_rank, m_backend);
    std::swap(taken.m_spans, m_spans);
    std::swap(taken.m_memory, m_memory);
    return taken;
}

void Measurements::writeJsonLines(std::ostream& out) const
{
    for (const Span& s : m_spans)
        out << nlohmann::json{{"type", "span"},
                              {"rank", m_rank},
                              {"step", s.step},
                              {"stage", s.stage},
                              {"chunk", s.chunk},
                              {"mb", s.microbatch},
                              {"kind", wire::spanKindName(s.kind)},
                              {"peer", s.peerRank},
                              {"begin_ns", s.beginNs},
                              {"end_ns", s.endNs},
                              {"bytes", s.bytes}}
                   .dump()
            << "\n";
    for (const MemorySample& m : m_memory) {
        nlohmann::json categories;
        for (int c = 0; c < kMemoryCategories; ++c)
            categories[std::string(memoryCategoryName(MemoryCategory(c)))] = {
                {"current", m.usage.current[std::size_t(c)]}, {"peak", m.usage.peak[std::size_t(c)]}};
        out << nlohmann::json{{"type", "memory"},
                              {"rank", m_rank},
                              {"step", m.step},
                              {"time_ns", m.timeNs},
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
                                                          m.usage.current[std::size_t(c)],
                                                          m.usage.peak[std::size_t(c)]});
    return records;
}

}  // namespace meshbench::agent
