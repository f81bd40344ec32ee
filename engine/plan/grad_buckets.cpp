#include "grad_buckets.h"

#include <algorithm>
#include <map>

namespace meshbench::plan {

std::vector<int> cutIntoBuckets(std::span<const double> bytes, double capBytes)
{
    std::vector<int> bucketOf(bytes.size());
    int bucket = -1;
    double held = 0;
    for (std::size_t t = 0; t < bytes.size(); ++t) {
        if (bucket < 0 || held >= capBytes) {
            ++bucket;
            held = 0;
        }
        held += bytes[t];
        bucketOf[t] = bucket;
    }
    return bucketOf;
}

namespace {

int countBuckets(const ModelSpec& model, const ModelSlice& slice, double bytesPerElement, double capBytes)
{
    // The table's order, reversed per region: the backward's. Gathered once, cut per region.
    std::vector<double> dense, experts;
    forEachAgentParameter(model, [&](const AgentParameter& t) {
        if (slice.holds(t, model.tiedEmbeddings))
            (t.experts ? experts : dense).push_back(double(slice.shardShape(t).elements()) * bytesPerElement);
    });
    int buckets = 0;
    for (std::vector<double>* region : {&dense, &experts}) {
        std::reverse(region->begin(), region->end());
        const std::vector<int> bucketOf = cutIntoBuckets(*region, capBytes);
        buckets += bucketOf.empty() ? 0 : bucketOf.back() + 1;
    }
    return buckets;
}

}  // namespace

int gradientBucketCount(const ModelSpec& model, const ModelSlice& slice, double bytesPerElement, double capBytes)
{
    // The search asks this for every candidate, and its candidates share a few hundred slices:
    // remembered per thread, keyed by everything the count reads.
    const MoeSpec& moe = model.moe;
    std::vector<double> key{double(model.layers),
                            double(model.hidden),
                            double(model.heads),
                            double(model.kvHeads),
                            double(model.ffnHidden),
                            double(model.vocab),
                            double(int(model.norm)),
                            double(int(model.activation)),
                            double(model.tiedEmbeddings),
                            double(moe.experts),
                            double(moe.ffnHidden),
                            double(moe.everyNLayers),
                            double(slice.embedding),
                            double(slice.head),
                            double(slice.expertShards),
                            double(slice.tensorShards),
                            bytesPerElement,
                            capBytes};
    for (const ModelSlice::Chunk& c : slice.chunks) {
        key.push_back(c.firstLayer);
        key.push_back(c.layers);
    }
    thread_local std::map<std::vector<double>, int> counted;
    if (const auto known = counted.find(key); known != counted.end())
        return known->second;
    if (counted.size() > 4096)
        counted.clear();
    const int buckets = countBuckets(model, slice, bytesPerElement, capBytes);
    counted.emplace(std::move(key), buckets);
    return buckets;
}

}  // namespace meshbench::plan
