#include "agent/distributed/reduction_queue.h"

#include <algorithm>

namespace meshbench::agent {

void ReductionQueue::push(PendingComm pending, std::size_t bytes, std::function<void()> whenDone)
{
    m_entries.push_back({std::move(pending), bytes, Measurements::nowNs(), std::move(whenDone)});
    m_bytesInFlight += bytes;
}

void ReductionQueue::poll()
{
    while (!m_entries.empty() && m_entries.front().pending.done())
        finishFront();
}

void ReductionQueue::waitUntilAtMost(std::size_t bytes)
{
    while (!m_entries.empty() && (bytes == 0 || m_bytesInFlight > bytes)) {
        m_entries.front().pending.wait();
        finishFront();
    }
}

void ReductionQueue::finishFront()
{
    Entry entry = std::move(m_entries.front());
    m_entries.pop_front();
    m_bytesInFlight -= entry.bytes;
    const std::int64_t begin = std::max(entry.startNs, m_freeNs);
    m_freeNs = Measurements::nowNs();
    if (m_measurements)
        m_measurements->addSpan({m_step, std::int16_t(m_stage), 0, -1, wire::SpanKind::DataParallelReduce, -1, begin,
                                 m_freeNs, entry.bytes});
    if (entry.whenDone)
        entry.whenDone();
}

}  // namespace meshbench::agent
