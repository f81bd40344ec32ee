#pragma once
// `meshbench-engine sessions` and `meshbench-engine export`.

#include <string>
#include <vector>

namespace meshbench::service {

// Exit status: 0 done; 1 a session could not be read (reported); 2 the command line is wrong;
// 5 an output could not be written.
int runSessionsCommand(const std::vector<std::string>& args);
int runExportCommand(const std::vector<std::string>& args);

}  // namespace meshbench::service
