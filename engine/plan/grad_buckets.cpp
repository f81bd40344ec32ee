#include "grad_buckets.h"

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

int gradientBucketCount(const ModelSpec& model, const ModelSlice& slice, double bytesPerElement, double capBytes)
{
    const std::vector<AgentParameter> tensors = agentParameters(model);
    int buckets = 0;
    for (bool experts : {false, true}) {
        std::vector<double> bytes;
        for (auto t = tensors.rbegin(); t != tensors.rend(); ++t) {
            if (t->experts != experts || !slice.holds(*t, model.tiedEmbeddings))
                continue;
            double elements = 1;
            for (std::int64_t dim : slice.shardShape(*t))
                elements *= double(dim);
            bytes.push_back(elements * bytesPerElement);
        }
        const std::vector<int> bucketOf = cutIntoBuckets(bytes, capBytes);
        buckets += bucketOf.empty() ? 0 : bucketOf.back() + 1;
    }
    return buckets;
}

}  // namespace meshbench::plan
