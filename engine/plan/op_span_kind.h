#pragma once
// A planned pipeline op and the span the agent measures for it: one map, so that the timeline's
// planned rows, the agent's spans and the bubble ratio agree on what each op was doing.

#include "schedule.h"

#include "wire/telemetry.h"

namespace meshbench::plan {

wire::SpanKind spanKindOf(OpKind kind);

}  // namespace meshbench::plan
