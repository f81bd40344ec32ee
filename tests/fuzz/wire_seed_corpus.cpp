// Writes the fuzzer's seed corpus: one small valid frame per record type and a mixed one, made by
// the encoder so the seeds follow the format as it is. Usage: wire_seed_corpus DIRECTORY

#include "wire/telemetry.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

using namespace meshbench::wire;

namespace {

bool write(const std::filesystem::path& directory, const std::string& name, const Batch& batch)
{
    const std::vector<std::uint8_t> frame = encodeBatch(batch);
    std::ofstream out(directory / (name + ".bin"), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(frame.data()), static_cast<std::streamsize>(frame.size()));
    return bool(out);
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: wire_seed_corpus DIRECTORY\n");
        return 2;
    }
    const std::filesystem::path directory = argv[1];
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (error) {
        std::fprintf(stderr, "wire_seed_corpus: cannot create %s: %s\n", argv[1], error.message().c_str());
        return 1;
    }
    const SpanRecord span{3, 1, 0, 2, SpanKind::SendActivation, 4, 1000, 2500, 65536};
    const ExpertLoadRecord expertLoad{3, 5, {120, 80, 0, 55}, {8, 0, 0, 1}};
    const MemorySampleRecord memory{3, 1200, MemoryCategory::Activations, 1 << 24, 1 << 25};
    const StepMetricsRecord step{3, 0, 900000, 2.5, 0.01, 1.25, 3e-4, 51200.0, 0.18, 4096};
    const NodeSampleRecord node{1500, "node-01", 1ll << 36, 1ll << 34, 0, 1ll << 34, 1ll << 32, 0.75f};
    const LogRecord log{1600, LogLevel::Warning, "loss spike at step 3: 2.5 (\xC3\xA9)"};
    const HeartbeatRecord heartbeat{1700, RankState::Running, 3, 4242, 0, 0, "node-01"};
    const bool ok =
        write(directory, "empty", Batch{0, 0, {}}) && write(directory, "span", Batch{1, 0, {span}}) &&
        write(directory, "expert_load", Batch{1, 1, {expertLoad}}) &&
        write(directory, "memory_sample", Batch{1, 2, {memory}}) &&
        write(directory, "step_metrics", Batch{1, 3, {step}}) && write(directory, "node_sample", Batch{0, 4, {node}}) &&
        write(directory, "log", Batch{2, 5, {log}}) && write(directory, "heartbeat", Batch{2, 6, {heartbeat}}) &&
        write(directory, "mixed", Batch{7, 100, {span, expertLoad, memory, step, node, log, heartbeat}});
    if (!ok) {
        std::fprintf(stderr, "wire_seed_corpus: cannot write the seeds into %s\n", argv[1]);
        return 1;
    }
    return 0;
}
