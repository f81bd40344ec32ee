#pragma once
// `meshbench-engine plan` and `meshbench-engine search`.

#include <string>
#include <vector>

namespace meshbench::service {

// Each takes the arguments after the command name and returns the process exit status:
// 0 done, 1 the job spec is wrong (reported), 2 the command line is wrong (reported).
int runPlanCommand(const std::vector<std::string>& args);
int runSearchCommand(const std::vector<std::string>& args);

}  // namespace meshbench::service
