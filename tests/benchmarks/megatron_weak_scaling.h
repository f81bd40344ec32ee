#pragma once
// Megatron-LM's H100 weak-scaling runs (its README, "Training Speed and Scalability", from
// commit f2e5db4 of July 2024, images/model_table.png): vocabulary 131,072, sequence 4,096,
// micro-batch 1, data parallel 48. bench_megatron_mfu plans them; bench_gpu --megatron-shapes
// times each run's per-GPU GEMMs on the device beside the planner's price for them.
//
// What the table does not say is assumed as Megatron's performance runs are set up: GPT blocks
// (LayerNorm, GELU MLP of 4h, no GQA), untied input and output embeddings (the table's sizes count
// both: 1.7B is 1.48B with one V x h), sequence parallelism wherever tp > 1, the distributed
// optimizer with fp32 gradients (Megatron forces them for bf16 at that commit), no recompute, 1F1B.

namespace meshbench::bench {

struct MegatronRun {
    const char* size;
    int heads, hidden, layers, tp, pp, gpus, batch;
    double mfu;  // published
};

constexpr int kMegatronVocab = 131072;
constexpr int kMegatronSeq = 4096;

constexpr MegatronRun kMegatronRuns[] = {
    {"1.7B", 16, 2048, 24, 1, 1, 48, 192, 0.41},        {"7.1B", 32, 4096, 30, 2, 1, 96, 192, 0.47},
    {"16B", 48, 6144, 32, 4, 1, 192, 192, 0.49},        {"32B", 56, 7168, 48, 8, 1, 384, 192, 0.46},
    {"70B", 64, 8192, 84, 8, 2, 768, 384, 0.42},        {"119B", 80, 10240, 92, 8, 4, 1536, 768, 0.43},
    {"177B", 96, 12288, 96, 8, 6, 2304, 1152, 0.44},    {"314B", 128, 16384, 96, 8, 8, 3072, 1536, 0.48},
    {"462B", 144, 18432, 112, 8, 16, 6144, 3072, 0.47},
};

}  // namespace meshbench::bench
