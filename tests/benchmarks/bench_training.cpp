// Training throughput of the demo model on one core, beside what OpenBLAS's GEMM reaches on the
// same machine in the same run: the model's FLOP rate (Megatron's FLOP count per step over the
// step time) against cblas_sgemm at the model's own GEMM shapes and at 1024^3; and, when Debian's
// python3-torch is installed, PyTorch eager training the same model and batch from the same
// step-0 checkpoint (tests/agent/torch_reference.py, one thread).
//
// usage: bench_training [JOB.json] [STEPS]

#include "agent/train/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/openblas_core.h"
#include "plan/cost_model.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

using namespace meshbench;

namespace {

double now()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// GFLOP/s of C[M, N] = A[M, K] B[K, N]^T, repeated for at least half a second.
double sgemmRate(int M, int N, int K)
{
    std::vector<float> a(std::size_t(M) * K, 0.5f), b(std::size_t(N) * K, 0.25f), c(std::size_t(M) * N);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
    int calls = 0;
    const double start = now();
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f,
                    c.data(), N);
        ++calls;
    } while (now() - start < 0.5);
    return 2.0 * M * N * K * calls / (now() - start) / 1e9;
}

// Median step time of PyTorch eager on the same job from the same checkpoint, or 0 without torch.
double torchStepSeconds(const std::string& job, const std::string& checkpoint, int steps)
{
    const std::string command = "/usr/bin/python3 " MESHBENCH_SOURCE_DIR "/tests/agent/torch_reference.py --job '" +
                                job + "' --checkpoint '" + checkpoint + "' --random-tokens --steps " +
                                std::to_string(steps + 1) + " 2>/dev/null";
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe)
        return 0;
    std::vector<double> seconds;
    char line[4096];
    while (std::fgets(line, sizeof line, pipe)) {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("seconds"))
            seconds.push_back(j["seconds"].get<double>());
    }
    pclose(pipe);
    if (seconds.size() < 2)
        return 0;
    seconds.erase(seconds.begin());   // the first step pays for allocations, as ours does
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv)
{
    // Both we and PyTorch (which loads the same OpenBLAS) then run on the CPU's proper kernels.
    kernels::reexecWithBetterOpenblasCore(argv);
    const std::string path = argc > 1 ? argv[1] : MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json";
    const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    const plan::LoadResult loaded = plan::parseJobSpec(text.str());
    if (!loaded.valid()) {
        std::fprintf(stderr, "bench_training: %s does not load\n", path.c_str());
        return 1;
    }
    const plan::JobSpec& spec = *loaded.spec;

    kernels::CpuBackend backend(1);
    agent::Trainer trainer(spec, backend);
    trainer.initialize();
    trainer.step();   // warm-up: first-touch allocations
    const double start = now();
    for (int i = 0; i < steps; ++i)
        trainer.step();
    const double seconds = (now() - start) / steps;
    const double flops = plan::CostModel(spec, {}).flopsPerStep();

    const int T = spec.parallel.microBatchSize * int(spec.model.seqLen);
    const int h = int(spec.model.hidden);
    std::printf("OpenBLAS core %s\n", openblas_get_corename());
    std::printf("demo model (%zu parameters), one core, %d steps of %lld tokens:\n",
                trainer.model().layout().parameterCount(), steps, static_cast<long long>(trainer.tokensPerStep()));
    std::printf("  training            %8.0f tokens/s   %6.2f GFLOP/s (model FLOPs, Megatron's count)\n",
                double(trainer.tokensPerStep()) / seconds, flops / seconds / 1e9);
    std::printf("  OpenBLAS sgemm      %8s            %6.2f GFLOP/s at the model's MLP shape %d x %d x %d\n", "",
                sgemmRate(T, 4 * h, h), T, 4 * h, h);
    std::printf("  OpenBLAS sgemm      %8s            %6.2f GFLOP/s at 1024 x 1024 x 1024\n", "",
                sgemmRate(1024, 1024, 1024));

    const std::string checkpoint = (std::filesystem::temp_directory_path() / "bench_training_step0.safetensors").string();
    agent::Trainer fresh(spec, backend);
    fresh.initialize();
    fresh.save(checkpoint);
    const double torchSeconds = torchStepSeconds(path, checkpoint, std::min(steps, 10));
    std::filesystem::remove(checkpoint);
    if (torchSeconds > 0)
        std::printf("  PyTorch eager       %8.0f tokens/s   %6.2f GFLOP/s (same model, batch and checkpoint, 1 thread)\n",
                    double(trainer.tokensPerStep()) / torchSeconds, flops / torchSeconds / 1e9);
    else
        std::printf("  PyTorch eager       not measured: /usr/bin/python3 cannot import torch (apt-get install python3-torch)\n");
    return 0;
}
