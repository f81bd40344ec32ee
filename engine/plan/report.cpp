#include "report.h"

#include "spec_schema.h"
#include "units.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

namespace meshbench::plan {

using nlohmann::json;

namespace {

std::string pad(std::string text, std::size_t width, bool right = true)
{
    if (text.size() >= width)
        return text;
    const std::string fill(width - text.size(), ' ');
    return right ? fill + text : text + fill;
}

std::string formatCount(double n)
{
    if (n >= 1e9)
        return formatNumber("%.2f B", n / 1e9);
    if (n >= 1e6)
        return formatNumber("%.2f M", n / 1e6);
    if (n >= 1e3)
        return formatNumber("%.1f k", n / 1e3);
    return formatNumber("%.0f", n);
}

std::string formatFlops(double flops)
{
    const char* units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", "EFLOP"};
    int unit = 0;
    while (flops >= 1000 && unit < 6) {
        flops /= 1000;
        ++unit;
    }
    return formatNumber("%.3g ", flops) + units[unit];
}

json memoryToJson(const MemoryBreakdown& m)
{
    return {{"weights", m.weights},
            {"grads", m.grads},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"total", m.total()}};
}

std::string layoutLine(const ParallelSpec& p)
{
    std::ostringstream out;
    out << "dp " << p.dp << " x pp " << p.pp << " x tp " << p.tp << " = " << p.worldSize() << " ranks, ep " << p.ep
        << ", ZeRO-" << p.zero << (p.sequenceParallel ? ", sequence parallel" : "") << ", recompute "
        << recomputeName(p.recompute);
    return out.str();
}

std::string scheduleLine(const ParallelSpec& p)
{
    std::ostringstream out;
    out << scheduleName(p.schedule);
    if (p.schedule == ScheduleKind::Interleaved)
        out << " (v=" << p.virtualStages << ")";
    out << ", " << p.microbatches << " micro-batches of " << p.microBatchSize;
    return out.str();
}

// One text row per stage: each column is makespan / width of time, showing the op that covers
// its middle ('F', 'B', 'W'; the micro-batch's last digit follows when the op is wide enough),
// '.' where the stage is idle.
std::string gantt(const SimulationResult& sim, int width)
{
    std::ostringstream out;
    if (!sim.completed || sim.makespan <= 0)
        return "";
    const int stages = int(sim.timeline.size());
    const int shownHead = stages > 16 ? 8 : stages;
    for (int s = 0; s < stages; ++s) {
        if (s == shownHead && shownHead < stages - 8) {
            out << "  ...  (" << stages - 16 << " stages not shown)\n";
            s = stages - 8;
        }
        std::string row(std::size_t(width), '.');
        for (const TimedOp& t : sim.timeline[std::size_t(s)]) {
            if (!isCompute(t.op.kind) || t.end <= t.begin)
                continue;
            const int first = int(std::floor(t.begin / sim.makespan * width + 0.5));
            const int last = std::min(width, int(std::floor(t.end / sim.makespan * width + 0.5)));
            for (int col = first; col < last; ++col)
                row[std::size_t(col)] = opKindName(t.op.kind)[0];
            if (last - first >= 2)
                row[std::size_t(first) + 1] = char('0' + t.op.microbatch % 10);
        }
        out << "  stage " << pad(std::to_string(s), 3, false) << "|" << row << "|  bubble "
            << formatPercent(sim.bubbleRatio[std::size_t(s)]) << "\n";
    }
    return out.str();
}

}  // namespace

json errorsToJson(const std::vector<SpecError>& errors)
{
    json out = json::array();
    for (const SpecError& e : errors)
        out.push_back({{"path", e.path}, {"message", e.message}});
    return out;
}

std::string errorsToText(const std::vector<SpecError>& errors)
{
    std::string out;
    for (const SpecError& e : errors)
        out += "error: " + (e.path.empty() ? std::string() : e.path + ": ") + e.message + "\n";
    return out;
}

