// Reading a job spec: the document walked in the schema's order (spec_schema.h), each key checked
// for its type and range, unknown keys refused with the nearest valid one; then the rules that
// tie keys together, which no single row of the schema can state.

#include "job_spec.h"

#include "capability.h"
#include "spec_schema.h"
#include "spec_text.h"
#include "units.h"

#include "wire/text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

namespace meshbench::plan {

using nlohmann::json;

namespace {

// Walks one JSON object: reads known keys with type and range checks, reports unknown keys.
class ObjectReader {
public:
    ObjectReader(const json& object, std::string path, std::vector<SpecError>& errors)
        : m_object(object), m_path(std::move(path)), m_errors(errors)
    {
    }

    std::string pathOf(std::string_view key) const
    {
        return m_path.empty() ? std::string(key) : m_path + "." + std::string(key);
    }

    void fail(std::string_view key, std::string message) { m_errors.push_back({pathOf(key), std::move(message)}); }

    // The key's value; nullptr when it is absent, or null, which is refused for every key alike: a
    // default is had by leaving the key out, so that null never stands for a value silently.
    const json* find(std::string_view key)
    {
        m_known.emplace_back(key);
        const auto it = m_object.find(std::string(key));
        if (it != m_object.end() && it->is_null())
            fail(key, "is null; leave the key out for its default, or give it a value");
        return it == m_object.end() || it->is_null() ? nullptr : &*it;
    }

    bool readInt(std::string_view key, std::int64_t& out, std::int64_t min, std::int64_t max, bool required)
    {
        const json* value = find(key);
        if (!value) {
            if (required)
                fail(key, "is required: give an integer from " + withThousands(min) + " to " + withThousands(max));
            return false;
        }
        std::int64_t parsed = 0;
        if (value->is_number_unsigned()) {
            const std::uint64_t u = value->get<std::uint64_t>();
            if (u > std::uint64_t(max)) {
                fail(key, value->dump() + " is out of range; use " + withThousands(min) + " to " + withThousands(max));
                return false;
            }
            parsed = std::int64_t(u);
        } else if (value->is_number_integer()) {
            parsed = value->get<std::int64_t>();
        } else if (value->is_number_float()) {
            const double d = value->get<double>();
            if (std::floor(d) != d || !std::isfinite(d)) {
                fail(key, "expected an integer, got " + describe(*value));
                return false;
            }
            if (d < double(min) || d > double(max)) {
                fail(key, value->dump() + " is out of range; use " + withThousands(min) + " to " + withThousands(max));
                return false;
            }
            parsed = std::int64_t(d);
        } else {
            fail(key, "expected an integer, got " + describe(*value));
            return false;
        }
        if (parsed < min || parsed > max) {
            fail(key,
                 std::to_string(parsed) + " is out of range; use " + withThousands(min) + " to " + withThousands(max));
            return false;
        }
        out = parsed;
        return true;
    }

    // The key's value when `isType` holds for it; nullptr when it is absent, null (both reported by
    // find) or of another type, which is reported as "expected <what>, got ...".
    const json* findTyped(std::string_view key, bool (json::*isType)() const noexcept, std::string_view what)
    {
        const json* value = find(key);
        if (value && !(value->*isType)()) {
            fail(key, "expected " + std::string(what) + ", got " + describe(*value));
            return nullptr;
        }
        return value;
    }

    bool readDouble(std::string_view key, double& out, double min, double max, bool minExclusive)
    {
        const json* value = findTyped(key, &json::is_number, "a number");
        if (!value)
            return false;
        const double d = value->get<double>();
        const bool below = minExclusive ? d <= min : d < min;
        if (!std::isfinite(d) || below || d > max) {
            std::ostringstream range;
            range << (minExclusive ? "above " : "from ") << min << (minExclusive ? " up to " : " to ") << max;
            fail(key, value->dump() + " is out of range; use a value " + range.str());
            return false;
        }
        out = d;
        return true;
    }

    bool readBool(std::string_view key, bool& out)
    {
        const json* value = findTyped(key, &json::is_boolean, "true or false");
        if (!value)
            return false;
        out = value->get<bool>();
        return true;
    }

