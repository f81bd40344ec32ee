#pragma once
// Which spec a stored session ran: the one place the engine's replay, the Monitor and the
// workbench's Sessions area ask.

#include "plan/job_spec.h"
#include "store/session_store.h"

#include <string>

namespace meshbench::live {

// The layout a stored session's agents ran: its job spec across its ranks, or one device for a
// --one-device run (plan::specAsRun). Throws store::StoreError, naming `session` when given, when
// the stored spec no longer validates.
plan::JobSpec sessionSpecAsRun(const store::SessionReader& reader, const std::string& session = {});

}  // namespace meshbench::live
