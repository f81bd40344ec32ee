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

struct MeasuredRun {
    std::string source;  // the session's file name
    JobSpec spec;
    // Per pipeline stage, the F, B and W seconds its ranks measured per step (their mean over
    // ranks and steps).
    std::vector<double> stageComputeSeconds;
    std::vector<MeasuredCollective> reductions;  // every rank's dp-reduce spans
    double stepSeconds = 0;                      // median measured step
};

struct CalibrationResult {
    CalibrationSpec calibration;
    // Each fitted figure beside the table's, and how far the uncalibrated plan was from the run.
    std::vector<std::string> report;
};

// The fitted speed is found to within this share of the speed that meets the runs' steps (the
// bisection stops when its bracket is this narrow in log speed).
inline constexpr double kFitPrecision = 1e-4;

// Fits one speed factor for the device (its GEMM, attention and streaming rates and op overhead
// scale together: measured compute over planned compute, summed over every stage of every run)
// and, where the runs' dp-reduce spans allow, the bus bandwidth of the tier their data-parallel
// groups use. Throws std::invalid_argument naming the run when there is nothing to fit, when the
// steps need a speed far from the one the spans show (kStepsFromSpans in calibration.cpp), and when
// a fitted rate is outside what the device can be (calibrationBoundsErrors, device_model.h).
CalibrationResult calibrate(const std::vector<MeasuredRun>& runs);

}  // namespace meshbench::plan
