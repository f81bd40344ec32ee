#pragma once
// `meshbench-engine run`: launch a job, show its progress, store its session, print a summary.

#include "command_line.h"

#include <string>

namespace meshbench::service {

// Exit status: 0 the job completed; 1 the job spec is wrong (nothing launched); 2 the command
// line is wrong; 3 the job failed; 4 it was stopped; 5 it could not be started (session file,
// collector or launcher). The session is stored in every case from 3 on.
Command addRunCommand(CLI::App& engine);

// Where meshbench-agent is: $MESHBENCH_AGENT, else beside this executable, else on PATH.
std::string agentExecutable();

}  // namespace meshbench::service
