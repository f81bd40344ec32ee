#include "rank_file.h"

#include "expert_counts.h"
#include "kineto_reader.h"
#include "nsys_reader.h"

#include <filesystem>
#include <fstream>
#include <string_view>

namespace meshbench::import {

bool isTraceName(const std::string& name)
{
    for (const char* ending : {".json", ".json.gz", ".sqlite", ".jsonl", ".jsonl.gz"})
        if (name.ends_with(ending))
            return true;
    return false;
}

Format formatOf(const std::string& path)
{
    char magic[16] = {};
    std::ifstream file(path, std::ios::binary);
    file.read(magic, sizeof magic);
    if (std::string_view(magic, sizeof magic) == std::string_view("SQLite format 3\0", 16))
        return Format::Nsys;
    if (path.ends_with(".jsonl") || path.ends_with(".jsonl.gz") || looksLikeExpertCounts(path))
        return Format::ExpertCounts;
    return Format::Kineto;
}

RankTrace readRankTrace(const std::string& path, Format format, NameTable& names, const ReadOptions& options)
{
    return format == Format::Nsys ? readNsysExport(path, names, options) : readKinetoTrace(path, names, options);
}

std::string joinedParts(const std::vector<std::string>& parts)
{
    std::string text;
    for (const std::string& p : parts)
        text += (text.empty() ? "" : "; ") + p;
    return text;
}

store::ImportSource importSource(const std::string& path, const RankTrace& trace, const RankAnalysis& analysis)
{
    store::ImportSource source;
    std::error_code error;
    source.path = std::filesystem::absolute(path, error).string();
    source.bytes = static_cast<std::int64_t>(std::filesystem::file_size(path, error));
    source.format = trace.format;
    source.digest = trace.digest;
    source.rank = analysis.rank;
    source.recognised = joinedParts(analysis.recognised);
    std::vector<std::string> inferred = analysis.inferred;
    if (!trace.rank)
        inferred.insert(inferred.begin(), "rank " + std::to_string(analysis.rank) + " from the file name");
    source.inferred = joinedParts(inferred);
    return source;
}

}  // namespace meshbench::import
