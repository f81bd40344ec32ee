// plan::calibrate and the bounds it checks its fit against (calibrationBoundsErrors), on measured
// runs made up here from the planner's own figures for a one-device layout, so that what the fit
// must find is known without running anything.

#include "plan/calibration.h"
#include "plan/cost_model.h"
#include "plan/device_model.h"
#include "plan/mesh.h"
#include "plan/planner.h"

#include <QtTest>

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
