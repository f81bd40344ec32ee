#include "calibration.h"

#include "cost_model.h"
#include "device_model.h"
#include "mesh.h"
#include "planner.h"
#include "units.h"

#include <algorithm>
#include <cmath>
#include <functional>
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

std::string sourcesOf(const std::vector<MeasuredRun>& runs)
{
    std::string names;
    for (const MeasuredRun& run : runs)
        names += (names.empty() ? "" : ", ") + run.source;
    return names;
}

// The rates of the device table (no calibration) for the runs' cluster.
Performance tableOf(const std::vector<MeasuredRun>& runs)
{
    const JobSpec& first = runs.front().spec;
    ClusterSpec datasheet = first.cluster;
    datasheet.calibration = {};
    return devicePerformance(datasheet, ranksPerNode(first));
}

// The fit must describe the device that ran: every rate finite, none above its peak, none below the
// table's floor. `device` says how far from its table the fit put the device, for the message.
void checkBounds(const std::vector<MeasuredRun>& runs, const CalibrationSpec& cal, const std::string& device)
{
    ClusterSpec datasheet = runs.front().spec.cluster;
    datasheet.calibration = {};
    const std::vector<SpecError> errors = calibrationBoundsErrors(datasheet, cal);
    if (errors.empty())
        return;
    std::string message =
        sourcesOf(runs) + ": the fitted rates cannot be " + datasheet.device.kind + " rates (" + device + "):";
    for (const SpecError& e : errors)
        message += "\n  " + e.path + ": " + e.message;
    throw std::invalid_argument(message + "\nno device runs faster than its peak, nor this far below its table: "
                                          "the session's spans and steps are damaged or timed in the wrong unit, "
                                          "or cluster.device is not the device that ran them; calibrate from an "
                                          "undamaged session of a run on this device");
}

// Planned seconds per step of one kind of work, summed over the traced stages of every run, with
// `cal` applied; `work` gives a stage's seconds per step from its model.
double plannedWith(const std::vector<MeasuredRun>& runs, const CalibrationSpec& cal,
                   const std::function<double(const CostModel&, const JobSpec&, int stage)>& work)
{
    double sum = 0;
    for (const MeasuredRun& run : runs) {
        JobSpec spec = run.spec;
        spec.cluster.calibration = cal;
        spec.cluster.calibration.source = "fit";
        const Mesh mesh(spec.parallel);
        const CostModel model(spec, linkClasses(mesh, spec.cluster));
        for (int s = 0; s < spec.parallel.pp; ++s)
            if (run.stageKernels[std::size_t(s)].ranks > 0)
                sum += work(model, spec, s);
    }
    return sum;
}

// The rate (`field` of the calibration) at which the planned time meets the measured one, by
// bisection on its log (planned time falls as the rate rises), from a bracket far wider than the
// device's bounds, which checkBounds applies after. Throws when no rate in the bracket meets it.
double fitRate(const std::vector<MeasuredRun>& runs, CalibrationSpec& cal, double CalibrationSpec::*field, double table,
               double measured, const std::function<double(const CostModel&, const JobSpec&, int stage)>& work,
               const std::string& what)
{
    const double reach = std::log(kSlowestCalibration * kSlowestCalibration);
    double low = std::log(table) - reach, high = std::log(table) + reach;
    const auto plannedAt = [&](double logRate) {
        cal.*field = std::exp(logRate);
        return plannedWith(runs, cal, work);
    };
    if (plannedAt(low) < measured || plannedAt(high) > measured)
        throw std::invalid_argument(sourcesOf(runs) + ": no " + what + " rate within " +
                                    formatNumber("%.0f", std::exp(reach)) + " times the table's meets the " +
                                    formatNumber("%.3f ms", measured * 1e3) +
                                    " its kernels took per step; the trace's kernels or the job spec (--job) are "
                                    "not of one run");
    for (int i = 0; i < 100 && high - low > kFitPrecision; ++i) {
        const double mid = 0.5 * (low + high);
        (plannedAt(mid) > measured ? low : high) = mid;
    }
    cal.*field = std::exp(0.5 * (low + high));
    return cal.*field;
}

