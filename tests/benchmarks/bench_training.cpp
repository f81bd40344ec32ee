// Training throughput of the demo model on one core, beside what OpenBLAS's GEMM reaches on the
// same machine in the same run: the model's FLOP rate (Megatron's FLOP count per step over the
// step time) against cblas_sgemm at the model's own GEMM shapes and at 1024^3; and, when Debian's
// python3-torch is installed, PyTorch eager training the same model and batch from the same
// step-0 checkpoint (tests/agent/torch_reference.py, one thread).
//
// Without python3-torch the PyTorch line says so and the run still succeeds (OpenBLAS is the
// reference every run has); with it, a script that fails prints its stderr and the exit status
// is 1, as it is when our own training fails.
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
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace meshbench;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// GFLOP/s of C[M, N] = A[M, K] B[K, N]^T, repeated for at least half a second.
double sgemmRate(int M, int N, int K)
{
    std::vector<float> a(std::size_t(M) * K, 0.5f), b(std::size_t(N) * K, 0.25f), c(std::size_t(M) * N);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
    int calls = 0;
    const double start = now();
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(),
                    N);
        ++calls;
    } while (now() - start < 0.5);
    return 2.0 * M * N * K * calls / (now() - start) / 1e9;
}

std::string readFile(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// A shell command's status in words: "exit status N" or "signal N".
std::string statusWords(int status)
{
    if (status == -1)
        return "could not be started";
    if (WIFEXITED(status))
        return "exited with status " + std::to_string(WEXITSTATUS(status));
    return "was killed by signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

struct TorchRun {
    enum class State { Measured, NoTorch, Failed } state = State::Failed;
    double stepSeconds = 0;  // median, when Measured
    std::string why;         // when not Measured
};

constexpr const char* kPython = "/usr/bin/python3";

// PyTorch eager on the same job from the same checkpoint: its median step time; NoTorch when
// Debian's python3 or its torch are not installed; Failed, with the script's stderr, otherwise.
TorchRun torchStepSeconds(const std::string& job, const std::string& checkpoint, int steps,
                          const std::filesystem::path& errFile)
{
    TorchRun run;
    if (access(kPython, X_OK) != 0) {
        run.state = TorchRun::State::NoTorch;
        run.why = std::string(kPython) + " is not installed (apt-get install python3 python3-torch)";
        return run;
    }
    // Only a missing module is "not installed"; a torch that is there but fails to import is an error.
    const int probe = std::system((std::string(kPython) + " -c 'import torch' 2> '" + errFile.string() + "'").c_str());
    if (probe != 0) {
        const std::string err = readFile(errFile.string());
        if (err.find("No module named 'torch'") != std::string::npos) {
            run.state = TorchRun::State::NoTorch;
            run.why = std::string(kPython) + " has no torch module (apt-get install python3-torch)";
        } else {
            run.why = "`" + std::string(kPython) + " -c 'import torch'` " + statusWords(probe) + ":\n" + err;
        }
        return run;
    }
    const std::string command = std::string(kPython) +
                                " " MESHBENCH_SOURCE_DIR "/tests/agent/torch_reference.py --job '" + job +
                                "' --checkpoint '" + checkpoint + "' --random-tokens --steps " +
                                std::to_string(steps + 1) + " 2> '" + errFile.string() + "'";
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) {
        run.why = "cannot start " + command;
        return run;
    }
    std::vector<double> seconds;
    char line[4096];
    while (std::fgets(line, sizeof line, pipe)) {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("seconds") && j["seconds"].is_number())
            seconds.push_back(j["seconds"].get<double>());
    }
    const int status = pclose(pipe);
    if (status != 0) {
        run.why = "tests/agent/torch_reference.py " + statusWords(status) + ":\n" + readFile(errFile.string());
        return run;
    }
    if (seconds.size() < std::size_t(steps) + 1) {
        run.why = "tests/agent/torch_reference.py printed " + std::to_string(seconds.size()) +
                  " step times, asked for " + std::to_string(steps + 1) + ":\n" + readFile(errFile.string());
        return run;
    }
    seconds.erase(seconds.begin());  // the first step pays for allocations, as ours does
    std::sort(seconds.begin(), seconds.end());
    run.state = TorchRun::State::Measured;
    run.stepSeconds = seconds[seconds.size() / 2];
    return run;
}

