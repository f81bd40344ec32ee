#include "op_names.h"

#include <array>
#include <charconv>
#include <utility>

namespace meshbench::import {

namespace {

// A non-negative number at the front of `text`, consumed.
std::optional<int> takeNumber(std::string_view& text)
{
    int value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || value < 0)
        return std::nullopt;
    text.remove_prefix(static_cast<std::size_t>(end - text.data()));
    return value;
}

std::optional<OpName> pipeliningName(std::string_view text)
{
    // Longest action first: "SEND_F" before "F".
    constexpr std::array<std::pair<std::string_view, wire::SpanKind>, 8> kActions{{
        {"SEND_F", wire::SpanKind::SendActivation},
        {"RECV_F", wire::SpanKind::RecvActivation},
        {"SEND_B", wire::SpanKind::SendGradient},
        {"RECV_B", wire::SpanKind::RecvGradient},
        {"F", wire::SpanKind::Forward},
        {"I", wire::SpanKind::Backward},
        {"W", wire::SpanKind::WeightGrad},
        {"B", wire::SpanKind::Backward},
    }};
    const std::optional<int> stage = takeNumber(text);
    if (!stage)
        return std::nullopt;
    for (const auto& [action, kind] : kActions) {
        if (!text.starts_with(action))
            continue;
        text.remove_prefix(action.size());
        const std::optional<int> microbatch = takeNumber(text);
        if (!microbatch || !text.empty())
            return std::nullopt;
        return OpName{kind, *stage, *microbatch, -1};
    }
    return std::nullopt;
}

// "<kind> mb<m> chunk<c>", the kind by its wire name.
std::optional<OpName> meshbenchName(std::string_view text)
{
    const std::size_t space = text.find(' ');
    if (space == std::string_view::npos)
        return std::nullopt;
    const std::optional<wire::SpanKind> kind = wire::spanKindFromName(text.substr(0, space));
    text.remove_prefix(space + 1);
    if (!kind || !text.starts_with("mb"))
        return std::nullopt;
    text.remove_prefix(2);
    const std::optional<int> microbatch = takeNumber(text);
    if (!microbatch || !text.starts_with(" chunk"))
        return std::nullopt;
    text.remove_prefix(6);
    const std::optional<int> chunk = takeNumber(text);
    if (!chunk || !text.empty())
        return std::nullopt;
    return OpName{*kind, -1, *microbatch, *chunk};
}

}  // namespace

std::optional<OpName> parseOpName(std::string_view name)
{
    if (name.starts_with("PP:"))
        return pipeliningName(name.substr(3));
    for (const auto& [prefix, kind] : {std::pair{std::string_view("Forward "), wire::SpanKind::Forward},
                                       std::pair{std::string_view("Backward "), wire::SpanKind::Backward}}) {
        if (!name.starts_with(prefix))
            continue;
        std::string_view rest = name.substr(prefix.size());
        const std::optional<int> microbatch = takeNumber(rest);
        if (microbatch && rest.empty())
            return OpName{kind, -1, *microbatch, -1};
        return std::nullopt;
    }
    return meshbenchName(name);
}

std::optional<int> StepMarker::step(std::string_view name) const
{
    const std::string_view marker = m_marker.empty() ? std::string_view("ProfilerStep#") : m_marker;
    if (!name.starts_with(marker))
        return std::nullopt;
    std::string_view rest = name.substr(marker.size());
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '#' || rest.front() == '_'))
        rest.remove_prefix(1);
    if (rest.empty())
        return m_marker.empty() ? std::nullopt : std::optional<int>(-1);
    const std::optional<int> number = takeNumber(rest);
    if (!number || !rest.empty())
        return std::nullopt;
    return number;
}

}  // namespace meshbench::import
