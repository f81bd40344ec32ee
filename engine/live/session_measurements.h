#pragma once
// What a stored session measured, as calibration reads it (plan::calibrate): its spec, each
// stage's F, B and W seconds per step, its dp-reduce spans and its median step. For
// `meshbench-engine calibrate` and the Designer's "Calibrate from Session".

#include "plan/calibration.h"

#include <string>

namespace meshbench::live {

// Throws store::StoreError for a file that cannot be read and std::invalid_argument, naming the
// file, for a session that holds nothing to calibrate from (a spec that no longer loads, no
// completed step).
plan::MeasuredRun measureSession(const std::string& path);

}  // namespace meshbench::live
