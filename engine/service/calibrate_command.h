#pragma once
// `meshbench-engine calibrate`: fit the device's and links' rates to sessions' measured spans.

#include <string>
#include <vector>

namespace meshbench::service {

// Exit status: 0 done; 1 a session cannot be read or holds nothing to fit (reported); 2 the
// command line is wrong; 5 the profile cannot be written.
int runCalibrateCommand(const std::vector<std::string>& args);

}  // namespace meshbench::service
