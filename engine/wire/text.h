#pragma once
// Text that enters and leaves the engine: UTF-8 checked and repaired, JSON parsed strictly, and JSON
// written so that it cannot fail on bad bytes.
// Text from outside — SQLite's messages about a corrupt file, a path, a launcher's output, a damaged
// session's columns — may hold bytes that are not UTF-8. nlohmann-json refuses to serialise those
// (type_error 316) and CSV readers choke on them; here each becomes U+FFFD, so one bad byte costs a
// character, not the reply or the file.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::wire {

// Length of the well-formed UTF-8 sequence at `at` (RFC 3629 section 4: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 if the bytes there do not start one; `left` >= 1.
std::size_t wellFormedUtf8Length(const std::uint8_t* at, std::size_t left);
// Offset of the first byte that does not start a well-formed sequence, or text.size().
std::size_t firstInvalidUtf8(std::span<const std::uint8_t> text);
// `text` with each byte that does not start a well-formed sequence replaced by U+FFFD.
std::string validUtf8(std::string_view text);

// Bytes that are not printable UTF-8 (ill-formed sequences, control characters) written as \xNN, so
// that a message quoting input stays readable text.
std::string printableText(std::string_view bytes);

// How deep a document of ours may nest: a job spec or a control request needs a few levels, and
// copying or printing a deeper one recurses once per level.
constexpr int kMaxJsonDepth = 64;
std::string jsonTooDeepMessage();

// A problem in a JSON text: where (a JSON path such as "parallel.dp" or "cluster.x[2].a", where the
// parser was; empty for the document) and what.
struct JsonProblem {
    std::string path;
    std::string message;
};
// The way JSON enters the engine. Refuses what the standard leaves open but a document of ours cannot
// mean: a key given twice in one object (nlohmann-json would keep the last, silently), and nesting
// deeper than kMaxJsonDepth. A syntax error gives its line and column; every message quotes the input
// printably. Never throws: nothing, and the problems, when the text is refused.
std::optional<nlohmann::json> parseStrictJson(std::string_view text, std::vector<JsonProblem>& problems);

// The one way JSON leaves the engine (command output, control replies, the live feed, exports).
// `indent` as for nlohmann::json::dump: -1 for one line.
std::string jsonText(const nlohmann::json& value, int indent = -1);

}  // namespace meshbench::wire
