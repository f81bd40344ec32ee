#include "agent/distributed/gradient_norm.h"

#include <cmath>

namespace meshbench::agent {

double globalGradientNorm(GradientSquares squares, const GradientNormGroups& groups)
{
    // ZeRO shards: dense tensors' over the data group, expert blocks' over the expert-data group.
    const auto sumShards = [&squares](Communicator* group, std::size_t first) {
        if (!group)
            return;
        double parts[2] = {squares[first], squares[first + 1]};
        group->allReduceSum(parts, 2);
        squares[first] = parts[0];
        squares[first + 1] = parts[1];
    };
    sumShards(groups.zeroShards, 0);
    sumShards(groups.expertZeroShards, kExpertBlock);
    // Only the squares of tensors split over a group are summed over it; both kinds of split
    // ([3]) over both groups.
    const auto sumSplit = [&squares](Communicator& group, std::size_t split) {
        double parts[2] = {squares[split], squares[kTensorSplit | kExpertBlock]};
        group.allReduceSum(parts, 2);
        squares[split] = parts[0];
        squares[kTensorSplit | kExpertBlock] = parts[1];
    };
    if (groups.tensor)
        sumSplit(*groups.tensor, kTensorSplit);
    if (groups.expert)
        sumSplit(*groups.expert, kExpertBlock);
    double total = squares[0] + squares[1] + squares[2] + squares[3];
    if (groups.pipeline)
        groups.pipeline->allReduceSum(&total, 1);
    return std::sqrt(total);
}

}  // namespace meshbench::agent
