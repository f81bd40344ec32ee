#include "rank_analysis.h"

#include "import_error.h"
#include "megatron_ranges.h"
#include "op_names.h"

#include "plan/measured_bubble.h"
#include "plan/schedule.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <span>
#include <unordered_map>

namespace meshbench::import {

namespace {

using plan::TimeInterval;
using store::DeviceClass;

bool containsNoCase(std::string_view text, std::string_view upperWord)
{
    return std::search(text.begin(), text.end(), upperWord.begin(), upperWord.end(),
                       [](char a, char b) { return std::toupper(static_cast<unsigned char>(a)) == b; }) != text.end();
}

// Megatron's group descriptions (parallel_state.py: TENSOR_MODEL_PARALLEL_GROUP, ...) and
// DeviceMesh's mesh_<dim> names.
std::optional<DeviceClass> classOfDescription(std::string_view desc)
{
    if (desc.empty())
        return std::nullopt;
    if (containsNoCase(desc, "EXPERT_DATA") || containsNoCase(desc, "MESH_DP") || containsNoCase(desc, "MESH_FSDP"))
        return DeviceClass::CommData;
    if (containsNoCase(desc, "EXPERT") || containsNoCase(desc, "MESH_EP"))
        return DeviceClass::CommExpert;
    if (containsNoCase(desc, "TENSOR") || containsNoCase(desc, "MESH_TP"))
        return DeviceClass::CommTensor;
    if (containsNoCase(desc, "PIPELINE") || containsNoCase(desc, "MESH_PP"))
        return DeviceClass::CommPipeline;
    if (containsNoCase(desc, "DATA_PARALLEL"))
        return DeviceClass::CommData;
    return std::nullopt;
}

bool isPointToPoint(const CollectiveInfo& c, std::string_view kernelName)
{
    return c.name == "send" || c.name == "recv" || c.name == "sendrecv" ||
           (c.name.empty() && kernelName.find("SendRecv") != std::string_view::npos);
}

// The ranks of a collective's group, sorted: from its arguments, else from the trace's pg_config.
std::vector<int> groupRanks(const CollectiveInfo& c, const RankTrace& trace)
{
    std::vector<int> ranks;
    if (!c.groupRanks.empty())
        ranks = ranksListed(c.groupRanks);
    else
        for (const ProcessGroup& g : trace.groups)
            if (!c.group.empty() && g.name == c.group)
                ranks = g.ranks;
    std::sort(ranks.begin(), ranks.end());
    return ranks;
}

std::string groupDescription(const CollectiveInfo& c, const RankTrace& trace)
{
    if (!c.groupDesc.empty())
        return c.groupDesc;
    for (const ProcessGroup& g : trace.groups)
        if (!c.group.empty() && g.name == c.group)
            return g.desc;
    return {};
}

// The parallel dimension whose group ran a communication kernel: from the group's description, from
// its ranks matched against the job's mesh, or, for a point-to-point transfer, from its peer.
DeviceClass dimensionOf(const CollectiveInfo& c, std::string_view kernelName, int rank, const RankTrace& trace,
                        const JobContext& job)
{
    if (const std::optional<DeviceClass> byDesc = classOfDescription(groupDescription(c, trace)))
        return *byDesc;
    if (!job.mesh)
        return DeviceClass::CommOther;
    const std::vector<int> members = groupRanks(c, trace);
    constexpr std::pair<plan::GroupKind, DeviceClass> kKinds[] = {
        {plan::GroupKind::Tensor, DeviceClass::CommTensor},   {plan::GroupKind::Pipeline, DeviceClass::CommPipeline},
        {plan::GroupKind::Expert, DeviceClass::CommExpert},   {plan::GroupKind::Data, DeviceClass::CommData},
        {plan::GroupKind::ExpertData, DeviceClass::CommData},
    };
    if (members.size() > 1) {
        for (const auto& [kind, deviceClass] : kKinds) {
            std::vector<int> group = job.mesh->groupOf(kind, rank);
            std::sort(group.begin(), group.end());
            if (group == members)
                return deviceClass;
        }
    }
    if (isPointToPoint(c, kernelName)) {
        const int peer = c.name == "recv" ? c.srcRank : c.dstRank >= 0 ? c.dstRank : c.srcRank;
        const std::vector<int> pipeline = job.mesh->groupOf(plan::GroupKind::Pipeline, rank);
        if (peer < 0 ? job.pp() > 1 : std::find(pipeline.begin(), pipeline.end(), peer) != pipeline.end())
            return DeviceClass::CommPipeline;
    }
    return DeviceClass::CommOther;
}

bool isComputeClass(DeviceClass c)
{
    return c == DeviceClass::Gemm || c == DeviceClass::Attention || c == DeviceClass::OtherCompute;
}

// Whether a kernel's name says backward (true) or forward (false); nothing when it says neither
// (a GEMM, an elementwise kernel, a communication kernel).
std::optional<bool> directionOf(std::string_view name)
{
    for (std::string_view word : {"BWD", "BACKWARD", "GRAD"})
        if (containsNoCase(name, word))
            return true;
    for (std::string_view word : {"FWD", "FORWARD"})
        if (containsNoCase(name, word))
            return false;
    return std::nullopt;
}

std::vector<TimeInterval> merged(std::vector<TimeInterval> intervals)
{
    std::sort(intervals.begin(), intervals.end(),
              [](const TimeInterval& a, const TimeInterval& b) { return a.beginNs < b.beginNs; });
    std::vector<TimeInterval> out;
    for (const TimeInterval& i : intervals) {
        if (!out.empty() && i.beginNs <= out.back().endNs)
            out.back().endNs = std::max(out.back().endNs, i.endNs);
        else
            out.push_back(i);
    }
    return out;
}

std::int64_t lengthOf(const std::vector<TimeInterval>& mergedIntervals)
{
    std::int64_t total = 0;
    for (const TimeInterval& i : mergedIntervals)
        total += i.endNs - i.beginNs;
    return total;
}

// Length of the intersection of two merged interval lists.
std::int64_t overlapOf(const std::vector<TimeInterval>& a, const std::vector<TimeInterval>& b)
{
    std::int64_t total = 0;
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        const std::int64_t begin = std::max(a[i].beginNs, b[j].beginNs);
        const std::int64_t end = std::min(a[i].endNs, b[j].endNs);
        if (end > begin)
            total += end - begin;
        (a[i].endNs < b[j].endNs ? i : j)++;
    }
    return total;
}

// Device time per step and class from the rank's kernels (those of a step: launched inside it), and
// the idle time of the step's device span; communication counts as exposed where no compute ran.
void measureDeviceTime(RankAnalysis& out)
{
    out.deviceTime.clear();
    std::map<int, std::vector<const store::KernelRow*>> byStep;
    for (const store::KernelRow& k : out.kernels)
        if (k.step >= 0)
            byStep[k.step].push_back(&k);
    for (const StepWindow& w : out.steps) {
        const auto kernels = byStep.find(w.step);
        if (kernels == byStep.end())
            continue;
        std::vector<std::vector<TimeInterval>> byClass(store::kDeviceClasses);
        std::vector<TimeInterval> compute, all;
        for (const store::KernelRow* k : kernels->second) {
            const TimeInterval interval{k->beginNs, k->endNs};
            byClass[static_cast<std::size_t>(k->deviceClass)].push_back(interval);
            if (isComputeClass(k->deviceClass))
                compute.push_back(interval);
            all.push_back(interval);
        }
        const std::vector<TimeInterval> computeUnion = merged(std::move(compute));
        const std::vector<TimeInterval> busy = merged(std::move(all));
        for (int c = 0; c < store::kDeviceClasses; ++c) {
            const auto deviceClass = static_cast<DeviceClass>(c);
            if (deviceClass == DeviceClass::Idle)
                continue;
            const std::vector<TimeInterval> u = merged(std::move(byClass[static_cast<std::size_t>(c)]));
            if (u.empty())
                continue;
            const std::int64_t length = lengthOf(u);
            const std::int64_t exposed =
                store::isCommunicationClass(deviceClass) ? length - overlapOf(u, computeUnion) : length;
            out.deviceTime.push_back({out.rank, w.step, deviceClass, length, exposed});
        }
        const std::int64_t idle = (w.deviceEndNs - w.deviceBeginNs) - lengthOf(busy);
        out.deviceTime.push_back({out.rank, w.step, DeviceClass::Idle, idle, idle});
    }
}

// One of Megatron-LM's ranges (megatron_ranges.h): a p2p call or a schedule phase.
struct MegatronCall {
    const HostRange* range;
    MegatronRange call;
};

class Analysis {
public:
    Analysis(const RankTrace& trace, int rank, const NameTable& names, const JobContext& job, const StepMarker& steps)
        : m_trace(trace), m_names(names), m_job(job), m_marker(steps)
    {
        m_out.rank = rank;
        if (job.mesh)
            m_out.stage = job.mesh->coordOf(rank).pp;
    }

