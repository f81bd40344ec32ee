// One include, chosen by the test (tests/layering/CMakeLists.txt), compiled with a library's include
// roots: a header of the library itself or of what it links must be found; one from a layer above
// it must not.
#if defined(PROBE_PLAN_OWN)
#include "plan/planner.h"
#elif defined(PROBE_PLAN_STORE)
#include "store/session_store.h"
#elif defined(PROBE_KERNELS_OWN)
#include "kernels/backend.h"
#elif defined(PROBE_KERNELS_AGENT)
#include "agent/runtime/communicator.h"
#elif defined(PROBE_TIMELINE_OWN)
#include "timeline/timeline_store.h"
#elif defined(PROBE_MONITOR)
#include "monitor/run_state.h"
#elif defined(PROBE_LIVE_SERVICE)
#include "service/server.h"
#elif defined(PROBE_IMPORT_OWN)
#include "import/trace_import.h"
#elif defined(PROBE_QT)
#include <qobject.h>
#elif defined(PROBE_AGENT_LAYOUT)
#include "agent/layout/parameters.h"
#elif defined(PROBE_AGENT_PARALLEL)
#include "agent/parallel/tensor_parallel.h"
#elif defined(PROBE_AGENT_MODEL)
#include "agent/model/gpt_model.h"
#elif defined(PROBE_AGENT_DISTRIBUTED)
#include "agent/distributed/pipeline_executor.h"
#elif defined(PROBE_AGENT_TRAIN)
#include "agent/train/trainer.h"
#else
#error "include_probe.cpp: define one PROBE_ macro"
#endif