// Each rate fitted to its own kernels (calibration.h); the order matters where one kind of work
// depends on two rates: element-wise kernels on the memory bandwidth alone, GEMMs on it too (a
// skinny GEMM is memory-bound), so the bandwidth is fitted first.
CalibrationResult calibrateFromKernels(const std::vector<MeasuredRun>& runs)
{
    for (const MeasuredRun& run : runs)
        if (int(run.stageKernels.size()) != run.spec.parallel.pp)
            throw std::invalid_argument(run.source + " has kernels for " + std::to_string(run.stageKernels.size()) +
                                        " of its " + std::to_string(run.spec.parallel.pp) +
                                        " pipeline stages; its session is damaged");
    const Performance table = tableOf(runs);

    CalibrationResult result;
    CalibrationSpec& cal = result.calibration;
    const auto measuredOf = [&](double MeasuredKernels::*kind) {
        double sum = 0;
        for (const MeasuredRun& run : runs)
            for (const MeasuredKernels& k : run.stageKernels)
                sum += k.ranks > 0 ? k.*kind : 0.0;
        return sum;
    };
    const auto perStep = [](double StageWork::*kind) {
        return [kind](const CostModel& model, const JobSpec& spec, int stage) {
            return spec.parallel.microbatches * (model.stageWork(stage).*kind);
        };
    };
    const auto ms = [](double seconds) { return formatNumber("%.3f ms", seconds * 1e3); };
    const auto f3 = [](double value) { return formatNumber("%.3f", value); };
    struct DeviceRate {
        double MeasuredKernels::*measured;
        double StageWork::*planned;
        double CalibrationSpec::*field;
        double table;
        const char* kernels;
        const char* rate;
        double shownScale;
        const char* unit;
    };
    const DeviceRate rates[] = {
        {&MeasuredKernels::streaming, &StageWork::streaming, &CalibrationSpec::memoryBandwidth,
         table.device.memoryBandwidth, "element-wise", "memory bandwidth", 1e9, " GB/s"},
        {&MeasuredKernels::attention, &StageWork::attention, &CalibrationSpec::attentionEfficiency,
         table.device.attentionEfficiency, "attention", "attention efficiency", 1, ""},
        {&MeasuredKernels::gemm, &StageWork::gemm, &CalibrationSpec::matmulEfficiency, table.device.matmulEfficiency,
         "GEMM", "matmul efficiency", 1, ""},
    };
    for (const DeviceRate& r : rates) {
        const double measured = measuredOf(r.measured);
        const double planned = plannedWith(runs, cal, perStep(r.planned));
        if (measured <= 0 || planned <= 0) {
            result.report.push_back(std::string(r.kernels) + " kernels: none traced; " + r.rate +
                                    " kept from the table");
            continue;
        }
        const double fitted = fitRate(runs, cal, r.field, r.table, measured, perStep(r.planned), r.rate);
        result.report.push_back(std::string(r.kernels) + " kernels: " + ms(measured) +
                                " per step over the traced stages, " + ms(planned) +
                                " planned from the table: " + r.rate + " " + f3(r.table / r.shownScale) + " -> " +
                                f3(fitted / r.shownScale) + r.unit);
    }

    // The collectives, per network tier: the dimensions whose groups the tier carries.
    using Work = std::function<double(const CostModel&, const JobSpec&, int stage)>;
    struct Collective {
        double MeasuredKernels::*measured;
        GroupLink LinkClasses::*link;
        const char* name;
        Work planned;
    };
    const Collective collectives[] = {
        {&MeasuredKernels::tensorComm, &LinkClasses::tensor, "tensor-parallel",
         [](const CostModel& model, const JobSpec& spec, int stage) {
             const StageWork w = model.stageWork(stage);
             return spec.parallel.microbatches * (w.tensorComm + w.tensorCommHidden);
         }},
        {&MeasuredKernels::dataComm, &LinkClasses::data, "data-parallel",
         [](const CostModel& model, const JobSpec&, int stage) {
             const DataParallelCosts dp = model.dataParallelCosts(stage);
             return dp.reduce + dp.gather + dp.layerGathers;
         }},
        {&MeasuredKernels::expertComm, &LinkClasses::expert, "expert-parallel",
         [](const CostModel& model, const JobSpec& spec, int stage) {
             return spec.parallel.microbatches * model.stageWork(stage).expertComm;
         }},
    };
    for (const bool inside : {true, false}) {
        std::vector<const Collective*> carried;
        std::string names;
        for (const Collective& c : collectives) {
            bool here = true;
            for (const MeasuredRun& run : runs)
                here = here && (linkClasses(Mesh(run.spec.parallel), run.spec.cluster).*c.link).insideDomain == inside;
            if (here && measuredOf(c.measured) > 0) {
                carried.push_back(&c);
                names += (names.empty() ? "" : " and ") + std::string(c.name);
            }
        }
        if (carried.empty())
            continue;
        const Work planned = [&carried](const CostModel& model, const JobSpec& spec, int stage) {
            double sum = 0;
            for (const Collective* c : carried)
                sum += c->planned(model, spec, stage);
            return sum;
        };
        double measured = 0;
        for (const Collective* c : carried)
            measured += measuredOf(c->measured);
        const double before = plannedWith(runs, cal, planned);
        if (before <= 0)
            continue;
        const LinkPerformance& link = table.link(inside);
        const double fitted = fitRate(
            runs, cal, inside ? &CalibrationSpec::intraBandwidth : &CalibrationSpec::interBandwidth, link.busBandwidth,
            measured, planned, std::string(inside ? "intra" : "inter") + "-node bus bandwidth");
        result.report.push_back(names + " collectives: " + ms(measured) + " per step over the traced stages, " +
                                ms(before) + " planned from the table: " + (inside ? "intra" : "inter") +
                                "-node bus bandwidth " + f3(link.busBandwidth / 1e9) + " -> " + f3(fitted / 1e9) +
                                " GB/s");
    }
    cal.source = sourcesOf(runs);
    checkBounds(runs, cal, "fitted to their kernels");
    return result;
}

}  // namespace

CalibrationResult calibrate(const std::vector<MeasuredRun>& runs)
{
    if (runs.empty())
        throw std::invalid_argument("give at least one session to calibrate from");
    const std::string& kind = runs.front().spec.cluster.device.kind;
    for (const MeasuredRun& run : runs)
        if (run.spec.cluster.device.kind != kind)
            throw std::invalid_argument(run.source + " ran on '" + run.spec.cluster.device.kind + "', " +
                                        runs.front().source + " on '" + kind +
                                        "': calibrate one device kind at a time");
    if (std::all_of(runs.begin(), runs.end(), [](const MeasuredRun& run) { return !run.stageKernels.empty(); }))
        return calibrateFromKernels(runs);
    double measured = 0, planned = 0;
    double volume = 0, seconds = 0;
    int spans = 0;
    bool insideDomain = true;
    for (const MeasuredRun& run : runs) {
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
    }
    if (measured <= 0 || planned <= 0)
        throw std::invalid_argument(runs.front().source + " holds no forward or backward spans to fit the device to");

    const Performance table = tableOf(runs);

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
    const std::string names = sourcesOf(runs);
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
    checkBounds(runs, cal, "a device at " + g3(1.0 / slowdown) + " of its table's");
    return result;
}

}  // namespace meshbench::plan