    // `requiredMessage` is reported when the key is missing; empty for a key that may be left out.
    bool readString(std::string_view key, std::string& out, const std::string& requiredMessage)
    {
        if (!requiredMessage.empty() && !present(key)) {
            find(key);  // known, and null reported
            fail(key, requiredMessage);
            return false;
        }
        const json* value = findTyped(key, &json::is_string, "a string");
        if (!value)
            return false;
        out = value->get<std::string>();
        return true;
    }

    // A non-empty list of strings, or an object of strings by name; null when absent or of another
    // shape (reported). `what` is the shape the message asks for.
    const json* readStrings(std::string_view key, bool list, const std::string& what, bool required)
    {
        const json* value = find(key);
        if (!value) {
            if (required && !present(key))
                fail(key, "is required: give " + what);
            return nullptr;
        }
        const bool shaped = list ? value->is_array() && !value->empty() : value->is_object();
        if (!shaped || !std::all_of(value->begin(), value->end(), [](const json& v) { return v.is_string(); })) {
            fail(key, "must be " + what);
            return nullptr;
        }
        return value;
    }

    // A nested object; null when absent or of the wrong type (reported).
    const json* object(std::string_view key, bool required)
    {
        const json* value = find(key);
        if (!value) {
            if (required)
                fail(key, "is required: add a \"" + std::string(key) + "\" object");
            return nullptr;
        }
        if (!value->is_object()) {
            fail(key, "expected an object, got " + describe(*value));
            return nullptr;
        }
        return value;
    }

    // Whether the key is there with a value (null counts as absent), without reading it.
    bool present(std::string_view key) const
    {
        const auto it = m_object.find(std::string(key));
        return it != m_object.end() && !it->is_null();
    }

    // A key that is reported otherwise (it belongs elsewhere): not unknown, yet not listed as valid.
    void excuse(std::string_view key) { m_excused.emplace_back(key); }

    // Call after every read: reports keys nobody asked for.
    void rejectUnknownKeys()
    {
        for (const auto& [key, value] : m_object.items()) {
            if (std::find(m_known.begin(), m_known.end(), key) != m_known.end() ||
                std::find(m_excused.begin(), m_excused.end(), key) != m_excused.end())
                continue;
            fail(key, "unknown key; " + suggestion(key, m_known) + "valid keys here: " + joinOr(m_known));
        }
    }

private:
    const json& m_object;
    std::string m_path;
    std::vector<SpecError>& m_errors;
    std::vector<std::string> m_known;
    std::vector<std::string> m_excused;
};

// Reads a document, or one section of it, into a spec: every key of the section in the schema's
// order, then the section's rules.
class SpecReader {
public:
    SpecReader(JobSpec& spec, std::vector<SpecError>& errors) : m_spec(spec), m_errors(errors) {}

    // `object` is the section `section` of the schema ("" for the whole document), found at the
    // document's path `path`.
    void readSection(const json& object, std::string_view section, std::string path)
    {
        ObjectReader r(object, std::move(path), m_errors);
        std::vector<const SpecKey*> otherVariant;
        for (const SpecKey* key : specKeysIn(section)) {
            if (!key->applies(m_spec)) {
                otherVariant.push_back(key);
                continue;
            }
            if (key->deriveDefault)
                key->deriveDefault(m_spec);
            if (key->type == SpecType::Section) {
                if (const json* inner = r.object(key->name(), key->required))
                    readSection(*inner, key->path, r.pathOf(key->name()));
                continue;
            }
            const bool read = readKey(r, *key);
            if (read)
                m_given.push_back(key->path);
            if (!afterKey(r, *key, read))
                return;  // the section's other keys depend on this one
        }
        // The keys of the variant the section is not (train.data's file keys for a markov source).
        for (const SpecKey* key : otherVariant)
            if (r.present(key->name())) {
                const std::string variant(key->onlyWhenValue);
                r.fail(key->name(), "is a setting of the " + variant + " " + std::string(key->onlyWhenKey) + "; set " +
                                        std::string(section) + "." + std::string(key->onlyWhenKey) + " to \"" +
                                        variant + "\" or remove it");
                r.excuse(key->name());
            }
        r.rejectUnknownKeys();
        afterSection(r, section);
    }

private:
    bool given(std::string_view path) const { return std::find(m_given.begin(), m_given.end(), path) != m_given.end(); }

