#pragma once
// What the session comparison reads of one stored session: the step metrics as stored, the bubble
// measured from its spans per step and per stage (played through live::SessionReplay, as the
// Monitor's replay does), peak memory per rank, and its plan's predictions.

#include "wire/telemetry.h"

#include <QString>

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace meshbench::store {
class SessionReader;
}

namespace meshbench::app {

// Step figures come from the step metrics (one record per step; a step reported twice counts once).
// The means leave out the warm-up, the first stored step, whenever later steps exist
// (live/steady_state.h).
struct SessionFigures {
    QString name;
    QString layout;
    std::map<std::int32_t, wire::StepMetricsRecord> steps;  // by step, as stored
    std::optional<double> meanStepSeconds;                  // mean of end - begin
    std::optional<double> tokensPerSecond;                  // tokens over the steps' summed time
    std::optional<double> finalLoss;                        // the last step's loss
    // Per rank (index = rank): the largest, over steps, of the sum over categories of each
    // category's peak in that step (its current bytes where a sample has no peak); nullopt for a
    // rank without samples.
    std::vector<std::optional<std::int64_t>> peakMemoryBytes;
};
// Throws store::StoreError when the file turns out to be corrupt.
SessionFigures sessionFigures(const store::SessionReader& session);

// A step's figures as the comparison plots them; empty where the record has none.
std::optional<double> stepSeconds(const wire::StepMetricsRecord& step);
std::optional<double> stepTokensPerSecond(const wire::StepMetricsRecord& step);

struct ComparedSession {
    QString path;
    SessionFigures figures;
    // The measured bubble (plan::measuredBubble over every rank, as the Monitor shows it) of each
    // aggregated step, and its mean over the steps after the warm-up (as above).
    std::map<std::int32_t, double> stepBubble;
    std::optional<double> meanBubble;
    // Per stage: the mean over the same steps of the measured stage bubble; empty for a stage
    // without spans.
    std::vector<std::optional<double>> stageBubble;
    // The plan of the spec the session ran; all empty, with `planProblem` saying why, when the
    // stored spec no longer loads.
    std::optional<double> plannedStepSeconds;
    std::optional<double> plannedTokensPerSecond;
    std::optional<double> plannedBubble;
    std::vector<std::optional<double>> plannedStageBubble;
    std::vector<std::optional<double>> plannedPeakBytes;  // per rank: its stage's planned total
    QString planProblem;
};
// Reads the whole session. Throws store::StoreError when the file is unreadable or corrupt.
ComparedSession loadComparedSession(const QString& path);

// The name session `i` of a comparison goes by: A, B, ... Z, then 27, 28, ...
QString sessionLetter(int i);

}  // namespace meshbench::app