    RankAnalysis run()
    {
        findSteps();
        indexLaunches();
        placeKernels();
        readOps();
        if (m_opCount == 0)
            readMegatronOps();
        if (m_opCount == 0 && m_trace.hasDeviceEvents())
            inferOps();
        pipelineTransfers();
        deviceTime();
        describe();
        return std::move(m_out);
    }

private:
    void findSteps()
    {
        int next = 0;
        for (const HostRange& r : m_trace.ranges) {
            const std::optional<int> step = m_marker.step(m_names.name(r.nameId));
            if (!step)
                continue;
            StepWindow w;
            w.step = *step >= 0 ? *step : next;
            next = w.step + 1;
            w.hostBeginNs = r.beginNs;
            w.hostEndNs = r.endNs;
            m_out.steps.push_back(w);
        }
        if (m_out.steps.empty()) {
            // No step marker: the whole trace is one step.
            StepWindow w;
            w.hostBeginNs = std::numeric_limits<std::int64_t>::min();
            w.hostEndNs = std::numeric_limits<std::int64_t>::max();
            m_out.steps.push_back(w);
            m_out.inferred.push_back("the whole trace is one step: no '" +
                                     (m_marker.marker().empty() ? std::string("ProfilerStep#") : m_marker.marker()) +
                                     "' ranges");
        }
    }

    // The step whose host range holds time t, or -1.
    int stepIndexAt(std::int64_t t) const
    {
        const auto& steps = m_out.steps;
        auto after = std::upper_bound(steps.begin(), steps.end(), t,
                                      [](std::int64_t time, const StepWindow& w) { return time < w.hostBeginNs; });
        if (after == steps.begin())
            return -1;
        const auto& w = *(after - 1);
        return t <= w.hostEndNs ? static_cast<int>(after - 1 - steps.begin()) : -1;
    }

