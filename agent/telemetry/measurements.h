#pragma once
// The measurement hooks of a rank: a span for every executed op and memory by category per step,
// kept until the agent takes them (to ship them to the engine, or to write them as JSON lines).
// Spans are the wire's records, timed on the wire's clock, so they travel unconverted.
//
// Work a backend runs asynchronously (a GPU's) is timed by the backend's own time marks, taken
// where the work is launched and read once the step's timeline is resolved, so that a span is when
// the device ran it, not when the host queued it. Each timed op is also an NVTX range of the same
// name ("F mb3 chunk0"), so that an Nsight Systems capture lines up with these spans.

#include "agent/runtime/device_buffer.h"
#include "wire/telemetry.h"
#include "wire/wall_clock.h"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace meshbench::agent {

using Span = wire::SpanRecord;

struct MemorySample {
    int step = 0;
    std::int64_t timeNs = 0;
    MemoryUsage usage;  // current at the step's end and peak during it, by category
};

class Measurements {
public:
    // Without a backend, marks are the host clock's.
    explicit Measurements(int rank, kernels::Backend* backend = nullptr) : m_rank(rank), m_backend(backend) {}

    static std::int64_t nowNs() { return wire::wallAlignedNowNs(); }
    int rank() const { return m_rank; }

    // A span timed on the host, whose ends the host saw (a reduction's start and completion).
    void addSpan(const Span& span) { m_spans.push_back(span); }

    // Starts a timeline: waits for the device and ties its next mark to the host clock.
    void beginTimeline();
    kernels::TimeMark mark();
    // A span between two marks of the timeline; its times are filled in by resolveTimeline.
    void addSpan(const Span& span, kernels::TimeMark begin, kernels::TimeMark end);
    // The time of a mark on the host clock (waits until the device has passed it).
    std::int64_t timeOf(kernels::TimeMark mark);
    // Times the timeline's spans and adds them to spans().
    void resolveTimeline();

    // An NVTX range around an op (no-op unless a tool such as nsys is attached).
    class Range {
    public:
        explicit Range(const Span& span);
        ~Range();
        Range(const Range&) = delete;
        Range& operator=(const Range&) = delete;
    };

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
    struct PendingSpan {
        Span span;
        kernels::TimeMark begin, end;
    };

    int m_rank;
    kernels::Backend* m_backend;
    kernels::TimeMark m_origin = 0;
    std::int64_t m_originNs = 0;
    std::vector<std::int64_t> m_hostMarks;  // without a backend
    std::vector<PendingSpan> m_pending;
    std::vector<Span> m_spans;
    std::vector<MemorySample> m_memory;
};

}  // namespace meshbench::agent