    // Whether the key was given: read and stored, or, for a name looked up in a table of presets
    // (a noun names the table), given as a string at all, so that an unknown preset does not also
    // leave the keys it would have filled reported missing.
    bool readKey(ObjectReader& r, const SpecKey& key)
    {
        const std::string_view name = key.name();
        const bool required = key.required || (!key.requiredUnless.empty() && !given(key.requiredUnless));
        switch (key.type) {
        case SpecType::Integer: {
            const auto min = std::int64_t(key.min);
            auto max = std::int64_t(key.max);
            if (!key.maxFrom.empty())
                if (const std::int64_t bound = specKey(key.maxFrom)->value(m_spec).get<std::int64_t>(); bound >= min)
                    max = bound;
            std::int64_t value = 0;
            return r.readInt(name, value, min, max, required) && key.assign(m_spec, value);
        }
        case SpecType::Number: {
            double value = 0;
            return r.readDouble(name, value, key.min, key.max, key.minExclusive) && key.assign(m_spec, value);
        }
        case SpecType::Flag: {
            bool value = false;
            return r.readBool(name, value) && key.assign(m_spec, value);
        }
        case SpecType::Text: {
            std::string value;
            return r.readString(name, value, required ? "is required" : "") && key.assign(m_spec, value);
        }
        case SpecType::Choice:
        case SpecType::Preset: {
            std::string value;
            const std::string missing = !required                  ? std::string()
                                        : key.requiredText.empty() ? "is required: use " + joinOr(key.choices)
                                                                   : std::string(key.requiredText);
            if (!r.readString(name, value, missing))
                return false;
            if (key.assign(m_spec, value))
                return true;
            const std::string names = suggestion(value, key.choices) + "use " + joinOr(key.choices);
            if (key.noun.empty())
                r.fail(name, "'" + value + "' is not allowed; " + names);
            else
                r.fail(name,
                       "unknown " + std::string(key.noun) + " '" + value + "'; " + names + std::string(key.otherwise));
            return !key.noun.empty();
        }
        case SpecType::TextList:
        case SpecType::TextMap: {
            const bool list = key.type == SpecType::TextList;
            const std::string what = std::string(list ? "a non-empty list of strings" : "an object of strings") +
                                     ", e.g. " + std::string(key.placeholder);
            const json* value = r.readStrings(name, list, what, required);
            return value && key.assign(m_spec, *value);
        }
        case SpecType::Section:
            break;
        }
        return false;
    }

    // The rules of single keys that depend on others. Returns false when the section's other keys
    // cannot be read.
    bool afterKey(ObjectReader& r, const SpecKey& key, bool read)
    {
        ClusterSpec& cluster = m_spec.cluster;
        if (key.path == "cluster.device" && !read && !given("cluster.preset"))
            r.fail("device", "is required without a preset: use " + joinOr(key.choices));
        if (key.path == "cluster.nvlink_domain" && !read && !given("cluster.preset") &&
            (given("cluster.nodes") || given("cluster.devices_per_node")))
            cluster.nvlinkDomain = cluster.devicesPerNode;
        if (key.path == "train.data.source" && !read && r.present("source"))
            return false;  // the other settings depend on the source
        if (key.path == "train.data.path" && read && m_spec.train.data.path.empty())
            r.fail("path", "is empty: give the path of a flat uint16/uint32 token file");
        if (key.path == "launch.command" && read && m_spec.launch.command.front().empty())
            r.fail("command", "names no program: its first string is empty; e.g. [\"python3\", \"train.py\"]");
        if (key.path == "launch.cwd" && read && m_spec.launch.cwd.empty())
            r.fail("cwd", "is empty: give a folder, or leave the key out for the job spec's folder");
        if (key.path == "launch.env" && read)
            checkEnvironment(r, m_spec.launch.env);
        return true;
    }

