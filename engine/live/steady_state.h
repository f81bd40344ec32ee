#pragma once
// How steady-state figures are taken from a run's steps, for every reader of a session alike
// (calibration, findings, Sessions > Compare): the first step is warm-up, and a figure over steps
// is their median.

#include <cstddef>
#include <vector>

namespace meshbench::live {

// The first step of a run pays for first-touch allocation and cold caches (a run resumed from a
// checkpoint too, whatever the step's number): it is warm-up, left out of steady-state figures.
constexpr std::size_t kWarmupSteps = 1;

// Index of the first step a figure over `stored` steps (in step order) is taken from: the first
// after warm-up, or the first of all for a run that stored no more than its warm-up (a figure from
// it is all there is).
constexpr std::size_t firstSteadyStep(std::size_t stored) { return stored > kWarmupSteps ? kWarmupSteps : 0; }

// The median of non-empty values: the middle one, or the mean of the two middle ones.
double median(std::vector<double> values);

}  // namespace meshbench::live
