#pragma once
// `meshbench-engine import`: other stacks' traces into a session (engine/import).

#include "command_line.h"

namespace meshbench::service {

// Exit status: 0 done; 1 an input is wrong (named, with the event and the fix; nothing written);
// 2 the command line is wrong; 4 stopped by a signal (nothing written).
Command addImportCommand(CLI::App& engine);

}  // namespace meshbench::service
