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
// As root, Open MPI needs OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 set.

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
    double hiddenShare = 0;   // of the reduction's time, under the backward
    double reduceSeconds = 0; // per step and rank, the reduction's span union
    bool ok = false;
};

Result run(const std::filesystem::path& dir, const std::string& name, json job, int ranks)
{
    const std::filesystem::path jobFile = dir / (name + ".json"), spans = dir / (name + ".spans");
    std::ofstream(jobFile) << job.dump(2);
    const std::string command = std::string(MESHBENCH_MPIRUN) + " --oversubscribe -np " + std::to_string(ranks) + " " +
                                MESHBENCH_AGENT + " --job " + jobFile.string() + " --spans " + spans.string() +
                                " > " + (dir / (name + ".log")).string() + " 2>&1";
    Result result;
    if (std::system(command.c_str()) != 0) {
        std::fprintf(stderr, "bench_overlap: %s failed; see %s\n", name.c_str(), (dir / (name + ".log")).c_str());
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
                continue;   // warm-up
            const Interval i{double(j["begin_ns"].get<std::int64_t>()) * 1e-9, double(j["end_ns"].get<std::int64_t>()) * 1e-9};
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
    for (const auto& [step, span] : stepSpan)
        steps.push_back(span.second - span.first);
    if (steps.empty() || byRankStep.empty())
        return result;
    std::sort(steps.begin(), steps.end());
    result.medianStepSeconds = steps[steps.size() / 2];
    result.hiddenShare = reduceTotal > 0 ? hidden / reduceTotal : 0;
    result.reduceSeconds = reduceTotal / double(byRankStep.size());
    result.ok = true;
    return result;
}

}  // namespace

int main(int argc, char** argv)
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

    std::printf("demo model, %d steps (first not counted), 1 MiB gradient buckets, CPU backend under mpirun\n", steps);
    std::printf("%-10s %-8s %14s %14s %18s %16s\n", "layout", "overlap", "step (ms)", "vs off", "reduce/rank (ms)",
                "hidden under B");
    int failures = 0;
    for (const auto& [label, ep] : {std::pair{"dp2", 1}, std::pair{"dp2 ep2", 2}}) {
        Result results[2];
        for (const bool overlapOn : {false, true}) {
            json job = demo;
            job["parallel"] = {{"dp", 2},         {"pp", 1},      {"tp", 1}, {"ep", ep}, {"zero", 0},
                               {"microbatches", 4}, {"micro_batch_size", 2}, {"recompute", "none"},
                               {"grad_bucket_mb", 1.0}, {"overlap_grad_reduce", overlapOn}};
            job["cluster"] = {{"nodes", 1}, {"devices_per_node", 2}, {"device", "cpu"}};
            job["train"]["steps"] = steps;
            const std::string name = std::string(label == std::string("dp2") ? "dp2" : "dp2-ep2") +
                                     (overlapOn ? "-on" : "-off");
            results[overlapOn] = run(dir, name, job, 2);
            failures += !results[overlapOn].ok;
        }
        for (const bool overlapOn : {false, true}) {
            const Result& r = results[overlapOn];
            const double ratio = results[0].medianStepSeconds > 0 ? r.medianStepSeconds / results[0].medianStepSeconds : 0;
            std::printf("%-10s %-8s %14.1f %13.2fx %18.1f %15.0f%%\n", label, overlapOn ? "on" : "off",
                        1e3 * r.medianStepSeconds, ratio, 1e3 * r.reduceSeconds, 100 * r.hiddenShare);
        }
    }
    return failures == 0 ? 0 : 1;
}