    void indexLaunches()
    {
        m_launchOf.reserve(m_trace.launches.size());
        for (const Launch& l : m_trace.launches)
            m_launchOf.emplace(l.correlation, &l);
        for (std::size_t i = 0; i < m_trace.device.size(); ++i)
            if (m_trace.device[i].correlation >= 0)
                m_deviceByCorrelation.emplace(m_trace.device[i].correlation, i);
    }

    void placeKernels()
    {
        m_out.kernels.reserve(m_trace.device.size());
        m_stepOfDevice.resize(m_trace.device.size(), -1);
        m_classOfDevice.resize(m_trace.device.size());
        m_devicesOfStep.resize(m_out.steps.size());
        std::map<std::string, std::int64_t> orderInGroup;
        for (std::size_t i = 0; i < m_trace.device.size(); ++i) {
            const DeviceEvent& d = m_trace.device[i];
            const auto launch = m_launchOf.find(d.correlation);
            const int index = stepIndexAt(launch != m_launchOf.end() ? launch->second->ns : d.beginNs);
            m_stepOfDevice[i] = index;
            DeviceClass deviceClass = d.deviceClass;
            if (d.collective >= 0) {
                const CollectiveInfo& c = m_trace.collectives[static_cast<std::size_t>(d.collective)];
                const std::string_view name = m_names.name(d.nameId);
                deviceClass = dimensionOf(c, name, m_out.rank, m_trace, m_job);
                noteCollective(c, name, d.endNs, orderInGroup);
                if (!c.communicator.empty())
                    m_out.communicatorUses.push_back({m_out.kernels.size(), c.communicator, c.name, c.peer,
                                                      launch != m_launchOf.end() ? launch->second->ns : d.beginNs});
            }
            m_classOfDevice[i] = deviceClass;
            if (index >= 0) {
                m_devicesOfStep[static_cast<std::size_t>(index)].push_back(i);
                StepWindow& w = m_out.steps[static_cast<std::size_t>(index)];
                w.deviceBeginNs = w.kernels == 0 ? d.beginNs : std::min(w.deviceBeginNs, d.beginNs);
                w.deviceEndNs = w.kernels == 0 ? d.endNs : std::max(w.deviceEndNs, d.endNs);
                ++w.kernels;
            }
            m_out.kernels.push_back({d.beginNs, d.endNs, d.device, d.stream, deviceClass, d.nameId,
                                     index >= 0 ? m_out.steps[static_cast<std::size_t>(index)].step : -1});
        }
        for (StepWindow& w : m_out.steps)
            if (w.kernels == 0) {
                w.deviceBeginNs = w.hostBeginNs;
                w.deviceEndNs = w.hostEndNs;
            }
    }

    // Members of a collective finish together, and so do the two ends of a transfer; its key must
    // be the same on each of them. Transfers are keyed by their pair of ranks, so that the stages,
    // which share no collective, are aligned with each other.
    void noteCollective(const CollectiveInfo& c, std::string_view name, std::int64_t endNs,
                        std::map<std::string, std::int64_t>& orderInGroup)
    {
        std::string key;
        if (isPointToPoint(c, name)) {
            if (c.srcRank < 0 || c.dstRank < 0)
                return;
            key = "p2p " + std::to_string(c.srcRank) + ">" + std::to_string(c.dstRank) + " ";
        } else {
            if (c.groupSize == 1)
                return;
            const std::vector<int> members = groupRanks(c, m_trace);
            if (members.size() < 2)
                return;  // without the group's ranks, keys of different groups could meet
            for (int r : members)
                key += std::to_string(r) + ",";
        }
        const std::int64_t seq = c.seq >= 0 ? c.seq : orderInGroup[key]++;
        m_out.collectives.push_back({key + "#" + std::to_string(seq), endNs});
    }

    // The device span of the work a host range launched (kernels by the correlation of the launches
    // made inside it on its thread), or nothing when it launched none.
    std::optional<TimeInterval> deviceSpanOf(const HostRange& r) const
    {
        const auto& launches = m_trace.launches;
        auto first = std::lower_bound(launches.begin(), launches.end(), r.beginNs,
                                      [](const Launch& l, std::int64_t t) { return l.ns < t; });
        std::optional<TimeInterval> span;
        for (auto l = first; l != launches.end() && l->ns <= r.endNs; ++l) {
            // torch's autograd engine launches a CUDA backward from a device thread of its own while
            // the range's thread waits in backward(): a thread that runs no op of its own works for
            // the op whose range is open, but for the data-parallel reductions its gradient hooks
            // launch and pipeline transfers.
            const bool helper = l->thread != r.thread && !m_opThreads.count(l->thread);
            if (l->thread != r.thread && !helper)
                continue;
            auto [begin, end] = m_deviceByCorrelation.equal_range(l->correlation);
            for (auto d = begin; d != end; ++d) {
                if (helper && (m_classOfDevice[d->second] == DeviceClass::CommData ||
                               m_classOfDevice[d->second] == DeviceClass::CommPipeline))
                    continue;
                const DeviceEvent& e = m_trace.device[d->second];
                span = span ? TimeInterval{std::min(span->beginNs, e.beginNs), std::max(span->endNs, e.endNs)}
                            : TimeInterval{e.beginNs, e.endNs};
            }
        }
        return span;
    }

    int pp() const
    {
        if (m_job.pp() > 0)
            return m_job.pp();
        for (const ProcessGroup& g : m_trace.groups)
            if (classOfDescription(g.desc) == DeviceClass::CommPipeline && !g.ranks.empty())
                return static_cast<int>(g.ranks.size());
        return 0;
    }

