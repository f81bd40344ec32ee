#include "megatron_ranges.h"

#include <array>
#include <utility>

namespace meshbench::import {

namespace {

constexpr std::string_view kInterleavedSchedule =
    "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving.";
constexpr std::string_view kP2p = "megatron.core.pipeline_parallel.p2p_communication.";

// The directions a call's name lists, e.g. "send_forward_recv_backward": send forward, receive backward.
std::optional<MegatronRange> callOf(std::string_view function)
{
    MegatronRange call;
    bool sending = false;
    bool any = false;
    while (!function.empty()) {
        const std::size_t underscore = function.find('_');
        const std::string_view word = function.substr(0, underscore);
        function.remove_prefix(underscore == std::string_view::npos ? function.size() : underscore + 1);
        if (word == "send" || word == "recv") {
            sending = word == "send";
            continue;
        }
        if (word != "forward" && word != "backward")
            return std::nullopt;
        any = true;
        bool& flag = word == "forward" ? (sending ? call.sendsForward : call.receivesForward)
                                       : (sending ? call.sendsBackward : call.receivesBackward);
        flag = true;
    }
    return any ? std::optional(call) : std::nullopt;
}

}  // namespace

std::optional<MegatronRange> parseMegatronRange(std::string_view name)
{
    if (name.starts_with(kP2p))
        return callOf(name.substr(kP2p.size()));
    if (!name.starts_with(kInterleavedSchedule))
        return std::nullopt;
    constexpr std::array<std::pair<std::string_view, MegatronPhase>, 4> kPhases{{
        {"warmup", MegatronPhase::Warmup},
        {"steady", MegatronPhase::Steady},
        {"cooldown", MegatronPhase::Cooldown},
        {"misc", MegatronPhase::Misc},
    }};
    const std::string_view suffix = name.substr(kInterleavedSchedule.size());
    for (const auto& [text, phase] : kPhases)
        if (suffix == text) {
            MegatronRange range;
            range.phase = phase;
            return range;
        }
    return std::nullopt;
}

std::vector<wire::SpanKind> opsBeforeCall(const MegatronRange& call, MegatronPhase phase)
{
    std::vector<wire::SpanKind> ops;
    if (call.sendsForward && phase != MegatronPhase::Cooldown && phase != MegatronPhase::Misc)
        ops.push_back(wire::SpanKind::Forward);
    if (call.sendsBackward && phase != MegatronPhase::Warmup && phase != MegatronPhase::Misc)
        ops.push_back(wire::SpanKind::Backward);
    return ops;
}

std::optional<wire::SpanKind> transferOfCall(const MegatronRange& call)
{
    if (call.sendsForward)
        return wire::SpanKind::SendActivation;
    if (call.sendsBackward)
        return wire::SpanKind::SendGradient;
    if (call.receivesForward)
        return wire::SpanKind::RecvActivation;
    if (call.receivesBackward)
        return wire::SpanKind::RecvGradient;
    return std::nullopt;
}

}  // namespace meshbench::import
