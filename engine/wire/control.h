#pragma once
// The engine's control and live-feed formats, spoken between meshbench-engine serve and its
// clients (the GUI, scripts).
//
// Control (ZeroMQ ROUTER on the engine; clients use DEALER or REQ): a request is one frame holding
// a JSON object {"v": 1, "id": ANY, "op": NAME, ...arguments}; the reply is one frame
// {"v": 1, "id": the request's id, "ok": true, ...results} or {"v": 1, "id": ..., "ok": false,
// "error": "what is wrong and how to fix it"}. Operations and their arguments:
//   hello                                   -> version, live (the feed's endpoint)
//   plan     job: OBJECT                    -> plan: the plan's JSON, or ok false with errors
//   submit   job: OBJECT, steps?: N, one_device?: BOOL -> job: "job-N", session: PATH
//   stop     source: "job-N"
//   jobs                                    -> jobs: [{source, state, step, session, cause, lost}]
//   sessions dir?: PATH                     -> sessions: [{path, name, created_ns, layout, outcome, steps, final_loss}]
//   open     session: PATH, speed?: X       -> replay: "replay-N" (starts re-publishing it)
//   seek     source: "replay-N", step: N
//   pause / resume   source: "replay-N"
//   speed    source: "replay-N", speed: X
//   close    source: "replay-N"
// Versioned: a request with another "v" is refused with the version this engine speaks.
//
// Live feed (ZeroMQ PUB): two frames, a topic "<kind>/<source>" (subscribe by prefix: "step/",
// "step/job-3") and a payload. Kinds: step, memory (live::toJson), job (state changes and
// progress), log, and spans, whose payload is a telemetry batch (wire::encodeBatch) of a rank's
// spans, decimated for the timeline. Sources are "job-N" (a run) and "replay-N" (a replay). And
// "subscribed/engine", {"topic": PREFIX}, sent on each subscription as the engine takes it in: a
// client that waits for it knows it gets everything published after (a PUB drops what comes before
// a subscription arrives), e.g. before it submits a job it means to watch from the start.

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace meshbench::wire {

constexpr int kControlVersion = 1;
// A request is a job spec at most, far below this; the engine's control socket hangs up on a client
// whose frame claims more (ZMQ_MAXMSGSIZE), authenticated or not, before it buffers any of it.
constexpr std::size_t kMaxRequestBytes = std::size_t(1) << 20;
// A reply may carry a plan's op list or a long session listing.
constexpr std::size_t kMaxReplyBytes = std::size_t(16) << 20;

enum class ControlOp { Hello, Plan, Submit, Stop, Jobs, Sessions, Open, Seek, Pause, Resume, Speed, Close };
std::string_view controlOpName(ControlOp op);

struct ControlRequest {
    nlohmann::json id;  // echoed in the reply; null when the request had none
    ControlOp op = ControlOp::Hello;
    nlohmann::json args;  // the whole request object
};

// clang-tidy 14 follows json's noexcept default constructor into a throw it cannot reach (the
// branch for a type other than null).
// NOLINTNEXTLINE(bugprone-exception-escape)
struct ParsedControl {
    std::optional<ControlRequest> request;
    std::string error;  // when the frame is not a valid request
    nlohmann::json id;  // the request's id if it could be read, for the error reply
};
// Never throws: anything malformed becomes `error`.
ParsedControl parseControlRequest(std::string_view frame);

nlohmann::json controlReply(const nlohmann::json& id, nlohmann::json results = nlohmann::json::object());
nlohmann::json controlError(const nlohmann::json& id, const std::string& error);

enum class LiveKind { Step, Memory, Job, Log, Spans, Subscribed };
// The source of the engine's own messages (subscribed).
constexpr std::string_view kEngineSource = "engine";
std::string_view liveKindName(LiveKind kind);
std::string liveTopic(LiveKind kind, std::string_view source);

}  // namespace meshbench::wire
