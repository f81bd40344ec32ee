#pragma once
// Calibration: the device's and links' rates fitted to what a run measured, so that plans of other
// layouts of the same machine predict what they will measure. The session store's reader fills
// MeasuredRun; this layer only fits.

#include "job_spec.h"

#include <string>
#include <vector>

namespace meshbench::plan {

// One collective a rank timed: a dp-reduce span with the bytes it moved.
struct MeasuredCollective {
    double bytes = 0;
    double seconds = 0;
};

// One pipeline stage's device time per step by the kind of kernel that ran (the mean over its traced
// ranks and the counted steps), from a profiler's kernels.
struct MeasuredKernels {
    int ranks = 0;  // ranks of the stage whose kernels were traced; 0: none, the stage is not fitted
    double gemm = 0;
    double attention = 0;
    double streaming = 0;  // other compute: element-wise kernels
    double tensorComm = 0;
    double dataComm = 0;
    double expertComm = 0;
};

struct MeasuredRun {
    std::string source;  // the session's file name
    JobSpec spec;
    // Per pipeline stage, the F, B and W seconds its ranks measured per step (their mean over
    // ranks and steps).
    std::vector<double> stageComputeSeconds;
    std::vector<MeasuredCollective> reductions;  // every rank's dp-reduce spans
    double stepSeconds = 0;                      // median measured step
    // Per pipeline stage, when the session holds a trace's kernels (imported): then each rate is
    // fitted to its own kernels. Empty for a run of our agent, whose ops are timed but not its kernels.
    std::vector<MeasuredKernels> stageKernels;
};

struct CalibrationResult {
    CalibrationSpec calibration;
    // Each fitted figure beside the table's, and how far the uncalibrated plan was from the run.
    std::vector<std::string> report;
};

// The fitted speed is found to within this share of the speed that meets the runs' steps (the
// bisection stops when its bracket is this narrow in log speed).
inline constexpr double kFitPrecision = 1e-4;

// When every run has kernels (stageKernels), the fit is each rate to its own kind of
// kernel: the memory bandwidth to the element-wise kernels, the attention and matmul efficiencies to
// the attention and GEMM kernels, and each network tier's bus bandwidth to the tensor-, data- and
// expert-parallel collectives its groups ran; a rate whose kernels were not traced keeps the table's.
// Otherwise the fit is from the ops' spans: one speed factor for the device (its GEMM, attention and streaming rates
// and op overhead scale together: measured compute over planned compute, summed over every stage of every run) and,
// where the runs' dp-reduce spans allow, the bus bandwidth of the tier their data-parallel groups use. Throws
// std::invalid_argument naming the run when there is nothing to fit, when the steps need a speed far from the one the
// spans show (kStepsFromSpans in calibration.cpp), and when a fitted rate is outside what the device can be
// (calibrationBoundsErrors, device_model.h).
CalibrationResult calibrate(const std::vector<MeasuredRun>& runs);

}  // namespace meshbench::plan
