// The layout rules of a job spec: world size, the divisibility of layers, heads, widths,
// vocabulary and experts, EP inside DP, ZeRO with pipelines, and the schedule's own rules.

#include "job_spec.h"

#include "spec_text.h"
#include "units.h"

#include <algorithm>
#include <numeric>

namespace meshbench::plan {

namespace {

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

}  // namespace

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

}  // namespace meshbench::plan
