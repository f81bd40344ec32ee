#include "live/session_spec.h"

namespace meshbench::live {

plan::JobSpec sessionSpecAsRun(const store::SessionReader& reader, const std::string& session)
{
    const plan::LoadResult loaded = plan::parseJobSpec(reader.header().jobSpec);
    if (!loaded.valid()) {
        const plan::SpecError first = loaded.errors.empty() ? plan::SpecError{"", "unknown"} : loaded.errors.front();
        throw store::StoreError((session.empty() ? "" : session + ": ") +
                                "the session's job spec no longer passes validation (" +
                                (first.path.empty() ? "" : first.path + ": ") + first.message +
                                "); the file is damaged, or was written by an engine with other rules");
    }
    return plan::specAsRun(*loaded.spec, reader.header().ranks.size());
}

}  // namespace meshbench::live
