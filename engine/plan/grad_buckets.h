#pragma once
// The data-parallel gradient buckets, one rule for the agent, which reduces them
// (agent/distributed/data_parallel.cpp), and the planner, which prices how much of their reduction
// the backward hides (CostModel::dataParallelCosts).

#include "agent_parameters.h"
#include "job_spec.h"

#include <span>
#include <vector>

namespace meshbench::plan {

// Cuts one region's gradients into buckets. bytes: the region's tensors in the order the backward
// finishes them. A bucket takes whole tensors until it holds at least capBytes, as PyTorch DDP's
// bucket_cap_mb does (Li et al. 2020); a cap of 0 gives each tensor a bucket of its own. Returns
// each tensor's bucket, numbered from 0 in that order.
std::vector<int> cutIntoBuckets(std::span<const double> bytes, double capBytes);

// The buckets the agent reduces on a rank holding `slice`: the dense tensors' and the experts' cut
// apart (they are reduced over different groups), each from its last tensor back, at
// bytesPerElement a gradient.
int gradientBucketCount(const ModelSpec& model, const ModelSlice& slice, double bytesPerElement, double capBytes);

}  // namespace meshbench::plan
