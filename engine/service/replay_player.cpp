#include "replay_player.h"

#include "live_publisher.h"

#include "live/session_replay.h"
#include "wire/telemetry.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <map>
#include <optional>
#include <thread>
#include <variant>

namespace meshbench::service {

namespace {

using Clock = std::chrono::steady_clock;

// Thrown out of a replay's record visitor to end the pass early (a seek, a close).
struct ReplayInterrupted {};

// The step a record belongs to, for those that carry one.
std::optional<std::int32_t> recordStep(const wire::Record& record)
{
    return std::visit(
        [](const auto& r) -> std::optional<std::int32_t> {
            using T = std::decay_t<decltype(r)>;
            if constexpr (std::is_same_v<T, wire::SpanRecord> || std::is_same_v<T, wire::ExpertLoadRecord> ||
                          std::is_same_v<T, wire::MemorySampleRecord> || std::is_same_v<T, wire::StepMetricsRecord>)
                return r.step;
            else
                return std::nullopt;
        },
        record);
}

}  // namespace

void playSession(zmq::context_t& context, Worker& worker, const std::shared_ptr<store::SessionReader>& reader,
                 const std::string& session, bool endWhenDone)
{
    // Seeking restarts the pass from the chosen step's first record: the store is read from the
    // step before's beginning on (no rank starts step N before the pipeline's first rank began
    // step N - 1), and what is older than the chosen step is skipped here.
    LivePublisher publisher(context, worker.source);
    // Every page is read once before anything plays (on this thread: a large session takes a while).
    reader->checkStructure();
    const live::SessionReplay replay(*reader, session);
    // What the run lost on the way, as a live run reports it when it ends.
    std::uint64_t lost = 0;
    for (const store::RankTraffic& traffic : reader->traffic())
        lost += traffic.lost + traffic.dropped;
    std::map<std::int32_t, std::int64_t> stepBegins;
    for (const auto& m : reader->stepMetrics())
        stepBegins[m.record.step] = m.record.beginNs;
    int fromStep = 0;
    for (;;) {
        // Per pass: a session still being written may have grown since the last one.
        const store::RunWindow window = reader->runWindow();
        const std::int64_t from = stepBegins.count(fromStep) ? stepBegins[fromStep] : INT64_MIN;
        // The replay clock: session time advanced by wall time x speed while playing.
        std::optional<std::int64_t> position;
        Clock::time_point lastWall = Clock::now();
        int step = fromStep;
        std::map<std::uint32_t, wire::Batch> pendingSpans;
        Clock::time_point lastFlush = Clock::now();
        auto flushSpans = [&] {
            for (auto& [rank, batch] : pendingSpans)
                if (!batch.records.empty()) {
                    publisher.spans(batch);
                    batch.records.clear();
                }
            lastFlush = Clock::now();
        };
        auto advanceClock = [&] {
            const Clock::time_point now = Clock::now();
            if (!worker.paused.load() && position)
                *position += std::int64_t(std::chrono::duration<double, std::nano>(now - lastWall).count() *
                                          worker.speed.load());
            lastWall = now;
        };
        try {
            const auto previous = stepBegins.find(fromStep - 1);
            const std::int64_t scanFrom = previous != stepBegins.end() ? previous->second : INT64_MIN;
            live::SessionReplay::Handlers handlers;
            handlers.admit = [&](std::uint32_t rank, const wire::Record& record) {
                // A seek skips the records of earlier steps, and the others from before the step began.
                const std::optional<std::int64_t> time = wire::recordTimeNs(record);
                const std::optional<std::int32_t> recordOfStep = recordStep(record);
                if (recordOfStep ? *recordOfStep < fromStep : time && *time < from)
                    return false;
                if (time) {
                    window.check(session, rank, *time);
                    if (!position)
                        position = *time;
                    // Wait until the replay clock reaches the record, in short naps so that a
                    // pause, a new speed, a seek or a close take effect at once.
                    for (advanceClock(); *position < *time || worker.paused.load(); advanceClock()) {
                        if (worker.stop.load() || worker.seekStep.load() >= 0)
                            throw ReplayInterrupted{};
                        flushSpans();
                        std::this_thread::sleep_for(std::chrono::milliseconds(
                            std::clamp<std::int64_t>((*time - *position) / 1'000'000, 1, 20)));
                    }
                }
                if (worker.stop.load() || worker.seekStep.load() >= 0)
                    throw ReplayInterrupted{};
                if (const auto* span = std::get_if<wire::SpanRecord>(&record)) {
                    wire::Batch& batch = pendingSpans[rank];
                    batch.rank = rank;
                    batch.records.push_back(*span);
                } else if (const auto* log = std::get_if<wire::LogRecord>(&record)) {
                    publisher.log(rank, log->level, log->text);
                }
                if (Clock::now() - lastFlush > std::chrono::milliseconds(50))
                    flushSpans();
                return true;
            };
            handlers.steps = [&](const std::vector<live::StepAggregate>& steps, bool atEnd) {
                if (atEnd)
                    flushSpans();
                for (const live::StepAggregate& s : steps) {
                    publisher.step(s);
                    if (atEnd)
                        continue;
                    step = s.step;
                    publisher.job(
                        {{"state", "playing"}, {"session", session}, {"step", step}, {"speed", worker.speed.load()}});
                }
            };
            handlers.memory = [&](const std::vector<live::RankMemory>& memory) {
                for (const live::RankMemory& m : memory)
                    publisher.memory(m);
            };
            replay.play(handlers, scanFrom);
            flushSpans();
            publisher.job({{"state", "ended"}, {"session", session}, {"step", step}, {"lost", lost}});
        } catch (const ReplayInterrupted&) {
        }
        if (worker.stop.load() || (endWhenDone && worker.seekStep.load() < 0))
            break;
        // Ended: wait for a seek (or the end of the replay).
        while (worker.seekStep.load() < 0 && !worker.stop.load())
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (worker.stop.load())
            break;
        fromStep = worker.seekStep.exchange(-1);
        publisher.job({{"state", "seeking"}, {"session", session}, {"step", fromStep}});
    }
    worker.done = true;
}

}  // namespace meshbench::service
