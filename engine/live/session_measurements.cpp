#include "session_measurements.h"

#include "live/session_spec.h"
#include "plan/report.h"
#include "store/session_store.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace meshbench::live {
namespace {

double median(std::vector<double> values)
{
    if (values.empty())
        return 0;
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

std::string milliseconds(double seconds)
{
    return plan::formatNumber("%.3f ms", seconds * 1e3);
}

// The time a rank was busy in `intervals` (begin, end): their union, so that ops that overlap
// count once.
double busySeconds(std::vector<std::pair<std::int64_t, std::int64_t>>& intervals)
{
    std::sort(intervals.begin(), intervals.end());
    std::int64_t busy = 0, begin = 0, end = 0;
    bool open = false;
    for (const auto& [b, e] : intervals) {
        if (open && b <= end) {
            end = std::max(end, e);
            continue;
        }
        if (open)
            busy += end - begin;
        begin = b;
        end = e;
        open = true;
    }
    if (open)
        busy += end - begin;
    return double(busy) * 1e-9;
}

} // namespace

// The first step is left out when there are others: it pays for first-touch allocation and warm
// caches.
plan::MeasuredRun measureSession(const std::string& path)
{
    const store::SessionReader reader(path);
    // A damaged page anywhere refuses the file before anything is measured from it, even one that
    // calibration would not read: the rest of what it holds cannot be trusted either.
    reader.checkStructure();
    plan::MeasuredRun run;
    run.source = std::filesystem::path(path).filename().string();
    // The layout the ranks ran: the spec's own, or one device for a --one-device run.
    run.spec = sessionSpecAsRun(reader, path);

    // Each completed step's time, from the rank that reports the job's metrics (rank 0).
    std::map<int, double> stepSeconds;
    for (const auto& metrics : reader.stepMetrics()) {
        const wire::StepMetricsRecord& m = metrics.record;
        if (m.endNs <= m.beginNs)
            throw std::invalid_argument(path + ": step " + std::to_string(m.step) +
                                        "'s metrics end at or before they begin (" + std::to_string(m.beginNs) +
                                        " to " + std::to_string(m.endNs) +
                                        " ns): the session is damaged; calibrate from another session");
        if (!stepSeconds.emplace(m.step, double(m.endNs - m.beginNs) * 1e-9).second)
            throw std::invalid_argument(path + ": step " + std::to_string(m.step) +
                                        " has more than one record of its metrics: the session's rows were "
                                        "copied; calibrate from the run's own file");
    }
    if (stepSeconds.empty())
        throw std::invalid_argument(path + " holds no completed step; calibrate from a run that trained");
    const int firstCounted =
        stepSeconds.size() > 1 ? std::next(stepSeconds.begin())->first : stepSeconds.begin()->first;
    std::vector<double> steps;
    for (const auto& [step, seconds] : stepSeconds)
        if (step >= firstCounted)
            steps.push_back(seconds);
    run.stepSeconds = median(steps);
    const int counted = int(steps.size());

    // Per rank and counted step, its compute ops' times; spans of a step without metrics (the
    // step a stopped run was in) are left out. Each op of a rank's schedule runs once a step: one
    // that is stored twice was copied.
    std::map<std::pair<std::uint32_t, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> compute;
    std::map<std::uint32_t, int> stageOf;
    std::set<std::tuple<std::uint32_t, int, int, int, int, int, std::int64_t>> ops;
    std::string duplicate;
    const auto [t0, t1] = reader.timeRange();
    reader.spans(t0, t1, {}, [&](const store::StoredSpan& stored) {
        const wire::SpanRecord& span = stored.span;
        if (span.step < firstCounted || !stepSeconds.count(span.step) || span.endNs <= span.beginNs)
            return;
        if (wire::isComputeKind(span.kind)) {
            // An op without a micro-batch is told apart by its time.
            const std::int64_t when = span.microbatch < 0 ? span.beginNs : 0;
            if (!ops.emplace(stored.rank, span.step, span.stage, span.chunk, span.microbatch, int(span.kind), when)
                     .second &&
                duplicate.empty())
                duplicate = "rank " + std::to_string(stored.rank) + "'s " + wire::spanLabel(span) + " of step " +
                            std::to_string(span.step);
            stageOf[stored.rank] = span.stage;
            compute[{stored.rank, span.step}].emplace_back(span.beginNs, span.endNs);
        } else if (span.kind == wire::SpanKind::DataParallelReduce && span.bytes > 0) {
            run.reductions.push_back({double(span.bytes), double(span.endNs - span.beginNs) * 1e-9});
        }
    });
    if (!duplicate.empty())
        throw std::invalid_argument(path + ": " + duplicate +
                                    " is stored more than once, where a rank runs each op of its schedule once "
                                    "a step: the session's spans were copied; calibrate from the run's own file");

    // A rank computes one op at a time, so its ops in a step cannot keep it busy for longer than
    // the step took (ops that overlap count once: what overlap allows).
    std::map<std::uint32_t, double> busy;
    for (auto& [key, intervals] : compute) {
        const double seconds = busySeconds(intervals);
        const double step = stepSeconds.at(key.second);
        if (seconds > step)
            throw std::invalid_argument(path + ": rank " + std::to_string(key.first) + "'s compute spans of step " +
                                        std::to_string(key.second) + " keep it busy for " + milliseconds(seconds) +
                                        ", longer than the step's " + milliseconds(step) +
                                        ": the spans' times are damaged (or in another unit than the steps'); "
                                        "calibrate from another session");
        busy[key.first] += seconds;
    }

    const int pp = run.spec.parallel.pp;
    std::vector<double> sum(std::size_t(pp), 0.0);
    std::vector<int> count(std::size_t(pp), 0);
    for (const auto& [rank, seconds] : busy) {
        const int stage = stageOf[rank];
        if (stage < 0 || stage >= pp)
            continue;
        sum[std::size_t(stage)] += seconds / counted;
        ++count[std::size_t(stage)];
    }
    for (int s = 0; s < pp; ++s)
        if (count[std::size_t(s)] > 0)
            run.stageComputeSeconds.push_back(sum[std::size_t(s)] / count[std::size_t(s)]);
    return run;
}

} // namespace meshbench::live
