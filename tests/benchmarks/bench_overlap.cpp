// The data-parallel reduction overlapped with the backward (gradient buckets, Megatron's
// --overlap-grad-reduce) against the same reduction after the backward, in one run: the demo
// model on dp2 and dp2 x ep2 under mpirun, each with overlap on and off, printing the median step
// time of both and, from the spans, the share of the reduction's time that lay under the backward
// (the union of dp-reduce spans intersected with the union of B and W spans, over the union of
// dp-reduce spans, summed over ranks and steps). Buckets are 1 MiB, so the demo's ~5.6 MB of
// gradients make several. Open MPI advances the reduction only inside MPI calls, which the
// buckets make between layers; on an oversubscribed machine the ranks also share cores, so the
// gain on a laptop or CI box is smaller than on one core per rank.
//
// usage: bench_overlap [STEPS]   (default 8; the first step is a warm-up and not counted)
// As root, Open MPI needs OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 set; the
// benchmark does not set them for itself (as bench_calibration does not) and refuses to start
// without them. A run that fails prints its log's end and no figures, and the exit status is 1.

#include "common/guarded_main.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using nlohmann::json;

namespace {

using Interval = std::pair<double, double>;

// The intervals merged into disjoint ones, in order.
std::vector<Interval> unite(std::vector<Interval> intervals)
{
    std::sort(intervals.begin(), intervals.end());
    std::vector<Interval> merged;
    for (const Interval& i : intervals) {
        if (!merged.empty() && i.first <= merged.back().second)
            merged.back().second = std::max(merged.back().second, i.second);
        else
            merged.push_back(i);
    }
    return merged;
}

double length(const std::vector<Interval>& disjoint)
{
    double total = 0;
    for (const Interval& i : disjoint)
        total += i.second - i.first;
    return total;
}

double overlap(const std::vector<Interval>& a, const std::vector<Interval>& b)
{
    double total = 0;
    for (const Interval& x : a)
        for (const Interval& y : b)
            total += std::max(0.0, std::min(x.second, y.second) - std::max(x.first, y.first));
    return total;
}

struct Result {
    double medianStepSeconds = 0;
    double hiddenShare = 0;    // of the reduction's time, under the backward
    double reduceSeconds = 0;  // per step and rank, the reduction's span union
    bool ok = false;
    std::string error;  // why not, when !ok
};

// The last `lines` lines of a file, for a failed run's message.
std::string tailOf(const std::filesystem::path& file, std::size_t lines)
{
    std::ifstream in(file);
    std::vector<std::string> kept;
    for (std::string line; std::getline(in, line);) {
        kept.push_back(line);
        if (kept.size() > lines)
            kept.erase(kept.begin());
    }
    std::string text;
    for (const std::string& line : kept)
        text += "    " + line + "\n";
    return text.empty() ? "    (the log is empty)\n" : text;
}

Result run(const std::filesystem::path& dir, const std::string& name, const json& job, int ranks)
{
    const std::filesystem::path jobFile = dir / (name + ".json"), spans = dir / (name + ".spans");
    std::ofstream(jobFile) << job.dump(2);
    for (int rank = 0; rank < ranks; ++rank)  // a previous run's spans must not pass for this one's
        std::filesystem::remove(spans.string() + ".rank" + std::to_string(rank));
    const std::string command = std::string(MESHBENCH_MPIRUN) + " --oversubscribe -np " + std::to_string(ranks) + " " +
                                MESHBENCH_AGENT + " --job " + jobFile.string() + " --spans " + spans.string() + " > " +
                                (dir / (name + ".log")).string() + " 2>&1";
    Result result;
    if (const int status = std::system(command.c_str()); status != 0) {
        const std::filesystem::path log = dir / (name + ".log");
        result.error = "mpirun exited with status " +
                       std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                       "; the end of " + log.string() + ":\n" + tailOf(log, 15);
        return result;
    }
    // Per (rank, step): reduce and backward intervals; per step: first begin and last end.
    std::map<std::pair<int, int>, std::pair<std::vector<Interval>, std::vector<Interval>>> byRankStep;
    std::map<int, Interval> stepSpan;
    for (int rank = 0; rank < ranks; ++rank) {
        std::ifstream in(spans.string() + ".rank" + std::to_string(rank));
        for (std::string line; std::getline(in, line);) {
            const json j = json::parse(line, nullptr, false);
            if (!j.is_object() || j.value("type", "") != "span")
                continue;
            const int step = j["step"].get<int>();
            if (step == 1)
                continue;  // warm-up
            const Interval i{double(j["begin_ns"].get<std::int64_t>()) * 1e-9,
                             double(j["end_ns"].get<std::int64_t>()) * 1e-9};
            const std::string kind = j["kind"].get<std::string>();
            auto& [reduce, backward] = byRankStep[{rank, step}];
            if (kind == "dp-reduce")
                reduce.push_back(i);
            else if (kind == "B" || kind == "W")
                backward.push_back(i);
            auto [it, fresh] = stepSpan.try_emplace(step, i);
            if (!fresh)
                it->second = {std::min(it->second.first, i.first), std::max(it->second.second, i.second)};
        }
    }
    double reduceTotal = 0, hidden = 0;
    for (auto& [key, intervals] : byRankStep) {
        const std::vector<Interval> reduce = unite(intervals.first), backward = unite(intervals.second);
        reduceTotal += length(reduce);
        hidden += overlap(reduce, backward);
    }
    std::vector<double> steps;
    steps.reserve(stepSpan.size());
    for (const auto& [step, span] : stepSpan)
        steps.push_back(span.second - span.first);
    if (steps.empty() || byRankStep.empty()) {
        result.error = "the run wrote no spans after the warm-up step to " + spans.string() + ".rank*";
        return result;
    }
    if (reduceTotal <= 0) {
        result.error = "the run's spans hold no dp-reduce span: nothing to measure the overlap of";
        return result;
    }
    std::sort(steps.begin(), steps.end());
    result.medianStepSeconds = steps[steps.size() / 2];
    result.hiddenShare = hidden / reduceTotal;
    result.reduceSeconds = reduceTotal / double(byRankStep.size());
    result.ok = true;
    return result;
}

int runBenchmark(int argc, char** argv)
{
    const int steps = argc > 1 ? std::max(2, std::atoi(argv[1])) : 8;
    std::ifstream demoFile(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json");
    const json demo = json::parse(demoFile, nullptr, false);
    if (!demo.is_object()) {
        std::fprintf(stderr, "bench_overlap: cannot read resources/jobs/demo.json\n");
        return 1;
    }
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / "meshbench-bench-overlap";
    std::filesystem::create_directories(dir);

    if (geteuid() == 0 && !(std::getenv("OMPI_ALLOW_RUN_AS_ROOT") && std::getenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"))) {
        std::fprintf(stderr, "bench_overlap: running as root, and Open MPI's mpirun refuses root unless "
                             "OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set: set both, or "
                             "run it as another user\n");
        return 1;
    }

    struct Row {
        const char* label;
        bool overlapOn;
        Result result;
    };
    std::vector<Row> rows;
    int failures = 0;
    for (const auto& [label, ep] : {std::pair{"dp2", 1}, std::pair{"dp2 ep2", 2}}) {
        for (const bool overlapOn : {false, true}) {
            json job = demo;
            job["parallel"] = {{"dp", 2},
                               {"pp", 1},
                               {"tp", 1},
                               {"ep", ep},
                               {"zero", 0},
                               {"microbatches", 4},
                               {"micro_batch_size", 2},
                               {"recompute", "none"},
                               {"grad_bucket_mb", 1.0},
                               {"overlap_grad_reduce", overlapOn}};
            job["cluster"] = {{"nodes", 1}, {"devices_per_node", 2}, {"device", "cpu"}};
            job["train"]["steps"] = steps;
            const std::string name =
                std::string(label == std::string("dp2") ? "dp2" : "dp2-ep2") + (overlapOn ? "-on" : "-off");
            rows.push_back({label, overlapOn, run(dir, name, job, 2)});
            if (!rows.back().result.ok) {
                ++failures;
                std::fprintf(stderr, "bench_overlap: the %s run with overlap %s failed: %s", label,
                             overlapOn ? "on" : "off", rows.back().result.error.c_str());
                if (rows.back().result.error.back() != '\n')
                    std::fputc('\n', stderr);
            }
        }
    }
    if (failures > 0) {
        std::fprintf(stderr, "bench_overlap: %d of %zu runs failed; no figures\n", failures, rows.size());
        return 1;
    }

    std::printf("demo model, %d steps (first not counted), 1 MiB gradient buckets, CPU backend under mpirun\n", steps);
    std::printf("%-10s %-8s %14s %14s %18s %16s\n", "layout", "overlap", "step (ms)", "vs off", "reduce/rank (ms)",
                "hidden under B");
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const Result& r = rows[i].result;
        const Result& off = rows[i - (rows[i].overlapOn ? 1 : 0)].result;  // each layout's off row comes first
        std::printf("%-10s %-8s %14.1f %13.2fx %18.1f %15.0f%%\n", rows[i].label, rows[i].overlapOn ? "on" : "off",
                    1e3 * r.medianStepSeconds, r.medianStepSeconds / off.medianStepSeconds, 1e3 * r.reduceSeconds,
                    100 * r.hiddenShare);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    return meshbench::testing::guardedMain("bench_overlap", 1, [&] { return runBenchmark(argc, argv); });
}
