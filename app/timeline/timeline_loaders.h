#pragma once
// Filling a TimelineStore from a stored session or from the planner's simulated schedule. Qt-free,
// so a caller may build a large session's timeline on a worker thread and hand it to TimelineData.

#include "timeline/timeline_store.h"

#include "plan/mesh.h"
#include "plan/planner.h"
#include "store/session_store.h"

#include <optional>
#include <utility>
#include <vector>

namespace meshbench::app {

// Row labels and stages from the session's rank table or from a mesh.
std::vector<RowInfo> rowsForRanks(const std::vector<store::RankInfo>& ranks);
std::vector<RowInfo> rowsForMesh(const plan::Mesh& mesh);

// The session's spans that overlap [window.first, window.second] (all spans without a window), with
// one row per rank of its header. Throws store::StoreError when the file turns out to be corrupt.
TimelineStore loadSessionTimeline(const store::SessionReader& reader,
                                  std::optional<std::pair<std::int64_t, std::int64_t>> window = std::nullopt);

// The predicted timeline of one step: each pipeline op of the simulation as a span (step 0,
// starting at time 0), then the step's data-parallel reduction and optimizer when the plan priced
// them. PerStage gives one row per stage (its RowInfo::rank is the stage and a span's peer is the
// peer stage); PerRank copies a stage's ops onto each of its ranks (peer is then the peer rank).
enum class PlanRows { PerStage, PerRank };

// Simulator units to ns: cost-model plans simulate in seconds (1e9); unit-cost plans have no time,
// so one unit is drawn as one millisecond (1e6).
double planNsPerUnit(const plan::Plan& plan);
// The ops of a schedule that run as overlapped F&B pairs, for TimelineStore::setOverlappedOps.
TimelineStore::OverlappedOps overlappedOpsOf(const plan::Schedule& schedule);
// nsPerUnit <= 0 takes planNsPerUnit(plan).
TimelineStore loadPlanTimeline(const plan::Plan& plan, PlanRows rows = PlanRows::PerStage, double nsPerUnit = 0);

}  // namespace meshbench::app
