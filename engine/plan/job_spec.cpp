#include "job_spec.h"

#include "capability.h"
#include "presets.h"
#include "units.h"

#include "wire/text.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <sstream>

namespace meshbench::plan {

using nlohmann::json;

namespace {

// Names of enum values as they appear in JSON; the first matching entry wins.
template <typename E>
struct EnumName {
    std::string_view name;
    E value;
};

constexpr EnumName<Norm> kNorms[] = {{"layernorm", Norm::LayerNorm}, {"rmsnorm", Norm::RmsNorm}};
constexpr EnumName<Activation> kActivations[] = {{"gelu", Activation::Gelu}, {"swiglu", Activation::SwiGlu}};
constexpr EnumName<Recompute> kRecomputes[] = {
    {"none", Recompute::None}, {"selective", Recompute::Selective}, {"full", Recompute::Full}};
constexpr EnumName<GradDtype> kGradDtypes[] = {{"fp32", GradDtype::Fp32}, {"bf16", GradDtype::Bf16}};
constexpr EnumName<ActivationDtype> kActivationDtypes[] = {{"bf16", ActivationDtype::Bf16},
                                                           {"fp32", ActivationDtype::Fp32}};
constexpr EnumName<RankOrder> kOrders[] = {{"tp-dp-pp", RankOrder::TpDpPp}, {"tp-pp-dp", RankOrder::TpPpDp}};
constexpr EnumName<BackendKind> kBackends[] = {
    {"auto", BackendKind::Auto}, {"cpu", BackendKind::Cpu}, {"cuda", BackendKind::Cuda}};
constexpr EnumName<DataSource> kDataSources[] = {{"markov", DataSource::Markov}, {"file", DataSource::File}};
constexpr EnumName<TokenDtype> kTokenDtypes[] = {{"uint16", TokenDtype::Uint16}, {"uint32", TokenDtype::Uint32}};
constexpr EnumName<ScheduleKind> kSchedules[] = {{"gpipe", ScheduleKind::GPipe},
                                                 {"1f1b", ScheduleKind::OneFOneB},
                                                 {"interleaved", ScheduleKind::Interleaved},
                                                 {"zb-h1", ScheduleKind::ZeroBubbleH1},
                                                 {"zb-v", ScheduleKind::ZeroBubbleV},
                                                 {"dualpipev", ScheduleKind::DualPipeV}};

template <typename E, std::size_t N>
std::string_view nameOf(const EnumName<E> (&table)[N], E value)
{
    for (const auto& entry : table)
        if (entry.value == value)
            return entry.name;
    return "?";
}

std::size_t editDistance(std::string_view a, std::string_view b)
{
    std::vector<std::size_t> row(b.size() + 1);
    std::iota(row.begin(), row.end(), 0);
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

std::string joinOr(const std::vector<std::string>& items)
{
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0)
            out += i + 1 == items.size() ? " or " : ", ";
        out += items[i];
    }
    return out;
}

template <typename Range>
std::vector<std::string> toStrings(const Range& range)
{
    std::vector<std::string> out;
    for (const auto& item : range)
        out.emplace_back(item);
    return out;
}

// "did you mean 'x'?" when a candidate is close enough to be a typo.
std::string suggestion(std::string_view given, const std::vector<std::string>& candidates)
{
    // A name the user typed the start of ("h100" for "h100-sxm") beats a closer edit distance.
    for (const std::string& candidate : candidates)
        if (!given.empty() && candidate.size() > given.size() && candidate.compare(0, given.size(), given) == 0)
            return "did you mean '" + candidate + "'? ";
    std::string best;
    std::size_t bestDistance = std::max<std::size_t>(3, given.size() / 2) + 1;
    for (const std::string& candidate : candidates) {
        const std::size_t d = editDistance(given, candidate);
        if (d < bestDistance) {
            bestDistance = d;
            best = candidate;
        }
    }
    return best.empty() ? std::string() : "did you mean '" + best + "'? ";
}

std::string describe(const json& value)
{
    if (value.is_structured())
        return std::string(value.type_name()) + " of " + std::to_string(value.size()) + " entries";
    std::string text = value.dump();
    if (text.size() > 40)
        text = text.substr(0, 37) + "...";
    return std::string(value.type_name()) + " " + text;
}

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

    bool readInt(std::string_view key, std::int64_t& out, std::int64_t min, std::int64_t max, bool required = false)
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

    template <typename T>
    bool readInt(std::string_view key, T& out, std::int64_t min, std::int64_t max, bool required = false)
    {
        std::int64_t wide = 0;
        if (!readInt(key, wide, min, max, required))
            return false;
        out = T(wide);
        return true;
    }

