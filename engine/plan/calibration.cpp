#include "calibration.h"

#include "cost_model.h"
#include "device_model.h"
#include "mesh.h"
#include "planner.h"
#include "units.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace meshbench::plan {
namespace {

// How far apart (as a factor either way) the speed the runs' steps need may be from the one their
// compute spans show: the bisection's bracket. A pipeline's bubble and its communication lengthen a
// step beyond its compute, which the plans price; a larger gap means the spans and the steps are
// not of one run.
constexpr double kStepsFromSpans = 8.0;

// The device's rates scaled by 1 / slowdown. Nothing is capped at the device's peak: a fit above it
// is refused (calibrationBoundsErrors), not quietly made possible.
CalibrationSpec scaled(const Performance& table, double slowdown)
{
    CalibrationSpec cal;
    cal.matmulEfficiency = table.device.matmulEfficiency / slowdown;
    cal.attentionEfficiency = table.device.attentionEfficiency / slowdown;
    cal.memoryBandwidth = table.device.memoryBandwidth / slowdown;
    cal.kernelOverhead = table.device.kernelOverhead * slowdown;
    return cal;
}

// Mean log of planned over measured step time with `cal` applied to every run.
double stepError(const std::vector<MeasuredRun>& runs, const CalibrationSpec& cal)
{
    double sum = 0;
    for (const MeasuredRun& run : runs) {
        JobSpec spec = run.spec;
        spec.cluster.calibration = cal;
        spec.cluster.calibration.source = "fit";
        sum += std::log(makePlan(spec).step.total / run.stepSeconds);
    }
    return sum / double(runs.size());
}

}  // namespace

