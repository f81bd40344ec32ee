#include "control.h"

#include "text.h"

#include <array>

namespace meshbench::wire {

namespace {

constexpr std::array<std::pair<ControlOp, std::string_view>, 12> kOps{{
    {ControlOp::Hello, "hello"},
    {ControlOp::Plan, "plan"},
    {ControlOp::Submit, "submit"},
    {ControlOp::Stop, "stop"},
    {ControlOp::Jobs, "jobs"},
    {ControlOp::Sessions, "sessions"},
    {ControlOp::Open, "open"},
    {ControlOp::Seek, "seek"},
    {ControlOp::Pause, "pause"},
    {ControlOp::Resume, "resume"},
    {ControlOp::Speed, "speed"},
    {ControlOp::Close, "close"},
}};

std::string opList()
{
    std::string list;
    for (const auto& [op, name] : kOps)
        list += (list.empty() ? "" : ", ") + std::string(name);
    return list;
}

}  // namespace

std::string_view controlOpName(ControlOp op)
{
    for (const auto& [known, name] : kOps)
        if (known == op)
            return name;
    return "unknown";
}

ParsedControl parseControlRequest(std::string_view frame)
{
    ParsedControl parsed;
    if (frame.size() > kMaxRequestBytes) {
        parsed.error = "the request is " + std::to_string(frame.size()) + " bytes; at most " +
                       std::to_string(kMaxRequestBytes) + " are accepted";
        return parsed;
    }
    std::vector<JsonProblem> problems;
    std::optional<nlohmann::json> strict = parseStrictJson(frame, problems);
    if (!strict) {
        const JsonProblem& first = problems.front();
        parsed.error = "the request is not one JSON object such as {\"v\": 1, \"op\": \"hello\"}: " +
                       (first.path.empty() ? "" : first.path + ": ") + first.message;
        return parsed;
    }
    nlohmann::json doc = std::move(*strict);
    if (!doc.is_object()) {
        parsed.error = "the request must be a JSON object such as {\"v\": 1, \"op\": \"hello\"}";
        return parsed;
    }
    if (doc.contains("id"))
        parsed.id = doc["id"];
    const auto version = doc.find("v");
    if (version == doc.end() || !version->is_number_integer() || version->get<std::int64_t>() != kControlVersion) {
        parsed.error = "the request must say \"v\": " + std::to_string(kControlVersion) +
                       " (the control protocol version this engine speaks)";
        return parsed;
    }
    const auto op = doc.find("op");
    if (op == doc.end() || !op->is_string()) {
        parsed.error = "the request needs \"op\", one of: " + opList();
        return parsed;
    }
    for (const auto& [known, name] : kOps)
        if (op->get<std::string>() == name) {
            parsed.request = ControlRequest{parsed.id, known, std::move(doc)};
            return parsed;
        }
    parsed.error = "unknown op \"" + op->get<std::string>() + "\"; the ops are: " + opList();
    return parsed;
}

nlohmann::json controlReply(const nlohmann::json& id, nlohmann::json results)
{
    results["v"] = kControlVersion;
    results["id"] = id;
    results["ok"] = true;
    return results;
}

nlohmann::json controlError(const nlohmann::json& id, const std::string& error)
{
    return {{"v", kControlVersion}, {"id", id}, {"ok", false}, {"error", error}};
}

std::string_view liveKindName(LiveKind kind)
{
    switch (kind) {
    case LiveKind::Step:
        return "step";
    case LiveKind::Memory:
        return "memory";
    case LiveKind::Job:
        return "job";
    case LiveKind::Log:
        return "log";
    case LiveKind::Spans:
        return "spans";
    case LiveKind::Subscribed:
        return "subscribed";
    }
    return "unknown";
}

std::string liveTopic(LiveKind kind, std::string_view source)
{
    return std::string(liveKindName(kind)) + "/" + std::string(source);
}

}  // namespace meshbench::wire
