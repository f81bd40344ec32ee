#pragma once
// `meshbench-engine calibrate`: fit the device's and links' rates to sessions' measured spans.

#include "command_line.h"

namespace meshbench::service {

// Exit status: 0 done; 1 a session cannot be read, is damaged, contradicts itself or holds nothing
// to fit, or the fit is outside the device's bounds (reported; nothing written); 2 the command line
// is wrong; 5 the profile cannot be written.
Command addCalibrateCommand(CLI::App& engine);

}  // namespace meshbench::service
