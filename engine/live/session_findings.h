#pragma once
// The findings of a stored session as a whole: its steps and memory played through the aggregator
// (SessionReplay), its ranks' compute from its spans, and, for an imported trace, its device time
// and kernels (DeviceEvidence). For `meshbench-engine import`'s summary and whoever shows a session
// from its file.

#include "findings.h"

#include "store/session_store.h"

#include <string>
#include <vector>

namespace meshbench::live {

// Throws store::StoreError (naming `session` when given) for a file that turns out corrupt or a
// stored spec that no longer validates.
std::vector<Finding> sessionFindings(const store::SessionReader& reader, const std::string& session = {});

}  // namespace meshbench::live
