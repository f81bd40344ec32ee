// plan::calibrate and the bounds it checks its fit against (calibrationBoundsErrors), on measured
// runs made up here from the planner's own figures for a one-device layout, so that what the fit
// must find is known without running anything.

#include "plan/calibration.h"
#include "plan/cost_model.h"
#include "plan/device_model.h"
#include "plan/mesh.h"
#include "plan/planner.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

using namespace meshbench::plan;

namespace {

// The demo model as one device runs it.
JobSpec oneDevice()
{
    std::ifstream file(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    const LoadResult loaded = loadJobSpec(nlohmann::json::parse(file));
    if (!loaded.valid())
        qFatal("demo.json does not load");
    return singleDeviceSpec(*loaded.spec);
}

// A run of `spec` on a device `slowdown` times slower than its table in every rate: its spans and
// its step take that many times what the table plans.
MeasuredRun runAt(const JobSpec& spec, double slowdown)
{
    const Mesh mesh(spec.parallel);
    const CostModel model(spec, linkClasses(mesh, spec.cluster));
    MeasuredRun run;
    run.source = "made-up";
    run.spec = spec;
    run.stageComputeSeconds = {slowdown * spec.parallel.microbatches * model.stageWork(0).total()};
    run.stepSeconds = slowdown * makePlan(spec).step.total;
    return run;
}

JobSpec resourceJob(const char* name)
{
    std::ifstream file(std::string(MESHBENCH_SOURCE_DIR "/resources/jobs/") + name);
    const LoadResult loaded = loadJobSpec(nlohmann::json::parse(file));
    if (!loaded.valid())
        qFatal("%s does not load", name);
    return *loaded.spec;
}

// A traced run of `spec` on a device and network whose true rates are `truth`: each stage's kernels
// by kind take what the planner prices them at with those rates (`traced` stages only).
MeasuredRun tracedRunAt(const JobSpec& spec, const CalibrationSpec& truth, const std::vector<bool>& traced)
{
    JobSpec real = spec;
    real.cluster.calibration = truth;
    const Mesh mesh(real.parallel);
    const CostModel model(real, linkClasses(mesh, real.cluster));
    MeasuredRun run;
    run.source = "traced";
    run.spec = spec;
    run.stepSeconds = makePlan(real).step.total;
    const double m = real.parallel.microbatches;
    for (int s = 0; s < real.parallel.pp; ++s) {
        const StageWork w = model.stageWork(s);
        const DataParallelCosts dp = model.dataParallelCosts(s);
        MeasuredKernels k;
        if (traced[std::size_t(s)])
            k = {1,
                 m * w.gemm,
                 m * w.attention,
                 m * w.streaming,
                 m * (w.tensorComm + w.tensorCommHidden),
                 dp.reduce + dp.gather + dp.layerGathers,
                 m * w.expertComm};
        run.stageKernels.push_back(k);
    }
    return run;
}

bool throwsSaying(const MeasuredRun& run, const char* words)
{
    try {
        calibrate({run});
    } catch (const std::invalid_argument& e) {
        if (QString(e.what()).contains(words))
            return true;
        qWarning("%s", e.what());
    }
    return false;
}

}  // namespace

class TestCalibration : public QObject {
    Q_OBJECT
private slots:
    void aSlowerDeviceIsFoundAtThatSlowdown()
    {
        const JobSpec spec = oneDevice();
        const Performance table = devicePerformance(spec.cluster, 1);
        for (double slowdown : {0.8, 1.0, 3.0, 40.0}) {
            const CalibrationSpec fitted = calibrate({runAt(spec, slowdown)}).calibration;
            QVERIFY2(std::abs(std::log(table.device.memoryBandwidth / fitted.memoryBandwidth / slowdown)) <=
                         kFitPrecision,
                     qPrintable(QString::number(slowdown)));
            QVERIFY(std::abs(std::log(table.device.matmulEfficiency / fitted.matmulEfficiency / slowdown)) <=
                    kFitPrecision);
            QVERIFY(std::abs(std::log(fitted.kernelOverhead / table.device.kernelOverhead / slowdown)) <=
                    kFitPrecision);
        }
    }

    // Faster than its peak, or slower than the floor: refused, not capped (the old fit capped the
    // GEMM efficiency at 1 and wrote any memory bandwidth).
    void aFitOutsideTheDevicesBoundsIsRefused()
    {
        const JobSpec spec = oneDevice();
        const CalibrationBounds bounds = calibrationBounds(spec.cluster);
        const Performance table = devicePerformance(spec.cluster, 1);
        // The fastest allowed: the first rate to reach its peak.
        const double fastest = std::max(table.device.matmulEfficiency / bounds.matmulEfficiency.highest,
                                        table.device.memoryBandwidth / bounds.memoryBandwidth.highest);
        QVERIFY(fastest < 1.0);
        QVERIFY(throwsSaying(runAt(spec, fastest / 1.01), "is above"));
        QVERIFY(throwsSaying(runAt(spec, kSlowestCalibration * 1.01), "is below"));
        QVERIFY(throwsSaying(runAt(spec, 1e-6), "is above"));
    }

    void stepsFarFromTheSpansAreRefused()
    {
        MeasuredRun run = runAt(oneDevice(), 1.0);
        run.stepSeconds *= 1000;  // the spans' compute is a thousandth of the step
        QVERIFY(throwsSaying(run, "the steps and the spans disagree"));
        run = runAt(oneDevice(), 1.0);
        run.stageComputeSeconds[0] *= 1000;
        QVERIFY(throwsSaying(run, "the steps and the spans disagree"));
    }