    void readOps()
    {
        const int stages = pp();
        bool hostOnly = false;
        for (const HostRange& r : m_trace.ranges)
            if (parseOpName(m_names.name(r.nameId)))
                m_opThreads.insert(r.thread);
        for (const HostRange& r : m_trace.ranges) {
            const std::optional<OpName> op = parseOpName(m_names.name(r.nameId));
            if (!op)
                continue;
            const int index = stepIndexAt(r.beginNs);
            if (index < 0)
                continue;
            if (op->kind != wire::SpanKind::Forward && op->kind != wire::SpanKind::Backward &&
                op->kind != wire::SpanKind::WeightGrad)
                m_namedTransfers = true;
            wire::SpanRecord span;
            span.step = m_out.steps[static_cast<std::size_t>(index)].step;
            int stage = m_out.stage;
            int chunk = std::max(op->chunk, 0);
            if (op->stage >= 0) {
                const int local = stages > 0 ? op->stage % stages : op->stage;
                chunk = op->chunk >= 0 ? op->chunk : stages > 0 ? op->stage / stages : 0;
                if (stage >= 0 && local != stage)
                    throw ImportError(m_trace.path + ": op '" + m_names.name(r.nameId) + "' runs stage " +
                                      std::to_string(op->stage) + ", but the job's mesh puts rank " +
                                      std::to_string(m_out.rank) + " on stage " + std::to_string(stage) +
                                      "; check --job, or the rank the file was given");
                stage = local;
                if (m_out.stage < 0)
                    m_out.stage = local;
            }
            span.stage = static_cast<std::int16_t>(std::max(stage, 0));
            span.chunk = static_cast<std::int16_t>(chunk);
            span.microbatch = op->microbatch;
            span.kind = op->kind;
            const std::optional<TimeInterval> device = deviceSpanOf(r);
            hostOnly = hostOnly || !device;
            span.beginNs = device ? device->beginNs : r.beginNs;
            span.endNs = device ? device->endNs : r.endNs;
            m_out.spans.push_back(span);
            ++m_out.steps[static_cast<std::size_t>(index)].ops;
            ++m_opCount;
        }
        if (m_opCount > 0) {
            m_out.recognised.push_back(std::to_string(m_opCount) + " pipeline ops by name");
            if (hostOnly)
                m_out.inferred.push_back(m_trace.hasDeviceEvents() ? "some ops launched no device work: their host "
                                                                     "time stands for their device time"
                                                                   : "ops' host time stands for their device time "
                                                                     "(the trace has no device events)");
        }
    }

    // Megatron-LM's NVTX ranges: an op runs between two p2p calls of its step, and its kernels are
    // those launched then, on any thread (torch's autograd engine launches a backward from a
    // thread of its own). Where an F and a B run back to back (the interleaved steady state), the B
    // begins at the first launch from another thread than the schedule's. Micro-batches and chunks
    // are the job's schedule's, in order; without --job, micro-batches in order and chunk 0.
    void readMegatronOps()
    {
        std::vector<MegatronCall> phases;
        for (const HostRange& r : m_trace.ranges)
            if (const std::optional<MegatronRange> m = parseMegatronRange(m_names.name(r.nameId)))
                (m->isCall() ? m_megatronCalls : phases).push_back({&r, *m});
        if (m_megatronCalls.empty())
            return;
        std::vector<plan::Op> scheduled[2];  // the stage's forwards and backwards, in schedule order
        if (m_job.spec && m_out.stage >= 0)
            for (const plan::Op& op : plan::buildStageOps(m_job.spec->parallel.scheduleShape(), m_out.stage))
                if (op.kind == plan::OpKind::Forward || op.kind == plan::OpKind::Backward)
                    scheduled[op.kind == plan::OpKind::Backward].push_back(op);
        const bool fromSchedule = !scheduled[0].empty();
        std::vector<std::vector<const MegatronCall*>> callsOfStep(m_out.steps.size());
        for (const MegatronCall& c : m_megatronCalls)
            if (const int index = stepIndexAt(c.range->beginNs); index >= 0)
                callsOfStep[std::size_t(index)].push_back(&c);
        const int before = m_opCount;
        for (std::size_t s = 0; s < m_out.steps.size(); ++s) {
            std::vector<wire::SpanRecord> ops;
            int hostOnly = 0;
            std::string problem;
            std::int64_t previousEnd = m_out.steps[s].hostBeginNs;
            for (const MegatronCall* c : callsOfStep[s]) {
                const std::vector<wire::SpanKind> kinds = opsBeforeCall(c->call, phaseOf(*c, phases));
                const TimeInterval window{previousEnd, c->range->beginNs};
                previousEnd = c->range->endNs;
                if (kinds.empty())
                    continue;
                const std::vector<std::pair<const Launch*, std::size_t>> launched = workLaunchedIn(window);
                // Where the B begins among the launches; all of them belong to the one op otherwise.
                std::size_t cut = launched.size();
                if (kinds.size() == 2) {
                    cut = std::find_if(launched.begin(), launched.end(),
                                       [&](const auto& l) { return l.first->thread != c->range->thread; }) -
                          launched.begin();
                    if (cut == 0 || cut == launched.size()) {
                        problem = "an F and a B ran between two Megatron p2p calls and no launch from another "
                                  "thread tells where the B began";
                        break;
                    }
                }
                for (std::size_t k = 0; k < kinds.size(); ++k) {
                    const auto first = launched.begin() + std::ptrdiff_t(k == 0 ? 0 : cut);
                    const auto last = k + 1 < kinds.size() ? launched.begin() + std::ptrdiff_t(cut) : launched.end();
                    wire::SpanRecord span;
                    span.kind = kinds[k];
                    span.beginNs = window.beginNs;
                    span.endNs = window.endNs;
                    hostOnly += first == last ? 1 : 0;
                    for (auto l = first; l != last; ++l) {
                        const DeviceEvent& e = m_trace.device[l->second];
                        const bool firstKernel = l == first;
                        span.beginNs = firstKernel ? e.beginNs : std::min(span.beginNs, e.beginNs);
                        span.endNs = firstKernel ? e.endNs : std::max(span.endNs, e.endNs);
                    }
                    ops.push_back(span);
                }
            }
            const int step = m_out.steps[s].step;
            int count[2] = {0, 0};
            for (const wire::SpanRecord& op : ops)
                ++count[op.kind == wire::SpanKind::Backward];
            if (problem.empty() && fromSchedule &&
                (count[0] != int(scheduled[0].size()) || count[1] != int(scheduled[1].size())))
                problem = "found " + std::to_string(count[0]) + " forwards and " + std::to_string(count[1]) +
                          " backwards between Megatron p2p calls, the job's schedule has " +
                          std::to_string(scheduled[0].size()) + " and " + std::to_string(scheduled[1].size());
            if (!problem.empty()) {
                m_out.warnings.emplace_back(step, "rank " + std::to_string(m_out.rank) + ", step " +
                                                      std::to_string(step) + ": " + problem +
                                                      "; its ops are not stored");
                continue;
            }
            if (hostOnly > 0)
                m_out.warnings.emplace_back(step, "rank " + std::to_string(m_out.rank) + ", step " +
                                                      std::to_string(step) + ": " + std::to_string(hostOnly) +
                                                      " Megatron ops launched no device work; their host time "
                                                      "stands for their device time");
            int next[2] = {0, 0};
            for (wire::SpanRecord& op : ops) {
                const int backward = op.kind == wire::SpanKind::Backward;
                const int index = next[backward]++;
                op.step = step;
                op.stage = static_cast<std::int16_t>(std::max(m_out.stage, 0));
                op.microbatch = fromSchedule ? scheduled[backward][std::size_t(index)].microbatch : index;
                op.chunk = static_cast<std::int16_t>(fromSchedule ? scheduled[backward][std::size_t(index)].chunk : 0);
                m_out.spans.push_back(op);
                ++m_out.steps[s].ops;
                ++m_opCount;
            }
        }
        if (m_opCount == before)
            return;
        m_out.recognised.push_back(std::to_string(m_opCount - before) +
                                   " pipeline ops from Megatron-LM's NVTX ranges (p2p calls" +
                                   (phases.empty() ? std::string(")") : std::string(" and schedule phases)")));
        if (!fromSchedule)
            m_out.inferred.push_back("micro-batches numbered in the order Megatron ran them, chunk 0 (no --job)");
    }