int run(int argc, char** argv)
{
    // Both we and PyTorch (which loads the same OpenBLAS) then run on the CPU's proper kernels.
    kernels::reexecWithBetterOpenblasCore(argv);
    const std::string path = argc > 1 ? argv[1] : MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json";
    const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
    if (steps < 1) {
        std::fprintf(stderr, "usage: bench_training [JOB.json] [STEPS (at least 1)]\n");
        return 2;
    }
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    const plan::LoadResult loaded = plan::parseJobSpec(text.str());
    if (!loaded.valid()) {
        std::fprintf(stderr, "bench_training: %s does not load\n", path.c_str());
        for (const plan::SpecError& e : loaded.errors)
            std::fprintf(stderr, "  %s: %s\n", e.path.c_str(), e.message.c_str());
        return 1;
    }
    const plan::JobSpec& spec = *loaded.spec;

    kernels::CpuBackend backend(1);
    agent::Trainer trainer(spec, backend);
    trainer.initialize();
    trainer.step();  // warm-up: first-touch allocations
    const double start = now();
    for (int i = 0; i < steps; ++i)
        trainer.step();
    const double seconds = (now() - start) / steps;
    const double flops = plan::CostModel(spec, {}).flopsPerStep();

    const int T = spec.parallel.microBatchSize * int(spec.model.seqLen);
    const int h = int(spec.model.hidden);
    const double mlpRate = sgemmRate(T, 4 * h, h), squareRate = sgemmRate(1024, 1024, 1024);

    const std::filesystem::path scratch =
        std::filesystem::temp_directory_path() / ("bench_training-" + std::to_string(getpid()));
    std::filesystem::create_directories(scratch);
    const std::string checkpoint = (scratch / "step0.safetensors").string();
    agent::Trainer fresh(spec, backend);
    fresh.initialize();
    fresh.save(checkpoint);
    const TorchRun torch = torchStepSeconds(path, checkpoint, std::min(steps, 10), scratch / "torch.stderr");
    std::filesystem::remove_all(scratch);
    if (torch.state == TorchRun::State::Failed) {
        std::fprintf(stderr, "bench_training: the PyTorch reference failed, so no figures: %s\n", torch.why.c_str());
        return 1;
    }

    std::printf("OpenBLAS core %s\n", openblas_get_corename());
    std::printf("demo model (%zu parameters), one core, %d steps of %lld tokens:\n",
                trainer.model().layout().parameterCount(), steps, static_cast<long long>(trainer.tokensPerStep()));
    std::printf("  training            %8.0f tokens/s   %6.2f GFLOP/s (model FLOPs, Megatron's count)\n",
                double(trainer.tokensPerStep()) / seconds, flops / seconds / 1e9);
    std::printf("  OpenBLAS sgemm      %8s            %6.2f GFLOP/s at the model's MLP shape %d x %d x %d\n", "",
                mlpRate, T, 4 * h, h);
    std::printf("  OpenBLAS sgemm      %8s            %6.2f GFLOP/s at 1024 x 1024 x 1024\n", "", squareRate);
    if (torch.state == TorchRun::State::Measured)
        std::printf(
            "  PyTorch eager       %8.0f tokens/s   %6.2f GFLOP/s (same model, batch and checkpoint, 1 thread)\n",
            double(trainer.tokensPerStep()) / torch.stepSeconds, flops / torch.stepSeconds / 1e9);
    else
        std::printf("  PyTorch eager       not measured: %s\n", torch.why.c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_training: %s\n", e.what());
        return 1;
    }
}