    bool readDouble(std::string_view key, double& out, double min, double max, bool minExclusive = false)
    {
        const json* value = find(key);
        if (!value)
            return false;
        if (!value->is_number()) {
            fail(key, "expected a number, got " + describe(*value));
            return false;
        }
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

    // A figure given in the unit users read (GB/s, us), stored in SI units: out = value x scale.
    bool readScaled(std::string_view key, double& out, double scale, double min, double max, bool minExclusive = false)
    {
        double value = 0;
        if (!readDouble(key, value, min, max, minExclusive))
            return false;
        out = value * scale;
        return true;
    }

    bool readBool(std::string_view key, bool& out)
    {
        const json* value = find(key);
        if (!value)
            return false;
        if (!value->is_boolean()) {
            fail(key, "expected true or false, got " + describe(*value));
            return false;
        }
        out = value->get<bool>();
        return true;
    }

    bool readString(std::string_view key, std::string& out, bool required = false)
    {
        const json* value = find(key);
        if (!value) {
            if (required)
                fail(key, "is required");
            return false;
        }
        if (!value->is_string()) {
            fail(key, "expected a string, got " + describe(*value));
            return false;
        }
        out = value->get<std::string>();
        return true;
    }

    template <typename E, std::size_t N>
    bool readEnum(std::string_view key, E& out, const EnumName<E> (&table)[N])
    {
        std::string text;
        if (!readString(key, text))
            return false;
        std::vector<std::string> names;
        for (const auto& entry : table) {
            if (entry.name == text) {
                out = entry.value;
                return true;
            }
            names.emplace_back(entry.name);
        }
        fail(key, "'" + text + "' is not allowed; " + suggestion(text, names) + "use " + joinOr(names));
        return false;
    }

    // A nested object; null when absent or of the wrong type (reported).
    const json* object(std::string_view key, bool required = false)
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

constexpr std::int64_t kMaxDegree = 1 << 20;

void readMoe(ObjectReader& parent, const json& object, ModelSpec& model, std::vector<SpecError>& errors)
{
    ObjectReader r(object, parent.pathOf("moe"), errors);
    MoeSpec& moe = model.moe;
    r.readInt("experts", moe.experts, 1, 65536, true);
    r.readInt("top_k", moe.topK, 1, 65536);
    moe.ffnHidden = model.ffnHidden;
    r.readInt("moe_ffn_hidden", moe.ffnHidden, 1, 1 << 24);
    r.readInt("every_n_layers", moe.everyNLayers, 1, 10000);
    r.readDouble("capacity_factor", moe.capacityFactor, 0.0, 1000.0, true);
    r.readDouble("aux_loss_coef", moe.auxLossCoef, 0.0, 1.0);
    r.rejectUnknownKeys();
    if (moe.experts > 0 && moe.topK > moe.experts)
        r.fail("top_k", "top_k=" + std::to_string(moe.topK) + " exceeds experts=" + std::to_string(moe.experts) +
                            "; a token cannot go to more experts than exist: use top_k 1 to " +
                            std::to_string(moe.experts));
    if (moe.everyNLayers > model.layers && model.layers > 0)
        r.fail("every_n_layers", std::to_string(moe.everyNLayers) + " exceeds the " + std::to_string(model.layers) +
                                     " layers; use 1 to " + std::to_string(model.layers));
}

void readModel(const json& object, ModelSpec& model, std::vector<SpecError>& errors)
{
    ObjectReader r(object, "model", errors);
    r.readInt("layers", model.layers, 1, 10000, true);
    r.readInt("hidden", model.hidden, 1, 1 << 20, true);
    r.readInt("heads", model.heads, 1, 65536, true);
    model.kvHeads = model.heads;
    r.readInt("kv_heads", model.kvHeads, 1, 65536);
    model.ffnHidden = 4 * model.hidden;
    r.readInt("ffn_hidden", model.ffnHidden, 1, 1 << 24);
    r.readInt("vocab", model.vocab, 1, 100'000'000, true);
    r.readInt("seq_len", model.seqLen, 1, 100'000'000, true);
    r.readEnum("norm", model.norm, kNorms);
    r.readEnum("activation", model.activation, kActivations);
    r.readBool("tied_embeddings", model.tiedEmbeddings);
    if (const json* moe = r.object("moe"))
        readMoe(r, *moe, model, errors);
    r.rejectUnknownKeys();

    if (model.heads > 0 && model.hidden > 0 && model.hidden % model.heads != 0)
        r.fail("hidden", "hidden=" + std::to_string(model.hidden) +
                             " does not split into heads=" + std::to_string(model.heads) +
                             " equal head dimensions; use a multiple of " + std::to_string(model.heads));
    if (model.kvHeads > model.heads)
        r.fail("kv_heads", "kv_heads=" + std::to_string(model.kvHeads) + " exceeds heads=" +
                               std::to_string(model.heads) + "; use at most " + std::to_string(model.heads));
    else if (model.kvHeads > 0 && model.heads % model.kvHeads != 0)
        r.fail("kv_heads", "heads=" + std::to_string(model.heads) + " do not form equal query groups over kv_heads=" +
                               std::to_string(model.kvHeads) + "; use a divisor of " + std::to_string(model.heads));
}

void readParallel(const json& object, ParallelSpec& p, std::vector<SpecError>& errors)
{
    ObjectReader r(object, "parallel", errors);
    r.readInt("dp", p.dp, 1, kMaxDegree);
    r.readInt("pp", p.pp, 1, kMaxDegree);
    r.readInt("tp", p.tp, 1, kMaxDegree);
    r.readInt("ep", p.ep, 1, kMaxDegree);
    r.readInt("zero", p.zero, 0, 3);
    r.readBool("sequence_parallel", p.sequenceParallel);
    r.readEnum("recompute", p.recompute, kRecomputes);
    r.readEnum("schedule", p.schedule, kSchedules);
    r.readInt("virtual_stages", p.virtualStages, 1, 1024);
    r.readInt("microbatches", p.microbatches, 1, kMaxDegree);
    r.readInt("micro_batch_size", p.microBatchSize, 1, 65536);
    r.readEnum("order", p.order, kOrders);
    r.readDouble("grad_bucket_mb", p.gradBucketMb, 0.0, 1e6, true);
    r.readBool("overlap_grad_reduce", p.overlapGradReduce);
    r.readBool("overlap_param_gather", p.overlapParamGather);
    r.readBool("tp_comm_overlap", p.tpCommOverlap);
    r.rejectUnknownKeys();
}

// Returns whether the document gave precision.activations (without it, loadJobSpec picks the
// default from the cluster's device).
bool readPrecision(const json& object, PrecisionSpec& precision, std::vector<SpecError>& errors)
{
    ObjectReader r(object, "precision", errors);
    r.readEnum("grads", precision.grads, kGradDtypes);
    const bool activations = r.present("activations");
    r.readEnum("activations", precision.activations, kActivationDtypes);
    r.rejectUnknownKeys();
    return activations;
}

// Rates in the units a user reads (GB/s, us), as `calibrate` writes them.
void readCalibration(const json& object, const std::string& path, CalibrationSpec& cal, std::vector<SpecError>& errors)
{
    ObjectReader r(object, path, errors);
    r.readString("source", cal.source, true);
    r.readDouble("matmul_efficiency", cal.matmulEfficiency, 0.0, 1.0, true);
    r.readDouble("attention_efficiency", cal.attentionEfficiency, 0.0, 1.0, true);
    r.readScaled("memory_bandwidth_GBps", cal.memoryBandwidth, 1e9, 0.0, 1e6, true);
    r.readScaled("kernel_overhead_us", cal.kernelOverhead, 1e-6, 0.0, 1e6);
    r.readScaled("intra_node_bus_bandwidth_GBps", cal.intraBandwidth, 1e9, 0.0, 1e6, true);
    r.readScaled("inter_node_bus_bandwidth_GBps", cal.interBandwidth, 1e9, 0.0, 1e6, true);
    r.readScaled("intra_node_latency_us", cal.intraLatency, 1e-6, 0.0, 1e6);
    r.readScaled("inter_node_latency_us", cal.interLatency, 1e-6, 0.0, 1e6);
    r.rejectUnknownKeys();
}

void readCluster(const json& object, ClusterSpec& cluster, std::vector<SpecError>& errors)
{
    ObjectReader r(object, "cluster", errors);
    std::string preset;
    std::string device;
    const bool hasPreset = r.readString("preset", preset);
    const bool hasDevice = r.readString("device", device);
    if (hasPreset) {
        if (auto c = clusterPreset(preset))
            cluster = *c;
        else
            r.fail("preset", "unknown cluster preset '" + preset + "'; " +
                                 suggestion(preset, toStrings(clusterPresetNames())) + "use " +
                                 joinOr(toStrings(clusterPresetNames())) +
                                 ", or describe nodes, devices_per_node and device");
    }
    if (hasDevice) {
        if (auto d = devicePreset(device))
            cluster.device = *d;
        else
            r.fail("device", "unknown device '" + device + "'; " + suggestion(device, toStrings(devicePresetNames())) +
                                 "use " + joinOr(toStrings(devicePresetNames())));
    } else if (!hasPreset) {
        r.fail("device", "is required without a preset: use " + joinOr(toStrings(devicePresetNames())));
    }
    const bool hasNodes = r.readInt("nodes", cluster.nodes, 1, kMaxDegree, !hasPreset);
    const bool hasDevices = r.readInt("devices_per_node", cluster.devicesPerNode, 1, 1024, !hasPreset);
    if (!r.readInt("nvlink_domain", cluster.nvlinkDomain, 1, 65536) && (hasNodes || hasDevices) && !hasPreset)
        cluster.nvlinkDomain = cluster.devicesPerNode;
    r.readScaled("intra_node_bandwidth_GBps", cluster.intraBandwidth, 1e9, 0.0, 1e6, true);
    r.readScaled("inter_node_bandwidth_GBps", cluster.interBandwidth, 1e9, 0.0, 1e6, true);
    r.readScaled("intra_node_latency_us", cluster.intraLatency, 1e-6, 0.0, 1e6);
    r.readScaled("inter_node_latency_us", cluster.interLatency, 1e-6, 0.0, 1e6);
    r.readDouble("compute_efficiency", cluster.computeEfficiency, 0.0, 1.0, true);
    if (const json* calibration = r.object("calibration"))
        readCalibration(*calibration, r.pathOf("calibration"), cluster.calibration, errors);
    r.rejectUnknownKeys();

    if (!hasPreset) {
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
    if (cluster.devices() > kMaxDegree)
        r.fail("nodes", std::to_string(cluster.nodes) + " nodes x " + std::to_string(cluster.devicesPerNode) +
                            " devices = " + withThousands(cluster.devices()) + " devices; Meshbench plans up to " +
                            withThousands(kMaxDegree) + " devices");
    if (cluster.nvlinkDomain % cluster.devicesPerNode != 0 && cluster.devicesPerNode % cluster.nvlinkDomain != 0)
        r.fail("nvlink_domain", "nvlink_domain=" + std::to_string(cluster.nvlinkDomain) +
                                    " must divide devices_per_node=" + std::to_string(cluster.devicesPerNode) +
                                    " or be a multiple of it (e.g. 72 for an NVL72 rack of 4-GPU trays)");
}

// The settings of one data source; those of the other are named as such, so that the fix is clear.
// The Markov chain's bounds come from the model: order up to seq_len, branching up to vocab.
void readData(ObjectReader& parent, const json& object, DataSpec& data, const ModelSpec& model,
              std::vector<SpecError>& errors)
{
    ObjectReader r(object, parent.pathOf("data"), errors);
    if (!r.readEnum("source", data.source, kDataSources) && r.present("source"))
        return;  // the other settings depend on the source
    const bool markov = data.source == DataSource::Markov;
    if (markov) {
        r.readInt("order", data.order, 1, model.seqLen > 0 ? model.seqLen : 100'000'000);
        int branching = 0;
        if (r.readInt("branching", branching, 2, model.vocab >= 2 ? model.vocab : 100'000'000))
            data.branching = branching;
    } else {
        if (r.readString("path", data.path, true) && data.path.empty())
            r.fail("path", "is empty: give the path of a flat uint16/uint32 token file");
        if (!r.readEnum("dtype", data.dtype, kTokenDtypes) && !r.present("dtype"))
            r.fail("dtype", "is required for a token file: \"uint16\" (nanoGPT's prepare.py) or \"uint32\"");
    }
    constexpr std::array<const char*, 2> kFileKeys{"path", "dtype"}, kMarkovKeys{"order", "branching"};
    for (const char* key : markov ? kFileKeys : kMarkovKeys)
        if (r.present(key)) {
            r.fail(key, std::string("is a setting of the ") + (markov ? "file" : "markov") +
                            " source; set train.data.source to \"" + (markov ? "file" : "markov") + "\" or remove it");
            r.excuse(key);
        }
    r.rejectUnknownKeys();
}

void readTrain(const json& object, TrainSpec& train, const ModelSpec& model, std::vector<SpecError>& errors)
{
    ObjectReader r(object, "train", errors);
    r.readInt("steps", train.steps, 0, 1'000'000'000);
    r.readDouble("lr", train.lr, 0.0, 10.0, true);
    r.readInt("warmup_steps", train.warmupSteps, 0, 1'000'000'000);
    r.readInt("decay_steps", train.decaySteps, 0, 1'000'000'000);
    r.readDouble("min_lr", train.minLr, 0.0, 10.0);
    r.readDouble("weight_decay", train.weightDecay, 0.0, 10.0);
    r.readDouble("beta1", train.beta1, 0.0, 0.999999);
    r.readDouble("beta2", train.beta2, 0.0, 0.999999);
    r.readDouble("eps", train.eps, 0.0, 1.0, true);
    r.readDouble("grad_clip", train.gradClip, 0.0, 1e9);
    r.readInt("seed", train.seed, 0, std::int64_t(1) << 62);
    if (const json* data = r.object("data"))
        readData(r, *data, train.data, model, errors);
    r.rejectUnknownKeys();
}

// The Markov source (the default) draws from at least two tokens.
void validateData(const JobSpec& spec, std::vector<SpecError>& errors)
{
    if (spec.train.data.source == DataSource::Markov && spec.model.vocab < 2)
        errors.push_back({"model.vocab", "vocab=" + std::to_string(spec.model.vocab) +
                                             " is too small for the markov data source, which needs 2 tokens or "
                                             "more; raise model.vocab or set train.data to a token file"});
}

std::string listValues(const std::vector<std::int64_t>& values, std::string_view name)
{
    if (values.empty())
        return "no " + std::string(name) + " value fits";
    std::vector<std::string> text;
    const std::size_t shown = std::min<std::size_t>(values.size(), 10);
    for (std::size_t i = 0; i < shown; ++i)
        text.push_back(std::to_string(values[i]));
    if (shown < values.size())
        text.push_back("... (" + std::to_string(values.size()) + " in all)");
    return "use " + std::string(name) + " " + joinOr(text);
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

std::string_view normName(Norm n) { return nameOf(kNorms, n); }
std::string_view activationName(Activation a) { return nameOf(kActivations, a); }
std::string_view recomputeName(Recompute r) { return nameOf(kRecomputes, r); }
std::string_view gradDtypeName(GradDtype g) { return nameOf(kGradDtypes, g); }
std::string_view activationDtypeName(ActivationDtype a) { return nameOf(kActivationDtypes, a); }
std::string_view rankOrderName(RankOrder o) { return nameOf(kOrders, o); }
std::string_view backendName(BackendKind b) { return nameOf(kBackends, b); }
std::string_view dataSourceName(DataSource s) { return nameOf(kDataSources, s); }
std::string_view tokenDtypeName(TokenDtype d) { return nameOf(kTokenDtypes, d); }

std::vector<std::int64_t> divisorsOf(std::int64_t n)
{
    std::vector<std::int64_t> out;
    for (std::int64_t d = 1; d * d <= n; ++d) {
        if (n % d == 0) {
            out.push_back(d);
            if (d != n / d)
                out.push_back(n / d);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::int64_t tensorParallelBound(const ModelSpec& m)
{
    // Megatron's column/row-parallel layers split heads, query groups and both MLPs; the
    // vocabulary-parallel embedding splits the vocabulary.
    std::int64_t bound = std::gcd(std::gcd(std::int64_t(m.heads), std::int64_t(m.kvHeads)), m.ffnHidden);
    bound = std::gcd(bound, m.vocab);
    return m.moe.enabled() ? std::gcd(bound, m.moe.ffnHidden) : bound;
}

int ModelSpec::moeLayersIn(int first, int count) const
{
    if (!moe.enabled() || count <= 0)
        return 0;
    // Multiples of everyNLayers in [first, first + count).
    const int every = moe.everyNLayers;
    const auto upTo = [every](int end) { return end <= 0 ? 0 : (end - 1) / every + 1; };
    return upTo(first + count) - upTo(first);
}

std::vector<SpecError> validateLayout(const JobSpec& spec)
{
    std::vector<SpecError> errors;
    const ModelSpec& m = spec.model;
    const ParallelSpec& p = spec.parallel;
    const ClusterSpec& c = spec.cluster;
    auto fail = [&errors](std::string path, std::string message) {
        errors.push_back({std::move(path), std::move(message)});
    };
    const auto str = [](std::int64_t v) { return std::to_string(v); };

    if (p.worldSize() != c.devices()) {
        const std::int64_t others = std::int64_t(p.pp) * p.tp;
        std::string fix = c.devices() % others == 0 ? "use dp=" + str(c.devices() / others)
                                                    : "choose dp, pp and tp whose product is " + str(c.devices());
        fail("parallel.dp", "dp=" + str(p.dp) + " x pp=" + str(p.pp) + " x tp=" + str(p.tp) + " = " +
                                str(p.worldSize()) + " ranks, but the cluster has " + str(c.devices()) + " devices (" +
                                str(c.nodes) + " nodes x " + str(c.devicesPerNode) + "); " + fix +
                                ", or change cluster.nodes");
    }

    const std::int64_t stages = std::int64_t(p.pp) * p.virtualStages;
    if (m.layers % stages != 0) {
        // Proper divisors first; 1 and one layer per stage only when nothing else divides.
        // Interleaved and the V schedules need two stages, so 1 is offered only to the others.
        const std::int64_t fewestStages =
            p.schedule == ScheduleKind::Interleaved || p.scheduleShape().vShaped() ? 2 : 1;
        std::vector<std::int64_t> fits;
        if (m.layers % p.virtualStages == 0) {
            const std::int64_t perChunk = m.layers / p.virtualStages;
            for (std::int64_t d : divisorsOf(perChunk))
                if (d > 1 && d < perChunk)
                    fits.push_back(d);
            if (fits.empty() && fewestStages == 1)
                fits = perChunk > 1 ? std::vector<std::int64_t>{1, perChunk} : std::vector<std::int64_t>{1};
            else if (fits.empty() && perChunk > 1)
                fits = {perChunk};
        }
        std::string fix;
        if (m.layers % p.virtualStages != 0)
            fix = p.scheduleShape().vShaped() ? std::string(scheduleName(p.schedule)) +
                                                    " places two chunks on every stage; use an even model.layers"
                                              : "use virtual_stages that divides " + str(m.layers);
        else if (fits.empty())
            fix = "no pp of 2 or more fits " + str(m.layers / p.virtualStages) +
                  " layers per chunk; use more layers or another schedule";
        else
            fix = listValues(fits, "pp");
        fail("parallel.pp", str(m.layers) + " layers do not divide into pp=" + str(p.pp) +
                                " x virtual_stages=" + str(p.virtualStages) + " stages; " + fix);
    }

    const std::vector<std::int64_t> tpFits = divisorsOf(tensorParallelBound(m));
    const std::string tpFix = listValues(tpFits, "tp");
    if (m.heads % p.tp != 0)
        fail("parallel.tp", str(m.heads) + " attention heads do not split over tp=" + str(p.tp) + "; " + tpFix);
    if (m.kvHeads % p.tp != 0)
        fail("parallel.tp",
             str(m.kvHeads) + " kv_heads (query groups) do not split over tp=" + str(p.tp) + "; " + tpFix);
    if (m.ffnHidden % p.tp != 0)
        fail("parallel.tp", "ffn_hidden=" + str(m.ffnHidden) + " does not split over tp=" + str(p.tp) + "; " + tpFix);
    if (m.moe.enabled() && m.moe.ffnHidden % p.tp != 0)
        fail("parallel.tp",
             "moe_ffn_hidden=" + str(m.moe.ffnHidden) + " does not split over tp=" + str(p.tp) + "; " + tpFix);
    if (m.vocab % p.tp != 0) {
        const std::int64_t padded = (m.vocab + p.tp - 1) / p.tp * p.tp;
        fail("parallel.tp", "vocab=" + str(m.vocab) + " does not split over tp=" + str(p.tp) + "; pad model.vocab to " +
                                str(padded) + " (as Megatron pads it) or " + tpFix);
    }
    if (p.sequenceParallel && m.seqLen % p.tp != 0)
        fail("parallel.sequence_parallel", "seq_len=" + str(m.seqLen) + " does not split over tp=" + str(p.tp) +
                                               " for sequence parallelism; use a seq_len that is a multiple of " +
                                               str(p.tp) + " or set sequence_parallel to false");

    // EP is carved out of DP; experts are sharded over the ep ranks.
    if (p.ep > 1 && !m.moe.enabled())
        fail("parallel.ep", "ep=" + str(p.ep) + " needs an MoE model; set parallel.ep to 1 or add model.moe");
    if (p.dp % p.ep != 0) {
        std::vector<std::int64_t> fits;
        for (std::int64_t d : divisorsOf(p.dp))
            if (!m.moe.enabled() || m.moe.experts % d == 0)
                fits.push_back(d);
        fail("parallel.ep", "ep=" + str(p.ep) + " must divide dp=" + str(p.dp) + " (EP is carved out of DP); " +
                                listValues(fits, "ep"));
    }
    if (m.moe.enabled() && m.moe.experts % p.ep != 0) {
        std::vector<std::int64_t> fits;
        for (std::int64_t d : divisorsOf(m.moe.experts))
            if (p.dp % d == 0)
                fits.push_back(d);
        fail("parallel.ep",
             str(m.moe.experts) + " experts do not shard evenly over ep=" + str(p.ep) + "; " + listValues(fits, "ep"));
    }

    // DeepSpeed's pipeline engine refuses ZeRO-2/3 with pipeline parallelism: gradients are
    // accumulated over micro-batches, which ZeRO-2/3 would reduce-scatter after every one.
    if (p.zero >= 2 && p.pp > 1)
        fail("parallel.zero", "ZeRO-" + str(p.zero) + " cannot be combined with pipeline parallelism (pp=" + str(p.pp) +
                                  "); use zero 0 or 1 (Megatron's distributed optimizer), or pp 1");

    if (p.scheduleShape().slotCount() > kMaxScheduleSlots)
        fail("parallel.microbatches",
             "pp=" + str(p.pp) + " x microbatches=" + str(p.microbatches) +
                 " x virtual_stages=" + str(p.virtualStages) + " = " + withThousands(p.scheduleShape().slotCount()) +
                 " pipeline slots; the planner simulates at most " + withThousands(kMaxScheduleSlots) +
                 ": use fewer microbatches with a larger micro_batch_size");
    if (const std::string chunks = validateVirtualStages(p.scheduleShape()); !chunks.empty())
        fail("parallel.virtual_stages", chunks);
    else if (const std::string why = validateScheduleShape(p.scheduleShape()); !why.empty())
        fail("parallel.schedule", why);
    return errors;
}

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
    ObjectReader top(document, "", result.errors);
    top.readString("name", spec.name);
    if (const json* model = top.object("model", true))
        readModel(*model, spec.model, result.errors);
    if (const json* parallel = top.object("parallel"))
        readParallel(*parallel, spec.parallel, result.errors);
    bool activationsGiven = false;
    if (const json* precision = top.object("precision"))
        activationsGiven = readPrecision(*precision, spec.precision, result.errors);
    if (const json* cluster = top.object("cluster", true))
        readCluster(*cluster, spec.cluster, result.errors);
    // The cpu device runs meshbench-agent's fp32 model; any other device is priced as Megatron-LM.
    if (!activationsGiven)
        spec.precision.activations = spec.cluster.device.kind == "cpu" ? ActivationDtype::Fp32 : ActivationDtype::Bf16;
    if (const json* train = top.object("train"))
        readTrain(*train, spec.train, spec.model, result.errors);
    top.readEnum("backend", spec.backend, kBackends);
    top.rejectUnknownKeys();
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

namespace {

json toJson(const DataSpec& data)
{
    if (data.source == DataSource::File)
        return {{"source", "file"}, {"path", data.path}, {"dtype", tokenDtypeName(data.dtype)}};
    json out = {{"source", "markov"}, {"order", data.order}};
    if (data.branching)
        out["branching"] = *data.branching;
    return out;
}

}  // namespace

json toJson(const CalibrationSpec& cal)
{
    json out = {{"source", cal.source}};
    auto put = [&](const char* key, double value, double scale, bool set) {
        if (set)
            out[key] = value * scale;
    };
    put("matmul_efficiency", cal.matmulEfficiency, 1.0, cal.matmulEfficiency > 0);
    put("attention_efficiency", cal.attentionEfficiency, 1.0, cal.attentionEfficiency > 0);
    put("memory_bandwidth_GBps", cal.memoryBandwidth, 1e-9, cal.memoryBandwidth > 0);
    put("kernel_overhead_us", cal.kernelOverhead, 1e6, cal.kernelOverhead >= 0);
    put("intra_node_bus_bandwidth_GBps", cal.intraBandwidth, 1e-9, cal.intraBandwidth > 0);
    put("inter_node_bus_bandwidth_GBps", cal.interBandwidth, 1e-9, cal.interBandwidth > 0);
    put("intra_node_latency_us", cal.intraLatency, 1e6, cal.intraLatency >= 0);
    put("inter_node_latency_us", cal.interLatency, 1e6, cal.interLatency >= 0);
    return out;
}

std::optional<CalibrationSpec> readCalibrationProfile(const json& profile, std::vector<SpecError>& errors)
{
    if (!profile.is_object()) {
        errors.push_back({"", "a calibration profile is a JSON object, as `meshbench-engine calibrate --out` writes"});
        return std::nullopt;
    }
    const std::size_t before = errors.size();
    CalibrationSpec cal;
    readCalibration(profile, "", cal, errors);
    if (errors.size() != before)
        return std::nullopt;
    return cal;
}

json toJson(const JobSpec& spec)
{
    const ModelSpec& m = spec.model;
    const ParallelSpec& p = spec.parallel;
    const ClusterSpec& c = spec.cluster;
    json model = {{"layers", m.layers},
                  {"hidden", m.hidden},
                  {"heads", m.heads},
                  {"kv_heads", m.kvHeads},
                  {"ffn_hidden", m.ffnHidden},
                  {"vocab", m.vocab},
                  {"seq_len", m.seqLen},
                  {"norm", normName(m.norm)},
                  {"activation", activationName(m.activation)},
                  {"tied_embeddings", m.tiedEmbeddings}};
    if (m.moe.enabled())
        model["moe"] = {{"experts", m.moe.experts},
                        {"top_k", m.moe.topK},
                        {"moe_ffn_hidden", m.moe.ffnHidden},
                        {"every_n_layers", m.moe.everyNLayers},
                        {"capacity_factor", m.moe.capacityFactor},
                        {"aux_loss_coef", m.moe.auxLossCoef}};
    json cluster = {{"nodes", c.nodes},
                    {"devices_per_node", c.devicesPerNode},
                    {"nvlink_domain", c.nvlinkDomain},
                    {"device", c.device.kind},
                    {"intra_node_bandwidth_GBps", c.intraBandwidth / 1e9},
                    {"inter_node_bandwidth_GBps", c.interBandwidth / 1e9},
                    {"intra_node_latency_us", c.intraLatency * 1e6},
                    {"inter_node_latency_us", c.interLatency * 1e6}};
    if (c.computeEfficiency > 0)
        cluster["compute_efficiency"] = c.computeEfficiency;
    if (!c.preset.empty())
        cluster["preset"] = c.preset;
    if (!c.calibration.empty())
        cluster["calibration"] = toJson(c.calibration);
    json out = {{"model", model},
                {"parallel",
                 {{"dp", p.dp},
                  {"pp", p.pp},
                  {"tp", p.tp},
                  {"ep", p.ep},
                  {"zero", p.zero},
                  {"sequence_parallel", p.sequenceParallel},
                  {"recompute", recomputeName(p.recompute)},
                  {"schedule", scheduleName(p.schedule)},
                  {"virtual_stages", p.virtualStages},
                  {"microbatches", p.microbatches},
                  {"micro_batch_size", p.microBatchSize},
                  {"order", rankOrderName(p.order)},
                  {"grad_bucket_mb", p.gradBucketMb},
                  {"overlap_grad_reduce", p.overlapGradReduce},
                  {"overlap_param_gather", p.overlapParamGather},
                  {"tp_comm_overlap", p.tpCommOverlap}}},
                {"precision",
                 {{"grads", gradDtypeName(spec.precision.grads)},
                  {"activations", activationDtypeName(spec.precision.activations)}}},
                {"cluster", cluster},
                {"train",
                 {{"steps", spec.train.steps},
                  {"lr", spec.train.lr},
                  {"warmup_steps", spec.train.warmupSteps},
                  {"decay_steps", spec.train.decaySteps},
                  {"min_lr", spec.train.minLr},
                  {"weight_decay", spec.train.weightDecay},
                  {"beta1", spec.train.beta1},
                  {"beta2", spec.train.beta2},
                  {"eps", spec.train.eps},
                  {"grad_clip", spec.train.gradClip},
                  {"seed", spec.train.seed},
                  {"data", toJson(spec.train.data)}}},
                {"backend", backendName(spec.backend)}};
    if (!spec.name.empty())
        out["name"] = spec.name;
    return out;
}

JobSpec singleDeviceSpec(JobSpec spec)
{
    ParallelSpec& p = spec.parallel;
    p.microbatches = int(p.globalBatch() / p.microBatchSize);
    p.dp = p.pp = p.tp = p.ep = 1;
    p.virtualStages = 1;
    // One stage has no pipeline to interleave or fold into a V: those schedules run as the
    // one-stage schedule with the same backward (zb-h1 splits W off as zb-v and dualpipev do).
    if (p.schedule == ScheduleKind::Interleaved)
        p.schedule = ScheduleKind::OneFOneB;
    else if (p.scheduleShape().vShaped())
        p.schedule = ScheduleKind::ZeroBubbleH1;
    p.zero = 0;
    p.sequenceParallel = false;
    spec.cluster.nodes = 1;
    spec.cluster.devicesPerNode = 1;
    spec.cluster.nvlinkDomain = 1;
    return spec;
}

JobSpec specAsRun(JobSpec spec, std::size_t ranks)
{
    if (ranks == 1 && spec.parallel.worldSize() > 1)
        return singleDeviceSpec(std::move(spec));
    return spec;
}

}  // namespace meshbench::plan
