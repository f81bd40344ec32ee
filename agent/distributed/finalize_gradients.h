#pragma once
// What the gradients need once the backward and the data-parallel reduction are done, before the
// optimizer (Megatron-core's distributed/finalize_model_grads): the two copies of a tied embedding
// summed, the sequence-parallel norms' weights summed over the tensor group, and the global norm
// for clipping. Each works on this rank's shard buffer (the whole gradient buffer without ZeRO).

#include "agent/distributed/gradient_norm.h"
#include "agent/distributed/zero_shards.h"
#include "agent/layout/parameters.h"
#include "agent/runtime/communicator.h"

#include "kernels/backend.h"

namespace meshbench::agent {

// With tied embeddings and pipeline stages, the first stage (input) and the last (output layer)
// each hold the embedding; both need the sum of their gradients, as Megatron's embedding group
// all-reduce. Called on those two stages with the embedding's whole gradient (before ZeRO shards
// it: the stages' shards do not line up).
void sumTiedEmbeddingCopies(kernels::Backend& backend, Communicator& pipeline, int peerStage,
                            kernels::DevPtr embeddingGrad, std::size_t elements);

// Under sequence parallelism each TP rank's norms saw its own tokens: their weights' gradients are
// sums over the tensor group (Megatron all-reduces them likewise). Sums commute with the
// data-parallel ones, so this runs on the shard.
void sumSequenceParallelNormGradients(Communicator& tensor, const ParameterLayout& layout, const ZeroShards& shards,
                                      kernels::DevPtr shardGrads);

// This rank's sums of squares, by how each tensor is split, over the parts of tensors it owns;
// `skipView` (a tied embedding's second copy) is not counted.
GradientSquares shardGradientSquares(kernels::Backend& backend, const ParameterLayout& layout, const ZeroShards& shards,
                                     kernels::ConstDevPtr shardGrads, int skipView);

}  // namespace meshbench::agent
