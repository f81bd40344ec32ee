#include "live_trace_importer.h"

#include "import/import_error.h"
#include "import/live_alignment.h"
#include "import/rank_file.h"
#include "plan/units.h"
#include "wire/error_text.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <set>

namespace meshbench::service {
namespace {

std::string micros(std::int64_t ns) { return plan::formatNumber("%.1f us", double(ns) / 1000); }

// Throws ImportError when the engine must not, or cannot, read `path` for a rank.
void checkHandedOverFile(const std::string& path)
{
    if (!std::filesystem::path(path).is_absolute())
        throw import::ImportError("the path is not absolute, and the rank's working folder is not the engine's");
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0)
        throw import::ImportError(errno == ENOENT ? "there is no such file on the engine's host (a rank on another "
                                                    "host writes its traces to its own disk: copy them here)"
                                                  : wire::errorText(errno));
    if (!S_ISREG(st.st_mode))
        throw import::ImportError("it is not a regular file (links and folders are not followed)");
    if (st.st_uid != ::geteuid())
        throw import::ImportError("it belongs to another user, and the engine reads only its own user's files");
    if (!import::isTraceName(std::filesystem::path(path).filename().string()))
        throw import::ImportError("its name is not a trace's (*.json, *.json.gz or an nsys export's *.sqlite)");
}

}  // namespace

LiveTraceImporter::LiveTraceImporter(store::SessionWriter& writer, const plan::JobSpec& spec) : m_writer(writer)
{
    m_job.spec = spec;
    m_job.mesh.emplace(spec.parallel);
}

LiveTraceImporter::~LiveTraceImporter()
{
    if (m_thread.joinable())
        finish(true);
}

void LiveTraceImporter::handedOver(std::uint32_t rank, std::string path, std::int64_t handedNs)
{
    std::lock_guard lock(m_mutex);
    if (m_finishing)
        return;
    m_queue.push_back({rank, std::move(path), handedNs});
    if (!m_thread.joinable())
        m_thread = std::thread([this] { work(); });
    m_wake.notify_all();
}

void LiveTraceImporter::heard(std::uint32_t rank, std::int64_t endNs)
{
    std::lock_guard lock(m_mutex);
    std::int64_t& latest = m_heard.try_emplace(rank, std::numeric_limits<std::int64_t>::min()).first->second;
    if (endNs > latest) {
        latest = endNs;
        m_wake.notify_all();
    }
}

void LiveTraceImporter::finish(bool abandon)
{
    {
        std::lock_guard lock(m_mutex);
        m_finishing = true;
        m_abandon = abandon;
        m_wake.notify_all();
    }
    if (m_thread.joinable())
        m_thread.join();
}

std::vector<std::pair<wire::LogLevel, std::string>> LiveTraceImporter::takeMessages()
{
    std::lock_guard lock(m_mutex);
    return std::exchange(m_messages, {});
}

void LiveTraceImporter::say(wire::LogLevel level, std::string text)
{
    std::lock_guard lock(m_mutex);
    m_messages.emplace_back(level, std::move(text));
}

void LiveTraceImporter::work()
{
    for (;;) {
        HandOver next;
        {
            std::unique_lock lock(m_mutex);
            m_wake.wait(lock, [&] { return !m_queue.empty() || m_finishing; });
            if (m_queue.empty())
                return;
            next = std::move(m_queue.front());
            m_queue.pop_front();
        }
        importOne(next);
    }
}

bool LiveTraceImporter::waitUntilHeard(const HandOver& handOver)
{
    std::unique_lock lock(m_mutex);
    m_wake.wait(lock, [&] {
        const auto heard = m_heard.find(handOver.rank);
        return m_finishing || (heard != m_heard.end() && heard->second > handOver.handedNs);
    });
    return !m_abandon;
}

