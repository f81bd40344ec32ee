#pragma once
// meshbench-agent's parameter tensors, described once: ParameterLayout (agent/layout) places them in
// its flat buffer, and the planner cuts their gradients into data-parallel buckets by the agent's
// rule (grad_buckets.h), so the buckets it prices are the ones the agent reduces.
//
// Names, whole-model shapes (row-major, PyTorch's Linear convention: weight [out, in], y = x W^T):
//   embed.weight                    [V, h]
//   layers.{i}.attn_norm.weight     [h]          (+ .bias [h] with LayerNorm)
//   layers.{i}.attn.qkv.weight      [(H + 2 Hkv) d, h]   rows: q heads, then k heads, then v heads
//   layers.{i}.attn.proj.weight     [h, H d]
//   layers.{i}.mlp_norm.weight      [h]          (+ .bias [h] with LayerNorm)
//   dense layer:
//   layers.{i}.mlp.fc1.weight       [f, h], or [2f, h] for SwiGLU (gate rows first, then up)
//   layers.{i}.mlp.fc2.weight       [h, f]
//   MoE layer:
//   layers.{i}.moe.router.weight    [E, h]
//   layers.{i}.moe.experts.fc1.weight  [E, f_moe (x2 for SwiGLU), h]   experts stacked on dim 0
//   layers.{i}.moe.experts.fc2.weight  [E, h, f_moe]
//   final_norm.weight               [h]          (+ .bias [h] with LayerNorm)
//   lm_head.weight                  [V, h]       only with untied embeddings

#include "job_spec.h"
#include "schedule.h"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace meshbench::plan {

enum class ParameterRole {
    Embedding,
    AttnNormWeight,
    AttnNormBias,
    Qkv,
    Proj,
    MlpNormWeight,
    MlpNormBias,
    Fc1,  // dense MLP
    Fc2,
    Router,  // MoE
    ExpertFc1,
    ExpertFc2,
    FinalNormWeight,
    FinalNormBias,
    Head,  // untied embeddings only
};

enum class ParameterInit { Normal, ScaledNormal, Ones, Zeros };

// Under TP, how a tensor's last two dimensions (rows = outputs, columns = inputs) are split:
// Rows: a block of rows; GatedRows: a block of the gate rows and the same block of the up rows;
// QkvRows: blocks of the q, k and v rows; Columns: a block of columns (row-parallel layers);
// None: replicated.
enum class TensorSplit { None, Rows, GatedRows, QkvRows, Columns };

// A tensor's shape: one to three dimensions, held in place so that walking the table allocates
// nothing (the search counts a stage's buckets for every candidate).
struct TensorShape {
    std::array<std::int64_t, 3> dims{};
    int rank = 0;
    std::int64_t elements() const;
    std::vector<std::int64_t> toVector() const { return {dims.begin(), dims.begin() + rank}; }
};

struct AgentParameter {
    ParameterRole role = ParameterRole::Embedding;
    int layer = -1;     // the layer's index; -1 for the embedding, the final norm and the output layer
    TensorShape shape;  // in the whole model
    ParameterInit init = ParameterInit::Normal;
    bool experts = false;  // a MoE layer's stacked expert weights: sharded over ep along dimension 0
    TensorSplit split = TensorSplit::None;
};

// Calls visit for every tensor of the whole model, in its order (the checkpoint's, and the seeds'
// of the initial values): the embedding, each layer's, the final norm's, and the output layer when
// untied.
void forEachAgentParameter(const ModelSpec& model, const std::function<void(const AgentParameter&)>& visit);
std::string parameterName(const AgentParameter& tensor);

// The part of the model one pipeline rank holds: its chunks of consecutive layers (one per
// virtual stage, in chunk order), whether it holds the embedding (the first virtual stage) and the
// final norm and output layer (the last virtual stage), and its EP and TP shards.
struct ModelSlice {
    struct Chunk {
        int firstLayer = 0;
        int layers = 0;
    };
    std::vector<Chunk> chunks;
    bool embedding = true;
    bool head = true;
    int expertShard = 0;   // this rank's block of each MoE layer's experts (its EP rank)
    int expertShards = 1;  // ep: the experts are split into this many contiguous blocks
    int tensorShard = 0;   // this rank's TP rank
    int tensorShards = 1;  // tp: Megatron's column- and row-parallel split of every linear layer

    static ModelSlice whole(const ModelSpec& model);
    // Stage s of the pipeline holds chunk c = layers [vs L/(p v), +L/(p v)) for its virtual stage
    // vs = shape.virtualStageOf(s, c): Megatron's interleaved c p + s, or the V schedules' s and
    // 2p - 1 - s.
    static ModelSlice ofStage(const ModelSpec& model, const ScheduleShape& shape, int stage);

    bool holdsLayer(int layer) const;
    // With tied embeddings the rank holding the output layer keeps a copy of the embedding for it
    // (as Megatron does).
    bool holds(const AgentParameter& tensor, bool tiedEmbeddings) const;
    // The tensor's shape on this rank: dimension 0 divided by ep for experts, the split dimension
    // by tp.
    TensorShape shardShape(const AgentParameter& tensor) const;
};

}  // namespace meshbench::plan
