#pragma once
// The global gradient norm, for clipping, from one rank's sums of squares of its gradients. A
// tensor's squares must be counted once over the whole model: a ZeRO shard's add up over the data
// group (an expert block's shard over the expert-data group), a tensor-parallel part's over the tensor group, an expert
// block's over the expert group, and each pipeline stage's over the pipeline group; a tensor that several ranks hold
// whole counts once. (Megatron-core, optimizer/clip_grads.py and distributed/finalize_model_grads.py, reduces the same
// way over its model-parallel groups.)

#include "agent/runtime/communicator.h"

#include <array>

namespace meshbench::agent {

// Squares by how their tensors are split: index bit 1 set for a tensor-parallel part, bit 2 for
// an expert block (so [3] holds the tensor-parallel parts of expert blocks).
using GradientSquares = std::array<double, 4>;
constexpr std::size_t kTensorSplit = 1;
constexpr std::size_t kExpertBlock = 2;

// The groups to reduce over; null where the job is not split that way (or ZeRO is off).
struct GradientNormGroups {
    Communicator* zeroShards = nullptr;  // the data group, when ZeRO shards the dense gradients
    Communicator* tensor = nullptr;
    Communicator* expert = nullptr;
    Communicator* pipeline = nullptr;
    Communicator* expertZeroShards = nullptr;  // the expert-data group, when ZeRO shards expert blocks
};

// Collective over every group given: each member gets the same norm.
double globalGradientNorm(GradientSquares squares, const GradientNormGroups& groups);

}  // namespace meshbench::agent
