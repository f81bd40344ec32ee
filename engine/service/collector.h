#pragma once
// The receiving end of a job's telemetry: a ZeroMQ PULL socket whose frames are decoded and
// checked (Ingest), stored (SessionWriter), aggregated (LiveAggregator) and shown (RunObserver),
// and whose problems (malformed frames, strangers, lost records) are logged into the session under
// the engine's own rank. The job runner drives it from its poll loop; the latency benchmark drives
// it alone.

#include "ingest.h"
#include "job_runner.h"

#include <zmq.hpp>

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace meshbench::service {

class LiveTraceImporter;

// Done to a listening socket before it binds (`name` says which, for refusals): CURVE, when the run
// is reachable from off this machine.
using SocketSetup = std::function<void(zmq::socket_t& socket, const std::string& name)>;

// A socket's bound endpoint as agents reach it: a wildcard address (0.0.0.0) becomes this host's
// name.
std::string reachableEndpoint(const zmq::socket_t& socket);

class Collector {
public:
    // Binds `bind` (e.g. tcp://127.0.0.1:*); throws std::runtime_error naming it when it cannot.
    Collector(zmq::context_t& context, const std::string& bind, std::uint32_t worldSize,
              live::LiveAggregator& aggregator, RunObserver& observer, const SocketSetup& setup = {});

    // The bound endpoint, as agents on this host reach it.
    std::string endpoint() const;
    zmq::socket_t& socket() { return m_socket; }
    // Records go to this session from now on.
    void attach(store::SessionWriter& writer) { m_writer = &writer; }
    // Traces the ranks hand over go to `importer` from now on (none: they are only logged).
    void handTracesTo(LiveTraceImporter* importer) { m_traces = importer; }

    // Handles the frames that have arrived (a bounded number, so that other work gets its turn),
    // then hands the aggregates that became final to the observer.
    void receive();
    // Hands every step still open to the observer (the end of a run).
    void flushAggregates();
    // A line of the engine's own: shown, and stored under store::kEngineRank.
    void engineLog(wire::LogLevel level, std::string text);

    const Ingest& ingest() const { return m_ingest; }
    // The last error line each rank logged, empty for none.
    std::span<const std::string> lastErrors() const { return m_lastError; }
    std::uint64_t records() const { return m_records; }

private:
    void takeAggregates();

    zmq::socket_t m_socket;
    Ingest m_ingest;
    live::LiveAggregator& m_aggregator;
    RunObserver& m_observer;
    store::SessionWriter* m_writer = nullptr;
    LiveTraceImporter* m_traces = nullptr;
    std::uint64_t m_engineSequence = 0;
    std::uint64_t m_records = 0;
    int m_problems = 0;
    std::vector<std::string> m_lastError;
};

}  // namespace meshbench::service
