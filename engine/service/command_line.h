#pragma once
// What every meshbench-engine command does with its arguments.

#include <string>

namespace meshbench::service {

// Prints the message and the command's usage line to stderr; returns exit status 2.
int usageError(const std::string& message, const char* usage);
// A finite number >= 0 written entirely in `text`.
bool parsePositive(const std::string& text, double& out);

}  // namespace meshbench::service
