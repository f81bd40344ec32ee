#include "clock_alignment.h"

#include <algorithm>
#include <cstdlib>
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

}  // namespace

std::map<int, ClockOffset> alignClocks(const std::vector<const RankAnalysis*>& ranks)
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
