// Live aggregator throughput: records per second through LiveAggregator::add (spans of the
// planner's simulated 1F1B timeline for every rank, ranks interleaved as the collector would see
// them), next to a bare loop over the same records that only sums span lengths per rank.

#include "common/guarded_main.h"

#include "live/aggregator.h"
#include "plan/mesh.h"
#include "plan/planner.h"

#include <chrono>
#include <cmath>
#include <cstdio>

using namespace meshbench;

namespace {

plan::JobSpec benchSpec()
{
    const nlohmann::json doc = nlohmann::json::parse(R"({
      "model": { "layers": 16, "hidden": 1024, "heads": 16, "ffn_hidden": 4096, "vocab": 32000, "seq_len": 1024,
                 "moe": { "experts": 8, "top_k": 2, "moe_ffn_hidden": 2048, "every_n_layers": 2 } },
      "parallel": { "dp": 8, "pp": 4, "tp": 2, "ep": 8, "schedule": "1f1b", "microbatches": 32, "micro_batch_size": 1 },
      "cluster": { "nodes": 8, "devices_per_node": 8, "device": "h100-sxm" }
    })");
    const plan::LoadResult loaded = plan::loadJobSpec(doc);
    if (!loaded.valid()) {
        std::fprintf(stderr, "bench spec invalid: %s: %s\n", loaded.errors.front().path.c_str(),
                     loaded.errors.front().message.c_str());
        std::exit(1);  // NOLINT(concurrency-mt-unsafe): main's first call, before any thread
    }
    return *loaded.spec;
}

double seconds(std::chrono::steady_clock::time_point from)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
}

int runBenchmark()
{
    const plan::JobSpec spec = benchSpec();
    const plan::Plan plan = plan::makePlan(spec);
    const plan::Mesh mesh(spec.parallel);
    const plan::SimulationResult& sim = plan.simulation;
    constexpr int kSteps = 200;
    const double scale = 1e9;  // simulated seconds to ns
    const auto ns = [&](double s) { return std::int64_t(std::llround(s * scale)); };
    const std::int64_t stepLength = ns(sim.makespan) + 1'000'000;

    // Round-robin over ranks, one op at a time: the interleaving the collector sees.
    std::vector<std::pair<std::uint32_t, wire::Record>> records;
    for (int step = 1; step <= kSteps; ++step) {
        const std::int64_t offset = step * stepLength;
        std::size_t longest = 0;
        for (const auto& ops : sim.timeline)
            longest = std::max(longest, ops.size());
        for (std::size_t i = 0; i <= longest; ++i)
            for (int rank = 0; rank < mesh.worldSize(); ++rank) {
                const auto& ops = sim.timeline[std::size_t(mesh.coordOf(rank).pp)];
                wire::SpanRecord s;
                s.step = step;
                if (i < ops.size()) {
                    s.kind = *wire::spanKindFromName(plan::opKindName(ops[i].op.kind));
                    s.beginNs = offset + ns(ops[i].begin);
                    s.endNs = offset + ns(ops[i].end);
                } else {
                    s.kind = wire::SpanKind::Optimizer;
                    s.beginNs = offset + ns(sim.makespan);
                    s.endNs = s.beginNs + 1000;
                }
                records.emplace_back(std::uint32_t(rank), s);
            }
        for (int layer = 0; layer < spec.model.layers; ++layer)
            if (spec.model.isMoeLayer(layer))
                records.emplace_back(0u, wire::ExpertLoadRecord{step, layer, std::vector<std::uint32_t>(8, 100),
                                                                std::vector<std::uint32_t>(8, 1)});
        wire::StepMetricsRecord m;
        m.step = step;
        m.endNs = stepLength;
        records.emplace_back(0u, m);
    }

    // Reference: touch every record, sum span lengths per rank.
    std::vector<std::int64_t> busy(std::size_t(mesh.worldSize()), 0);
    auto start = std::chrono::steady_clock::now();
    for (const auto& [rank, record] : records)
        if (const auto* s = std::get_if<wire::SpanRecord>(&record))
            busy[rank] += s->endNs - s->beginNs;
    const double reference = seconds(start);
    std::int64_t checksum = 0;
    for (std::int64_t b : busy)
        checksum += b;

    live::LiveAggregator aggregator(spec, &plan);
    std::size_t steps = 0;
    double bubble = 0;
    start = std::chrono::steady_clock::now();
    for (const auto& [rank, record] : records) {
        aggregator.add(rank, record);
        for (const live::StepAggregate& s : aggregator.takeCompletedSteps()) {
            ++steps;
            bubble = s.bubble.value_or(-1);
        }
    }
    const double measured = seconds(start);

    const double n = double(records.size());
    std::printf("records: %zu (%d ranks, %d steps), steps emitted %zu, bubble %.6f (plan %.6f), checksum %lld\n",
                records.size(), mesh.worldSize(), kSteps, steps, bubble, sim.overallBubbleRatio,
                static_cast<long long>(checksum));
    std::printf("live aggregator:            %8.2f M records/s\n", n / measured / 1e6);
    std::printf("reference (sum per rank):   %8.2f M records/s\n", n / reference / 1e6);
    return steps == std::size_t(kSteps) ? 0 : 1;
}

}  // namespace

int main()
{
    return meshbench::testing::guardedMain("bench_live_aggregator", 1, [] { return runBenchmark(); });
}
