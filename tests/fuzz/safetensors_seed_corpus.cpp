// Writes the checkpoint fuzzer's seed corpus with the project's own writer, so the seeds follow
// the format as it is: an empty file, metadata alone, scalars and empty tensors, and a miniature
// of a real checkpoint (its tensor names, Adam's moments and the metadata the trainer stores).
// Usage: safetensors_seed_corpus DIRECTORY

#include "agent/checkpoint/safetensors.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

using namespace meshbench::agent;

namespace {

std::vector<float> ramp(std::size_t count)
{
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i)
        values[i] = std::sin(static_cast<float>(i)) * 0.02f;
    return values;
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: safetensors_seed_corpus DIRECTORY\n");
        return 2;
    }
    const std::filesystem::path directory = argv[1];
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (error) {
        std::fprintf(stderr, "safetensors_seed_corpus: cannot create %s: %s\n", argv[1], error.message().c_str());
        return 1;
    }
    const auto path = [&](const char* name) { return (directory / name).string(); };
    const std::vector<float> embed = ramp(16 * 8), qkv = ramp(24 * 8), norm(8, 1.0f);
    const std::vector<float> special = {-0.0f, std::numeric_limits<float>::infinity(),
                                        std::numeric_limits<float>::quiet_NaN(),
                                        std::numeric_limits<float>::denorm_min(), 3.5f};
    const float scalar = 42.0f;
    try {
        writeSafetensors(path("empty.safetensors"), {}, {});
        writeSafetensors(path("metadata.safetensors"), {},
                         {{"format", "pt"},
                          {"note", "\xC3\xBCnic\xC3\xB8"
                                   "de"}});
        writeSafetensors(path("small.safetensors"),
                         {{"scalar", {}, &scalar},
                          {"empty", {0, 3}, nullptr},
                          {"special", {5}, special.data()},
                          {"matrix", {2, 4}, embed.data()}},
                         {{"step", "7"}});
        // The trainer's layout in miniature (agent/train/trainer.cpp, docs/agent.md, "Checkpoint format").
        const std::string job = R"({"model":{"layers":1,"hidden":8,"heads":2,"vocab":16,"seq_len":4}})";
        writeSafetensors(path("checkpoint.safetensors"),
                         {{"embed.weight", {16, 8}, embed.data()},
                          {"layers.0.attn_norm.weight", {8}, norm.data()},
                          {"layers.0.attn.qkv.weight", {24, 8}, qkv.data()},
                          {"final_norm.weight", {8}, norm.data()},
                          {"optimizer.exp_avg.embed.weight", {16, 8}, embed.data()},
                          {"optimizer.exp_avg_sq.final_norm.weight", {8}, norm.data()}},
                         {{"format", "meshbench-checkpoint-1"}, {"step", "0"}, {"job", job}});
    } catch (const CheckpointError& e) {
        std::fprintf(stderr, "safetensors_seed_corpus: %s\n", e.what());
        return 1;
    }
    return 0;
}
