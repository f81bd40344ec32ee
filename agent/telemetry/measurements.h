#pragma once
// The measurement hooks of a rank: a span for every executed op and memory by category per step,
// kept until the agent takes them (to ship them to the engine, or to write them as JSON lines).
// Spans are the wire's records, timed on the wire's clock, so they travel unconverted.

#include "agent/runtime/device_buffer.h"
#include "wire/telemetry.h"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace meshbench::agent {

using Span = wire::SpanRecord;

struct MemorySample {
    int step = 0;
    std::int64_t timeNs = 0;
    MemoryUsage usage;          // current at the step's end and peak during it, by category
};

class Measurements {
public:
    explicit Measurements(int rank) : m_rank(rank) {}

    static std::int64_t nowNs() { return wire::wallAlignedNowNs(); }
    int rank() const { return m_rank; }

    void addSpan(const Span& span) { m_spans.push_back(span); }
    void addMemorySample(MemorySample sample) { m_memory.push_back(sample); }
    const std::vector<Span>& spans() const { return m_spans; }
    const std::vector<MemorySample>& memory() const { return m_memory; }
    // Hands over everything measured so far and starts empty.
    Measurements take();

    // One JSON object per line: spans ({"type": "span", ...}) then memory samples.
    void writeJsonLines(std::ostream& out) const;
    // The same as telemetry records: spans, then one memory sample per category.
    std::vector<wire::Record> toRecords() const;

private:
    int m_rank;
    std::vector<Span> m_spans;
    std::vector<MemorySample> m_memory;
};

}  // namespace meshbench::agent
