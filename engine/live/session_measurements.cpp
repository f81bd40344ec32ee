#include "session_measurements.h"

#include "live/session_spec.h"
#include "live/steady_state.h"
#include "plan/units.h"
#include "store/session_store.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

namespace meshbench::live {
namespace {

std::string milliseconds(double seconds) { return plan::formatNumber("%.3f ms", seconds * 1e3); }

// One compute op of a rank's step: the span and its times.
struct ComputeOp {
    wire::SpanRecord span;
    std::int64_t beginNs = 0, endNs = 0;
};

// How long rank `rank` computed in `step`: the union of its ops' times, so that ops that overlap
// count once (what overlap allows). Throws, naming the session, when an op of its schedule is
// stored twice (a rank runs each once a step; one without a micro-batch is told apart by its
// time) or when its ops keep it busy for longer than the step took.
double checkedBusySeconds(const std::string& path, std::uint32_t rank, int step, std::vector<ComputeOp>& ops,
                          double stepSeconds)
{
    const auto key = [](const ComputeOp& op) {
        const wire::SpanRecord& s = op.span;
        return std::tuple(s.stage, s.chunk, s.microbatch, int(s.kind), s.microbatch < 0 ? op.beginNs : 0);
    };
    std::sort(ops.begin(), ops.end(), [&](const ComputeOp& a, const ComputeOp& b) { return key(a) < key(b); });
    for (std::size_t i = 1; i < ops.size(); ++i)
        if (key(ops[i - 1]) == key(ops[i]))
            throw std::invalid_argument(path + ": rank " + std::to_string(rank) + "'s " + wire::spanLabel(ops[i].span) +
                                        " of step " + std::to_string(step) +
                                        " is stored more than once, where a rank runs each op of its schedule once "
                                        "a step: the session's spans were copied; calibrate from the run's own file");
    std::sort(ops.begin(), ops.end(), [](const ComputeOp& a, const ComputeOp& b) { return a.beginNs < b.beginNs; });
    std::int64_t busy = 0, begin = 0, end = std::numeric_limits<std::int64_t>::min();
    for (const ComputeOp& op : ops) {
        if (op.beginNs > end) {
            busy += end > begin ? end - begin : 0;
            begin = op.beginNs;
        }
        end = std::max(end, op.endNs);
    }
    busy += end > begin ? end - begin : 0;
    const double seconds = double(busy) * 1e-9;
    if (seconds > stepSeconds)
        throw std::invalid_argument(path + ": rank " + std::to_string(rank) + "'s compute spans of step " +
                                    std::to_string(step) + " keep it busy for " + milliseconds(seconds) +
                                    ", longer than the step's " + milliseconds(stepSeconds) +
                                    ": the spans' times are damaged (or in another unit than the steps'); "
                                    "calibrate from another session");
    return seconds;
}

// An imported trace's device time per stage and step by kind of kernel (none for our agent's runs):
// the mean over the stage's traced ranks of their counted steps.
std::vector<plan::MeasuredKernels> stageKernels(const store::SessionReader& reader, const std::string& path,
                                                const plan::JobSpec& spec, const std::map<int, double>& stepSeconds,
                                                int firstCounted)
{
    const std::vector<store::DeviceTimeRow> rows = reader.deviceTime();
    if (rows.empty())
        return {};
    std::map<int, int> stageOf;
    for (const store::RankInfo& r : reader.header().ranks)
        stageOf[r.rank] = r.pp;
    std::vector<plan::MeasuredKernels> stages(std::size_t(spec.parallel.pp));
    std::map<int, std::set<int>> stepsOf;  // per rank, its counted steps with device time
    for (const store::DeviceTimeRow& row : rows) {
        if (row.step < firstCounted || !stepSeconds.count(row.step))
            continue;
        const auto stage = stageOf.find(row.rank);
        if (stage == stageOf.end() || stage->second < 0 || stage->second >= spec.parallel.pp)
            throw std::invalid_argument(path + ": device time of rank " + std::to_string(row.rank) +
                                        ", which the session's layout does not have; the session is damaged");
        if (row.busyNs < 0 || row.exposedNs < 0 || row.exposedNs > row.busyNs)
            throw std::invalid_argument(path + ": rank " + std::to_string(row.rank) + "'s device time in step " +
                                        std::to_string(row.step) + " is damaged (busy " + std::to_string(row.busyNs) +
                                        " ns, exposed " + std::to_string(row.exposedNs) +
                                        " ns); calibrate from another session");
        plan::MeasuredKernels& k = stages[std::size_t(stage->second)];
        const double seconds = double(row.busyNs) * 1e-9;
        switch (row.deviceClass) {
        case store::DeviceClass::Gemm:
            k.gemm += seconds;
            break;
        case store::DeviceClass::Attention:
            k.attention += seconds;
            break;
        case store::DeviceClass::OtherCompute:
            k.streaming += seconds;
            break;
        case store::DeviceClass::CommTensor:
            k.tensorComm += seconds;
            break;
        case store::DeviceClass::CommData:
            k.dataComm += seconds;
            break;
        case store::DeviceClass::CommExpert:
            k.expertComm += seconds;
            break;
        default:
            break;  // pipeline transfers, unplaced collectives, copies, idle: no rate of the table's
        }
        stepsOf[row.rank].insert(row.step);
    }
    std::vector<int> rankSteps(stages.size(), 0);
    for (const auto& [rank, steps] : stepsOf) {
        ++stages[std::size_t(stageOf[rank])].ranks;
        rankSteps[std::size_t(stageOf[rank])] += int(steps.size());
    }
    for (std::size_t s = 0; s < stages.size(); ++s)
        if (rankSteps[s] > 0) {
            plan::MeasuredKernels& k = stages[s];
            for (double* field : {&k.gemm, &k.attention, &k.streaming, &k.tensorComm, &k.dataComm, &k.expertComm})
                *field /= rankSteps[s];
        }
    return stages;
}

}  // namespace

// Warm-up is left out when later steps exist (steady_state.h).
plan::MeasuredRun measureSession(const std::string& path)
{
    const store::SessionReader reader(path);
    // A damaged page anywhere refuses the file before anything is measured from it, even one that
    // calibration would not read: the rest of what it holds cannot be trusted either.
    reader.checkStructure();
    plan::MeasuredRun run;
    run.source = std::filesystem::path(path).filename().string();
    // The layout the ranks ran: the spec's own, or one device for a --one-device run.
    run.spec = sessionSpecAsRun(reader, path);

    // Each completed step's time, from the rank that reports the job's metrics (rank 0).
    std::map<int, double> stepSeconds;
    for (const auto& metrics : reader.stepMetrics()) {
        const wire::StepMetricsRecord& m = metrics.record;
        if (m.endNs <= m.beginNs)
            throw std::invalid_argument(path + ": step " + std::to_string(m.step) +
                                        "'s metrics end at or before they begin (" + std::to_string(m.beginNs) +
                                        " to " + std::to_string(m.endNs) +
                                        " ns): the session is damaged; calibrate from another session");
        if (!stepSeconds.emplace(m.step, double(m.endNs - m.beginNs) * 1e-9).second)
            throw std::invalid_argument(path + ": step " + std::to_string(m.step) +
                                        " has more than one record of its metrics: the session's rows were "
                                        "copied; calibrate from the run's own file");
    }
    if (stepSeconds.empty())
        throw std::invalid_argument(path + " holds no completed step; calibrate from a run that trained");
    const int firstCounted = std::next(stepSeconds.begin(), std::ptrdiff_t(firstSteadyStep(stepSeconds.size())))->first;
    std::vector<double> steps;
    for (const auto& [step, seconds] : stepSeconds)
        if (step >= firstCounted)
            steps.push_back(seconds);
    run.stepSeconds = median(steps);
    const int counted = int(steps.size());

    // Per rank, the compute ops of the counted step it is in; spans of a step without metrics (the
    // step a stopped run was in) are left out. The reader gives each rank's spans by begin time, and
    // a rank's steps follow one another, so a step is checked when its rank's next one begins.
    struct OpenStep {
        int step = -1;
        std::vector<ComputeOp> ops;
    };
    std::map<std::uint32_t, OpenStep> open;
    std::map<std::uint32_t, int> stageOf;
    std::map<std::uint32_t, double> busy;
    const auto close = [&](std::uint32_t rank, OpenStep& current) {
        if (current.step >= 0)
            busy[rank] += checkedBusySeconds(path, rank, current.step, current.ops, stepSeconds.at(current.step));
        current.ops.clear();
    };
    const auto [t0, t1] = reader.timeRange();
    reader.spans(t0, t1, {}, [&](const store::StoredSpan& stored) {
        const wire::SpanRecord& span = stored.span;
        if (span.step < firstCounted || !stepSeconds.count(span.step) || span.endNs <= span.beginNs)
            return;
        if (wire::isComputeKind(span.kind)) {
            OpenStep& current = open[stored.rank];
            if (span.step < current.step)
                throw std::invalid_argument(path + ": rank " + std::to_string(stored.rank) + "'s " +
                                            wire::spanLabel(span) + " of step " + std::to_string(span.step) +
                                            " begins after its spans of step " + std::to_string(current.step) +
                                            ": the session's spans are damaged; calibrate from another session");
            if (span.step != current.step) {
                close(stored.rank, current);
                current.step = span.step;
            }
            current.ops.push_back({span, span.beginNs, span.endNs});
            stageOf[stored.rank] = span.stage;
        } else if (span.kind == wire::SpanKind::DataParallelReduce && span.bytes > 0) {
            run.reductions.push_back({double(span.bytes), double(span.endNs - span.beginNs) * 1e-9});
        }
    });
    for (auto& [rank, current] : open)
        close(rank, current);

    const int pp = run.spec.parallel.pp;
    std::vector<double> sum(std::size_t(pp), 0.0);
    std::vector<int> count(std::size_t(pp), 0);
    for (const auto& [rank, seconds] : busy) {
        const int stage = stageOf[rank];
        if (stage < 0 || stage >= pp)
            continue;
        sum[std::size_t(stage)] += seconds / counted;
        ++count[std::size_t(stage)];
    }
    for (int s = 0; s < pp; ++s)
        if (count[std::size_t(s)] > 0)
            run.stageComputeSeconds.push_back(sum[std::size_t(s)] / count[std::size_t(s)]);
    run.stageKernels = stageKernels(reader, path, run.spec, stepSeconds, firstCounted);
    return run;
}

}  // namespace meshbench::live
