#pragma once
// The one way JSON leaves the engine (command output, control replies, the live feed, exports).
// Text from outside — SQLite's messages about a corrupt file, a path, a launcher's output — may hold
// bytes that are not UTF-8, which nlohmann-json refuses to serialise (type_error 316). Here they
// become U+FFFD, so one bad byte costs a character, not the reply.

#include <nlohmann/json.hpp>

#include <string>

namespace meshbench::wire {

// `indent` as for nlohmann::json::dump: -1 for one line.
std::string jsonText(const nlohmann::json& value, int indent = -1);

}  // namespace meshbench::wire
