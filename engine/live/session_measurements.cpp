#include "session_measurements.h"

#include "store/session_store.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <stdexcept>

namespace meshbench::live {
namespace {

double median(std::vector<double> values)
{
    if (values.empty())
        return 0;
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

}  // namespace

// The first step is left out when there are others: it pays for first-touch allocation and warm
// caches.
plan::MeasuredRun measureSession(const std::string& path)
{
    const store::SessionReader reader(path);
    const plan::LoadResult loaded = plan::parseJobSpec(reader.header().jobSpec);
    if (!loaded.valid())
        throw std::invalid_argument(path + ": its job spec no longer loads: " + loaded.errors.front().path + ": " +
                                    loaded.errors.front().message);
    plan::MeasuredRun run;
    run.source = std::filesystem::path(path).filename().string();
    run.spec = *loaded.spec;

    std::vector<double> steps;
    int lastStep = 0;
    for (const auto& metrics : reader.stepMetrics()) {
        lastStep = std::max(lastStep, metrics.record.step);
        if (metrics.record.step > 1 && metrics.record.endNs > metrics.record.beginNs)
            steps.push_back(double(metrics.record.endNs - metrics.record.beginNs) * 1e-9);
    }
    const int firstCounted = lastStep > 1 ? 2 : 1;
    const int counted = lastStep - firstCounted + 1;
    if (counted < 1)
        throw std::invalid_argument(path + " holds no completed step; calibrate from a run that trained");
    run.stepSeconds = median(steps);

    // Per rank: its stage and its F, B and W seconds over the counted steps.
    std::map<std::uint32_t, std::pair<int, double>> ranks;
    const auto [t0, t1] = reader.timeRange();
    reader.spans(t0, t1, {}, [&](const store::StoredSpan& stored) {
        const wire::SpanRecord& span = stored.span;
        if (span.step < firstCounted || span.endNs <= span.beginNs)
            return;
        const double seconds = double(span.endNs - span.beginNs) * 1e-9;
        if (wire::isComputeKind(span.kind)) {
            auto& [stage, busy] = ranks[stored.rank];
            stage = span.stage;
            busy += seconds;
        } else if (span.kind == wire::SpanKind::DataParallelReduce && span.bytes > 0) {
            run.reductions.push_back({double(span.bytes), seconds});
        }
    });
    const int pp = run.spec.parallel.pp;
    std::vector<double> sum(std::size_t(pp), 0.0);
    std::vector<int> count(std::size_t(pp), 0);
    for (const auto& [rank, entry] : ranks) {
        if (entry.first < 0 || entry.first >= pp)
            continue;
        sum[std::size_t(entry.first)] += entry.second / counted;
        ++count[std::size_t(entry.first)];
    }
    for (int s = 0; s < pp; ++s)
        if (count[std::size_t(s)] > 0)
            run.stageComputeSeconds.push_back(sum[std::size_t(s)] / count[std::size_t(s)]);
    return run;
}

}  // namespace meshbench::live