json planToJson(const Plan& plan)
{
    json stages = json::array();
    for (const StageMemory& s : plan.stages)
        stages.push_back(
            {{"stage", s.stage}, {"params", s.parameters}, {"memory_bytes", memoryToJson(s.memory)}, {"fits", s.fits}});
    std::size_t opCount = 0;
    for (const auto& stage : plan.simulation.timeline)
        opCount += stage.size();
    const bool listOps = opCount <= kMaxReportedOps;
    json schedule = json::array();
    for (std::size_t s = 0; s < plan.simulation.timeline.size(); ++s) {
        json ops = json::array();
        if (listOps)
            for (const TimedOp& t : plan.simulation.timeline[s]) {
                json op = {{"op", opKindName(t.op.kind)},
                           {"mb", t.op.microbatch},
                           {"chunk", t.op.chunk},
                           {"begin", t.begin},
                           {"end", t.end}};
                if (t.op.peerStage >= 0)
                    op["peer"] = t.op.peerStage;
                ops.push_back(std::move(op));
            }
        schedule.push_back({{"stage", s},
                            {"bubble_ratio", plan.simulation.bubbleRatio[s]},
                            {"busy", plan.simulation.busy[s]},
                            {"ops", std::move(ops)}});
    }
    std::vector<std::string> warnings = plan.warnings;
    if (!listOps)
        warnings.push_back("the schedule has " + std::to_string(opCount) + " ops; the op list is left out above " +
                           std::to_string(kMaxReportedOps) +
                           " (each stage's bubble and busy time are given): lower parallel.microbatches, with a "
                           "larger micro_batch_size, to see it");
    const StepBreakdown& st = plan.step;
    json out = {
        {"valid", true},
        {"errors", json::array()},
        {"warnings", warnings},
        {"world_size", plan.worldSize},
        {"params_total", plan.parameters.total},
        {"params_per_gpu_max", plan.parametersPerGpuMax},
        {"memory_bytes", memoryToJson(plan.mostLoaded())},
        {"most_loaded_stage", plan.mostLoadedStage},
        {"device_memory_bytes", plan.deviceMemory},
        {"fits", plan.fits},
        {"stages", stages},
        {"flops_per_step", plan.flopsPerStep},
        {"step_time_s", st.total},
        {"step_breakdown_s",
         {{"compute", st.compute},
          {"tensor_comm", st.tensorComm},
          {"expert_comm", st.expertComm},
          {"pipeline_bubble", st.pipelineBubble},
          {"data_parallel_comm", st.dataParallelComm},
          {"optimizer", st.optimizer},
          {"tensor_comm_hidden", st.tensorCommHidden},
          {"data_parallel_hidden", st.dataParallelHidden}}},
        {"calibration", plan.spec.cluster.calibration.source},
        {"tokens_per_s", plan.tokensPerSecond},
        {"mfu", plan.mfu},
        {"bubble_ratio", plan.simulation.overallBubbleRatio},
        {"makespan", plan.simulation.makespan},
        {"schedule", schedule},
        {"spec", toJson(plan.spec)},
    };
    if (plan.unitCosts)
        out["unit_costs"] = {
            {"F", plan.unitCosts->forward}, {"B", plan.unitCosts->backward}, {"W", plan.unitCosts->weightGrad}};
    return out;
}

