#include "trace_import.h"

#include "clock_alignment.h"
#include "expert_counts.h"
#include "import_error.h"
#include "kineto_reader.h"
#include "nsys_reader.h"
#include "rank_analysis.h"
#include "rank_file.h"
#include "trace_input.h"

#include "plan/measured_bubble.h"
#include "plan/planner.h"
#include "plan/presets.h"
#include "plan/report.h"
#include "plan/schedule.h"
#include "plan/units.h"
#include "store/session_store.h"
#include "wire/wall_clock.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace meshbench::import {

namespace {

namespace fs = std::filesystem;

// The files to read: those named, and in the folders named every trace file (other JSON, such as a
// job spec or a config beside the traces, is passed over and counted in `skipped`).
std::vector<std::string> listInputs(const std::vector<std::string>& paths, std::vector<std::string>& skipped)
{
    std::vector<std::string> files;
    for (const std::string& path : paths) {
        std::error_code error;
        if (fs::is_directory(path, error)) {
            std::vector<std::string> inside;
            for (const fs::directory_entry& entry : fs::recursive_directory_iterator(path, error))
                if (entry.is_regular_file() && isTraceName(entry.path().filename().string())) {
                    const std::string file = entry.path().string();
                    (formatOf(file) != Format::Kineto || looksLikeKinetoTrace(file) ? inside : skipped).push_back(file);
                }
            if (inside.empty())
                throw ImportError(path + ": holds no trace (*.json, *.json.gz, *.sqlite, *.jsonl)");
            std::sort(inside.begin(), inside.end());
            files.insert(files.end(), inside.begin(), inside.end());
        } else if (fs::exists(path, error)) {
            files.push_back(path);
        } else {
            throw ImportError(path + ": no such file or folder");
        }
    }
    return files;
}

// The rank a file's name gives: the first group of `pattern` (or its whole match) over the name.
std::optional<int> rankFromName(const std::string& path, const std::string& pattern)
{
    const std::string name = fs::path(path).filename().string();
    std::smatch match;
    const std::regex re(pattern);
    if (!std::regex_search(name, match, re))
        return std::nullopt;
    const std::string digits = match.size() > 1 ? match[1].str() : match[0].str();
    try {
        return std::stoi(digits);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// Without --rank-from: nsys exports carry the number `-o report.%q{OMPI_COMM_WORLD_RANK}` gave them;
// Megatron names its counts rank{r}.jsonl. A torch.profiler trace must say its rank itself.
std::optional<std::string> defaultRankPattern(Format format)
{
    switch (format) {
    case Format::Nsys:
        return std::string(R"((\d+)(?:\.nsys-rep)?\.sqlite$)");
    case Format::ExpertCounts:
        return std::string(R"(rank[-_]?(\d+))");
    case Format::Kineto:
        return std::nullopt;
    }
    return std::nullopt;
}

JobContext readJob(const std::optional<std::string>& path, std::string& text)
{
    JobContext job;
    if (!path)
        return job;
    std::ifstream file(*path, std::ios::binary);
    if (!file)
        throw ImportError(*path + ": the job spec cannot be read");
    std::ostringstream content;
    content << file.rdbuf();
    text = content.str();
    const plan::LoadResult loaded = plan::parseJobSpec(text);
    if (!loaded.spec || !loaded.errors.empty()) {
        std::string message = *path + ": the job spec is wrong";
        for (const plan::SpecError& e : loaded.errors)
            message += "\n  " + e.path + ": " + e.message;
        throw ImportError(message);
    }
    job.spec = *loaded.spec;
    job.mesh.emplace(job.spec->parallel);
    return job;
}

// A spec for a session imported without --job: the pipeline as the traces show it, every other
// rank data-parallel, on DGX H100 nodes, over a placeholder model (GPT-2 small's shape: Radford et al.
// 2019) since a trace does not describe its model. It lets the Monitor draw the stages; the session
// says the layout was inferred, and its plan means nothing without --job.
plan::JobSpec inferredSpec(int world, int stages, int microbatches, int chunks)
{
    plan::JobSpec spec;
    spec.name = "imported traces";
    spec.model.hidden = 768;
    spec.model.heads = spec.model.kvHeads = 12;
    spec.model.ffnHidden = 3072;
    spec.model.vocab = 50257;
    spec.model.seqLen = 1024;
    const auto shape = [&](int pp, int virtualStages) {
        spec.parallel.pp = pp;
        spec.parallel.dp = world / pp;
        spec.parallel.microbatches = std::max(microbatches, 1);
        spec.parallel.schedule = virtualStages > 1 ? plan::ScheduleKind::Interleaved : plan::ScheduleKind::OneFOneB;
        spec.parallel.virtualStages = virtualStages;
        spec.model.layers = 12 * pp * virtualStages;
        spec.parallel.microbatches = plan::admittedMicrobatches(spec.parallel.scheduleShape());
    };
    // DGX H100 nodes of 8 with their links, so that the findings' figures have rates to stand on; a
    // world that fills no whole number of them is one node of its size.
    spec.cluster = *plan::clusterPreset("dgx-h100");
    spec.cluster.preset.clear();
    if (world % spec.cluster.devicesPerNode != 0)
        spec.cluster.devicesPerNode = spec.cluster.nvlinkDomain = world;
    spec.cluster.nodes = world / spec.cluster.devicesPerNode;
    shape(stages > 0 && world % stages == 0 ? stages : 1, std::max(chunks, 1));
    if (!plan::validateLayout(spec).empty())
        shape(1, 1);
    return spec;
}

std::string micros(std::int64_t ns) { return plan::formatNumber("%.1f us", double(ns) / 1000); }

std::string percent(double ratio) { return plan::formatNumber("%.2f%%", 100 * ratio); }

struct RankInput {
    std::string path;
    Format format;
    int rank = -1;
    std::optional<int> world;
    RankAnalysis analysis;
    store::ImportSource source;
};

class Importer {
public:
    explicit Importer(const ImportRequest& request) : m_request(request) {}

    ImportResult run()
    {
        std::vector<std::string> skipped;
        const std::vector<std::string> files = listInputs(m_request.paths, skipped);
        for (const std::string& file : skipped)
            m_summary.push_back("passed over " + file + ": not a trace");
        m_job = readJob(m_request.jobPath, m_jobText);
        for (const std::string& path : files) {
            readFile(path);
            if (m_request.read.cancelled())
                throw ImportError("the import was cancelled; nothing was written");
        }
        checkRanks();
        align();
        dropPartialSteps();
        measureBubble();
        if (m_request.read.cancelled())
            throw ImportError("the import was cancelled; nothing was written");
        write();
        return {m_request.sessionPath, m_summary};
    }

private:
    ReadOptions optionsFor(std::uint64_t before) const
    {
        ReadOptions options = m_request.read;
        if (m_request.read.progress)
            options.progress = [this, before](std::uint64_t bytes, std::uint64_t events) {
                m_request.read.progress(before + bytes, m_eventsBefore + events);
            };
        return options;
    }

    int rankOf(const std::string& path, Format format, std::optional<int> stated) const
    {
        if (stated)
            return *stated;
        const std::optional<std::string> pattern =
            !m_request.rankFrom.empty() ? std::optional(m_request.rankFrom) : defaultRankPattern(format);
        if (pattern)
            if (const std::optional<int> rank = rankFromName(path, *pattern))
                return *rank;
        throw ImportError(path + ": says no rank (no distributedInfo.rank)" +
                          (m_request.rankFrom.empty()
                               ? std::string()
                               : ", and --rank-from '" + m_request.rankFrom + "' finds no number in its name") +
                          "; name the rank with --rank-from REGEX over the file name, e.g. --rank-from "
                          "'rank(\\d+)'");
    }

    void readFile(const std::string& path)
    {
        RankInput input;
        input.path = path;
        input.format = formatOf(path);
        const ReadOptions options = optionsFor(m_bytesBefore);
        std::error_code error;
        const std::uint64_t size = fs::file_size(path, error);
        input.source.path = fs::absolute(path, error).string();
        input.source.bytes = static_cast<std::int64_t>(size);
        if (input.format == Format::ExpertCounts) {
            input.rank = rankOf(path, input.format, std::nullopt);
            ExpertCounts counts = readExpertCounts(path, input.rank, m_job, options);
            input.source.format = "megatron-tokens-per-expert";
            input.source.digest = counts.digest;
            input.source.recognised = std::to_string(counts.loads.size()) + " layer counts";
            if (!m_job.spec)
                input.source.inferred = "experts and layers as the file numbers them (no --job)";
            // Tensor-parallel ranks of one expert-parallel rank count the same tokens: one of them is kept.
            if (!m_job.mesh || m_job.mesh->coordOf(input.rank).tp == 0)
                m_expertLoads[input.rank] = std::move(counts.loads);
        } else {
            RankTrace trace = readRankTrace(path, input.format, m_names, options);
            input.rank = rankOf(path, input.format, trace.rank);
            input.world = trace.worldSize;
            if (m_job.mesh && input.world && *input.world != m_job.mesh->worldSize())
                throw ImportError(path + ": is a trace of " + std::to_string(*input.world) +
                                  " ranks, but the job (--job) has " + std::to_string(m_job.mesh->worldSize()) +
                                  "; give the job spec of the traced run");
            input.analysis = analyseRank(trace, input.rank, m_names, m_job, m_request.read.steps);
            input.source = importSource(path, trace, input.analysis);
            m_eventsBefore += trace.events;
        }
        input.source.rank = input.rank;
        m_bytesBefore += size;
        m_inputs.push_back(std::move(input));
    }

    void checkRanks()
    {
        std::map<int, const RankInput*> byRank;
        const RankInput* worldFrom = nullptr;
        for (const RankInput& input : m_inputs) {
            if (input.format == Format::ExpertCounts)
                continue;
            if (input.rank < 0)
                throw ImportError(input.path + ": rank " + std::to_string(input.rank) + " is negative");
            if (auto [at, fresh] = byRank.emplace(input.rank, &input); !fresh)
                throw ImportError("rank " + std::to_string(input.rank) + " is in two files: " + at->second->path +
                                  " and " + input.path + "; import one run's traces at a time");
            if (input.world) {
                if (worldFrom && *worldFrom->world != *input.world)
                    throw ImportError("the traces are of different runs: " + worldFrom->path + " has world size " +
                                      std::to_string(*worldFrom->world) + ", " + input.path + " has " +
                                      std::to_string(*input.world));
                worldFrom = &input;
            }
        }
        if (byRank.empty())
            throw ImportError("no trace among the inputs: give the per-rank torch.profiler traces or nsys exports "
                              "(expert counts alone make no session)");
        m_world = worldFrom ? *worldFrom->world : byRank.rbegin()->first + 1;
        if (m_job.mesh)
            m_world = m_job.mesh->worldSize();  // readFile checked the traces' own world against it
        for (const auto& [rank, input] : byRank)
            if (rank >= m_world)
                throw ImportError(input->path + ": is rank " + std::to_string(rank) + ", outside a world of " +
                                  std::to_string(m_world) + " ranks");
        const int missing = m_world - static_cast<int>(byRank.size());
        m_summary.push_back(
            "read " + std::to_string(m_inputs.size()) + " files (" + std::to_string(m_bytesBefore) + " bytes, " +
            std::to_string(m_eventsBefore) + " events): " + std::to_string(byRank.size()) + " of " +
            std::to_string(m_world) + " ranks" +
            (missing > 0 ? " (" + std::to_string(missing) + " not traced: a profiled subset, as --profile-ranks makes)"
                         : ""));
    }

    void align()
    {
        std::vector<RankAnalysis*> ranks;
        for (RankInput& input : m_inputs)
            if (input.format != Format::ExpertCounts)
                ranks.push_back(&input.analysis);
        // nsys: which ranks share an NCCL communicator is known only now that every rank is read.
        for (const std::string& line : placeCommunicators(ranks, m_job))
            m_summary.push_back(line);
        m_offsets = alignClocks({ranks.begin(), ranks.end()}, m_job);
        for (RankInput& input : m_inputs) {
            if (input.format == Format::ExpertCounts)
                continue;
            const ClockOffset& offset = m_offsets[input.rank];
            RankAnalysis& a = input.analysis;
            for (wire::SpanRecord& s : a.spans) {
                s.beginNs += offset.offsetNs;
                s.endNs += offset.offsetNs;
            }
            for (store::KernelRow& k : a.kernels) {
                k.beginNs += offset.offsetNs;
                k.endNs += offset.offsetNs;
            }
            for (StepWindow& w : a.steps) {
                w.deviceBeginNs += offset.offsetNs;
                w.deviceEndNs += offset.offsetNs;
            }
            m_summary.push_back("rank " + std::to_string(input.rank) + ": clock offset " + micros(offset.offsetNs) +
                                (offset.collectives > 0 ? ", residual " + micros(offset.residualNs) + " over " +
                                                              std::to_string(offset.collectives) + " collectives"
                                 : offset.transfers > 0
                                     ? ", within " + micros(offset.residualNs) + " (bounded by " +
                                           std::to_string(offset.transfers) + " pipeline send/recv pairs)"
                                     : ", not aligned (no collective or send/recv pair shared with another rank)"));
        }
    }

    void dropPartialSteps()
    {
        std::vector<const RankAnalysis*> view;
        std::set<int> all;
        for (RankInput& input : m_inputs)
            if (input.format != Format::ExpertCounts) {
                view.push_back(&input.analysis);
                for (const StepWindow& w : input.analysis.steps)
                    all.insert(w.step);
            }
        const std::vector<int> partial = partialSteps(view);
        for (int step : partial)
            all.erase(step);
        m_steps.assign(all.begin(), all.end());
        for (RankInput& input : m_inputs)
            if (input.format != Format::ExpertCounts) {
                keepSteps(input.analysis, m_steps);
                for (const auto& [step, warning] : input.analysis.warnings)
                    m_summary.push_back("warning: " + warning);
            }
        if (!partial.empty()) {
            std::string list;
            for (int s : partial)
                list += (list.empty() ? "" : ", ") + std::to_string(s);
            m_summary.push_back("dropped partial steps " + list + " (cut by the trace's start or end)");
        }
    }

    void measureBubble()
    {
        int stages = m_job.pp();
        int microbatches = 0, chunks = 1;
        for (const RankInput& input : m_inputs)
            for (const wire::SpanRecord& s : input.analysis.spans) {
                if (m_job.pp() == 0)
                    stages = std::max(stages, s.stage + 1);
                microbatches = std::max(microbatches, s.microbatch + 1);
                chunks = std::max(chunks, s.chunk + 1);
            }
        if (!m_job.spec) {
            m_spec = inferredSpec(m_world, stages, microbatches, chunks);
            m_specInferred = true;
        } else {
            m_spec = *m_job.spec;
        }
        stages = m_spec.parallel.pp;
        for (int step : m_steps) {
            std::vector<plan::RankPipelinePhase> phases;
            for (const RankInput& input : m_inputs) {
                if (input.format == Format::ExpertCounts)
                    continue;
                std::vector<wire::SpanRecord> spans;
                for (const wire::SpanRecord& s : input.analysis.spans)
                    if (s.step == step)
                        spans.push_back(s);
                const int stage = std::max(input.analysis.stage, 0);
                phases.push_back(plan::rankPipelinePhase(stage, spans));
            }
            const plan::MeasuredBubble bubble = plan::measuredBubble(phases, stages);
            m_bubbles[step] = bubble;
        }
        m_plan = plan::makePlan(m_spec);
        const std::map<int, std::pair<std::int64_t, std::int64_t>> windows = stepWindows();
        for (const auto& [step, bubble] : m_bubbles) {
            if (!bubble.overall)
                continue;
            std::string perStage;
            for (const std::optional<double>& b : bubble.stages)
                perStage += (perStage.empty() ? "" : ", ") + (b ? percent(*b) : std::string("-"));
            const auto window = windows.find(step);
            const double ms = window == windows.end() ? 0 : double(window->second.second - window->second.first) / 1e6;
            std::string line = "step " + std::to_string(step) + ": " + plan::formatNumber("%.2f ms", ms) + ", bubble " +
                               percent(*bubble.overall) + " (stages " + perStage + ")";
            if (!m_specInferred)
                line += "; planned " + plan::formatNumber("%.2f ms", m_plan.step.total * 1e3) + ", bubble " +
                        percent(m_plan.simulation.overallBubbleRatio);
            m_summary.push_back(line);
        }
    }

    // Each step's span over every rank: from the first rank's begin to the last rank's end.
    std::map<int, std::pair<std::int64_t, std::int64_t>> stepWindows() const
    {
        std::map<int, std::pair<std::int64_t, std::int64_t>> windows;
        for (const RankInput& input : m_inputs)
            for (const StepWindow& w : input.analysis.steps) {
                auto [at, fresh] = windows.emplace(w.step, std::pair{w.deviceBeginNs, w.deviceEndNs});
                if (!fresh)
                    at->second = {std::min(at->second.first, w.deviceBeginNs),
                                  std::max(at->second.second, w.deviceEndNs)};
            }
        return windows;
    }

    // One record per step, as a run's rank 0 sends (the readers take a second as a copied row): the
    // step from the first rank's begin to the last rank's end, and the overall bubble. The bubble
    // per stage is the spans', as for a run.
    std::vector<wire::Record> stepMetrics() const
    {
        std::vector<wire::Record> records;
        const double tokens = double(m_spec.parallel.globalBatch()) * double(m_spec.model.seqLen);
        constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
        for (const auto& [step, window] : stepWindows()) {
            wire::StepMetricsRecord m;
            m.step = step;
            m.beginNs = window.first;
            m.endNs = window.second;
            m.loss = m.auxLoss = m.gradNorm = m.learningRate = kUnknown;
            const double seconds = double(window.second - window.first) / 1e9;
            m.tokens = m_specInferred ? 0 : static_cast<std::int64_t>(tokens);
            m.tokensPerSecond = seconds > 0 && !m_specInferred ? tokens / seconds : 0;
            const auto bubble = m_bubbles.find(step);
            m.bubbleRatio = bubble != m_bubbles.end() ? bubble->second.overall.value_or(0) : 0;
            records.emplace_back(m);
        }
        return records;
    }

    void write()
    {
        const std::string& out = m_request.sessionPath;
        std::error_code error;
        if (fs::exists(out, error))
            throw ImportError(out + ": exists already; choose another --session (nothing was written)");
        // Written beside its final name and renamed once complete: a failed import leaves nothing.
        const std::string partial = out + ".importing";
        struct Cleanup {
            std::string path;
            bool done = false;
            ~Cleanup()
            {
                if (done)
                    return;
                std::error_code ignored;
                for (const char* suffix : {"", "-wal", "-shm"})
                    fs::remove(path + suffix, ignored);
            }
        } cleanup{partial};

        std::int64_t first = std::numeric_limits<std::int64_t>::max(), last = std::numeric_limits<std::int64_t>::min();
        for (const RankInput& input : m_inputs)
            for (const StepWindow& w : input.analysis.steps) {
                first = std::min(first, w.deviceBeginNs);
                last = std::max(last, w.deviceEndNs);
            }
        if (first > last)
            first = last = 0;

        store::SessionHeader header;
        header.name = m_spec.name.empty() ? "imported traces" : m_spec.name;
        header.jobSpec = m_specInferred ? plan::toJson(m_spec).dump(2) : m_jobText;
        header.planJson = plan::planToJson(m_plan).dump();
        header.layout = plan::layoutWords(m_spec.parallel) + " (imported)";
        header.createdNs = first;
        header.engineVersion = MESHBENCH_VERSION;
        const plan::Mesh mesh(m_spec.parallel);
        for (int r = 0; r < m_world; ++r) {
            const plan::MeshCoord c = mesh.coordOf(r);
            const plan::DevicePlace place = plan::placeRank(r, m_spec.cluster);
            header.ranks.push_back({r, c.dp, c.pp, c.tp, c.ep, place.node, place.device, "", 0});
        }
        {
            store::SessionWriter writer(partial, header);
            writer.addKernelNames(m_names.names());
            for (RankInput& input : m_inputs) {
                writer.addImportSource(input.source);
                const auto rank = static_cast<std::uint32_t>(input.rank);
                if (input.format == Format::ExpertCounts) {
                    wire::Batch batch{rank, 0, {}};
                    for (wire::ExpertLoadRecord& load : m_expertLoads[input.rank])
                        batch.records.emplace_back(std::move(load));
                    writer.append(std::move(batch));
                    continue;
                }
                RankAnalysis& a = input.analysis;
                wire::Batch batch{rank, 0, {}};
                for (const wire::SpanRecord& s : a.spans)
                    batch.records.emplace_back(s);
                const ClockOffset& offset = m_offsets[input.rank];
                batch.records.emplace_back(wire::ClockOffsetRecord{first, offset.offsetNs, offset.residualNs});
                writer.append(std::move(batch));
                writer.appendKernels(rank, std::move(a.kernels));
                writer.addDeviceTime(std::move(a.deviceTime));
            }
            // The step records go with the lowest rank's, as a run's rank 0 sends them.
            const auto lowest = std::min_element(m_inputs.begin(), m_inputs.end(), [](const auto& a, const auto& b) {
                return (a.format == Format::ExpertCounts) < (b.format == Format::ExpertCounts) ||
                       ((a.format == Format::ExpertCounts) == (b.format == Format::ExpertCounts) && a.rank < b.rank);
            });
            writer.append(wire::Batch{static_cast<std::uint32_t>(lowest->rank), 0, stepMetrics()});
            wire::Batch log{store::kEngineRank, 0, {}};
            for (const std::string& line : m_summary)
                log.records.emplace_back(wire::LogRecord{last, wire::LogLevel::Info, "import: " + line});
            writer.append(std::move(log));
            writer.setOutcome({store::Outcome::Completed, "", -1, last});
            writer.flush();
        }
        fs::rename(partial, out, error);
        if (error)
            throw ImportError(out + ": cannot be written: " + error.message());
        cleanup.done = true;
        m_summary.push_back("session " + out +
                            (m_specInferred ? " (the layout was inferred: give --job to set it)" : ""));
    }

    const ImportRequest& m_request;
    JobContext m_job;
    std::string m_jobText;
    plan::JobSpec m_spec;
    bool m_specInferred = false;
    plan::Plan m_plan;
    NameTable m_names;
    std::vector<RankInput> m_inputs;
    std::map<int, std::vector<wire::ExpertLoadRecord>> m_expertLoads;
    std::map<int, ClockOffset> m_offsets;
    std::map<int, plan::MeasuredBubble> m_bubbles;
    std::vector<int> m_steps;
    int m_world = 0;
    std::uint64_t m_bytesBefore = 0, m_eventsBefore = 0;
    std::vector<std::string> m_summary;
};

}  // namespace

ImportResult importTraces(const ImportRequest& request)
{
    try {
        return Importer(request).run();
    } catch (const store::StoreError& e) {
        throw ImportError(e.what());
    } catch (const std::regex_error& e) {
        throw ImportError("--rank-from '" + request.rankFrom + "' is not a regular expression: " + e.what());
    }
}

}  // namespace meshbench::import
