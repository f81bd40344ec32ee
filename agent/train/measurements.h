#pragma once
// The measurement hooks of a rank: a span for every executed op, the step metrics, and memory by
// category, kept in memory. The telemetry issue ships them over ZeroMQ; until then they can be
// written as JSON lines (--spans) for tests and offline looks.

#include "agent/model/device_buffer.h"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace meshbench::agent {

struct Span {
    int step = 0;
    int stage = 0;
    int chunk = 0;
    int microbatch = -1;        // -1 for spans of the whole step (optimizer, data-parallel reduction)
    std::string kind;           // "F", "B", "W", "send-act", "recv-act", "send-grad", "recv-grad", "optimizer", "dp-reduce"
    std::int64_t beginNs = 0;   // monotonic clock
    std::int64_t endNs = 0;
    std::uint64_t bytes = 0;    // moved, for communication
};

struct MemorySample {
    int step = 0;
    std::int64_t timeNs = 0;
    MemoryUsage usage;          // current at the step's end and peak during it, by category
};

class Measurements {
public:
    explicit Measurements(int rank) : m_rank(rank) {}

    static std::int64_t nowNs();
    int rank() const { return m_rank; }

    void addSpan(Span span) { m_spans.push_back(std::move(span)); }
    void addMemorySample(MemorySample sample) { m_memory.push_back(sample); }
    const std::vector<Span>& spans() const { return m_spans; }
    const std::vector<MemorySample>& memory() const { return m_memory; }

    // One JSON object per line: spans ({"type": "span", ...}) then memory samples.
    void writeJsonLines(std::ostream& out) const;

private:
    int m_rank;
    std::vector<Span> m_spans;
    std::vector<MemorySample> m_memory;
};

}  // namespace meshbench::agent