    // The rules between the keys of a section, once it is read.
    void afterSection(ObjectReader& r, std::string_view section)
    {
        const ModelSpec& model = m_spec.model;
        if (section == "model")
            checkModel(r, model);
        else if (section == "model.moe")
            checkMoe(r, model);
        else if (section == "cluster")
            completeCluster(r, m_spec.cluster);
        else if (section.empty() && !given("precision.activations"))
            // The cpu device runs meshbench-agent's fp32 model; any other device is priced as Megatron-LM.
            m_spec.precision.activations =
                m_spec.cluster.device.kind == "cpu" ? ActivationDtype::Fp32 : ActivationDtype::Bf16;
    }

    static void checkModel(ObjectReader& r, const ModelSpec& model)
    {
        if (model.heads > 0 && model.hidden > 0 && model.hidden % model.heads != 0)
            r.fail("hidden", "hidden=" + std::to_string(model.hidden) +
                                 " does not split into heads=" + std::to_string(model.heads) +
                                 " equal head dimensions; use a multiple of " + std::to_string(model.heads));
        if (model.kvHeads > model.heads)
            r.fail("kv_heads", "kv_heads=" + std::to_string(model.kvHeads) + " exceeds heads=" +
                                   std::to_string(model.heads) + "; use at most " + std::to_string(model.heads));
        else if (model.kvHeads > 0 && model.heads % model.kvHeads != 0)
            r.fail("kv_heads", "heads=" + std::to_string(model.heads) +
                                   " do not form equal query groups over kv_heads=" + std::to_string(model.kvHeads) +
                                   "; use a divisor of " + std::to_string(model.heads));
    }

    // Names the launchers pass on (mpirun's -x takes a name) and that the engine does not set itself.
    static void checkEnvironment(ObjectReader& r, const std::map<std::string, std::string>& env)
    {
        for (const auto& [name, value] : env) {
            const bool word = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
                              std::all_of(name.begin(), name.end(), [](char c) {
                                  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                              });
            if (!word)
                r.fail("env", "'" + wire::printableText(name) +
                                  "' is not a variable name: use letters, digits and _, not starting with a digit");
            else if (name.starts_with("MESHBENCH_"))
                r.fail("env",
                       "'" + name + "' is the engine's to set (it tells every rank where to report): use another name");
        }
    }

    static void checkMoe(ObjectReader& r, const ModelSpec& model)
    {
        const MoeSpec& moe = model.moe;
        if (moe.experts > 0 && moe.topK > moe.experts)
            r.fail("top_k", "top_k=" + std::to_string(moe.topK) + " exceeds experts=" + std::to_string(moe.experts) +
                                "; a token cannot go to more experts than exist: use top_k 1 to " +
                                std::to_string(moe.experts));
        if (moe.everyNLayers > model.layers && model.layers > 0)
            r.fail("every_n_layers", std::to_string(moe.everyNLayers) + " exceeds the " + std::to_string(model.layers) +
                                         " layers; use 1 to " + std::to_string(model.layers));
    }

    void completeCluster(ObjectReader& r, ClusterSpec& cluster) const
    {
        if (!given("cluster.preset")) {
            // A hand-described cluster without link figures gets DGX H100-like links (NVLink 4, 400 Gb/s NICs).
            if (cluster.intraBandwidth <= 0)
                cluster.intraBandwidth = 450e9;
            if (cluster.interBandwidth <= 0)
                cluster.interBandwidth = 50e9;
            if (cluster.intraLatency <= 0)
                cluster.intraLatency = 3e-6;
            if (cluster.interLatency <= 0)
                cluster.interLatency = 10e-6;
        }
        if (cluster.devices() > kMaxSpecDegree)
            r.fail("nodes", std::to_string(cluster.nodes) + " nodes x " + std::to_string(cluster.devicesPerNode) +
                                " devices = " + withThousands(cluster.devices()) + " devices; Meshbench plans up to " +
                                withThousands(kMaxSpecDegree) + " devices");
        if (cluster.nvlinkDomain % cluster.devicesPerNode != 0 && cluster.devicesPerNode % cluster.nvlinkDomain != 0)
            r.fail("nvlink_domain", "nvlink_domain=" + std::to_string(cluster.nvlinkDomain) +
                                        " must divide devices_per_node=" + std::to_string(cluster.devicesPerNode) +
                                        " or be a multiple of it (e.g. 72 for an NVL72 rack of 4-GPU trays)");
    }

