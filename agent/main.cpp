// meshbench-agent: runs the training stack, on one device, or as one rank of a job that mpirun
// started (one process per device). This build runs data parallelism, pipeline
// parallelism (gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev), expert and tensor parallelism (with sequence
// parallelism) and ZeRO 1-3 across ranks; what it does not run yet, plan::agentCanRun says (the rule
// that validation, the search and the Designer ask too).

#include "agent/checkpoint/safetensors.h"
#include "agent/data/markov_source.h"
#include "agent/runtime/device_groups.h"
#include "agent/runtime/mpi_runtime.h"
#include "agent/telemetry/telemetry_sender.h"
#include "agent/train/trainer.h"
#include "plan/planner.h"

#include "kernels/backend_choice.h"
#include "kernels/cpu/openblas_core.h"
#include "plan/capability.h"
#include "plan/job_spec.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <unistd.h>

using namespace meshbench;

namespace {

struct Options {
    std::string job;
    std::optional<int> steps;
    std::string saveDir;
    int saveEvery = 0;
    std::string load;
    std::string metrics;
    std::string spans;
    std::string telemetry;
    std::string clock;
    int threads = 1;
};

// The agent's command line, read into `options`.
void addOptions(CLI::App& app, Options& options)
{
    app.add_option("--job", options.job, "the job spec to train")->required()->type_name("JOB.json");
    app.add_option_function<int>(
           "--steps", [&options](int steps) { options.steps = steps; },
           "optimizer steps to run, up to 1e9 (default: the job's train.steps)")
        ->check(CLI::Range(0, 1'000'000'000).description(""))
        ->type_name("N");
    app.add_option("--save", options.saveDir,
                   "write DIR/step-NNNNNN.safetensors at the start, every --save-every steps, and at the end")
        ->type_name("DIR");
    app.add_option("--save-every", options.saveEvery, "with --save, also save every N steps")
        ->check(CLI::Range(1, 1'000'000'000).description(""))
        ->type_name("N");
    app.add_option("--load", options.load, "resume from a checkpoint that --save wrote")->type_name("CHECKPOINT");
    app.add_option("--metrics", options.metrics, "also append one JSON object per step to FILE")->type_name("FILE");
    app.add_option("--spans", options.spans,
                   "write each executed op and memory by category as JSON lines (FILE.rank<R> under mpirun)")
        ->type_name("FILE");
    app.add_option("--threads", options.threads, "OpenBLAS threads (default " + std::to_string(options.threads) + ")")
        ->check(CLI::Range(1, 1'000'000'000).description(""))
        ->type_name("N");
    app.add_option("--telemetry", options.telemetry,
                   "stream spans, expert loads, memory, steps and heartbeats to an engine's collector (ZeroMQ)")
        ->type_name("ENDPOINT");
    app.add_option("--clock", options.clock,
                   "the engine's clock server: the stream then carries this rank's offset to the engine's clock")
        ->type_name("ENDPOINT");
}

// A wrong command line: what is wrong (an argument no option takes first: it is the likely typo), the
// usage, and where the options are described.
std::string failureMessage(const CLI::App* app, const CLI::Error& error)
{
    std::string what = error.what();
    if (const std::vector<std::string> left = app->remaining(); !left.empty())
        what = (left.front().size() > 1 && left.front()[0] == '-' ? "unknown option '" : "unexpected argument '") +
               left.front() + "'";
    return app->get_name() + ": " + what + "\n" + CLI::Formatter().make_usage(app, app->get_name()) + "Run '" +
           app->get_name() + " --help' for the options.\n";
}

std::string checkpointName(const std::string& dir, int step)
{
    char name[64];
    std::snprintf(name, sizeof name, "step-%06d.safetensors", step);
    return (std::filesystem::path(dir) / name).string();
}

// The step's expert figures over the model's MoE layers: the busiest layer's overload (max / mean
// tokens per expert) and the share of routed tokens dropped at capacity.
struct ExpertFigures {
    double imbalance = 0;
    double droppedShare = 0;
};

std::optional<ExpertFigures> expertFigures(const std::vector<agent::ExpertLoad>& loads)
{
    if (loads.empty())
        return std::nullopt;
    ExpertFigures figures;
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
            figures.imbalance = std::max(figures.imbalance, double(most) * double(l.routed.size()) / double(sum));
    }
    figures.droppedShare = routed > 0 ? double(routed - kept) / double(routed) : 0.0;
    return figures;
}

std::string expertSummary(const std::optional<ExpertFigures>& figures)
{
    if (!figures)
        return "";
    char text[96];
    std::snprintf(text, sizeof text, "  experts max/mean %.2f dropped %.1f%%", figures->imbalance,
                  100.0 * figures->droppedShare);
    return text;
}

// The write and read ends of the pipe through which a stop signal reaches the telemetry thread.
int g_stopPipe[2] = {-1, -1};

// Launched by Open MPI's mpirun (or another PMIx launcher)?
bool launchedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK"); }

// For the engine's failure tests, MESHBENCH_TEST_END_AFTER_STEP=RANK:STEP:HOW ends that rank early,
// after step STEP: HOW "exit0" with _exit(0), without a last heartbeat and without MPI_Finalize, as a
// process ends that a library (or a stray exit) ends; "finish" as if its last step were done.
struct TestEnd {
    int step = -1;  // -1: unset, or another rank's
    bool finish = false;
};

TestEnd testEnd(int rank)
{
    const char* setting = std::getenv("MESHBENCH_TEST_END_AFTER_STEP");
    int faultRank = -1, step = -1;
    char how[16] = "";
    char rest = 0;
    if (!setting || std::sscanf(setting, "%d:%d:%15[a-z0-9]%c", &faultRank, &step, how, &rest) != 3 ||
        faultRank != rank || (std::string(how) != "exit0" && std::string(how) != "finish"))
        return {};
    return {step, std::string(how) == "finish"};
}

// The step's telemetry: what every rank measured; the step's metrics from rank 0, which speaks for
// the job; expert loads from the data-parallel and tensor-parallel rank 0 of each stage, since they
// are summed over the data group and identical across the tensor group.
std::vector<wire::Record> stepRecords(const agent::StepMetrics& m, const agent::Measurements& measured,
                                      bool reportsMetrics, bool reportsExperts, std::int64_t tokensPerStep)
{
    std::vector<wire::Record> records = measured.toRecords();
    if (reportsMetrics)
        records.emplace_back(wire::StepMetricsRecord{m.step, m.beginNs, m.endNs, m.loss, m.auxLoss, m.gradNorm,
                                                     m.learningRate, m.tokensPerSecond, m.bubbleRatio, tokensPerStep});
    if (reportsExperts)
        for (const agent::ExpertLoad& load : m.expertLoads) {
            wire::ExpertLoadRecord r{m.step, load.layer, {}, {}};
            for (std::size_t e = 0; e < load.routed.size(); ++e) {
                r.routed.push_back(std::uint32_t(load.routed[e]));
                r.dropped.push_back(std::uint32_t(load.routed[e] - load.kept[e]));
            }
            records.emplace_back(std::move(r));
        }
    return records;
}

int run(const Options& options, const agent::MpiRuntime* mpi, agent::TelemetrySender* telemetry)
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
    plan::DataSpec& data = spec.train.data;
    if (data.source == plan::DataSource::File && std::filesystem::path(data.path).is_relative())
        data.path = (std::filesystem::path(options.job).parent_path() / data.path).string();
    // The layout as this process runs it: the spec's own across mpirun's ranks, one device otherwise.
    const plan::JobSpec asRun = plan::specAsRun(spec, mpi ? std::size_t(mpi->worldSize()) : 1);
    if (const std::vector<plan::SpecError> refusals = plan::agentRefusals(asRun); !refusals.empty()) {
        for (const plan::SpecError& e : refusals)
            std::cerr << "meshbench-agent: " << e.path << ": " << e.message << "\n";
        if (plan::agentCanRun(plan::singleDeviceSpec(spec)))
            std::cerr << "meshbench-agent: change the layout, or run without mpirun on one device\n";
        return 1;
    }

    // The backend first, so that it outlives the communicators that use its streams and memory.
    const kernels::BackendRequest request = spec.backend == plan::BackendKind::Cuda  ? kernels::BackendRequest::Cuda
                                            : spec.backend == plan::BackendKind::Cpu ? kernels::BackendRequest::Cpu
                                                                                     : kernels::BackendRequest::Auto;
    const kernels::BackendChoice choice = kernels::chooseBackend(request, options.threads, mpi ? mpi->localRank() : 0);
    kernels::Backend& backend = *choice.backend;
    std::optional<agent::ProcessGroups> groups;
    if (mpi && mpi->worldSize() > 1)
        groups.emplace(mpi->createGroups(plan::Mesh(spec.parallel)));
    // Rank 0 speaks for the job and writes its checkpoints.
    const bool leader = !mpi || mpi->worldRank() == 0;
    const bool sharesDevice = groups && mpi->localRankShares(choice.deviceIdentity);
    const std::string communicator =
        groups ? agent::attachDeviceCommunicators(*groups, backend, sharesDevice) : std::string();
    if (telemetry) {
        telemetry->log(wire::LogLevel::Info, "backend " + choice.reason);
        if (groups)
            telemetry->log(wire::LogLevel::Info, "communicator " + communicator);
    }
    agent::Trainer trainer(spec, backend, groups ? &*groups : nullptr);
    if (options.load.empty())
        trainer.initialize();
    else
        trainer.load(options.load);

    const int steps = options.steps.value_or(spec.train.steps);
    const int last = trainer.completedSteps() + steps;
    if (!leader)
        std::fclose(stdout);  // one voice per job: rank 0 reports
    std::printf("meshbench-agent: %s\n", spec.name.empty() ? options.job.c_str() : spec.name.c_str());
    // The whole model's parameters; a rank of a layout holds a share of them (its stage, TP shard, experts).
    const std::size_t modelParameters = agent::ParameterLayout(spec.model).parameterCount();
    const std::size_t held = trainer.model().layout().parameterCount();
    const std::string share = held == modelParameters ? "" : " (this rank holds " + std::to_string(held) + ")";
    std::printf("model %zu parameters%s, %lld tokens per step (global batch %lld x seq %lld), backend %s\n",
                modelParameters, share.c_str(), static_cast<long long>(trainer.tokensPerStep()),
                static_cast<long long>(spec.parallel.globalBatch()), static_cast<long long>(spec.model.seqLen),
                choice.reason.c_str());
    std::printf("data %s\n", trainer.data().describe().c_str());
    if (groups)
        std::printf("communicator %s\n", communicator.c_str());
    if (groups)
        std::printf("%d ranks: data parallel %d, pipeline %d (%s), expert parallel %d, tensor parallel %d\n",
                    mpi->worldSize(), groups->data->size(), groups->pipeline->size(),
                    std::string(plan::scheduleName(spec.parallel.schedule)).c_str(), groups->expert->size(),
                    groups->tensor->size());
    else if (spec.parallel.worldSize() > 1)
        std::printf("note: the layout has %lld ranks; this run computes the same global batch on one device\n",
                    static_cast<long long>(spec.parallel.worldSize()));
    const auto* markov = dynamic_cast<const agent::MarkovSource*>(&trainer.data());

    std::ofstream metrics;
    if (leader && !options.metrics.empty()) {
        metrics.open(options.metrics, std::ios::app);
        if (!metrics) {
            std::cerr << "meshbench-agent: cannot write metrics file '" << options.metrics << "'\n";
            return 1;
        }
    }
    // Saving is collective (ZeRO gathers the optimizer's shards); rank 0 writes.
    if (!options.saveDir.empty()) {
        if (leader)
            std::filesystem::create_directories(options.saveDir);
        trainer.save(checkpointName(options.saveDir, trainer.completedSteps()));
    }

    // With pipeline stages, each step's measured bubble is shown beside the planner's prediction.
    const double plannedBubble =
        groups && spec.parallel.pp > 1 ? plan::makePlan(spec).simulation.overallBubbleRatio : -1;
    const bool reportsExperts = !groups || (groups->coord.dp == 0 && groups->coord.tp == 0);
    std::vector<agent::Measurements> kept;  // for --spans
    double lastLoss = 0;
    const TestEnd end = testEnd(mpi ? mpi->worldRank() : 0);
    while (trainer.completedSteps() < last) {
        const agent::StepMetrics m = trainer.step();
        lastLoss = m.loss;
        agent::Measurements measured = trainer.takeMeasurements();
        if (telemetry) {
            telemetry->post(stepRecords(m, measured, leader, reportsExperts, trainer.tokensPerStep()));
            telemetry->setCompletedSteps(m.step);
        }
        if (!options.spans.empty())
            kept.push_back(std::move(measured));
        char bubble[64] = "";
        if (plannedBubble >= 0)
            std::snprintf(bubble, sizeof bubble, "  bubble %.1f%% (plan %.1f%%)", 100 * m.bubbleRatio,
                          100 * plannedBubble);
        const std::optional<ExpertFigures> experts = expertFigures(m.modelExpertLoads);
        std::printf("step %6d  loss %.6f  aux %.6f  grad-norm %.4f  lr %.3g  tokens/s %.0f%s%s\n", m.step, m.loss,
                    m.auxLoss, m.gradNorm, m.learningRate, m.tokensPerSecond, bubble, expertSummary(experts).c_str());
        std::fflush(stdout);
        if (metrics.is_open()) {
            nlohmann::json line{{"step", m.step},
                                {"loss", m.loss},
                                {"aux_loss", m.auxLoss},
                                {"grad_norm", m.gradNorm},
                                {"lr", m.learningRate},
                                {"tokens_per_s", m.tokensPerSecond},
                                {"bubble_ratio", m.bubbleRatio}};
            if (experts) {
                line["expert_imbalance"] = experts->imbalance;
                line["expert_dropped"] = experts->droppedShare;
            }
            metrics << line.dump() << "\n";
        }
        if (m.step == end.step) {
            if (end.finish)
                break;
            std::fflush(stdout);
            std::_Exit(0);
        }
        const bool due = options.saveEvery > 0 && m.step % options.saveEvery == 0;
        if (!options.saveDir.empty() && (due || m.step == last))
            trainer.save(checkpointName(options.saveDir, m.step));
    }
    if (!options.spans.empty()) {
        const std::string path = groups ? options.spans + ".rank" + std::to_string(mpi->worldRank()) : options.spans;
        std::ofstream out(path);
        for (const agent::Measurements& measured : kept)
            measured.writeJsonLines(out);
        if (!out)
            throw std::runtime_error("cannot write spans to '" + path + "'");
    }
    if (markov && steps > 0)
        std::printf("final loss %.4f nats, entropy floor of the source %.4f nats (%.1f%% above)\n", lastLoss,
                    markov->lossFloor(int(spec.model.seqLen)),
                    100.0 * (lastLoss / markov->lossFloor(int(spec.model.seqLen)) - 1.0));
    // A GPU's figures beyond the per-category ledger: the allocator's reserve and the device's own count.
    if (const kernels::DeviceMemory memory = backend.deviceMemory(); memory.reservedBytes >= 0) {
        const auto gib = [](std::int64_t bytes) { return double(bytes) / double(std::int64_t(1) << 30); };
        char line[256];
        std::snprintf(line, sizeof line,
                      "device memory: peak %.2f GiB reserved by the caching allocator; %.2f of %.2f GiB in use on the "
                      "device",
                      gib(memory.peakReservedBytes), gib(memory.deviceUsedBytes), gib(memory.deviceTotalBytes));
        std::printf("%s\n", line);
        if (telemetry)
            telemetry->log(wire::LogLevel::Info, line);
    }
    return 0;
}

int agentMain(int argc, char** argv)
{
    kernels::reexecWithBetterOpenblasCore(argv);
    Options options;
    CLI::App app("runs the training stack: on one device, or as one rank of a job that mpirun started",
                 "meshbench-agent");
    app.failure_message(failureMessage);
    addOptions(app, options);
    app.footer("exit status: 0 done, 1 a wrong job, checkpoint or data file, 2 a wrong command line,\n"
               "3 (under mpirun) a collective failed, most often because a peer ended first");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help ends here too, with status 0; anything else is a wrong command line.
        return app.exit(e) == 0 ? 0 : 2;
    }
    std::optional<agent::MpiRuntime> mpi;
    if (launchedByMpirun())
        mpi.emplace(argc, argv);
    const std::string who = mpi && mpi->worldSize() > 1
                                ? "meshbench-agent: rank " + std::to_string(mpi->worldRank()) + ": "
                                : "meshbench-agent: ";
    std::unique_ptr<agent::TelemetrySender> telemetry;
    if (!options.telemetry.empty()) {
        try {
            agent::TelemetryOptions telemetryOptions;
            telemetryOptions.endpoint = options.telemetry;
            telemetryOptions.rank = std::uint32_t(mpi ? mpi->worldRank() : 0);
            // Local rank 0 of each node (from MPI itself: under mpirun and srun alike) samples it.
            telemetryOptions.sampleNode = !mpi || mpi->localRank() == 0;
            telemetryOptions.clockEndpoint = options.clock;
            telemetryOptions.curve = agent::telemetryKeysFromEnvironment();
            telemetry = std::make_unique<agent::TelemetrySender>(std::move(telemetryOptions));
        } catch (const std::exception& e) {
            std::cerr << who << e.what() << "\n";
            return 2;
        }
        // A stop signal is turned into a last heartbeat ("terminated") before the process ends. The
        // handler only writes to a pipe (async-signal safe); a thread of ours does the rest.
        // Installed after MPI started, whose runtime threads would otherwise take the signal. The
        // engine's own stop signal leaves a rank of a multi-rank job waiting to be ended (see
        // wire::kEngineStopSignal), so that every rank can say it was stopped.
        if (pipe(g_stopPipe) != 0) {
            std::cerr << who << "cannot create a pipe for stop signals\n";
            return 2;
        }
        struct sigaction action {};
        action.sa_handler = [](int sig) {
            const unsigned char code = static_cast<unsigned char>(sig);
            [[maybe_unused]] const ssize_t n = write(g_stopPipe[1], &code, 1);
        };
        sigemptyset(&action.sa_mask);
        for (int sig : {SIGTERM, SIGINT, SIGHUP, wire::kEngineStopSignal})
            sigaction(sig, &action, nullptr);
        const bool linger = mpi && mpi->worldSize() > 1;
        std::thread([sender = telemetry.get(), linger] {
            unsigned char sig = 0;
            while (read(g_stopPipe[0], &sig, 1) != 1) {
            }
            sender->finish(wire::RankState::Terminated, sig);
            if (linger && sig == wire::kEngineStopSignal) {
                // Until the next stop signal, or the linger's end.
                pollfd next{g_stopPipe[0], POLLIN, 0};
                const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wire::kStopLingerSeconds);
                for (auto left = deadline - std::chrono::steady_clock::now(); left.count() > 0;
                     left = deadline - std::chrono::steady_clock::now()) {
                    const int ready =
                        poll(&next, 1, int(std::chrono::duration_cast<std::chrono::milliseconds>(left).count()) + 1);
                    if (ready == 1 && read(g_stopPipe[0], &sig, 1) == 1)
                        break;
                    if (ready == 0)
                        break;
                }
            }
            std::fflush(stdout);
            _exit(128 + sig);
        }).detach();
    }

    int status = 1;
    std::string error;
    try {
        status = run(options, mpi ? &*mpi : nullptr, telemetry.get());
    } catch (const agent::CheckpointError& e) {
        error = std::string("checkpoint: ") + e.what();
    } catch (const agent::DataError& e) {
        error = std::string("data: ") + e.what();
    } catch (const agent::CommError& e) {
        // Most often the consequence of a peer that ended first; the engine weighs it so.
        error = std::string("communication: ") + e.what();
        status = wire::kCommunicationFailedStatus;
    } catch (const std::exception& e) {
        error = e.what();
    }
    if (!error.empty())
        std::cerr << who << error << "\n";
    if (telemetry) {
        if (!error.empty())
            telemetry->log(wire::LogLevel::Error, error);
        telemetry->finish(status == 0 ? wire::RankState::Finished : wire::RankState::Failed, status);
    }
    // A failing rank ends the whole job now rather than leaving its peers in a collective.
    if (status != 0 && mpi && mpi->worldSize() > 1)
        agent::MpiRuntime::abortJob(status);
    return status;
}

}  // namespace

int main(int argc, char** argv)
{
    // What run() does not catch (starting MPI, an allocation) still ends with words and a status.
    try {
        return agentMain(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "meshbench-agent: " << e.what() << "\n";
    } catch (...) {
        std::cerr << "meshbench-agent: an unknown error ended the program\n";
    }
    return 1;
}