CalibrationResult calibrate(const std::vector<MeasuredRun>& runs)
{
    if (runs.empty())
        throw std::invalid_argument("give at least one session to calibrate from");
    const std::string& kind = runs.front().spec.cluster.device.kind;
    double measured = 0, planned = 0;
    double volume = 0, seconds = 0;
    int spans = 0;
    bool insideDomain = true;
    std::vector<std::string> sources;
    for (const MeasuredRun& run : runs) {
        if (run.spec.cluster.device.kind != kind)
            throw std::invalid_argument(run.source + " ran on '" + run.spec.cluster.device.kind + "', " +
                                        runs.front().source + " on '" + kind +
                                        "': calibrate one device kind at a time");
        JobSpec datasheet = run.spec;
        datasheet.cluster.calibration = {};
        const Mesh mesh(datasheet.parallel);
        const LinkClasses links = linkClasses(mesh, datasheet.cluster);
        const CostModel model(datasheet, links);
        const int pp = datasheet.parallel.pp;
        if (int(run.stageComputeSeconds.size()) != pp)
            throw std::invalid_argument(run.source + " has compute spans for " +
                                        std::to_string(run.stageComputeSeconds.size()) + " of its " +
                                        std::to_string(pp) + " pipeline stages; calibrate from a completed run");
        if (!(std::isfinite(run.stepSeconds) && run.stepSeconds > 0))
            throw std::invalid_argument(run.source + " has no measured step time (" +
                                        formatNumber("%g", run.stepSeconds) +
                                        " s); calibrate from a run that completed steps");
        for (double stage : run.stageComputeSeconds)
            if (!(std::isfinite(stage) && stage >= 0))
                throw std::invalid_argument(run.source + " measured " + formatNumber("%g", stage) +
                                            " s of compute in a stage's step; its spans are damaged");
        for (int s = 0; s < pp; ++s) {
            measured += run.stageComputeSeconds[std::size_t(s)];
            planned += datasheet.parallel.microbatches * model.stageWork(s).total();
        }
        // A reduction's bus volume, nccl-tests' convention: 2(n-1)/n of the buffer for an
        // all-reduce, (n-1)/n for a reduce-scatter.
        const int n = datasheet.parallel.dp;
        const double share = datasheet.parallel.zero == 0 ? 2.0 * (n - 1) / n : double(n - 1) / n;
        for (const MeasuredCollective& c : run.reductions) {
            if (n < 2 || c.seconds <= 0)
                continue;
            volume += share * c.bytes;
            seconds += c.seconds;
            ++spans;
        }
        insideDomain = insideDomain && links.data.insideDomain;
        sources.push_back(run.source);
    }
    if (measured <= 0 || planned <= 0)
        throw std::invalid_argument(runs.front().source + " holds no forward or backward spans to fit the device to");

    const JobSpec& first = runs.front().spec;
    ClusterSpec datasheetCluster = first.cluster;
    datasheetCluster.calibration = {};
    const Performance table = devicePerformance(datasheetCluster, ranksPerNode(first));

    CalibrationResult result;
    CalibrationSpec& cal = result.calibration;
    // The spans say how far the device's kernels are from the table; the step is what a plan must
    // predict, so the speed is then refined until the plans of the runs meet their measured steps
    // (bisection on log speed, where planned step time falls as the device gets faster).
    const double fromSpans = measured / planned;
    double low = std::log(fromSpans) - std::log(kStepsFromSpans), high = low + 2.0 * std::log(kStepsFromSpans);
    const double bracketLow = low, bracketHigh = high;
    for (int i = 0; i < 64 && high - low > kFitPrecision; ++i) {
        const double mid = 0.5 * (low + high);
        (stepError(runs, scaled(table, std::exp(mid))) > 0 ? high : low) = mid;
    }
    const double slowdown = std::exp(0.5 * (low + high));
    std::string names;
    for (const std::string& source : sources)
        names += (names.empty() ? "" : ", ") + source;
    const auto f3 = [](double value) { return formatNumber("%.3f", value); };
    const auto f2 = [](double value) { return formatNumber("%.2f", value); };
    const auto g3 = [](double value) { return formatNumber("%.3g", value); };
    // A fit that ended at its bracket's edge met no step: the steps need a device more than
    // kStepsFromSpans times faster or slower than the spans show.
    if (low <= bracketLow + kFitPrecision || high >= bracketHigh - kFitPrecision)
        throw std::invalid_argument(
            names + ": the steps and the spans disagree: the compute spans show a device at " + g3(1.0 / fromSpans) +
            " of its table's rates (" + g3(measured * 1e3) + " ms of F, B and W per step, " + f3(planned * 1e3) +
            " ms planned), and the measured steps need a device more than " + formatNumber("%.0f", kStepsFromSpans) +
            " times " + (low <= bracketLow + kFitPrecision ? "faster" : "slower") +
            " than that; the spans or the step metrics are damaged (spans too short or too long for their steps), "
            "so calibrate from another session");
    cal = scaled(table, slowdown);
    cal.source = names;
    result.report.push_back("compute: measured " + f3(measured * 1e3) +
                            " ms of F, B and W per step over all stages, planned " + f3(planned * 1e3) +
                            " ms from the table; the runs' steps fit a device at " + f3(1.0 / slowdown) +
                            " of its table's rates");
    result.report.push_back("  matmul efficiency " + f3(table.device.matmulEfficiency) + " -> " +
                            f3(cal.matmulEfficiency) + ", memory bandwidth " + f2(table.device.memoryBandwidth / 1e9) +
                            " -> " + f2(cal.memoryBandwidth / 1e9) + " GB/s, overhead per op " +
                            f2(table.device.kernelOverhead * 1e6) + " -> " + f2(cal.kernelOverhead * 1e6) + " us");
    // Reductions that overlap the backward share the cores (or SMs) with it: their spans time the
    // contention, not the link, and stay out of the fit.
    const bool overlapped = std::any_of(runs.begin(), runs.end(), [](const MeasuredRun& run) {
        return run.spec.parallel.overlapGradReduce && run.spec.parallel.dp > 1;
    });
    if (spans > 0 && overlapped)
        result.report.push_back("data parallel: the dp-reduce spans overlapped the backward (overlap_grad_reduce), so "
                                "they time contention, not the link; link rates kept from the table (calibrate "
                                "from a run with overlap_grad_reduce false to fit them)");
    if (spans > 0 && seconds > 0 && !overlapped) {
        const double bandwidth = volume / seconds;
        const LinkPerformance& before = table.link(insideDomain);
        (insideDomain ? cal.intraBandwidth : cal.interBandwidth) = bandwidth;
        result.report.push_back("data parallel: " + std::to_string(spans) + " dp-reduce spans moved " +
                                f3(volume / 1e6) + " MB of bus volume in " + f3(seconds * 1e3) +
                                " ms: " + (insideDomain ? "intra-node" : "inter-node") + " bus bandwidth " +
                                f3(before.busBandwidth / 1e9) + " -> " + f3(bandwidth / 1e9) + " GB/s");
    }
    // The fit must describe the device that ran: every rate finite, none above its peak, none
    // below the table's floor.
    if (const std::vector<SpecError> errors = calibrationBoundsErrors(datasheetCluster, cal); !errors.empty()) {
        std::string message = names + ": the fitted rates cannot be " + first.cluster.device.kind +
                              " rates (a device at " + g3(1.0 / slowdown) + " of its table's):";
        for (const SpecError& e : errors)
            message += "\n  " + e.path + ": " + e.message;
        throw std::invalid_argument(message + "\nno device runs faster than its peak, nor this far below its table: "
                                              "the session's spans and steps are damaged or timed in the wrong unit, "
                                              "or cluster.device is not the device that ran them; calibrate from an "
                                              "undamaged session of a run on this device");
    }
    return result;
}

}  // namespace meshbench::plan