    JobSpec& m_spec;
    std::vector<SpecError>& m_errors;
    std::vector<std::string_view> m_given;  // paths of the keys given so far
};

// The Markov source (the default) draws from at least two tokens.
void validateData(const JobSpec& spec, std::vector<SpecError>& errors)
{
    if (spec.train.data.source == DataSource::Markov && spec.model.vocab < 2)
        errors.push_back({"model.vocab", "vocab=" + std::to_string(spec.model.vocab) +
                                             " is too small for the markov data source, which needs 2 tokens or "
                                             "more; raise model.vocab or set train.data to a token file"});
}

// The JSON path of a value nested deeper than wire::kMaxJsonDepth, if there is one. Walked without recursion:
// copying or printing a deeply nested document recurses once per level, so depth is checked before
// anything else touches it.
std::optional<std::string> tooDeepAt(const json& document)
{
    struct Node {
        const json* value;
        int depth;
        std::size_t parent;  // index into nodes; the root is its own parent
        std::string label;   // ".key" or "[i]"
    };
    std::vector<Node> nodes{{&document, 1, 0, ""}};
    std::vector<std::size_t> pending{0};
    while (!pending.empty()) {
        const std::size_t at = pending.back();
        pending.pop_back();
        if (nodes[at].depth > wire::kMaxJsonDepth) {
            std::string path;
            for (std::size_t n = at; n != 0; n = nodes[n].parent)
                path.insert(0, nodes[n].label);
            return path.empty() || path[0] != '.' ? path : path.substr(1);
        }
        const json& value = *nodes[at].value;
        std::size_t index = 0;
        for (auto it = value.begin(); it != value.end(); ++it, ++index)
            if (it->is_structured()) {
                nodes.push_back(
                    {&*it, nodes[at].depth + 1, at,
                     value.is_object() ? "." + wire::printableText(it.key()) : "[" + std::to_string(index) + "]"});
                pending.push_back(nodes.size() - 1);
            }
    }
    return std::nullopt;
}

}  // namespace

LoadResult loadJobSpec(const json& document)
{
    LoadResult result;
    if (const std::optional<std::string> deep = tooDeepAt(document)) {
        result.errors.push_back({*deep, wire::jsonTooDeepMessage()});
        return result;
    }
    if (!document.is_object()) {
        result.errors.push_back({"", "a job spec is a JSON object with model, parallel and cluster sections, got " +
                                         std::string(document.type_name())});
        return result;
    }
    JobSpec spec;
    SpecReader(spec, result.errors).readSection(document, "", "");
    if (!result.errors.empty())
        return result;
    validateData(spec, result.errors);
    if (!result.errors.empty())
        return result;
    result.errors = validateLayout(spec);
    if (result.errors.empty())
        result.refusals = agentRefusals(spec);
    result.spec = std::move(spec);
    return result;
}

LoadResult parseJobSpec(std::string_view text)
{
    std::vector<wire::JsonProblem> problems;
    std::optional<json> document = wire::parseStrictJson(text, problems);
    if (!document) {
        LoadResult result;
        for (wire::JsonProblem& problem : problems)
            result.errors.push_back({std::move(problem.path), std::move(problem.message)});
        return result;
    }
    return loadJobSpec(*document);
}

std::optional<CalibrationSpec> readCalibrationProfile(const json& profile, std::vector<SpecError>& errors)
{
    if (!profile.is_object()) {
        errors.push_back({"", "a calibration profile is a JSON object, as `meshbench-engine calibrate --out` writes"});
        return std::nullopt;
    }
    const std::size_t before = errors.size();
    JobSpec spec;
    SpecReader(spec, errors).readSection(profile, "cluster.calibration", "");
    if (errors.size() != before)
        return std::nullopt;
    return spec.cluster.calibration;
}

}  // namespace meshbench::plan
