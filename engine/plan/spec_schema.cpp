#include "spec_schema.h"

#include "presets.h"

#include <cstdint>
#include <type_traits>

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

template <typename E, std::size_t N>
std::string_view nameOf(const EnumName<E> (&table)[N], E value)
{
    for (const auto& entry : table)
        if (entry.value == value)
            return entry.name;
    return "?";
}

std::vector<std::string> scheduleNames()
{
    std::vector<std::string> names;
    for (ScheduleKind kind : scheduleKinds())
        names.emplace_back(scheduleName(kind));
    return names;
}

template <typename Names>
std::vector<std::string> toStrings(const Names& names)
{
    return std::vector<std::string>(std::begin(names), std::end(names));
}

// The spec's member at the end of a chain of member pointers: memberOf<&JobSpec::parallel, &ParallelSpec::dp>.
template <auto... Chain>
auto& memberOf(JobSpec& spec)
{
    return (spec.*....*Chain);
}
template <auto... Chain>
const auto& memberOf(const JobSpec& spec)
{
    return (spec.*....*Chain);
}

// Figures written in the units people read them in. Cluster bandwidths are written back by
// division and a calibration's by multiplication, as each was before the schema: a spec or a
// profile written out keeps the bits it always had.
const SpecUnit kGBps{"GB/s", [](double v) { return v * 1e9; }, [](double s) { return s / 1e9; }};
const SpecUnit kProfileGBps{"GB/s", [](double v) { return v * 1e9; }, [](double s) { return s * 1e-9; }};
const SpecUnit kMicroseconds{"µs", [](double v) { return v * 1e-6; }, [](double s) { return s * 1e6; }};
const SpecUnit kMiB{"MiB", [](double v) { return v; }, [](double s) { return s; }};

// One row, filled in by chained calls.
struct Row : SpecKey {
    Row(std::string_view keyPath, SpecType kind)
    {
        path = keyPath;
        type = kind;
    }
    // Sets one field and hands the row on.
    template <typename Field, typename Value>
    Row&& with(Field SpecKey::*field, Value&& value) &&
    {
        this->*field = std::forward<Value>(value);
        return std::move(*this);
    }
    Row&& says(std::string_view name, std::string_view meaning) &&
    {
        return std::move(*this).with(&SpecKey::label, name).with(&SpecKey::help, meaning);
    }
    Row&& hidden(std::string_view why) && { return std::move(*this).with(&SpecKey::notShown, why); }
    Row&& hint(std::string_view text) && { return std::move(*this).with(&SpecKey::placeholder, text); }
    Row&& needed(std::string_view message = {}) &&
    {
        return std::move(*this).with(&SpecKey::required, true).with(&SpecKey::requiredText, message);
    }
    Row&& neededUnless(std::string_view other) && { return std::move(*this).with(&SpecKey::requiredUnless, other); }
    Row&& byDefault(std::string_view text, std::function<void(JobSpec&)> derive = {}) &&
    {
        return std::move(*this).with(&SpecKey::defaultText, text).with(&SpecKey::deriveDefault, std::move(derive));
    }
    Row&& exclusiveMin() && { return std::move(*this).with(&SpecKey::minExclusive, true); }
    Row&& boundBy(std::string_view other) && { return std::move(*this).with(&SpecKey::maxFrom, other); }
    Row&& in(const SpecUnit& u) && { return std::move(*this).with(&SpecKey::unit, &u); }
    Row&& unknownAs(std::string_view what, std::string_view tail = {}) &&
    {
        return std::move(*this).with(&SpecKey::noun, what).with(&SpecKey::otherwise, tail);
    }
    Row&& only(std::string_view key, std::string_view value) &&
    {
        return std::move(*this).with(&SpecKey::onlyWhenKey, key).with(&SpecKey::onlyWhenValue, value);
    }
    Row&& searched() && { return std::move(*this).with(&SpecKey::layout, true); }
    Row&& writtenWhen(std::function<bool(const JobSpec&)> set) &&
    {
        return std::move(*this).with(&SpecKey::isSet, std::move(set));
    }
};

