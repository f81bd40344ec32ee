#pragma once
// `meshbench-engine import`: other stacks' per-rank traces into an ordinary session. Each file is
// read and analysed on its own (bounded by the largest file, not their sum); the ranks' clocks are
// then aligned from their collectives, partial steps dropped on every rank, the bubble measured per
// stage as the planner defines it, and the session written beside its final name and renamed at
// the end, so a failed import leaves nothing half-written.

#include "read_options.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshbench::import {

struct ImportRequest {
    std::vector<std::string> paths;  // files, or folders whose trace files are all read
    std::optional<std::string> jobPath;
    std::string sessionPath;
    std::string rankFrom;  // a regular expression over the file name; its first group (or match) is the rank
    ReadOptions read;
};

struct ImportResult {
    std::string sessionPath;
    std::vector<std::string> summary;  // lines for the user: what was read, recognised, inferred, dropped
};

// Throws ImportError: the message names the file (and event) and the fix.
ImportResult importTraces(const ImportRequest& request);

}  // namespace meshbench::import