std::string planToText(const Plan& plan)
{
    const JobSpec& spec = plan.spec;
    const ModelSpec& m = spec.model;
    const ClusterSpec& c = spec.cluster;
    std::ostringstream out;
    out << "Meshbench plan" << (spec.name.empty() ? "" : ": " + spec.name) << "\n\n";
    out << "Model    " << m.layers << " layers, hidden " << m.hidden << ", " << m.heads << " heads (" << m.kvHeads
        << " kv), ffn " << m.ffnHidden << ", vocab " << m.vocab << ", seq " << m.seqLen << ", " << normName(m.norm)
        << ", " << activationName(m.activation) << (m.tiedEmbeddings ? ", tied embeddings" : ", untied embeddings")
        << "\n";
    if (m.moe.enabled())
        out << "         MoE every " << m.moe.everyNLayers << " layer(s): " << m.moe.experts << " experts of "
            << m.moe.ffnHidden << ", top-" << m.moe.topK << ", capacity factor " << m.moe.capacityFactor << "\n";
    out << "         " << formatCount(plan.parameters.total) << " parameters\n";
    out << "Layout   " << layoutLine(spec.parallel) << "\n";
    out << "Schedule " << scheduleLine(spec.parallel) << ", global batch " << spec.parallel.globalBatch()
        << " sequences\n";
    out << "Cluster  " << c.nodes << " x " << c.devicesPerNode << " " << c.device.kind << " ("
        << formatBytes(c.device.memoryBytes) << ", " << formatFlops(c.device.peakFlops) << "/s peak), NVLink domain "
        << c.nvlinkDomain << " at " << formatBytes(c.intraBandwidth) << "/s, network " << formatBytes(c.interBandwidth)
        << "/s per device\n\n";

    out << "Memory per GPU (capacity " << formatBytes(plan.deviceMemory) << ")\n";
    out << "  " << pad("stage", 9, false) << pad("params", 11) << pad("weights", 11) << pad("grads", 11)
        << pad("optimizer", 11) << pad("activations", 13) << pad("total", 11) << pad("of device", 11) << "\n";
    // Stages with identical figures share a row ("1-6").
    for (std::size_t i = 0; i < plan.stages.size();) {
        std::size_t j = i;
        const auto same = [&](const StageMemory& a, const StageMemory& b) {
            return std::abs(a.memory.total() - b.memory.total()) < 1.0 && std::abs(a.parameters - b.parameters) < 1.0;
        };
        while (j + 1 < plan.stages.size() && same(plan.stages[j + 1], plan.stages[i]))
            ++j;
        const StageMemory& s = plan.stages[i];
        const std::string label = i == j ? std::to_string(i) : std::to_string(i) + "-" + std::to_string(j);
        out << "  " << pad(label, 9, false) << pad(formatCount(s.parameters), 11)
            << pad(formatBytes(s.memory.weights), 11) << pad(formatBytes(s.memory.grads), 11)
            << pad(formatBytes(s.memory.optimizer), 11) << pad(formatBytes(s.memory.activations), 13)
            << pad(formatBytes(s.memory.total()), 11)
            << pad(formatNumber("%.0f%%", 100.0 * s.memory.total() / plan.deviceMemory), 11)
            << (s.fits ? "" : "  DOES NOT FIT") << "\n";
        i = j + 1;
    }
    out << "\n";

    if (!plan.unitCosts) {
        const StepBreakdown& st = plan.step;
        auto hidden = [](double seconds) {
            return seconds > 0 ? " (" + formatSeconds(seconds) + " hidden)" : std::string();
        };
        out << "Step     " << formatSeconds(st.total) << ": compute " << formatSeconds(st.compute) << ", TP comm "
            << formatSeconds(st.tensorComm) << hidden(st.tensorCommHidden) << ", EP comm "
            << formatSeconds(st.expertComm) << ", pipeline bubble " << formatSeconds(st.pipelineBubble) << ", DP comm "
            << formatSeconds(st.dataParallelComm) << hidden(st.dataParallelHidden) << ", optimizer "
            << formatSeconds(st.optimizer) << "\n";
        if (!plan.spec.cluster.calibration.empty())
            out << "         rates calibrated from " << plan.spec.cluster.calibration.source << "\n";
        out << "         " << formatFlops(plan.flopsPerStep) << " per step, "
            << formatNumber("%.0f", plan.tokensPerSecond) << " tokens/s, MFU " << formatPercent(plan.mfu) << "\n";
    } else {
        out << "Unit costs F=" << plan.unitCosts->forward << " B=" << plan.unitCosts->backward
            << " W=" << plan.unitCosts->weightGrad << " (no communication): makespan " << plan.simulation.makespan
            << "\n";
    }
    out << "Bubble   " << formatNumber("%.2f%%", 100.0 * plan.simulation.overallBubbleRatio)
        << " of stage time (simulated)\n\n";
    out << "Timeline (F forward, B backward, W weight gradient, . idle)\n" << gantt(plan.simulation, 96);
    for (const std::string& w : plan.warnings)
        out << "\nwarning: " << w;
    if (!plan.warnings.empty())
        out << "\n";
    return out.str();
}

json searchToJson(const SearchResult& result)
{
    json best = json::array();
    for (const SearchCandidate& c : result.best) {
        // The layout's keys as the spec writes them (the schema's), then its figures.
        json candidate = layoutToJson(c.parallel);
        candidate["step_time_s"] = c.stepTime;
        candidate["tokens_per_s"] = c.tokensPerSecond;
        candidate["mfu"] = c.mfu;
        candidate["memory_bytes"] = c.memoryBytes;
        candidate["bubble_ratio"] = c.bubbleRatio;
        best.push_back(std::move(candidate));
    }
    return {{"valid", result.errors.empty()},     {"errors", errorsToJson(result.errors)},
            {"global_batch", result.globalBatch}, {"planned_only", result.plannedOnly},
            {"refused", result.refused},          {"evaluated", result.evaluated},
            {"fitting", result.fitting},          {"evaluation_s", result.evaluationSeconds},
            {"total_s", result.totalSeconds},     {"best", best}};
}

