#include "timeline/timeline_kernels.h"

#include <QThread>

#include <algorithm>

namespace meshbench::app {

struct TimelineKernels::Read {
    std::int64_t t0 = 0, t1 = 0;
    KernelWindow window;
    std::string error;
};

TimelineKernels::TimelineKernels(const std::string& session, std::vector<std::string> names,
                                 std::vector<std::uint32_t> ranks, QObject* parent)
    : QObject(parent), m_reader(std::make_shared<const store::SessionReader>(session)), m_names(std::move(names)),
      m_ranks(std::move(ranks))
{
}

TimelineKernels::~TimelineKernels()
{
    if (m_thread) {
        m_thread->wait();
        delete m_thread;
    }
}

void TimelineKernels::show(std::int64_t t0, std::int64_t t1, int pixels)
{
    m_legible = kernelsLegible(t0, t1, pixels);
    if (!m_legible)
        return;
    m_wantedT0 = t0;
    m_wantedT1 = t1;
    const bool held = m_window && m_window->covers(t0, t1);
    const bool coming = m_read && t0 >= m_read->t0 && t1 <= m_read->t1;
    if (!held && !coming && !m_thread && m_error.isEmpty())
        startRead(kernelWindowFor(t0, t1));
}

void TimelineKernels::startRead(std::pair<std::int64_t, std::int64_t> range)
{
    m_read = std::make_shared<Read>();
    m_read->t0 = range.first;
    m_read->t1 = range.second;
    m_thread = QThread::create([reader = m_reader, ranks = m_ranks, read = m_read] {
        try {
            read->window = loadKernelWindow(*reader, read->t0, read->t1, ranks);
        } catch (const std::exception& e) {
            read->error = e.what();
        }
    });
    connect(m_thread, &QThread::finished, this, &TimelineKernels::onReadFinished);
    m_thread->start();
}

void TimelineKernels::onReadFinished()
{
    m_thread->deleteLater();
    m_thread = nullptr;
    const std::shared_ptr<Read> read = std::move(m_read);
    ++m_reads;
    if (!read->error.empty()) {
        m_error = QString::fromStdString(read->error);
        emit loaded();
        return;
    }
    m_window = std::make_unique<KernelWindow>(std::move(read->window));
    for (const auto& [rank, lanes] : m_window->ranks()) {
        std::vector<std::int32_t>& seen = m_streams[rank];
        for (const KernelLane& lane : lanes)
            if (std::find(seen.begin(), seen.end(), lane.stream) == seen.end())
                seen.push_back(lane.stream);
        std::sort(seen.begin(), seen.end());
    }
    // The user may have moved on while this window was read.
    if (m_legible && !m_window->covers(m_wantedT0, m_wantedT1))
        startRead(kernelWindowFor(m_wantedT0, m_wantedT1));
    emit loaded();
}

QString TimelineKernels::name(std::int32_t nameId) const
{
    if (nameId < 0 || std::size_t(nameId) >= m_names.size())
        return tr("(unnamed kernel %1)").arg(nameId);
    return QString::fromStdString(m_names[std::size_t(nameId)]);
}

std::span<const std::int32_t> TimelineKernels::streams(int rank) const
{
    const auto it = m_streams.find(rank);
    return it == m_streams.end() ? std::span<const std::int32_t>() : std::span<const std::int32_t>(it->second);
}

int TimelineKernels::laneOf(int rank, std::int32_t stream) const
{
    const std::span<const std::int32_t> seen = streams(rank);
    const auto lane = std::find(seen.begin(), seen.end(), stream);
    return lane == seen.end() ? -1 : int(lane - seen.begin());
}

}  // namespace meshbench::app
