#pragma once
// How a rank hands a trace file to the engine for import into its running session: one log line,
// this prefix and the file's absolute path (the Python client's torch.profiler handler writes it,
// agent/python/meshbench/profiler.py). A log line keeps it in the session, and in words, when the
// engine cannot import the file (it is on another host's disk, say).

#include <optional>
#include <string>
#include <string_view>

namespace meshbench::wire {

inline constexpr std::string_view kTraceHandOverPrefix = "meshbench-import: ";

// The path a log line hands over, or nothing for any other line.
inline std::optional<std::string> handedOverTrace(std::string_view logText)
{
    if (!logText.starts_with(kTraceHandOverPrefix) || logText.size() == kTraceHandOverPrefix.size())
        return std::nullopt;
    return std::string(logText.substr(kTraceHandOverPrefix.size()));
}

}  // namespace meshbench::wire
