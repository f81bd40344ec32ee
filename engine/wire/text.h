#pragma once
// Text that leaves the engine: UTF-8 checked and repaired, and JSON that cannot fail on bad bytes.
// Text from outside — SQLite's messages about a corrupt file, a path, a launcher's output, a damaged
// session's columns — may hold bytes that are not UTF-8. nlohmann-json refuses to serialise those
// (type_error 316) and CSV readers choke on them; here each becomes U+FFFD, so one bad byte costs a
// character, not the reply or the file.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace meshbench::wire {

// Length of the well-formed UTF-8 sequence at `at` (RFC 3629 section 4: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 if the bytes there do not start one; `left` >= 1.
std::size_t wellFormedUtf8Length(const std::uint8_t* at, std::size_t left);
// Offset of the first byte that does not start a well-formed sequence, or text.size().
std::size_t firstInvalidUtf8(std::span<const std::uint8_t> text);
// `text` with each byte that does not start a well-formed sequence replaced by U+FFFD.
std::string validUtf8(std::string_view text);

// The one way JSON leaves the engine (command output, control replies, the live feed, exports).
// `indent` as for nlohmann::json::dump: -1 for one line.
std::string jsonText(const nlohmann::json& value, int indent = -1);

}  // namespace meshbench::wire