Row section(std::string_view path) { return Row(path, SpecType::Section); }

// The row of the member at the end of Chain, set from a JSON value read as `Read`.
template <SpecType Type, typename Read, auto... Chain>
Row member(std::string_view path)
{
    Row r(path, Type);
    r.getStored = [](const JobSpec& s) { return json(memberOf<Chain...>(s)); };
    r.setStored = [](JobSpec& s, const json& v) {
        auto& stored = memberOf<Chain...>(s);
        stored = std::remove_reference_t<decltype(stored)>(v.get<Read>());
        return true;
    };
    return r;
}

Row ranged(Row r, double min, double max)
{
    r.min = min;
    r.max = max;
    return r;
}

template <auto... Chain>
Row integer(std::string_view path, double min, double max)
{
    return ranged(member<SpecType::Integer, std::int64_t, Chain...>(path), min, max);
}
template <auto... Chain>
Row number(std::string_view path, double min, double max)
{
    return ranged(member<SpecType::Number, double, Chain...>(path), min, max);
}
template <auto... Chain>
Row flag(std::string_view path)
{
    return member<SpecType::Flag, bool, Chain...>(path);
}
template <auto... Chain>
Row text(std::string_view path)
{
    return member<SpecType::Text, std::string, Chain...>(path);
}
template <auto... Chain>
Row textList(std::string_view path)
{
    return member<SpecType::TextList, std::vector<std::string>, Chain...>(path);
}
template <auto... Chain>
Row textMap(std::string_view path)
{
    return member<SpecType::TextMap, std::map<std::string, std::string>, Chain...>(path);
}

template <const auto& Table, auto... Chain>
Row choice(std::string_view path)
{
    Row r(path, SpecType::Choice);
    for (const auto& entry : Table)
        r.choices.emplace_back(entry.name);
    r.getStored = [](const JobSpec& s) { return json(nameOf(Table, memberOf<Chain...>(s))); };
    r.setStored = [](JobSpec& s, const json& v) {
        for (const auto& entry : Table)
            if (entry.name == v.get<std::string>()) {
                memberOf<Chain...>(s) = entry.value;
                return true;
            }
        return false;
    };
    return r;
}

constexpr std::string_view kNotYet = "not a field yet: the Designer keeps what the job's JSON gives";
constexpr std::string_view kTraining =
    "a setting of the training run, not of the plan the Designer prices: kept as the job's JSON gives it";
constexpr std::string_view kCalibrated =
    "fitted to stored sessions (meshbench-engine calibrate, or the Designer's calibration), not typed in";

// The figures of a calibration profile, each replacing the device table's or the cluster's: a share
// of the device's peak (no unit, up to 1), a bandwidth or a time. A share or bandwidth is set when
// above zero, a time when zero or more.
struct CalibratedFigure {
    std::string_view path;
    double CalibrationSpec::*member;
    const SpecUnit* unit;
    std::string_view replaces;
    std::string_view label;
    std::string_view help;
};

// clang-format off
const CalibratedFigure kCalibratedFigures[] = {
    {"cluster.calibration.matmul_efficiency", &CalibrationSpec::matmulEfficiency, nullptr, "the device table's", "GEMM efficiency", "share of the device's peak its large GEMMs reach"},
    {"cluster.calibration.attention_efficiency", &CalibrationSpec::attentionEfficiency, nullptr, "the device table's", "Attention efficiency", "share of the device's peak attention reaches"},
    {"cluster.calibration.memory_bandwidth_GBps", &CalibrationSpec::memoryBandwidth, &kProfileGBps, "the device table's", "Memory bandwidth GB/s", "the device memory's bandwidth"},
    {"cluster.calibration.kernel_overhead_us", &CalibrationSpec::kernelOverhead, &kMicroseconds, "the device table's", "Kernel overhead (µs)", "time per kernel or op"},
    {"cluster.calibration.intra_node_bus_bandwidth_GBps", &CalibrationSpec::intraBandwidth, &kProfileGBps, "the cluster's", "NVLink bus GB/s", "bus bandwidth per device inside an NVLink domain"},
    {"cluster.calibration.inter_node_bus_bandwidth_GBps", &CalibrationSpec::interBandwidth, &kProfileGBps, "the cluster's", "Network bus GB/s", "bus bandwidth per device across the network"},
    {"cluster.calibration.intra_node_latency_us", &CalibrationSpec::intraLatency, &kMicroseconds, "the cluster's", "NVLink latency (µs)", "latency per message inside an NVLink domain"},
    {"cluster.calibration.inter_node_latency_us", &CalibrationSpec::interLatency, &kMicroseconds, "the cluster's", "Network latency (µs)", "latency per message across the network"},
};
// clang-format on

