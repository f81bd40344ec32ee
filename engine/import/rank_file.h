#pragma once
// One rank's trace file: which kind it is (told by its content, an SQLite header or expert counts'
// lines, before its name), its reading by the reader it needs, and how a session describes it. One
// rule for the import of a run's files and for a trace that a running rank hands over.

#include "rank_analysis.h"
#include "rank_trace.h"
#include "read_options.h"

#include "store/imported_trace.h"

#include <string>

namespace meshbench::import {

enum class Format { Kineto, Nsys, ExpertCounts };

// A name the import reads in a folder: *.json, *.json.gz, *.sqlite, *.jsonl, *.jsonl.gz.
bool isTraceName(const std::string& name);
Format formatOf(const std::string& path);

// A torch.profiler trace or an nsys export (not expert counts). Throws ImportError.
RankTrace readRankTrace(const std::string& path, Format format, NameTable& names, const ReadOptions& options);

// The session's record of a read trace: its file, size and digest, and what the analysis recognised
// and inferred (the rank from the file's name, when the trace did not say it).
store::ImportSource importSource(const std::string& path, const RankTrace& trace, const RankAnalysis& analysis);

// Parts of a description, joined with "; ".
std::string joinedParts(const std::vector<std::string>& parts);

}  // namespace meshbench::import
