#include "agent/distributed/finalize_gradients.h"

#include "agent/runtime/device_buffer.h"

namespace meshbench::agent {

void sumTiedEmbeddingCopies(kernels::Backend& backend, Communicator& pipeline, int peerStage,
                            kernels::DevPtr embeddingGrad, std::size_t elements)
{
    DeviceBuffer theirs(backend, elements, MemoryCategory::Grads);
    pipeline.send(embeddingGrad, elements, peerStage, 0);
    pipeline.recv(theirs.ptr(), elements, peerStage, 0);
    pipeline.waitSends();
    // a + b = b + a in IEEE arithmetic: both copies get the same bits.
    backend.add(theirs.ptr(), embeddingGrad, elements);
}

void sumSequenceParallelNormGradients(Communicator& tensor, const ParameterLayout& layout, const ZeroShards& shards,
                                      kernels::DevPtr shardGrads)
{
    for (const TensorView& v : layout.views())
        if (v.shape.size() == 1)
            shards.forOwnedPart(
                v, [&](std::size_t at, std::size_t n) { tensor.allReduceSum(kernels::offset(shardGrads, at), n); });
}

GradientSquares shardGradientSquares(kernels::Backend& backend, const ParameterLayout& layout, const ZeroShards& shards,
                                     kernels::ConstDevPtr shardGrads, int skipView)
{
    GradientSquares sums{};
    for (int i = 0; i < int(layout.views().size()); ++i) {
        if (i == skipView)
            continue;
        const TensorView& v = layout.at(i);
        double& sum = sums[(v.tensorCount > 1 ? kTensorSplit : 0) | (v.shardCount > 1 ? kExpertBlock : 0)];
        shards.forOwnedPart(
            v, [&](std::size_t at, std::size_t n) { sum += backend.sumSquares(kernels::offset(shardGrads, at), n); });
    }
    return sums;
}

}  // namespace meshbench::agent