    // The schedule phase (the latest one begun, if it holds the call) that a p2p call ran in.
    static MegatronPhase phaseOf(const MegatronCall& c, const std::vector<MegatronCall>& phases)
    {
        auto after = std::upper_bound(phases.begin(), phases.end(), c.range->beginNs,
                                      [](std::int64_t t, const MegatronCall& p) { return t < p.range->beginNs; });
        if (after == phases.begin())
            return MegatronPhase::None;
        const HostRange& p = *(after - 1)->range;
        return p.thread == c.range->thread && c.range->endNs <= p.endNs ? (after - 1)->call.phase : MegatronPhase::None;
    }

    // The device work launched inside a host interval, on any thread, in launch order, as a named
    // op's range would hold it, less the kernels known to be data-parallel reductions (launched by
    // gradient hooks while a backward runs) or pipeline transfers.
    std::vector<std::pair<const Launch*, std::size_t>> workLaunchedIn(const TimeInterval& window) const
    {
        std::vector<std::pair<const Launch*, std::size_t>> out;
        const auto& launches = m_trace.launches;
        auto l = std::lower_bound(launches.begin(), launches.end(), window.beginNs,
                                  [](const Launch& launch, std::int64_t t) { return launch.ns < t; });
        for (; l != launches.end() && l->ns <= window.endNs; ++l) {
            auto [begin, end] = m_deviceByCorrelation.equal_range(l->correlation);
            for (auto d = begin; d != end; ++d)
                if (m_classOfDevice[d->second] != DeviceClass::CommData &&
                    m_classOfDevice[d->second] != DeviceClass::CommPipeline)
                    out.emplace_back(&*l, d->second);
        }
        return out;
    }

    // The Megatron p2p call whose range holds a launch on its thread, if any.
    const MegatronCall* megatronCallOf(const Launch& launch) const
    {
        auto after = std::upper_bound(m_megatronCalls.begin(), m_megatronCalls.end(), launch.ns,
                                      [](std::int64_t t, const MegatronCall& c) { return t < c.range->beginNs; });
        if (after == m_megatronCalls.begin())
            return nullptr;
        const MegatronCall& c = *(after - 1);
        return launch.ns <= c.range->endNs && launch.thread == c.range->thread ? &c : nullptr;
    }

