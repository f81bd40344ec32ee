#include "timeline/timeline_data.h"

namespace meshbench::app {

TimelineData::TimelineData(QObject* parent) : QObject(parent)
{
    m_notify.setSingleShot(true);
    m_notify.setInterval(50);
    connect(&m_notify, &QTimer::timeout, this, &TimelineData::changed);
}

void TimelineData::setStore(TimelineStore store) { replace(std::move(store), nullptr); }

void TimelineData::replace(TimelineStore store, std::unique_ptr<TimelineKernels> kernels)
{
    m_store = std::move(store);
    m_kernels = std::move(kernels);
    m_notify.stop();
    emit reset();
    emit changed();
}

void TimelineData::clear() { setStore(TimelineStore()); }

void TimelineData::setRows(const std::vector<RowInfo>& rows)
{
    m_store.setRows(rows);
    scheduleChanged();
}

void TimelineData::appendBatch(const wire::Batch& batch)
{
    if (m_store.appendBatch(batch) > 0)
        scheduleChanged();
}

void TimelineData::appendSpans(int rank, std::span<const TimelineSpan> spans)
{
    m_store.append(rank, spans);
    if (!spans.empty())
        scheduleChanged();
}

void TimelineData::loadSession(const store::SessionReader& reader,
                               std::optional<std::pair<std::int64_t, std::int64_t>> window)
{
    std::unique_ptr<TimelineKernels> kernels = kernelsOf(reader);
    replace(loadSessionTimeline(reader, window), std::move(kernels));
}

void TimelineData::showKernelsOf(const store::SessionReader& reader)
{
    m_kernels = kernelsOf(reader);
    emit reset();
}

std::unique_ptr<TimelineKernels> TimelineData::kernelsOf(const store::SessionReader& reader)
{
    // The names tell whether the session has kernels: counting them would read the whole table.
    std::vector<std::string> names = reader.kernelNames();
    if (names.empty())
        return nullptr;
    std::vector<std::uint32_t> ranks;
    for (const store::RankInfo& rank : reader.header().ranks)
        ranks.push_back(std::uint32_t(rank.rank));
    return std::make_unique<TimelineKernels>(reader.summary().path, std::move(names), std::move(ranks));
}

void TimelineData::loadPlan(const plan::Plan& plan, PlanRows rows, double nsPerUnit)
{
    setStore(loadPlanTimeline(plan, rows, nsPerUnit));
}

void TimelineData::setOverlappedOps(TimelineStore::OverlappedOps ops)
{
    m_store.setOverlappedOps(std::move(ops));
    scheduleChanged();
}

void TimelineData::setNotifyInterval(int ms) { m_notify.setInterval(std::max(0, ms)); }

void TimelineData::scheduleChanged()
{
    if (!m_notify.isActive())
        m_notify.start();
}

}  // namespace meshbench::app