std::string overlapLetters(const ParallelSpec& p)
{
    std::string letters;
    for (const auto& [on, letter] :
         {std::pair{p.overlapGradReduce, 'g'}, std::pair{p.overlapParamGather, 'p'}, std::pair{p.tpCommOverlap, 't'}})
        if (on)
            letters += letters.empty() ? std::string(1, letter) : std::string(",") + letter;
    return letters.empty() ? "-" : letters;
}

std::string layoutWords(const ParallelSpec& p)
{
    return "dp" + std::to_string(p.dp) + " pp" + std::to_string(p.pp) + " tp" + std::to_string(p.tp) + " ep" +
           std::to_string(p.ep) + " " + std::string(scheduleName(p.schedule)) +
           (p.zero > 0 ? " zero" + std::to_string(p.zero) : "");
}

std::string searchToText(const SearchResult& result, const JobSpec& spec)
{
    std::ostringstream out;
    const ClusterSpec& c = spec.cluster;
    out << "Meshbench search" << (spec.name.empty() ? "" : ": " + spec.name) << "\n";
    out << "Cluster " << c.nodes << " x " << c.devicesPerNode << " " << c.device.kind << " = " << c.devices()
        << " devices, global batch " << result.globalBatch << " sequences of " << spec.model.seqLen << "\n";
    out << result.evaluated << " layouts priced in " << formatSeconds(result.evaluationSeconds) << " ("
        << formatNumber("%.2f",
                        result.evaluationSeconds > 0 ? double(result.evaluated) / result.evaluationSeconds / 1e6 : 0.0)
        << " M/s), " << result.fitting << " fit in memory; best " << result.best.size() << " simulated in full, "
        << formatSeconds(result.totalSeconds) << " in all\n";
    if (result.refused > 0)
        out << result.refused << " more valid layouts skipped: meshbench-agent of this build does not run them\n";
    if (result.plannedOnly)
        out << "Planned only: Megatron-LM's overlaps and layouts meshbench-agent does not run are ranked too\n";
    out << "\n";
    if (result.best.empty()) {
        out << "No layout fits in " << formatBytes(c.device.memoryBytes)
            << " per device: add devices, or lower seq_len or the global batch.\n";
        return out.str();
    }
    out << "  " << pad("#", 3) << pad("tp", 5) << pad("pp", 5) << pad("dp", 6) << pad("ep", 5) << pad("v", 4)
        << pad("mbs", 5) << pad("m", 6) << pad("zero", 5) << pad("sp", 4) << "  " << pad("recompute", 10, false)
        << pad("schedule", 12, false) << pad("overlap", 8, false) << pad("step", 11) << pad("tokens/s", 12)
        << pad("MFU", 7) << pad("bubble", 8) << pad("memory", 10) << "\n";
    int rank = 1;
    for (const SearchCandidate& cand : result.best) {
        const ParallelSpec& p = cand.parallel;
        out << "  " << pad(std::to_string(rank++), 3) << pad(std::to_string(p.tp), 5) << pad(std::to_string(p.pp), 5)
            << pad(std::to_string(p.dp), 6) << pad(std::to_string(p.ep), 5) << pad(std::to_string(p.virtualStages), 4)
            << pad(std::to_string(p.microBatchSize), 5) << pad(std::to_string(p.microbatches), 6)
            << pad(std::to_string(p.zero), 5) << pad(p.sequenceParallel ? "on" : "off", 4) << "  "
            << pad(std::string(recomputeName(p.recompute)), 10, false)
            << pad(std::string(scheduleName(p.schedule)), 12, false) << pad(overlapLetters(p), 8, false)
            << pad(formatSeconds(cand.stepTime), 11) << pad(formatNumber("%.0f", cand.tokensPerSecond), 12)
            << pad(formatPercent(cand.mfu), 7) << pad(formatPercent(cand.bubbleRatio), 8)
            << pad(formatBytes(cand.memoryBytes), 10) << "\n";
    }
    out << "\noverlap: g the data-parallel reduction under the backward, p ZeRO's weight gather under the\n"
           "         forward, t the TP collectives under their GEMMs\n";
    return out.str();
}

}  // namespace meshbench::plan
