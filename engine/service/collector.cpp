#include "collector.h"

#include "live_trace_importer.h"

#include "wire/endpoints.h"
#include "wire/host_name.h"
#include "wire/trace_handover.h"
#include "wire/wall_clock.h"

#include <algorithm>
#include <limits>
#include <variant>

namespace meshbench::service {

namespace {

// Problems about incoming frames are reported one by one up to this many, then only counted.
constexpr int kReportedProblems = 50;
// Records waiting for the store beyond which no more frames are taken.
constexpr std::size_t kMaxQueuedRecords = 1'000'000;

}  // namespace

Collector::Collector(zmq::context_t& context, const std::string& bind, std::uint32_t worldSize,
                     live::LiveAggregator& aggregator, RunObserver& observer, const SocketSetup& setup)
    : m_socket(context, zmq::socket_type::pull), m_ingest(worldSize), m_aggregator(aggregator), m_observer(observer),
      m_lastError(worldSize)
{
    try {
        m_socket.set(zmq::sockopt::linger, 0);
        // Frames waiting per agent (each up to a few thousand records): bounded, see receive().
        m_socket.set(zmq::sockopt::rcvhwm, 100);
        if (setup)
            setup(m_socket, "telemetry collector");
        m_socket.bind(bind);
    } catch (const zmq::error_t& e) {
        throw std::runtime_error("cannot bind the telemetry collector to '" + bind +
                                 "': " + wire::bindFailure(e.num(), bind) + " (--collector tcp://HOST:PORT sets it)");
    }
}

std::string reachableEndpoint(const zmq::socket_t& socket)
{
    std::string endpoint = socket.get(zmq::sockopt::last_endpoint);
    if (const auto at = endpoint.find("0.0.0.0"); at != std::string::npos)
        endpoint.replace(at, 7, wire::localHostName());
    return endpoint;
}

std::string Collector::endpoint() const { return reachableEndpoint(m_socket); }

void Collector::engineLog(wire::LogLevel level, std::string text)
{
    m_observer.message(level, text);
    if (!m_writer)
        return;
    wire::Batch batch{store::kEngineRank, m_engineSequence++, {}};
    batch.records.emplace_back(wire::LogRecord{wire::wallAlignedNowNs(), level, std::move(text)});
    m_writer->append(std::move(batch));
}

void Collector::receive()
{
    // While the store is behind, frames wait in ZeroMQ (and then in the agents' bounded queues,
    // which count what they drop) rather than in this process's memory.
    if (m_writer && m_writer->queuedRecords() > kMaxQueuedRecords) {
        takeAggregates();
        return;
    }
    zmq::message_t frame;
    for (int n = 0; n < 10000 && m_socket.recv(frame, zmq::recv_flags::dontwait); ++n) {
        Ingest::Accepted accepted =
            m_ingest.accept({static_cast<const std::uint8_t*>(frame.data()), frame.size()}, wire::wallAlignedNowNs());
        for (std::string& problem : accepted.problems)
            if (++m_problems <= kReportedProblems)
                engineLog(wire::LogLevel::Warning, "collector: " + problem);
            else if (m_problems == kReportedProblems + 1)
                engineLog(wire::LogLevel::Warning, "collector: more problems with incoming frames; counting them only");
        for (std::string& note : accepted.notes)
            engineLog(wire::LogLevel::Info, "collector: " + note);
        if (!accepted.batch)
            continue;
        const wire::Batch& batch = *accepted.batch;
        const std::uint32_t rank = batch.rank;
        std::int64_t latestEnd = std::numeric_limits<std::int64_t>::min();
        for (const wire::Record& record : batch.records) {
            if (const auto* log = std::get_if<wire::LogRecord>(&record)) {
                if (log->level == wire::LogLevel::Error)
                    m_lastError[rank] = log->text;
                if (std::optional<std::string> trace = wire::handedOverTrace(log->text); trace && m_traces)
                    m_traces->handedOver(rank, std::move(*trace), log->timeNs);
            } else if (const auto* span = std::get_if<wire::SpanRecord>(&record)) {
                latestEnd = std::max(latestEnd, span->endNs);
            }
        }
        m_aggregator.add(batch);
        m_observer.batchArrived(batch);
        m_records += batch.records.size();
        if (m_writer)
            m_writer->append(std::move(*accepted.batch));
        // After the batch is queued for the store: what the importer then reads of the rank includes it.
        if (m_traces && latestEnd > std::numeric_limits<std::int64_t>::min())
            m_traces->heard(rank, latestEnd);
    }
    takeAggregates();
}

void Collector::takeAggregates()
{
    for (const live::StepAggregate& step : m_aggregator.takeCompletedSteps())
        m_observer.stepCompleted(step);
    for (const live::RankMemory& memory : m_aggregator.takeChangedMemory())
        m_observer.memoryChanged(memory);
}

void Collector::flushAggregates()
{
    for (const live::StepAggregate& step : m_aggregator.flush())
        m_observer.stepCompleted(step);
    takeAggregates();
}

}  // namespace meshbench::service
