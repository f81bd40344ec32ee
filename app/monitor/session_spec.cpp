#include "monitor/run_state.h"

namespace meshbench::app {

plan::JobSpec sessionJobSpec(const store::SessionReader& reader)
{
    const plan::LoadResult loaded = plan::parseJobSpec(reader.header().jobSpec);
    if (!loaded.valid())
        throw store::StoreError("the session's job spec no longer passes validation: " +
                                (loaded.errors.empty() ? std::string("unknown") : loaded.errors.front().message));
    return plan::specAsRun(*loaded.spec, reader.header().ranks.size());
}

}  // namespace meshbench::app