    // Without op names: the schedule's op order for this rank's stage, over the step's kernels in
    // launch order, cut where a pipeline transfer was launched and where the kernels' names turn
    // from forward to backward (the last stage runs a micro-batch's F and B back to back). The
    // optimizer (from the step's first multi_tensor_apply launch, torch's fused and foreach
    // optimizers) and the data-parallel reduction are not ops.
    void inferOps()
    {
        if (!m_job.spec || m_job.pp() < 2 || m_out.stage < 0)
            return;
        const plan::ScheduleShape shape = m_job.spec->parallel.scheduleShape();
        std::vector<plan::Op> compute;
        for (const plan::Op& op : plan::buildStageOps(shape, m_out.stage))
            if (plan::isCompute(op.kind))
                compute.push_back(op);
        int inferredSteps = 0;
        for (std::size_t s = 0; s < m_out.steps.size(); ++s) {
            const std::vector<TimeInterval> segments = segmentsOf(m_devicesOfStep[s]);
            if (segments.empty())
                continue;
            if (segments.size() != compute.size()) {
                m_out.warnings.emplace_back(m_out.steps[s].step, "rank " + std::to_string(m_out.rank) + ", step " +
                                                                     std::to_string(m_out.steps[s].step) + ": found " +
                                                                     std::to_string(segments.size()) +
                                                                     " compute segments between pipeline "
                                                                     "transfers, the schedule has " +
                                                                     std::to_string(compute.size()) +
                                                                     " ops; its ops are not stored");
                continue;
            }
            for (std::size_t i = 0; i < compute.size(); ++i) {
                wire::SpanRecord span;
                span.step = m_out.steps[s].step;
                span.stage = static_cast<std::int16_t>(m_out.stage);
                span.chunk = static_cast<std::int16_t>(compute[i].chunk);
                span.microbatch = compute[i].microbatch;
                span.kind = compute[i].kind == plan::OpKind::Forward    ? wire::SpanKind::Forward
                            : compute[i].kind == plan::OpKind::Backward ? wire::SpanKind::Backward
                                                                        : wire::SpanKind::WeightGrad;
                span.beginNs = segments[i].beginNs;
                span.endNs = segments[i].endNs;
                m_out.spans.push_back(span);
                ++m_out.steps[s].ops;
            }
            ++inferredSteps;
        }
        if (inferredSteps > 0)
            m_out.inferred.push_back("ops of " + std::to_string(inferredSteps) +
                                     " steps from the job's schedule, cut at the pipeline's transfers (the trace "
                                     "names no ops)");
    }

    std::int64_t launchOf(std::size_t device) const
    {
        const auto launch = m_launchOf.find(m_trace.device[device].correlation);
        return launch != m_launchOf.end() ? launch->second->ns : m_trace.device[device].beginNs;
    }

    // Where the direction turns, the kernels after the last one that told the old direction (a
    // GEMM, a layer norm: names that say neither) go with the new op. A kernel whose name says
    // neither is told by its launching thread where the trace has launches: torch's autograd engine
    // launches a CUDA backward from a device thread of its own, so a kernel launched from another
    // thread than the step's first compute kernel is a backward's.
    std::vector<TimeInterval> segmentsOf(std::vector<std::size_t> devices) const
    {
        std::stable_sort(devices.begin(), devices.end(),
                         [&](std::size_t a, std::size_t b) { return launchOf(a) < launchOf(b); });
        std::optional<std::int64_t> mainThread;
        const auto threadOf = [&](std::size_t device) -> std::optional<std::int64_t> {
            const auto launch = m_launchOf.find(m_trace.device[device].correlation);
            return launch != m_launchOf.end() ? std::optional(launch->second->thread) : std::nullopt;
        };
        std::vector<std::vector<std::size_t>> segments;
        // The current segment's direction once a kernel has told it: 0 forward, 1 backward, -1 not yet.
        int backward = -1;
        std::size_t lastTold = 0;  // in the current segment, one past the last kernel that told it
        bool transferSince = false;
        for (std::size_t i : devices) {
            const std::string_view name = m_names.name(m_trace.device[i].nameId);
            if (name.find("multi_tensor_apply") != std::string_view::npos)
                break;
            const DeviceClass c = m_classOfDevice[i];
            if (c == DeviceClass::CommPipeline) {
                transferSince = true;
                continue;
            }
            if (!isComputeClass(c) && c != DeviceClass::CommTensor)
                continue;
            std::optional<bool> direction = directionOf(name);
            const std::optional<std::int64_t> thread = threadOf(i);
            if (!mainThread && isComputeClass(c))
                mainThread = thread;
            if (!direction && thread && mainThread)
                direction = *thread != *mainThread;
            if (segments.empty() || transferSince) {
                segments.push_back({});
                backward = -1;
                lastTold = 0;
            } else if (direction && backward >= 0 && int(*direction) != backward) {
                std::vector<std::size_t>& current = segments.back();
                std::vector<std::size_t> moved(current.begin() + std::ptrdiff_t(lastTold), current.end());
                current.resize(lastTold);
                segments.push_back(std::move(moved));
            }
            segments.back().push_back(i);
            if (direction) {
                backward = int(*direction);
                lastTold = segments.back().size();
            }
            transferSince = false;
        }
        std::vector<TimeInterval> spans;
        for (const std::vector<std::size_t>& segment : segments) {
            if (segment.empty())
                continue;
            TimeInterval span{m_trace.device[segment.front()].beginNs, m_trace.device[segment.front()].endNs};
            for (std::size_t i : segment) {
                span.beginNs = std::min(span.beginNs, m_trace.device[i].beginNs);
                span.endNs = std::max(span.endNs, m_trace.device[i].endNs);
            }
            spans.push_back(span);
        }
        return spans;
    }

