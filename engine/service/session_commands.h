#pragma once
// `meshbench-engine sessions` and `meshbench-engine export`.

#include "command_line.h"

#include "store/session_store.h"

#include <nlohmann/json.hpp>

#include <string>

namespace meshbench::service {

// A folder's sessions as `sessions --json` prints them and the control protocol's "sessions"
// answers: {"sessions": [...], "unreadable": [{"path", "error"}]}.
nlohmann::json sessionListingJson(const store::SessionListing& listing);

// Exit status: 0 done; 1 a session could not be read, in part or at all (reported); 2 the command
// line is wrong; 5 an output could not be written.
Command addSessionsCommand(CLI::App& engine);
Command addExportCommand(CLI::App& engine);

}  // namespace meshbench::service
