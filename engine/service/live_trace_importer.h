#pragma once
// Traces that ranks of a running job hand over (wire/trace_handover.h: the Python client's
// torch.profiler handler names each), imported into the job's session while it runs. Each is read
// and analysed on a thread of its own, so the collector never waits on a file of gigabytes; it is
// placed on the rank's live ops (import/live_alignment.h) once the rank has reported an op that
// ended after the hand-over, so every op it is matched against is stored; then its source, kernels
// and device time are stored beside the live records. Its ops are not: the live ones are the run's.
//
// Only the engine user's own regular files are read: a rank can name a path, and the engine acts
// for no one else. What cannot be imported is said in a line of the session's log, with the
// command that imports it afterwards.

#include "import/rank_analysis.h"
#include "import/rank_trace.h"
#include "plan/job_spec.h"
#include "store/session_store.h"
#include "wire/telemetry.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace meshbench::service {

class LiveTraceImporter {
public:
    LiveTraceImporter(store::SessionWriter& writer, const plan::JobSpec& spec);
    ~LiveTraceImporter();  // abandons what is still to import
    LiveTraceImporter(const LiveTraceImporter&) = delete;
    LiveTraceImporter& operator=(const LiveTraceImporter&) = delete;

    // From the collector, on the engine clock: a rank handed over `path`; a rank reported an op
    // that ended at `endNs` (after its records were given to the writer).
    void handedOver(std::uint32_t rank, std::string path, std::int64_t handedNs);
    void heard(std::uint32_t rank, std::int64_t endNs);

    // The run is over: what was handed over is imported now (no more records will come), or, when
    // `abandon` (the user stopped the run), said not to be. Blocks until done.
    void finish(bool abandon);

    // Lines for the session's log since the last call (the engine's log is the collector's thread's).
    std::vector<std::pair<wire::LogLevel, std::string>> takeMessages();

private:
    struct HandOver {
        std::uint32_t rank = 0;
        std::string path;
        std::int64_t handedNs = 0;
    };
    void work();
    void importOne(const HandOver& handOver);
    bool waitUntilHeard(const HandOver& handOver);
    void say(wire::LogLevel level, std::string text);

    store::SessionWriter& m_writer;
    import::JobContext m_job;
    import::NameTable m_names;  // every handed-over trace's names, in the order the session numbers them
    std::size_t m_namesStored = 0;
    std::atomic<bool> m_abandon{false};

    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<HandOver> m_queue;
    std::map<std::uint32_t, std::int64_t> m_heard;  // each rank's latest op end
    bool m_finishing = false;
    std::vector<std::pair<wire::LogLevel, std::string>> m_messages;
    std::thread m_thread;  // started at the first hand-over
};

}  // namespace meshbench::service
