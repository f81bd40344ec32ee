#pragma once
// `meshbench-engine plan` and `meshbench-engine search`.

#include "command_line.h"

#include "plan/job_spec.h"

#include <optional>
#include <string>

namespace meshbench::service {

struct SpecFile {
    plan::JobSpec spec;
    std::string text;  // the file as written
};
// Reads and checks a job spec file; prints the errors (as JSON when asked) and returns nullopt
// when it cannot be used. layoutMustHold: the parallel layout must be valid too (not for search).
std::optional<SpecFile> loadSpecFile(const std::string& path, bool json, bool layoutMustHold);

// Reads a calibration profile (`calibrate --out`) into spec.cluster.calibration; prints what is
// wrong (as a JSON document on stdout when asked) and returns false when it cannot be used.
bool applyProfileFile(const std::string& path, plan::JobSpec& spec, bool json = false);

// Exit status: 0 done, 1 the job spec or the profile is wrong (reported), 3 an internal error; the
// engine's app reports a wrong command line (status 2). With --json each prints one document.
Command addPlanCommand(CLI::App& engine);
Command addSearchCommand(CLI::App& engine);

}  // namespace meshbench::service