    void aRunWithoutAFiniteStepOrComputeIsRefused()
    {
        for (double step : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
            MeasuredRun run = runAt(oneDevice(), 1.0);
            run.stepSeconds = step;
            QVERIFY2(throwsSaying(run, "no measured step time"), qPrintable(QString::number(step)));
        }
        MeasuredRun run = runAt(oneDevice(), 1.0);
        run.stageComputeSeconds[0] = std::nan("");
        QVERIFY(throwsSaying(run, "its spans are damaged"));
    }

    // Kernels measured by kind (an imported trace's) give each rate apart: the fit finds the rates the
    // run's device and network really had, each to the fit's precision, though every one differs from
    // the table by its own factor. Mixtral's layout puts its tensor-parallel groups inside a node and its
    // data-parallel groups across nodes, so both tiers are fitted.
    void kernelsFitEachRateToItsOwnKernels()
    {
        const JobSpec spec = resourceJob("mixtral-8x7b.json");
        const Performance table = devicePerformance(spec.cluster, ranksPerNode(spec));
        CalibrationSpec truth;
        truth.source = "truth";
        truth.matmulEfficiency = 0.8 * table.device.matmulEfficiency;
        truth.attentionEfficiency = 0.55 * table.device.attentionEfficiency;
        truth.memoryBandwidth = 0.7 * table.device.memoryBandwidth;
        truth.intraBandwidth = 0.75 * table.intra.busBandwidth;
        truth.interBandwidth = 0.5 * table.inter.busBandwidth;
        const auto near = [](double fitted, double expected) {
            return std::abs(std::log(fitted / expected)) <= kFitPrecision;
        };
        // The kinds of kernel split a stage's compute whole, whatever is recomputed.
        for (const Recompute recompute : {Recompute::None, Recompute::Selective, Recompute::Full}) {
            JobSpec variant = spec;
            variant.parallel.recompute = recompute;
            const CostModel model(variant, linkClasses(Mesh(variant.parallel), variant.cluster));
            for (int s = 0; s < variant.parallel.pp; ++s) {
                const StageWork w = model.stageWork(s);
                QVERIFY(std::abs(w.gemm + w.attention + w.streaming - w.compute) <= 1e-12 * w.compute);
            }
        }
        for (const std::vector<bool>& traced : {std::vector<bool>{true, true}, std::vector<bool>{false, true}}) {
            const CalibrationResult result = calibrate({tracedRunAt(spec, truth, traced)});
            const CalibrationSpec& fitted = result.calibration;
            for (const std::string& line : result.report)
                qInfo("%s", line.c_str());
            QVERIFY(near(fitted.matmulEfficiency, truth.matmulEfficiency));
            QVERIFY(near(fitted.attentionEfficiency, truth.attentionEfficiency));
            QVERIFY(near(fitted.memoryBandwidth, truth.memoryBandwidth));
            QVERIFY(near(fitted.intraBandwidth, truth.intraBandwidth));
            QVERIFY(near(fitted.interBandwidth, truth.interBandwidth));
            QCOMPARE(fitted.kernelOverhead, -1.0);  // the table's: no kernel kind measures it apart
        }

        // A kind of kernel the trace does not hold keeps the table's rate, and says so.
        MeasuredRun run = tracedRunAt(spec, truth, {true, true});
        for (MeasuredKernels& k : run.stageKernels)
            k.attention = 0;
        const CalibrationResult result = calibrate({run});
        QCOMPARE(result.calibration.attentionEfficiency, 0.0);
        QVERIFY(std::any_of(result.report.begin(), result.report.end(), [](const std::string& line) {
            return line == "attention kernels: none traced; attention efficiency kept from the table";
        }));

        // Kernels a device at its rates could not run so fast: refused, naming the rate and its bound.
        run = tracedRunAt(spec, truth, {true, true});
        for (MeasuredKernels& k : run.stageKernels)
            k.gemm /= 2;
        QVERIFY(throwsSaying(run, "matmul_efficiency"));
    }

    void boundsNameEachRateOutsideThem()
    {
        const JobSpec spec = oneDevice();
        const CalibrationBounds bounds = calibrationBounds(spec.cluster);
        CalibrationSpec cal;
        cal.source = "x";
        cal.matmulEfficiency = 0.5 * (bounds.matmulEfficiency.lowest + bounds.matmulEfficiency.highest);
        cal.memoryBandwidth = 0.5 * (bounds.memoryBandwidth.lowest + bounds.memoryBandwidth.highest);
        cal.kernelOverhead = 0.5 * bounds.kernelOverhead.highest;
        QVERIFY(calibrationBoundsErrors(spec.cluster, cal).empty());
        cal.memoryBandwidth = bounds.memoryBandwidth.highest * 1.01;
        cal.attentionEfficiency = std::nan("");
        cal.kernelOverhead = std::numeric_limits<double>::infinity();
        cal.intraBandwidth = bounds.intraBandwidth.lowest * 0.99;
        const std::vector<SpecError> errors = calibrationBoundsErrors(spec.cluster, cal);
        QStringList paths;
        for (const SpecError& e : errors)
            paths << QString::fromStdString(e.path);
        QCOMPARE(paths, QStringList({"attention_efficiency", "memory_bandwidth_GBps", "kernel_overhead_us",
                                     "intra_node_bus_bandwidth_GBps"}));
    }
};

QTEST_GUILESS_MAIN(TestCalibration)
#include "tst_calibration.moc"
