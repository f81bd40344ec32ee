#include "clock_alignment.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <tuple>
#include <unordered_map>

namespace meshbench::import {

namespace {

std::int64_t median(std::vector<std::int64_t>& values)
{
    const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
    std::nth_element(values.begin(), middle, values.end());
    return *middle;
}

struct Member {
    int rank;
    std::int64_t endNs;
};

// One pipeline transfer as both ends name it: step, direction (0 activations, 1 gradients),
// micro-batch, the sending virtual stage, and the pipeline (its lowest rank; 0 without a mesh).
using TransferKey = std::tuple<int, int, int, int, int>;

struct TransferEnd {
    int rank;
    std::int64_t ns;  // the send's begin, or the receive's end
};

// Shortest distances from `source` over edges (from, to, weight), nothing where none reaches;
// nothing at all where a cycle is negative (the bounds contradict each other).
std::optional<std::map<int, std::int64_t>> shortestPaths(const std::map<std::pair<int, int>, std::int64_t>& edges,
                                                         int source, std::size_t vertices)
{
    std::map<int, std::int64_t> distance{{source, 0}};
    for (std::size_t round = 0; round <= vertices; ++round) {
        bool changed = false;
        for (const auto& [edge, weight] : edges) {
            const auto from = distance.find(edge.first);
            if (from == distance.end())
                continue;
            const auto to = distance.find(edge.second);
            if (to == distance.end() || from->second + weight < to->second) {
                distance[edge.second] = from->second + weight;
                changed = true;
            }
        }
        if (!changed)
            return distance;
    }
    return std::nullopt;
}

// Alignment by pipeline transfers (see the header): x_a - x_b <= receive end - send begin is the
// edge b -> a of a difference-constraint graph.
void alignByTransfers(const std::vector<const RankAnalysis*>& ranks, const JobContext& job,
                      std::map<int, ClockOffset>& offsets)
{
    int pp = job.pp();
    if (pp <= 0)
        for (const RankAnalysis* r : ranks)
            pp = std::max(pp, r->stage + 1);
    std::map<TransferKey, std::vector<TransferEnd>> sends, receives;
    for (const RankAnalysis* r : ranks) {
        int pipeline = 0;
        if (job.mesh && r->rank < job.mesh->worldSize()) {
            const std::vector<int> group = job.mesh->groupOf(plan::GroupKind::Pipeline, r->rank);
            pipeline = *std::min_element(group.begin(), group.end());
        }
        for (const wire::SpanRecord& s : r->spans) {
            const int stage = s.chunk * std::max(pp, 1) + s.stage;  // virtual stage
            switch (s.kind) {
            case wire::SpanKind::SendActivation:
                sends[{s.step, 0, s.microbatch, stage, pipeline}].push_back({r->rank, s.beginNs});
                break;
            case wire::SpanKind::SendGradient:
                sends[{s.step, 1, s.microbatch, stage, pipeline}].push_back({r->rank, s.beginNs});
                break;
            case wire::SpanKind::RecvActivation:
                receives[{s.step, 0, s.microbatch, stage - 1, pipeline}].push_back({r->rank, s.endNs});
                break;
            case wire::SpanKind::RecvGradient:
                receives[{s.step, 1, s.microbatch, stage + 1, pipeline}].push_back({r->rank, s.endNs});
                break;
            default:
                break;
            }
        }
    }
    std::map<std::pair<int, int>, std::int64_t> edges;
    std::map<int, int> transfers;
    for (const auto& [key, from] : sends) {
        const auto to = receives.find(key);
        if (to == receives.end() || from.size() != 1 || to->second.size() != 1 ||
            from.front().rank == to->second.front().rank)
            continue;
        const int a = from.front().rank, b = to->second.front().rank;
        const std::int64_t weight = to->second.front().ns - from.front().ns;
        const auto [edge, fresh] = edges.emplace(std::pair{b, a}, weight);
        if (!fresh)
            edge->second = std::min(edge->second, weight);
        ++transfers[a];
        ++transfers[b];
    }
    if (edges.empty())
        return;
    const int reference = offsets.begin()->first;
    std::map<std::pair<int, int>, std::int64_t> reversed;
    for (const auto& [edge, weight] : edges)
        reversed.emplace(std::pair{edge.second, edge.first}, weight);
    // x_r - x_ref <= distance(ref -> r); x_ref - x_r <= distance(r -> ref).
    const auto upper = shortestPaths(edges, reference, offsets.size());
    const auto lower = shortestPaths(reversed, reference, offsets.size());
    if (!upper || !lower)
        return;
    for (auto& [rank, offset] : offsets) {
        const auto hi = upper->find(rank);
        const auto lo = lower->find(rank);
        if (hi == upper->end() || lo == lower->end())
            continue;
        const std::int64_t low = -lo->second, high = hi->second;
        offset.offsetNs = low + (high - low) / 2;
        offset.residualNs = (high - low + 1) / 2;
        offset.transfers = transfers[rank];
    }
}

}  // namespace

std::map<int, ClockOffset> alignClocks(const std::vector<const RankAnalysis*>& ranks, const JobContext& job)
{
    std::unordered_map<std::string, std::vector<Member>> byKey;
    for (const RankAnalysis* r : ranks)
        for (const CollectiveEnd& c : r->collectives)
            byKey[c.key].push_back({r->rank, c.endNs});
    std::vector<std::vector<Member>> shared;
    for (auto& [key, members] : byKey)
        if (members.size() >= 2)
            shared.push_back(std::move(members));

    std::map<int, ClockOffset> offsets;
    std::map<int, std::vector<std::size_t>> collectivesOf;
    for (const RankAnalysis* r : ranks)
        offsets[r->rank] = {};
    for (std::size_t i = 0; i < shared.size(); ++i)
        for (const Member& m : shared[i])
            collectivesOf[m.rank].push_back(i);
    if (offsets.empty())
        return offsets;
    if (shared.empty()) {
        alignByTransfers(ranks, job, offsets);
        return offsets;
    }
    const int reference = offsets.begin()->first;

    // A rank joins once it shares a collective with a rank already aligned; the medians are then
    // refined until they settle (exact data settles at once).
    std::map<int, bool> aligned;
    aligned[reference] = true;
    for (int round = 0; round < 100; ++round) {
        bool changed = false;
        for (auto& [rank, offset] : offsets) {
            if (rank == reference)
                continue;
            std::vector<std::int64_t> estimates;
            for (std::size_t i : collectivesOf[rank]) {
                // Differences, not sums: a sum of epoch nanoseconds overflows.
                std::int64_t mine = 0;
                for (const Member& m : shared[i])
                    if (m.rank == rank)
                        mine = m.endNs;
                std::int64_t difference = 0;
                int count = 0;
                for (const Member& m : shared[i]) {
                    if (m.rank != rank && aligned[m.rank]) {
                        difference += m.endNs + offsets[m.rank].offsetNs - mine;
                        ++count;
                    }
                }
                if (count > 0)
                    estimates.push_back(difference / count);
            }
            if (estimates.empty())
                continue;
            const std::int64_t estimate = median(estimates);
            changed = changed || !aligned[rank] || estimate != offset.offsetNs;
            offset.offsetNs = estimate;
            offset.collectives = static_cast<int>(estimates.size());
            aligned[rank] = true;
        }
        if (!changed)
            break;
    }
    offsets[reference].collectives = static_cast<int>(collectivesOf[reference].size());

    for (auto& [rank, offset] : offsets) {
        std::vector<std::int64_t> distances;
        for (std::size_t i : collectivesOf[rank]) {
            const std::int64_t origin = shared[i].front().endNs;
            std::int64_t sum = 0;
            for (const Member& m : shared[i])
                sum += m.endNs + offsets[m.rank].offsetNs - origin;
            const std::int64_t mean = origin + sum / static_cast<std::int64_t>(shared[i].size());
            for (const Member& m : shared[i])
                if (m.rank == rank)
                    distances.push_back(std::llabs(m.endNs + offset.offsetNs - mean));
        }
        offset.residualNs = distances.empty() ? 0 : median(distances);
    }
    return offsets;
}

}  // namespace meshbench::import
