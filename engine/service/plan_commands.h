#pragma once
// `meshbench-engine plan` and `meshbench-engine search`.

#include "plan/job_spec.h"

#include <optional>
#include <string>
#include <vector>

namespace meshbench::service {

struct SpecFile {
    plan::JobSpec spec;
    std::string text;   // the file as written
};
// Reads and checks a job spec file; prints the errors (as JSON when asked) and returns nullopt
// when it cannot be used. layoutMustHold: the parallel layout must be valid too (not for search).
std::optional<SpecFile> loadSpecFile(const std::string& path, bool json, bool layoutMustHold);

// Reads a calibration profile (`calibrate --out`) into spec.cluster.calibration; prints what is
// wrong and returns false when it cannot be used.
bool applyProfileFile(const std::string& path, plan::JobSpec& spec);

// Each takes the arguments after the command name and returns the process exit status:
// 0 done, 1 the job spec is wrong (reported), 2 the command line is wrong (reported).
int runPlanCommand(const std::vector<std::string>& args);
int runSearchCommand(const std::vector<std::string>& args);

}  // namespace meshbench::service