void LiveTraceImporter::importOne(const HandOver& handOver)
{
    const std::string who = "rank " + std::to_string(handOver.rank) + "'s trace " + handOver.path;
    const std::string later = "; import it afterwards with meshbench-engine import";
    try {
        checkHandedOverFile(handOver.path);
        const import::Format format = import::formatOf(handOver.path);
        if (format == import::Format::ExpertCounts)
            throw import::ImportError("it holds expert counts, not a trace; the client reports them with expert_load");
        import::ReadOptions options;
        options.cancel = &m_abandon;
        const import::RankTrace trace = import::readRankTrace(handOver.path, format, m_names, options);
        const int rank = static_cast<int>(handOver.rank);
        if (trace.rank && *trace.rank != rank)
            throw import::ImportError("it says it is rank " + std::to_string(*trace.rank) + "'s");
        import::RankAnalysis analysis = import::analyseRank(trace, rank, m_names, m_job, options.steps);
        // A step the profiler cut at either end is no step to place.
        const std::vector<int> partial = import::partialSteps({&analysis});
        std::set<int> kept;
        for (const import::StepWindow& w : analysis.steps)
            kept.insert(w.step);
        for (int step : partial)
            kept.erase(step);
        import::keepSteps(analysis, {kept.begin(), kept.end()});

        if (!waitUntilHeard(handOver)) {
            say(wire::LogLevel::Info, who + " was not imported: the run was stopped" + later);
            return;
        }
        // The rank's live ops around the hand-over, from the session itself once what arrived is stored.
        // The trace's steps are the last ones before it, but the profiler may have spent long on the
        // trace before handing it over: the window reaches back until it holds a step more than the
        // trace, or the session's start.
        m_writer.flush();
        std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = std::numeric_limits<std::int64_t>::min();
        std::set<int> tracedSteps;
        for (const wire::SpanRecord& s : analysis.spans) {
            first = std::min(first, s.beginNs);
            last = std::max(last, s.endNs);
            tracedSteps.insert(s.step);
        }
        const std::int64_t length = analysis.spans.empty() ? 0 : last - first;
        const store::SessionReader reader(m_writer.path());
        const std::uint32_t ranks[] = {handOver.rank};
        std::vector<wire::SpanRecord> live;
        for (std::int64_t back = 2 * length + 1'000'000'000;; back *= 4) {
            live.clear();
            std::set<int> stepsBefore;
            reader.spans(handOver.handedNs - back, handOver.handedNs + length, ranks,
                         [&](const store::StoredSpan& stored) {
                             live.push_back(stored.span);
                             if (stored.span.beginNs < handOver.handedNs)
                                 stepsBefore.insert(stored.span.step);
                         });
            if (stepsBefore.size() > tracedSteps.size() || handOver.handedNs - back < reader.header().createdNs)
                break;
        }
        const import::LiveAlignment a = import::alignToLive(analysis.spans, live, handOver.handedNs);
        import::moveOntoLive(analysis, a);

        store::ImportSource source = import::importSource(handOver.path, trace, analysis);
        const std::string placed = "handed over by the running rank: steps " + std::to_string(a.firstStep) + "-" +
                                   std::to_string(a.lastStep) + " and clock offset " + micros(a.offsetNs) +
                                   " from its live ops (residual " + micros(a.residualNs) + " over " +
                                   std::to_string(a.matchedOps) + " ops)";
        source.inferred = source.inferred.empty() ? placed : source.inferred + "; " + placed;
        const std::vector<std::string>& names = m_names.names();
        m_writer.addKernelNames({names.begin() + std::ptrdiff_t(m_namesStored), names.end()});
        m_namesStored = names.size();
        m_writer.addImportSource(source);
        const std::size_t kernels = analysis.kernels.size();
        m_writer.appendKernels(handOver.rank, std::move(analysis.kernels));
        m_writer.addDeviceTime(std::move(analysis.deviceTime));
        say(wire::LogLevel::Info, "imported " + who + " (" + source.format + ", " + std::to_string(trace.events) +
                                      " events, " + std::to_string(kernels) + " kernels): " + placed);
    } catch (const std::exception& e) {  // ImportError, StoreError: the run goes on either way
        say(wire::LogLevel::Warning, who + " was not imported: " + e.what() + later);
    }
}

}  // namespace meshbench::service
