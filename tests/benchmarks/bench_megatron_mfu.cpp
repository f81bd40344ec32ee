// The planner against published measurements: Megatron-LM's H100 weak-scaling runs
// (megatron_weak_scaling.h), each planned on DGX H100 nodes and its MFU printed beside the
// published one. Issue 14's bound: each within 10% relative, the mean within 5%; the exit status
// says whether the plan meets it.
//
// usage: bench_megatron_mfu

#include "megatron_weak_scaling.h"
#include "plan/job_spec.h"
#include "plan/planner.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

using namespace meshbench::plan;
using namespace meshbench::bench;

namespace {

nlohmann::json jobOf(const MegatronRun& r)
{
    const int dp = r.gpus / (r.tp * r.pp);
    return {{"model",
             {{"layers", r.layers},
              {"hidden", r.hidden},
              {"heads", r.heads},
              {"ffn_hidden", 4 * r.hidden},
              {"vocab", kMegatronVocab},
              {"seq_len", kMegatronSeq},
              {"tied_embeddings", false},
              {"norm", "layernorm"},
              {"activation", "gelu"}}},
            {"parallel",
             {{"dp", dp},
              {"tp", r.tp},
              {"pp", r.pp},
              {"sequence_parallel", r.tp > 1},
              {"zero", 1},
              {"recompute", "none"},
              {"schedule", "1f1b"},
              {"micro_batch_size", 1},
              {"microbatches", r.batch / dp},
              {"overlap_grad_reduce", true},
              {"overlap_param_gather", true},
              {"tp_comm_overlap", r.tp > 1}}},
            {"cluster", {{"preset", "dgx-h100"}, {"nodes", r.gpus / 8}}}};
}

}  // namespace

int main()
{
    std::printf("%-6s %4s %4s %6s %6s  %8s %10s %9s   %s\n", "size", "tp", "pp", "GPUs", "batch", "planned",
                "published", "relative", "step: compute / TP / bubble / DP / optimizer (exposed), TP and DP hidden");
    double sumError = 0, worstError = 0;
    for (const MegatronRun& r : kMegatronRuns) {
        const LoadResult loaded = loadJobSpec(jobOf(r));
        if (!loaded.valid()) {
            std::fprintf(stderr, "bench_megatron_mfu: %s does not load: %s: %s\n", r.size,
                         loaded.errors.front().path.c_str(), loaded.errors.front().message.c_str());
            return 2;
        }
        const Plan plan = makePlan(*loaded.spec);
        const double error = (plan.mfu - r.mfu) / r.mfu;
        sumError += std::abs(error);
        worstError = std::max(worstError, std::abs(error));
        const StepBreakdown& b = plan.step;
        std::printf("%-6s %4d %4d %6d %6d  %7.1f%% %9.0f%% %+8.1f%%   %.3f s: %.3f / %.3f / %.3f / %.3f / %.3f, "
                    "%.3f %.3f\n",
                    r.size, r.tp, r.pp, r.gpus, r.batch, 100 * plan.mfu, 100 * r.mfu, 100 * error, b.total, b.compute,
                    b.tensorComm, b.pipelineBubble, b.dataParallelComm, b.optimizer, b.tensorCommHidden,
                    b.dataParallelHidden);
    }
    const double meanError = sumError / double(std::size(kMegatronRuns));
    const bool meets = worstError <= 0.10 && meanError <= 0.05;
    std::printf("mean |relative| %.1f%% (bound 5%%), worst %.1f%% (bound 10%%): %s\n", 100 * meanError,
                100 * worstError, meets ? "within the bounds" : "OUTSIDE the bounds");
    return meets ? 0 : 1;
}
