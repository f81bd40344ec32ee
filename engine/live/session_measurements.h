#pragma once
// What a stored session measured, as calibration reads it (plan::calibrate): its spec, each
// stage's F, B and W seconds per step, its dp-reduce spans and its median step. For
// `meshbench-engine calibrate` and the Designer's "Calibrate from Session".

#include "plan/calibration.h"

#include <string>

namespace meshbench::live {

// Throws store::StoreError for a file that cannot be read, is damaged (SQLite's quick_check) or
// whose spec no longer loads, and std::invalid_argument, naming the file, for a session that holds
// nothing to calibrate from (no completed step) or contradicts itself: a step that ends before it
// begins, an op or a step stored twice, a rank's compute spans busy for longer than their step.
// A --one-device session is measured as the one-device layout it ran (plan::specAsRun).
plan::MeasuredRun measureSession(const std::string& path);

}  // namespace meshbench::live
