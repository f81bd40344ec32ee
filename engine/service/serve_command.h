#pragma once
// `meshbench-engine serve` (the daemon for the GUI) and `meshbench-engine replay` (one stored
// session re-published on the live feed).

#include "command_line.h"

namespace meshbench::service {

// Exit status: 0 done; 1 the session cannot be read (replay); 2 the command line is wrong;
// 5 the sockets cannot be bound, or the CURVE keys they need cannot be read.
Command addServeCommand(CLI::App& engine);
Command addReplayCommand(CLI::App& engine);

}  // namespace meshbench::service
