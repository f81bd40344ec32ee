// meshbench-agent: runs the training stack. This build trains on one device (the CPU backend);
// the parallel issue runs one agent per rank under mpirun.

#include "agent/checkpoint/safetensors.h"
#include "agent/data/markov_source.h"
#include "agent/train/trainer.h"

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/openblas_core.h"
#include "plan/job_spec.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace meshbench;

namespace {

constexpr const char* kUsage =
    "usage: meshbench-agent --job JOB.json [--steps N] [--save DIR] [--save-every N] [--load CHECKPOINT]\n"
    "                       [--metrics FILE] [--threads N]\n"
    "\n"
    "  --steps N        optimizer steps to run (default: the job's train.steps)\n"
    "  --save DIR       write DIR/step-NNNNNN.safetensors at the start, every --save-every steps, and at the end\n"
    "  --load FILE      resume from a checkpoint written by --save\n"
    "  --metrics FILE   also write one JSON object per step to FILE\n"
    "  --threads N      OpenBLAS threads (default 1)\n";

struct Options {
    std::string job;
    std::optional<int> steps;
    std::string saveDir;
    int saveEvery = 0;
    std::string load;
    std::string metrics;
    int threads = 1;
};

int usageError(const std::string& message)
{
    std::cerr << "meshbench-agent: " << message << "\n" << kUsage;
    return 2;
}

bool parseCount(const std::string& text, int minimum, int& out)
{
    try {
        std::size_t used = 0;
        const long value = std::stol(text, &used);
        if (used != text.size() || value < minimum || value > 1'000'000'000)
            return false;
        out = int(value);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

std::string checkpointName(const std::string& dir, int step)
{
    char name[64];
    std::snprintf(name, sizeof name, "step-%06d.safetensors", step);
    return (std::filesystem::path(dir) / name).string();
}

std::string expertSummary(const std::vector<agent::ExpertLoad>& loads)
{
    // Overload factor of the busiest MoE layer: max / mean tokens per expert, and dropped share.
    double worst = 0;
    long routed = 0, kept = 0;
    for (const agent::ExpertLoad& l : loads) {
        long sum = 0, most = 0;
        for (std::size_t e = 0; e < l.routed.size(); ++e) {
            sum += l.routed[e];
            most = std::max<long>(most, l.routed[e]);
            kept += l.kept[e];
        }
        routed += sum;
        if (sum > 0)
            worst = std::max(worst, double(most) * double(l.routed.size()) / double(sum));
    }
    if (loads.empty())
        return "";
    char text[96];
    std::snprintf(text, sizeof text, "  experts max/mean %.2f dropped %.1f%%", worst,
                  routed > 0 ? 100.0 * double(routed - kept) / double(routed) : 0.0);
    return text;
}

int run(const Options& options)
{
    std::ifstream file(options.job, std::ios::binary);
    if (!file) {
        std::cerr << "meshbench-agent: cannot open job spec '" << options.job << "'\n";
        return 1;
    }
    std::ostringstream text;
    text << file.rdbuf();
    const plan::LoadResult loaded = plan::parseJobSpec(text.str());
    if (!loaded.valid()) {
        std::cerr << options.job << ": the job spec has problems:\n";
        for (const plan::SpecError& e : loaded.errors)
            std::cerr << "error: " << (e.path.empty() ? "" : e.path + ": ") << e.message << "\n";
        return 1;
    }
    plan::JobSpec spec = *loaded.spec;
    // A token file named relative to the job is found next to the job, wherever the agent runs.
    nlohmann::json& data = spec.train.data;
    if (data.is_object() && data.value("source", "") == "file" && data.contains("path") && data["path"].is_string() &&
        std::filesystem::path(data["path"].get<std::string>()).is_relative())
        data["path"] = (std::filesystem::path(options.job).parent_path() / data["path"].get<std::string>()).string();
    if (spec.backend == plan::BackendKind::Cuda) {
        std::cerr << "meshbench-agent: backend \"cuda\" is not in this build; set backend to \"cpu\" or \"auto\"\n";
        return 1;
    }

    kernels::CpuBackend backend(options.threads);
    agent::Trainer trainer(spec, backend);
    if (options.load.empty())
        trainer.initialize();
    else
        trainer.load(options.load);

    const int steps = options.steps.value_or(spec.train.steps);
    const int last = trainer.completedSteps() + steps;
    std::printf("meshbench-agent: %s\n", spec.name.empty() ? options.job.c_str() : spec.name.c_str());
    std::printf("model %zu parameters, %lld tokens per step (global batch %lld x seq %lld) on one %s device\n",
                trainer.model().layout().parameterCount(), static_cast<long long>(trainer.tokensPerStep()),
                static_cast<long long>(spec.parallel.globalBatch()), static_cast<long long>(spec.model.seqLen),
                std::string(backend.name()).c_str());
    std::printf("data %s\n", trainer.data().describe().c_str());
    if (spec.parallel.worldSize() > 1)
        std::printf("note: the layout has %lld ranks; this run computes the same global batch on one device\n",
                    static_cast<long long>(spec.parallel.worldSize()));
    const auto* markov = dynamic_cast<const agent::MarkovSource*>(&trainer.data());

    std::ofstream metrics;
    if (!options.metrics.empty()) {
        metrics.open(options.metrics, std::ios::app);
        if (!metrics) {
            std::cerr << "meshbench-agent: cannot write metrics file '" << options.metrics << "'\n";
            return 1;
        }
    }
    if (!options.saveDir.empty()) {
        std::filesystem::create_directories(options.saveDir);
        trainer.save(checkpointName(options.saveDir, trainer.completedSteps()));
    }

    double lastLoss = 0;
    while (trainer.completedSteps() < last) {
        const agent::StepMetrics m = trainer.step();
        lastLoss = m.loss;
        std::printf("step %6d  loss %.6f  aux %.6f  grad-norm %.4f  lr %.3g  tokens/s %.0f%s\n", m.step, m.loss,
                    m.auxLoss, m.gradNorm, m.learningRate, m.tokensPerSecond, expertSummary(m.expertLoads).c_str());
        std::fflush(stdout);
        if (metrics.is_open())
            metrics << nlohmann::json{{"step", m.step}, {"loss", m.loss}, {"aux_loss", m.auxLoss},
                                      {"grad_norm", m.gradNorm}, {"lr", m.learningRate},
                                      {"tokens_per_s", m.tokensPerSecond}}
                           .dump()
                    << "\n";
        const bool due = options.saveEvery > 0 && m.step % options.saveEvery == 0;
        if (!options.saveDir.empty() && (due || m.step == last))
            trainer.save(checkpointName(options.saveDir, m.step));
    }
    if (markov && steps > 0)
        std::printf("final loss %.4f nats, entropy floor of the source %.4f nats (%.1f%% above)\n", lastLoss,
                    markov->lossFloor(int(spec.model.seqLen)),
                    100.0 * (lastLoss / markov->lossFloor(int(spec.model.seqLen)) - 1.0));
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    kernels::reexecWithBetterOpenblasCore(argv);
    Options options;
    const std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        const bool hasValue = i + 1 < args.size();
        if (a == "--help" || a == "-h") {
            std::cout << kUsage;
            return 0;
        }
        if (a != "--job" && a != "--steps" && a != "--save" && a != "--save-every" && a != "--load" &&
            a != "--metrics" && a != "--threads")
            return usageError("unknown option '" + a + "'");
        if (!hasValue)
            return usageError(a + " needs a value");
        const std::string& value = args[++i];
        int count = 0;
        if (a == "--job") {
            options.job = value;
        } else if (a == "--save") {
            options.saveDir = value;
        } else if (a == "--load") {
            options.load = value;
        } else if (a == "--metrics") {
            options.metrics = value;
        } else if (!parseCount(value, a == "--steps" ? 0 : 1, count)) {
            return usageError(a + " needs a whole number, got '" + value + "'");
        } else if (a == "--steps") {
            options.steps = count;
        } else if (a == "--save-every") {
            options.saveEvery = count;
        } else {
            options.threads = count;
        }
    }
    if (options.job.empty())
        return usageError("--job is required");
    try {
        return run(options);
    } catch (const agent::CheckpointError& e) {
        std::cerr << "meshbench-agent: checkpoint: " << e.what() << "\n";
    } catch (const agent::DataError& e) {
        std::cerr << "meshbench-agent: data: " << e.what() << "\n";
    } catch (const std::exception& e) {
        std::cerr << "meshbench-agent: " << e.what() << "\n";
    }
    return 1;
}
