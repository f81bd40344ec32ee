#include "expert_counts.h"

#include "import_error.h"
#include "trace_input.h"

#include <nlohmann/json.hpp>

namespace meshbench::import {

bool looksLikeExpertCounts(const std::string& path)
{
    try {
        TraceInput input(path);
        std::string line;
        if (!input.readLine(line))
            return false;
        const nlohmann::json first = nlohmann::json::parse(line, nullptr, false);
        return first.is_object() && first.contains("tpe");
    } catch (const ImportError&) {
        return false;
    }
}

ExpertCounts readExpertCounts(const std::string& path, int rank, const JobContext& job, const ReadOptions& options)
{
    ExpertCounts counts;
    TraceInput input(path);
    std::string line;
    int experts = 0, localExperts = 0, firstExpert = 0, firstLayer = 0;
    if (job.spec && job.mesh) {
        const plan::MeshCoord at = job.mesh->coordOf(rank);
        experts = job.spec->model.moe.experts;
        localExperts = experts / std::max(job.spec->parallel.ep, 1);
        firstExpert = at.ep * localExperts;
        firstLayer = at.pp * (job.spec->model.layers / std::max(job.spec->parallel.pp, 1));
    }
    while (input.readLine(line)) {
        ++counts.lines;
        if (line.empty())
            continue;
        const std::string where = path + ": line " + std::to_string(counts.lines);
        const nlohmann::json entry = nlohmann::json::parse(line, nullptr, false);
        if (!entry.is_object() || !entry.contains("iter") || !entry.contains("layer") || !entry.contains("tpe") ||
            !entry["iter"].is_number_integer() || !entry["layer"].is_number_integer() || !entry["tpe"].is_array())
            throw ImportError(where + ": is not a tokens_per_expert entry {\"iter\", \"layer\", \"tpe\": [[...]]}");
        wire::ExpertLoadRecord load;
        load.step = entry["iter"].get<int>();
        load.layer = firstLayer + entry["layer"].get<int>();
        std::vector<std::uint64_t> local;
        for (const nlohmann::json& microbatch : entry["tpe"]) {
            if (!microbatch.is_array())
                throw ImportError(where + ": \"tpe\" must hold one list of per-expert counts per micro-batch");
            if (local.empty())
                local.resize(microbatch.size());
            if (microbatch.size() != local.size())
                throw ImportError(where + ": its micro-batches list " + std::to_string(local.size()) + " and " +
                                  std::to_string(microbatch.size()) + " experts");
            for (std::size_t e = 0; e < microbatch.size(); ++e) {
                if (!microbatch[e].is_number_integer() || microbatch[e].get<std::int64_t>() < 0)
                    throw ImportError(where + ": a token count is not a non-negative integer");
                local[e] += microbatch[e].get<std::uint64_t>();
            }
        }
        if (localExperts > 0 && int(local.size()) != localExperts)
            throw ImportError(where + ": counts " + std::to_string(local.size()) + " local experts, the job has " +
                              std::to_string(localExperts) + " per expert-parallel rank; check --job");
        const std::size_t total = experts > 0 ? std::size_t(experts) : local.size();
        load.routed.assign(total, 0);
        load.dropped.assign(total, 0);
        for (std::size_t e = 0; e < local.size(); ++e)
            load.routed[std::size_t(firstExpert) + e] = static_cast<std::uint32_t>(local[e]);
        counts.loads.push_back(std::move(load));
        if ((counts.lines & 0x3FF) == 0) {
            if (options.progress)
                options.progress(input.fileBytesRead(), counts.lines);
            if (options.cancelled())
                throw ImportError(path + ": the import was cancelled");
        }
    }
    if (!input.error().empty())
        throw ImportError(path + ": " + input.error());
    counts.digest = input.digest();
    return counts;
}

}  // namespace meshbench::import
