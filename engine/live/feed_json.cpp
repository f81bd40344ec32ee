#include "live/feed_json.h"

#include <utility>

namespace meshbench::live {

namespace {

using nlohmann::json;

nlohmann::json orNull(const std::optional<double>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

bool fail(std::string& error, const std::string& path, const char* expected)
{
    error = "live message: \"" + path + "\" must be " + expected;
    return false;
}

// The member `key` of `object`, or nullptr.
const json* member(const json& object, const char* key)
{
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
}

template <typename Int>
bool readInt(const json& object, const char* key, const std::string& prefix, Int& out, std::string& error)
{
    const json* value = member(object, key);
    if (!value || !value->is_number_integer())
        return fail(error, prefix + key, "a whole number");
    const bool fits = value->is_number_unsigned() ? std::in_range<Int>(value->get<std::uint64_t>())
                                                  : std::in_range<Int>(value->get<std::int64_t>());
    if (!fits)
        return fail(error, prefix + key, "a whole number in range");
    out = value->is_number_unsigned() ? Int(value->get<std::uint64_t>()) : Int(value->get<std::int64_t>());
    return true;
}

bool readOptional(const json& object, const char* key, const std::string& prefix, std::optional<double>& out,
                  std::string& error)
{
    const json* value = member(object, key);
    if (!value || !(value->is_null() || value->is_number()))
        return fail(error, prefix + key, "a number or null");
    out = value->is_null() ? std::nullopt : std::optional<double>(value->get<double>());
    return true;
}

bool readBool(const json& object, const char* key, bool& out, std::string& error)
{
    const json* value = member(object, key);
    if (!value || !value->is_boolean())
        return fail(error, key, "true or false");
    out = value->get<bool>();
    return true;
}

bool readCounts(const json& object, const char* key, const std::string& prefix, std::vector<std::uint32_t>& out,
                std::string& error)
{
    const json* value = member(object, key);
    if (!value || !value->is_array())
        return fail(error, prefix + key, "an array of token counts");
    std::vector<std::uint32_t> counts;
    counts.reserve(value->size());
    for (const json& count : *value) {
        if (!count.is_number_unsigned() || !std::in_range<std::uint32_t>(count.get<std::uint64_t>()))
            return fail(error, prefix + key, "an array of token counts (whole numbers from 0 to 4294967295)");
        counts.push_back(std::uint32_t(count.get<std::uint64_t>()));
    }
    out = std::move(counts);
    return true;
}

bool checkType(const json& payload, const char* type, std::string& error)
{
    if (!payload.is_object())
        return fail(error, "(payload)", "a JSON object");
    const json* value = member(payload, "type");
    if (!value || !value->is_string() || value->get<std::string>() != type)
        return fail(error, "type", type == std::string("step") ? "\"step\"" : "\"memory\"");
    return true;
}

bool readStage(const json& object, const std::string& prefix, StageBubble& stage, std::string& error)
{
    if (!object.is_object())
        return fail(error, prefix, "an object");
    const std::string p = prefix + ".";
    return readInt(object, "stage", p, stage.stage, error) &&
           readOptional(object, "bubble", p, stage.measured, error) &&
           readOptional(object, "planned_bubble", p, stage.planned, error) &&
           readInt(object, "ranks", p, stage.ranks, error);
}

bool readLayer(const json& object, const std::string& prefix, ExpertLayerStats& layer, std::string& error)
{
    if (!object.is_object())
        return fail(error, prefix, "an object");
    const std::string p = prefix + ".";
    if (!(readInt(object, "layer", p, layer.layer, error) && readCounts(object, "routed", p, layer.routed, error) &&
          readCounts(object, "dropped", p, layer.dropped, error) &&
          readOptional(object, "imbalance", p, layer.imbalance, error) &&
          readOptional(object, "dropped_fraction", p, layer.droppedFraction, error) &&
          readInt(object, "hottest_expert", p, layer.hottestExpert, error)))
        return false;
    if (layer.routed.size() != layer.dropped.size())
        return fail(error, p + "dropped", "as long as \"routed\" (one count per expert)");
    layer.routedTotal = 0;
    layer.droppedTotal = 0;
    for (std::size_t e = 0; e < layer.routed.size(); ++e) {
        layer.routedTotal += layer.routed[e];
        layer.droppedTotal += layer.dropped[e];
    }
    return true;
}

template <typename Item, typename ReadItem>
bool readArray(const json& object, const char* key, std::vector<Item>& out, std::string& error, ReadItem readItem)
{
    const json* value = member(object, key);
    if (!value || !value->is_array())
        return fail(error, key, "an array");
    std::vector<Item> items(value->size());
    for (std::size_t i = 0; i < items.size(); ++i)
        if (!readItem((*value)[i], std::string(key) + "[" + std::to_string(i) + "]", items[i], error))
            return false;
    out = std::move(items);
    return true;
}

}  // namespace

bool fromJson(const nlohmann::json& json, StepAggregate& step, std::string& error)
{
    if (!checkType(json, "step", error))
        return false;
    StepAggregate s;
    const std::string top;
    const bool ok =
        readInt(json, "step", top, s.step, error) && readBool(json, "partial", s.partial, error) &&
        readOptional(json, "loss", top, s.loss, error) && readOptional(json, "aux_loss", top, s.auxLoss, error) &&
        readOptional(json, "tokens_per_s", top, s.tokensPerSecond, error) &&
        readOptional(json, "step_seconds", top, s.stepSeconds, error) && readOptional(json, "mfu", top, s.mfu, error) &&
        readOptional(json, "planned_step_seconds", top, s.plannedStepSeconds, error) &&
        readOptional(json, "planned_tokens_per_s", top, s.plannedTokensPerSecond, error) &&
        readOptional(json, "comm_seconds", top, s.commSeconds, error) &&
        readOptional(json, "bubble", top, s.bubble, error) &&
        readOptional(json, "planned_bubble", top, s.plannedBubble, error) &&
        readOptional(json, "agent_bubble", top, s.agentBubble, error) &&
        readInt(json, "pipeline_begin_ns", top, s.pipelineBeginNs, error) &&
        readInt(json, "pipeline_end_ns", top, s.pipelineEndNs, error) &&
        readInt(json, "ranks_reporting", top, s.ranksReporting, error) &&
        readInt(json, "ranks_finished", top, s.ranksFinished, error) &&
        readArray(json, "stages", s.stages, error, readStage) &&
        readArray(json, "expert_layers", s.expertLayers, error, readLayer) &&
        readOptional(json, "imbalance_p50", top, s.imbalanceP50, error) &&
        readOptional(json, "imbalance_p95", top, s.imbalanceP95, error) &&
        readOptional(json, "dropped_fraction", top, s.droppedFraction, error);
    if (!ok)
        return false;
    step = std::move(s);
    return true;
}

bool fromJson(const nlohmann::json& json, RankMemory& memory, std::string& error)
{
    if (!checkType(json, "memory", error))
        return false;
    RankMemory m;
    const std::string top;
    if (!(readInt(json, "rank", top, m.rank, error) && readInt(json, "stage", top, m.stage, error) &&
          readInt(json, "step", top, m.step, error) && readInt(json, "time_ns", top, m.timeNs, error) &&
          readInt(json, "samples", top, m.samples, error)))
        return false;
    for (const auto& [key, bytes] : {std::pair{"current", &m.current}, std::pair{"peak", &m.peak}}) {
        const nlohmann::json* byCategory = member(json, key);
        if (!byCategory || !byCategory->is_object())
            return fail(error, key, "an object of bytes by memory category");
        for (int c = 0; c < wire::kMemoryCategories; ++c) {
            const std::string name(wire::memoryCategoryName(wire::MemoryCategory(c)));
            if (byCategory->contains(name) &&
                !readInt(*byCategory, name.c_str(), std::string(key) + ".", (*bytes)[std::size_t(c)], error))
                return false;
        }
    }
    memory = m;
    return true;
}

nlohmann::json toJson(const StepAggregate& step)
{
    nlohmann::json stages = nlohmann::json::array();
    for (const StageBubble& s : step.stages)
        stages.push_back({{"stage", s.stage},
                          {"bubble", orNull(s.measured)},
                          {"planned_bubble", orNull(s.planned)},
                          {"ranks", s.ranks}});
    nlohmann::json layers = nlohmann::json::array();
    for (const ExpertLayerStats& l : step.expertLayers)
        layers.push_back({{"layer", l.layer},
                          {"routed", l.routed},
                          {"dropped", l.dropped},
                          {"imbalance", orNull(l.imbalance)},
                          {"dropped_fraction", orNull(l.droppedFraction)},
                          {"hottest_expert", l.hottestExpert}});
    return {{"type", "step"},
            {"step", step.step},
            {"partial", step.partial},
            {"loss", orNull(step.loss)},
            {"aux_loss", orNull(step.auxLoss)},
            {"tokens_per_s", orNull(step.tokensPerSecond)},
            {"step_seconds", orNull(step.stepSeconds)},
            {"mfu", orNull(step.mfu)},
            {"planned_step_seconds", orNull(step.plannedStepSeconds)},
            {"planned_tokens_per_s", orNull(step.plannedTokensPerSecond)},
            {"comm_seconds", orNull(step.commSeconds)},
            {"bubble", orNull(step.bubble)},
            {"planned_bubble", orNull(step.plannedBubble)},
            {"agent_bubble", orNull(step.agentBubble)},
            {"pipeline_begin_ns", step.pipelineBeginNs},
            {"pipeline_end_ns", step.pipelineEndNs},
            {"ranks_reporting", step.ranksReporting},
            {"ranks_finished", step.ranksFinished},
            {"stages", std::move(stages)},
            {"expert_layers", std::move(layers)},
            {"imbalance_p50", orNull(step.imbalanceP50)},
            {"imbalance_p95", orNull(step.imbalanceP95)},
            {"dropped_fraction", orNull(step.droppedFraction)}};
}

nlohmann::json toJson(const RankMemory& memory)
{
    nlohmann::json current = nlohmann::json::object();
    nlohmann::json peak = nlohmann::json::object();
    for (int c = 0; c < wire::kMemoryCategories; ++c) {
        const std::string name(wire::memoryCategoryName(wire::MemoryCategory(c)));
        current[name] = memory.current[std::size_t(c)];
        peak[name] = memory.peak[std::size_t(c)];
    }
    return {{"type", "memory"},
            {"rank", memory.rank},
            {"stage", memory.stage},
            {"step", memory.step},
            {"time_ns", memory.timeNs},
            {"samples", memory.samples},
            {"current", std::move(current)},
            {"peak", std::move(peak)},
            {"current_total", memory.currentTotal()}};
}

}  // namespace meshbench::live
