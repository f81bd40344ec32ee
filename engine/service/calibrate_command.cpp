#include "calibrate_command.h"

#include "command_line.h"

#include "plan/calibration.h"
#include "plan/planner.h"
#include "plan/report.h"
#include "store/session_store.h"
#include "wire/text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>

namespace meshbench::service {

namespace {

constexpr const char* kUsage = "meshbench-engine calibrate SESSION... [--out PROFILE.json]";

double median(std::vector<double> values)
{
    if (values.empty())
        return 0;
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
}

// The spans and steps of a completed session, as calibration reads them. The first step is left
// out when there are others: it pays for first-touch allocation and warm caches.
plan::MeasuredRun measure(const std::string& path)
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

}  // namespace

int runCalibrateCommand(const std::vector<std::string>& args)
{
    std::vector<std::string> sessions;
    std::string out;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--out") {
            if (i + 1 >= args.size())
                return usageError("--out needs the profile file to write", kUsage);
            out = args[++i];
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option '" + a + "'", kUsage);
        } else {
            sessions.push_back(a);
        }
    }
    if (sessions.empty())
        return usageError("calibrate needs at least one session file", kUsage);

    std::vector<plan::MeasuredRun> runs;
    plan::CalibrationResult result;
    try {
        for (const std::string& path : sessions)
            runs.push_back(measure(path));
        result = plan::calibrate(runs);
    } catch (const std::exception& e) {
        std::cerr << "meshbench-engine calibrate: " << e.what() << "\n";
        return 1;
    }
    for (const std::string& line : result.report)
        std::cout << line << "\n";
    // Each session's step as planned from the table and from the fitted rates, beside what it measured.
    for (const plan::MeasuredRun& run : runs) {
        plan::JobSpec datasheet = run.spec, fitted = run.spec;
        datasheet.cluster.calibration = {};
        fitted.cluster.calibration = result.calibration;
        const double before = plan::makePlan(datasheet).step.total, after = plan::makePlan(fitted).step.total;
        const auto ms = [](double seconds) { return plan::formatNumber("%.2f ms", seconds * 1e3); };
        const auto off = [&](double planned) { return plan::formatNumber("%+.0f%%", 100 * (planned / run.stepSeconds - 1)); };
        std::cout << run.source << ": measured step " << ms(run.stepSeconds) << "; planned " << ms(before)
                  << " from the table (" << off(before) << "), " << ms(after) << " calibrated (" << off(after) << ")\n";
    }
    const std::string profile = wire::jsonText(plan::toJson(result.calibration), 2) + "\n";
    if (out.empty()) {
        std::cout << profile;
        return 0;
    }
    std::ofstream file(out, std::ios::binary | std::ios::trunc);
    if (!(file << profile) || !file.flush()) {
        std::cerr << "meshbench-engine calibrate: cannot write '" << out << "': check the folder and its permissions\n";
        return 5;
    }
    std::cout << "profile " << out << " (use it with --profile)\n";
    return 0;
}

}  // namespace meshbench::service