    // The pipeline's transfer kernels as send/recv spans, unless the trace named its transfers.
    void pipelineTransfers()
    {
        if (m_namedTransfers)
            return;
        for (std::size_t i = 0; i < m_trace.device.size(); ++i) {
            if (m_classOfDevice[i] != DeviceClass::CommPipeline || m_stepOfDevice[i] < 0)
                continue;
            const DeviceEvent& d = m_trace.device[i];
            const CollectiveInfo& c = m_trace.collectives[static_cast<std::size_t>(d.collective)];
            const bool send = c.name == "send";
            const int peer = send ? c.dstRank : c.srcRank;
            int peerStage = -1;
            if (peer >= 0 && m_job.mesh && peer < m_job.mesh->worldSize())
                peerStage = m_job.mesh->coordOf(peer).pp;
            const bool towardsLater = peerStage < 0 || peerStage > m_out.stage;
            wire::SpanRecord span;
            span.step = m_out.steps[static_cast<std::size_t>(m_stepOfDevice[i])].step;
            span.stage = static_cast<std::int16_t>(std::max(m_out.stage, 0));
            span.kind = send ? (towardsLater ? wire::SpanKind::SendActivation : wire::SpanKind::SendGradient)
                             : (towardsLater ? wire::SpanKind::RecvGradient : wire::SpanKind::RecvActivation);
            if (peerStage < 0)
                span.kind = send ? wire::SpanKind::SendActivation : wire::SpanKind::RecvActivation;
            span.peerRank = peer;
            if (peer < 0)
                megatronTransfer(d, span);
            span.beginNs = d.beginNs;
            span.endNs = d.endNs;
            m_out.spans.push_back(span);
        }
    }

    // A transfer whose kernel says neither its direction nor its peer (nsys) but was launched in
    // a Megatron p2p call: the call's direction, and its peer from the mesh (Megatron's
    // P2PCommunicator sends forward to pipeline rank + 1 and backward to rank - 1, both modulo pp).
    void megatronTransfer(const DeviceEvent& d, wire::SpanRecord& span) const
    {
        const auto launch = m_launchOf.find(d.correlation);
        const MegatronCall* call = launch != m_launchOf.end() ? megatronCallOf(*launch->second) : nullptr;
        const std::optional<wire::SpanKind> kind = call ? transferOfCall(call->call) : std::nullopt;
        if (!kind)
            return;
        span.kind = *kind;
        if (!m_job.mesh || m_out.stage < 0 || m_job.pp() < 2)
            return;
        const bool towardsLater = *kind == wire::SpanKind::SendActivation || *kind == wire::SpanKind::RecvGradient;
        const std::vector<int> pipeline = m_job.mesh->groupOf(plan::GroupKind::Pipeline, m_out.rank);
        const int pp = static_cast<int>(pipeline.size());
        span.peerRank = pipeline[std::size_t((m_out.stage + (towardsLater ? 1 : pp - 1)) % pp)];
    }

    void deviceTime()
    {
        if (m_trace.hasDeviceEvents())
            measureDeviceTime(m_out);
    }

    void describe()
    {
        std::size_t collectives = 0;
        for (const DeviceEvent& d : m_trace.device)
            collectives += d.collective >= 0 ? 1 : 0;
        m_out.recognised.insert(m_out.recognised.begin(),
                                std::to_string(m_trace.events) + " events, " + std::to_string(m_out.steps.size()) +
                                    " steps, " + std::to_string(m_trace.device.size()) + " device events (" +
                                    std::to_string(collectives) + " communication)");
    }

    const RankTrace& m_trace;
    const NameTable& m_names;
    const JobContext& m_job;
    const StepMarker& m_marker;
    RankAnalysis m_out;
    std::unordered_map<std::int64_t, const Launch*> m_launchOf;
    std::unordered_multimap<std::int64_t, std::size_t> m_deviceByCorrelation;
    std::vector<int> m_stepOfDevice;
    std::vector<DeviceClass> m_classOfDevice;
    std::set<std::int64_t> m_opThreads;                     // host threads that run named ops
    std::vector<std::vector<std::size_t>> m_devicesOfStep;  // device events by step index, in begin order
    std::vector<MegatronCall> m_megatronCalls;              // in begin order
    int m_opCount = 0;
    bool m_namedTransfers = false;
};

}  // namespace

RankAnalysis analyseRank(const RankTrace& trace, int rank, const NameTable& names, const JobContext& job,
                         const StepMarker& steps)
{
    return Analysis(trace, rank, names, job, steps).run();
}

