#pragma once
// What meshbench-agent itself keeps as activations: the bytes its MemoryLedger counts in the
// Activations category, read off the agent's code (agent/model/gpt_model.cpp: every buffer made by
// GptModel::activation(), the sequence-parallel gathers kept for the backward, and the copies a
// split backward keeps for its deferred weight gradients). The agent's model is fp32 on every
// backend, so every element is 4 bytes. precision.activations = "fp32" makes the cost model count
// activations this way (CostModel::activationBytes); "bf16" keeps Megatron-LM's formulas.
//
// What the agent allocates in its Workspace category is not counted here, and the ledger does not
// count it as activations either: the gradients of activations in a backward, the core attention
// that selective recompute rebuilds in the backward, full recompute's scratch output, the router's
// logits, the MoE dispatcher's permuted and packed rows, the TP partial sums and the pipeline's
// send/receive buffers.

#include "job_spec.h"

namespace meshbench::plan {

// One layer for one micro-batch, bytes.
struct AgentLayerActivations {
    double input = 0;    // the layer's input (the residual stream), kept under every recompute mode
    double kept = 0;     // what else it keeps from its forward to its backward under the spec's recompute
    double working = 0;  // everything but the input that its forward (or full recompute's rebuild) holds
    double stash = 0;    // zb-h1: the dy and x copies its deferred weight-gradient GEMMs keep from B to W
};
AgentLayerActivations agentLayerActivations(const JobSpec& spec, bool moe);

// One chunk (virtual stage) for one micro-batch, bytes. A chunk's forward and backward only add to
// what the other micro-batches in flight hold.
struct AgentChunkActivations {
    double kept = 0;          // held from the end of its forward to the start of its backward
    double forwardPeak = 0;   // the most it holds during its forward
    double backwardPeak = 0;  // the most it holds during its backward (at least `kept`)
    double stash = 0;         // held from the end of a split backward (zb-h1's B) to its W; 0 otherwise
};
AgentChunkActivations agentChunkActivations(const JobSpec& spec, int virtualStage);

// Whether the agent splits the backward into B and W for this spec: zb-h1 with a pipeline (one
// stage runs its micro-batches one forward and backward after another, whatever the schedule).
bool agentSplitsBackward(const ParallelSpec& parallel);

// The peak of the Activations category on a rank of `stage` during one training step: the chunks
// of the micro-batches in flight where the schedule's op list holds the most, bytes.
double agentActivationBytes(const JobSpec& spec, int stage);

}  // namespace meshbench::plan
