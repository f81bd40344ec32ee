#pragma once
// What every meshbench-engine command does with its arguments.

#include <atomic>
#include <string>

namespace meshbench::service {

// Prints the message and the command's usage line to stderr; returns exit status 2.
int usageError(const std::string& message, const char* usage);
// A finite number >= 0 written entirely in `text`.
bool parsePositive(const std::string& text, double& out);
// A flag that SIGINT, SIGTERM or SIGHUP raises, for a command to end cleanly: a thread takes the
// signals. Call it before any other thread starts, so that every thread inherits the blocked mask.
const std::atomic<bool>& stopOnSignals();

}  // namespace meshbench::service