std::vector<std::string> placeCommunicators(const std::vector<RankAnalysis*>& ranks, const JobContext& job)
{
    std::map<std::string, std::vector<int>> members;  // sorted
    for (const RankAnalysis* r : ranks)
        for (const CommunicatorUse& u : r->communicatorUses) {
            std::vector<int>& m = members[u.communicator];
            if (m.empty() || m.back() != r->rank)
                m.push_back(r->rank);
        }
    if (members.empty())
        return {};
    for (auto& [communicator, m] : members) {
        std::sort(m.begin(), m.end());
        m.erase(std::unique(m.begin(), m.end()), m.end());
    }
    constexpr std::pair<plan::GroupKind, DeviceClass> kKinds[] = {
        {plan::GroupKind::Tensor, DeviceClass::CommTensor},   {plan::GroupKind::Pipeline, DeviceClass::CommPipeline},
        {plan::GroupKind::Expert, DeviceClass::CommExpert},   {plan::GroupKind::Data, DeviceClass::CommData},
        {plan::GroupKind::ExpertData, DeviceClass::CommData},
    };
    // The dimension whose group (of this rank) holds every member: exactly the group when every
    // rank was traced, a part of it when only some were. Several dimensions: not told.
    const auto dimensionOfMembers = [&](const std::vector<int>& m, int rank) {
        std::optional<DeviceClass> found;
        if (!job.mesh || m.size() < 2)
            return DeviceClass::CommOther;
        for (const auto& [kind, deviceClass] : kKinds) {
            const std::vector<int> group = job.mesh->groupOf(kind, rank);
            if (!std::all_of(m.begin(), m.end(),
                             [&](int r) { return std::find(group.begin(), group.end(), r) != group.end(); }))
                continue;
            if (found && *found != deviceClass)
                return DeviceClass::CommOther;
            found = deviceClass;
        }
        return found.value_or(DeviceClass::CommOther);
    };

    std::map<DeviceClass, int> placed;  // communicators by class
    for (const auto& [communicator, m] : members)
        ++placed[dimensionOfMembers(m, m.front())];
    int keyed = 0;
    for (RankAnalysis* r : ranks) {
        if (r->communicatorUses.empty())
            continue;
        const int firstStep = r->steps.empty() ? -1 : r->steps.front().step;
        // Per step, the calls on each communicator (and, for sends and receives, each direction).
        std::map<std::pair<int, std::string>, std::vector<const CommunicatorUse*>> calls;
        for (const CommunicatorUse& u : r->communicatorUses) {
            store::KernelRow& k = r->kernels[u.kernel];
            const std::vector<int>& m = members[u.communicator];
            k.deviceClass = dimensionOfMembers(m, r->rank);
            if (k.step < 0 || m.size() < 2)
                continue;
            std::string key = "nccl " + u.communicator;
            if (u.call == "send" || u.call == "recv") {
                // NCCL numbers a communicator's ranks as torch's group lists them: in order of rank.
                const auto me = std::find(m.begin(), m.end(), r->rank) - m.begin();
                if (u.peer < 0 || u.peer >= int(m.size()) || u.peer == me)
                    continue;
                const int peer = m[std::size_t(u.peer)];
                key += u.call == "send" ? " " + std::to_string(r->rank) + ">" + std::to_string(peer)
                                        : " " + std::to_string(peer) + ">" + std::to_string(r->rank);
            }
            calls[{k.step, key}].push_back(&u);
        }
        for (auto& [stepKey, uses] : calls) {
            std::stable_sort(uses.begin(), uses.end(), [](const CommunicatorUse* a, const CommunicatorUse* b) {
                return a->launchNs < b->launchNs;
            });
            const bool fromEnd = stepKey.first == firstStep;
            for (std::size_t i = 0; i < uses.size(); ++i) {
                const std::string place = fromEnd ? "-" + std::to_string(uses.size() - i) : "+" + std::to_string(i);
                r->collectives.push_back({stepKey.second + " step " + std::to_string(stepKey.first) + place,
                                          r->kernels[uses[i]->kernel].endNs});
                ++keyed;
            }
        }
        measureDeviceTime(*r);
    }
    std::string classes;
    for (const auto& [deviceClass, count] : placed)
        classes += (classes.empty() ? "" : ", ") + std::to_string(count) + " " +
                   std::string(store::deviceClassName(deviceClass));
    return {std::to_string(members.size()) +
            " NCCL communicators named by NCCL's NVTX ranges, placed by the ranks "
            "that use them" +
            (job.mesh ? "" : " (no --job: their dimension is not known)") + ": " + classes + "; " +
            std::to_string(keyed) + " NCCL calls matched across ranks for the clock alignment"};
}

std::vector<int> partialSteps(const std::vector<const RankAnalysis*>& ranks)
{
    std::vector<int> partial;
    for (const RankAnalysis* rank : ranks) {
        const std::vector<StepWindow>& steps = rank->steps;
        if (steps.size() < 2)
            continue;
        // The steps between the ends, or the other end when there are two, show what a whole step holds.
        const auto inner = steps.size() > 2 ? std::span(steps).subspan(1, steps.size() - 2) : std::span(steps);
        int ops = 0;
        std::vector<std::size_t> kernels;
        for (const StepWindow& w : inner) {
            ops = std::max(ops, w.ops);
            kernels.push_back(w.kernels);
        }
        std::nth_element(kernels.begin(), kernels.begin() + std::ptrdiff_t(kernels.size() / 2), kernels.end());
        const std::size_t typicalKernels = kernels[kernels.size() / 2];
        for (const StepWindow* end : {&steps.front(), &steps.back()})
            if (end->ops < ops || end->kernels < typicalKernels)
                partial.push_back(end->step);
    }
    std::sort(partial.begin(), partial.end());
    partial.erase(std::unique(partial.begin(), partial.end()), partial.end());
    return partial;
}

void keepSteps(RankAnalysis& rank, const std::vector<int>& kept)
{
    const auto isKept = [&](int step) { return std::binary_search(kept.begin(), kept.end(), step); };
    std::erase_if(rank.steps, [&](const StepWindow& w) { return !isKept(w.step); });
    std::erase_if(rank.spans, [&](const wire::SpanRecord& s) { return !isKept(s.step); });
    std::erase_if(rank.deviceTime, [&](const store::DeviceTimeRow& d) { return !isKept(d.step); });
    std::erase_if(rank.warnings, [&](const std::pair<int, std::string>& w) { return !isKept(w.first); });
    for (store::KernelRow& k : rank.kernels)
        if (!isKept(k.step))
            k.step = -1;
}

}  // namespace meshbench::import