using J = JobSpec;
using M = ModelSpec;
using E = MoeSpec;
using P = ParallelSpec;
using R = PrecisionSpec;
using C = ClusterSpec;
using T = TrainSpec;
using D = DataSpec;
using L = LaunchSpec;

std::vector<SpecKey> makeSchema()
{
    std::vector<Row> rows;
    const auto add = [&rows](Row&& row) { rows.push_back(std::move(row)); };

    // The top level, in the order the reader asks for its keys.
    add(text<&J::name>("name")
            .says("Name", "a name for the job, shown by `plan` and stored with the session")
            .byDefault("none")
            .writtenWhen([](const J& s) { return !s.name.empty(); })
            .hidden("a label, not a setting: the Designer keeps the name the job's JSON gives"));
    add(section("model").needed().says("Model", "The transformer: its size, and its experts if it is an MoE."));
    add(integer<&J::model, &M::layers>("model.layers", 1, 10000).needed().says("Layers", "transformer layers"));
    add(integer<&J::model, &M::hidden>("model.hidden", 1, 1 << 20)
            .needed()
            .says("Hidden", "hidden size h; must divide by `heads`"));
    add(integer<&J::model, &M::heads>("model.heads", 1, 65536).needed().says("Heads", "attention heads"));
    add(integer<&J::model, &M::kvHeads>("model.kv_heads", 1, 65536)
            .says("KV heads", "key/value heads (GQA query groups); must divide `heads`")
            .byDefault("`heads`", [](J& s) { s.model.kvHeads = s.model.heads; }));
    add(integer<&J::model, &M::ffnHidden>("model.ffn_hidden", 1, 1 << 24)
            .says("FFN hidden", "MLP hidden size f")
            .byDefault("4·`hidden`", [](J& s) { s.model.ffnHidden = 4 * s.model.hidden; }));
    add(integer<&J::model, &M::vocab>("model.vocab", 1, 100'000'000)
            .needed()
            .says("Vocabulary", "vocabulary size V (pad it to a multiple of tp)"));
    add(integer<&J::model, &M::seqLen>("model.seq_len", 1, 100'000'000)
            .needed()
            .says("Sequence length", "sequence length s"));
    add(choice<kNorms, &J::model, &M::norm>("model.norm").says("Norm", "the normalisation layers"));
    add(choice<kActivations, &J::model, &M::activation>("model.activation")
            .says("Activation", "the MLP's activation; `swiglu` is gated, with 3 weight matrices"));
    add(flag<&J::model, &M::tiedEmbeddings>("model.tied_embeddings")
            .says("Tied embeddings", "the output layer shares the input embedding")
            .hidden(kNotYet));
    add(section("model.moe")
            .byDefault("none: a dense model")
            .says("Mixture of experts", "The section makes the model an MoE.")
            .writtenWhen([](const J& s) { return s.model.moe.enabled(); }));
    add(integer<&J::model, &M::moe, &E::experts>("model.moe.experts", 1, 65536)
            .needed()
            .says("MoE experts", "experts per MoE layer")
            .hint("Empty for a dense model"));
    add(integer<&J::model, &M::moe, &E::topK>("model.moe.top_k", 1, 65536)
            .says("Top-k", "experts per token; at most `experts`"));
    add(integer<&J::model, &M::moe, &E::ffnHidden>("model.moe.moe_ffn_hidden", 1, 1 << 24)
            .says("Expert FFN hidden", "hidden size of one expert")
            .byDefault("`model.ffn_hidden`", [](J& s) { s.model.moe.ffnHidden = s.model.ffnHidden; }));
    add(integer<&J::model, &M::moe, &E::everyNLayers>("model.moe.every_n_layers", 1, 10000)
            .says("MoE every n layers",
                  "layer i is an MoE layer when i mod N = 0 (Megatron's `moe_layer_freq`); at most `model.layers`"));
    add(number<&J::model, &M::moe, &E::capacityFactor>("model.moe.capacity_factor", 0.0, 1000.0)
            .exclusiveMin()
            .says("Capacity factor", "expert capacity = ceil(tokens·k/E · factor)"));
    add(number<&J::model, &M::moe, &E::auxLossCoef>("model.moe.aux_loss_coef", 0.0, 1.0)
            .says("Aux-loss coefficient", "load-balancing loss coefficient"));

    add(section("parallel").says("Parallel layout", "How the job is laid out over the devices."));
    add(integer<&J::parallel, &P::dp>("parallel.dp", 1, kMaxSpecDegree)
            .searched()
            .says("Data parallel (dp)", "data-parallel degree; dp·pp·tp must equal the cluster's devices"));
    add(integer<&J::parallel, &P::pp>("parallel.pp", 1, kMaxSpecDegree)
            .searched()
            .says("Pipeline parallel (pp)", "pipeline-parallel degree (stages)"));
    add(integer<&J::parallel, &P::tp>("parallel.tp", 1, kMaxSpecDegree)
            .searched()
            .says("Tensor parallel (tp)",
                  "tensor-parallel degree; must divide heads, `kv_heads`, `ffn_hidden` and `vocab`"));
    add(integer<&J::parallel, &P::ep>("parallel.ep", 1, kMaxSpecDegree)
            .searched()
            .says("Expert parallel (ep)",
                  "expert-parallel degree, carved out of dp: must divide dp and the expert count"));
    add(integer<&J::parallel, &P::zero>("parallel.zero", 0, 3)
            .searched()
            .says("ZeRO stage",
                  "ZeRO stage. 1 is Megatron's distributed optimizer; 2 and 3 need pp = 1, as in DeepSpeed"));
    add(flag<&J::parallel, &P::sequenceParallel>("parallel.sequence_parallel")
            .searched()
            .says("Sequence parallel", "split norms and dropout along the sequence over tp (Megatron SP)"));
    add(choice<kRecomputes, &J::parallel, &P::recompute>("parallel.recompute")
            .searched()
            .says("Recompute",
                  "activation recomputation: `selective` recomputes the attention scores, `full` each layer"));
    {
        Row scheduleRow("parallel.schedule", SpecType::Choice);
        scheduleRow.choices = scheduleNames();
        scheduleRow.getStored = [](const J& s) { return json(scheduleName(s.parallel.schedule)); };
        scheduleRow.setStored = [](J& s, const json& v) {
            return parseScheduleName(v.get<std::string>(), s.parallel.schedule);
        };
        add(std::move(scheduleRow)
                .searched()
                .says("Schedule", "the pipeline schedule ([Pipeline schedules](schedules.md))"));
    }
    add(integer<&J::parallel, &P::virtualStages>("parallel.virtual_stages", 1, 1024)
            .searched()
            .says("Virtual stages",
                  "model chunks per stage: 2 or more with `interleaved`, exactly 2 with `zb-v` and `dualpipev`, "
                  "else 1. layers must divide by pp·virtual_stages"));
    add(integer<&J::parallel, &P::microbatches>("parallel.microbatches", 1, kMaxSpecDegree)
            .searched()
            .says("Micro-batches",
                  "micro-batches per data-parallel replica and step. Interleaved needs a multiple of pp, as "
                  "Megatron does; `dualpipev` at least 2·pp"));
    add(integer<&J::parallel, &P::microBatchSize>("parallel.micro_batch_size", 1, 65536)
            .searched()
            .says("Micro-batch size", "sequences per micro-batch"));
    add(choice<kOrders, &J::parallel, &P::order>("parallel.order")
            .says("Rank order", "rank order, innermost first: `tp-dp-pp` (Megatron's tp-cp-ep-dp-pp) or `tp-pp-dp`")
            .hidden(kNotYet));
    add(number<&J::parallel, &P::gradBucketMb>("parallel.grad_bucket_mb", 0.0, 1e6)
            .exclusiveMin()
            .in(kMiB)
            .says("Gradient bucket (MiB)", "size of the data-parallel gradient buckets (PyTorch DDP's `bucket_cap_mb`)")
            .hidden(kNotYet));
    add(flag<&J::parallel, &P::overlapGradReduce>("parallel.overlap_grad_reduce")
            .searched()
            .says("Overlap gradient reduction",
                  "start each bucket's reduction during the backward, as soon as its gradients are final "
                  "(Megatron's `--overlap-grad-reduce`); `false` reduces every bucket after the backward")
            .hidden(kNotYet));
    add(flag<&J::parallel, &P::overlapParamGather>("parallel.overlap_param_gather")
            .searched()
            .says("Overlap parameter gather",
                  "plan ZeRO's weight all-gather under the next step's first forward (Megatron's "
                  "`--overlap-param-gather`); planned only, the agent refuses it")
            .hidden(kNotYet));
    add(flag<&J::parallel, &P::tpCommOverlap>("parallel.tp_comm_overlap")
            .searched()
            .says("Overlap TP communication",
                  "plan TP's collectives cut into tp chunks pipelined with their GEMMs (Megatron's "
                  "`--tp-comm-overlap`; only a TP group inside one NVLink domain overlaps, as Transformer Engine "
                  "exchanges the chunks through CUDA IPC); planned only, the agent refuses it")
            .hidden(kNotYet));

    add(section("precision").says("Precision", "The dtypes the memory plan counts."));
    add(choice<kGradDtypes, &J::precision, &R::grads>("precision.grads")
            .says("Gradient dtype",
                  "gradient dtype: `fp32` (Megatron, 18 bytes per parameter) or `bf16` (the ZeRO paper, 16)")
            .hidden(kNotYet));
    add(choice<kActivationDtypes, &J::precision, &R::activations>("precision.activations")
            .says("Activation dtype",
                  "whose activations the plan counts: `bf16` what Megatron-LM keeps (Korthikanti et al. 2022, "
                  "2-byte activations), `fp32` exactly what meshbench-agent keeps (its fp32 model on every backend: "
                  "the Activations category of its memory ledger, tensor by tensor, with the stage's schedule op by "
                  "op)")
            .byDefault("`fp32` when `cluster.device` is `cpu`, else `bf16`")
            .hidden(kNotYet));

    add(section("cluster").needed().says(
        "Cluster", "Give either a `preset` or `nodes`, `devices_per_node` and `device`. Any other key overrides the "
                   "preset."));
    {
        Row presetRow("cluster.preset", SpecType::Preset);
        presetRow.choices = toStrings(clusterPresetNames());
        presetRow.getStored = [](const J& s) { return json(s.cluster.preset); };
        presetRow.setStored = [](J& s, const json& v) {
            std::optional<ClusterSpec> cluster = clusterPreset(v.get<std::string>());
            if (cluster)
                s.cluster = std::move(*cluster);
            return cluster.has_value();
        };
        add(std::move(presetRow)
                .unknownAs("cluster preset", ", or describe nodes, devices_per_node and device")
                .writtenWhen([](const J& s) { return !s.cluster.preset.empty(); })
                .byDefault("none")
                .says("Preset",
                      "a named cluster, filling every other key; `local-cpu` is one cpu device per core of this "
                      "machine"));
    }
    {
        Row deviceRow("cluster.device", SpecType::Choice);
        deviceRow.choices = toStrings(devicePresetNames());
        deviceRow.getStored = [](const J& s) { return json(s.cluster.device.kind); };
        deviceRow.setStored = [](J& s, const json& v) {
            std::optional<DeviceSpec> device = devicePreset(v.get<std::string>());
            if (device)
                s.cluster.device = std::move(*device);
            return device.has_value();
        };
        add(std::move(deviceRow)
                .unknownAs("device")
                .byDefault("required without `preset`")
                .says("Device", "the device kind: its datasheet dense bf16 peak, memory and bandwidth"));
    }
    add(integer<&J::cluster, &C::nodes>("cluster.nodes", 1, kMaxSpecDegree)
            .neededUnless("cluster.preset")
            .says("Nodes", "nodes in the cluster"));
    add(integer<&J::cluster, &C::devicesPerNode>("cluster.devices_per_node", 1, 1024)
            .neededUnless("cluster.preset")
            .says("Devices per node", "devices in each node"));
    add(integer<&J::cluster, &C::nvlinkDomain>("cluster.nvlink_domain", 1, 65536)
            .byDefault("`devices_per_node`, or the preset's")
            .hint("Devices that share the fast fabric")
            .says("NVLink domain", "devices sharing NVLink: a node, or 72 for an NVL72 rack; divides "
                                   "`devices_per_node` or is a multiple of it"));
    add(number<&J::cluster, &C::intraBandwidth>("cluster.intra_node_bandwidth_GBps", 0.0, 1e6)
            .exclusiveMin()
            .in(kGBps)
            .byDefault("450, or the preset's")
            .says("NVLink GB/s", "bandwidth per device and direction inside an NVLink domain"));
    add(number<&J::cluster, &C::interBandwidth>("cluster.inter_node_bandwidth_GBps", 0.0, 1e6)
            .exclusiveMin()
            .in(kGBps)
            .byDefault("50, or the preset's")
            .says("Network GB/s", "bandwidth per device and direction across the network"));
    add(number<&J::cluster, &C::intraLatency>("cluster.intra_node_latency_us", 0.0, 1e6)
            .in(kMicroseconds)
            .byDefault("3, or the preset's")
            .says("NVLink latency (µs)", "latency per message inside an NVLink domain"));
    add(number<&J::cluster, &C::interLatency>("cluster.inter_node_latency_us", 0.0, 1e6)
            .in(kMicroseconds)
            .byDefault("10, or the preset's")
            .says("Network latency (µs)", "latency per message across the network"));
    add(number<&J::cluster, &C::computeEfficiency>("cluster.compute_efficiency", 0.0, 1.0)
            .exclusiveMin()
            .writtenWhen([](const J& s) { return s.cluster.computeEfficiency > 0; })
            .byDefault("the device table's (0.74 on GPUs, 0.6 on the cpu device)")
            .says("Compute efficiency", "share of peak a large GEMM sustains"));
    add(section("cluster.calibration")
            .byDefault("none: the device table's rates")
            .says("Calibration",
                  "A calibration profile, the object `meshbench-engine calibrate` writes: each rate given replaces "
                  "the device table's.")
            .writtenWhen([](const J& s) { return !s.cluster.calibration.empty(); })
            .hidden(kCalibrated));
    add(text<&J::cluster, &C::calibration, &CalibrationSpec::source>("cluster.calibration.source")
            .needed()
            .says("Fitted to", "what the rates were fitted to, e.g. the session's file name"));
    for (const CalibratedFigure& figure : kCalibratedFigures) {
        Row row(figure.path, SpecType::Number);
        row.max = figure.unit ? 1e6 : 1.0;
        const bool time = figure.unit == &kMicroseconds;  // zero is a time; unset is -1
        row.minExclusive = !time;
        row.unit = figure.unit;
        row.getStored = [member = figure.member](const J& s) { return json(s.cluster.calibration.*member); };
        row.setStored = [member = figure.member](J& s, const json& v) {
            s.cluster.calibration.*member = v.get<double>();
            return true;
        };
        row.isSet = [member = figure.member, time](const J& s) {
            return time ? s.cluster.calibration.*member >= 0 : s.cluster.calibration.*member > 0;
        };
        add(std::move(row).byDefault(figure.replaces).says(figure.label, figure.help));
    }

    add(section("train")
            .says("Training",
                  "The training stack's settings. The learning rate warms up linearly over `warmup_steps`, then "
                  "follows a cosine from `lr` down to `min_lr` at step `decay_steps` and stays there; AdamW as "
                  "Loshchilov & Hutter 2019.")
            .hidden(kTraining));
    add(integer<&J::train, &T::steps>("train.steps", 0, 1'000'000'000).says("Steps", "optimizer steps"));
    add(number<&J::train, &T::lr>("train.lr", 0.0, 10.0).exclusiveMin().says("Learning rate", "peak learning rate"));
    add(integer<&J::train, &T::warmupSteps>("train.warmup_steps", 0, 1'000'000'000)
            .says("Warm-up steps", "linear warm-up length"));
    add(integer<&J::train, &T::decaySteps>("train.decay_steps", 0, 1'000'000'000)
            .says("Decay steps", "the step where the cosine reaches `min_lr` (0: no decay)"));
    add(number<&J::train, &T::minLr>("train.min_lr", 0.0, 10.0)
            .says("Minimum learning rate", "the floor of the cosine decay"));
    add(number<&J::train, &T::weightDecay>("train.weight_decay", 0.0, 10.0)
            .says("Weight decay", "AdamW decoupled weight decay, applied to matrices only"));
    add(number<&J::train, &T::beta1>("train.beta1", 0.0, 0.999999).says("Adam beta1", "AdamW first-moment decay"));
    add(number<&J::train, &T::beta2>("train.beta2", 0.0, 0.999999).says("Adam beta2", "AdamW second-moment decay"));
    add(number<&J::train, &T::eps>("train.eps", 0.0, 1.0).exclusiveMin().says("Adam epsilon", "AdamW epsilon"));
    add(number<&J::train, &T::gradClip>("train.grad_clip", 0.0, 1e9)
            .says("Gradient clip", "global gradient-norm clip (0: off)"));
    add(integer<&J::train, &T::seed>("train.seed", 0, double(std::int64_t(1) << 62))
            .says("Seed", "initialisation and synthetic data"));
    add(section("train.data")
            .says("Data",
                  "Where the tokens come from; checked with the rest of the spec, so `plan` refuses what the "
                  "agents would refuse. The keys of the other source are refused with a hint to change `source`."));
    add(choice<kDataSources, &J::train, &T::data, &D::source>("train.data.source")
            .says("Data source", "`markov`, a synthetic Markov chain, or `file`, a flat token file (nanoGPT's)"));
    add(integer<&J::train, &T::data, &D::order>("train.data.order", 1, 100'000'000)
            .boundBy("model.seq_len")
            .only("source", "markov")
            .says("Markov order", "the chain's order"));
    {
        Row branchingRow("train.data.branching", SpecType::Integer);
        branchingRow.min = 2;
        branchingRow.max = 100'000'000;
        branchingRow.getStored = [](const J& s) { return json(s.train.data.branching.value_or(0)); };
        branchingRow.setStored = [](J& s, const json& v) {
            s.train.data.branching = int(v.get<std::int64_t>());
            return true;
        };
        add(std::move(branchingRow)
                .boundBy("model.vocab")
                .only("source", "markov")
                .writtenWhen([](const J& s) { return s.train.data.branching.has_value(); })
                .byDefault("min(4, `model.vocab`)")
                .says("Markov branching", "the tokens each state can be followed by; `model.vocab` must be 2 or more"));
    }
    add(text<&J::train, &T::data, &D::path>("train.data.path")
            .needed()
            .only("source", "file")
            .says("Token file",
                  "the token file, relative to the job spec's folder; the file itself is checked by the agent, "
                  "which alone can see it"));
    add(choice<kTokenDtypes, &J::train, &T::data, &D::dtype>("train.data.dtype")
            .needed("is required for a token file: \"uint16\" (nanoGPT's prepare.py) or \"uint32\"")
            .only("source", "file")
            .says("Token dtype", "the width of one token in the file"));
    add(choice<kBackends, &J::backend>("backend")
            .says("Backend", "the agent's compute backend; see [`backend`](#backend) below")
            .hidden("chosen where the job runs, not part of the plan: kept as the job's JSON gives it"));
    add(section("launch")
            .byDefault("none: meshbench-agent runs the job")
            .says("Launch",
                  "Another program run in meshbench-agent's place, one process per rank under mpirun or srun as the "
                  "agent is; it reports to the engine itself. The model and parallel sections still describe the run "
                  "and are planned and checked as ever; only what meshbench-agent itself cannot run does not hold "
                  "the job back. See [Launching another program](#launching-another-program) below.")
            .writtenWhen([](const J& s) { return s.launch.enabled(); })
            .hidden("a program to run, not part of the plan the Designer prices: kept as the job's JSON gives it"));
    add(textList<&J::launch, &L::command>("launch.command")
            .needed()
            .hint(R"(["python3", "train.py"])")
            .says("Command",
                  "the program and its arguments, run as they are (no shell); a program named by a relative path "
                  "(with a `/`) is relative to the job spec's folder, a bare name is looked up on the `PATH`"));
    add(text<&J::launch, &L::cwd>("launch.cwd")
            .byDefault("the job spec's folder")
            .writtenWhen([](const J& s) { return !s.launch.cwd.empty(); })
            .says("Working directory", "the ranks' working directory; a relative one is relative to the job spec's "
                                       "folder"));
    add(textMap<&J::launch, &L::env>("launch.env")
            .hint(R"({"NCCL_DEBUG": "INFO"})")
            .byDefault("none")
            .writtenWhen([](const J& s) { return !s.launch.env.empty(); })
            .says("Environment", "variables set for every rank over the engine's own; the names `MESHBENCH_…` are "
                                 "the engine's to set"));

    // A key of a section the Designer does not show is not shown, for the section's reason.
    for (Row& row : rows)
        if (row.notShown.empty())
            for (const Row& outer : rows)
                if (outer.path == row.section())
                    row.notShown = outer.notShown;
    return {rows.begin(), rows.end()};
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

std::string_view SpecKey::name() const
{
    const std::size_t dot = path.rfind('.');
    return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::string_view SpecKey::section() const
{
    const std::size_t dot = path.rfind('.');
    return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

json SpecKey::value(const JobSpec& spec) const
{
    const json stored = getStored(spec);
    return unit ? json(unit->toWritten(stored.get<double>())) : stored;
}

bool SpecKey::assign(JobSpec& spec, const json& written) const
{
    return unit ? setStored(spec, unit->toStored(written.get<double>())) : setStored(spec, written);
}

bool SpecKey::applies(const JobSpec& spec) const
{
    if (onlyWhenKey.empty())
        return true;
    const SpecKey* variant = specKey(std::string(section()) + "." + std::string(onlyWhenKey));
    return variant && variant->value(spec) == onlyWhenValue;
}

bool SpecKey::written(const JobSpec& spec) const { return applies(spec) && (!isSet || isSet(spec)); }

const std::vector<SpecKey>& specSchema()
{
    static const std::vector<SpecKey> schema = makeSchema();
    return schema;
}

const SpecKey* specKey(std::string_view path)
{
    for (const SpecKey& key : specSchema())
        if (key.path == path)
            return &key;
    return nullptr;
}

std::vector<const SpecKey*> specKeysIn(std::string_view section)
{
    std::vector<const SpecKey*> keys;
    for (const SpecKey& key : specSchema())
        if (key.section() == section)
            keys.push_back(&key);
    return keys;
}

json layoutToJson(const ParallelSpec& parallel)
{
    JobSpec spec;
    spec.parallel = parallel;
    json out = json::object();
    for (const SpecKey* key : specKeysIn("parallel"))
        if (key->layout)
            out[std::string(key->name())] = key->value(spec);
    return out;
}

}  // namespace meshbench::plan
