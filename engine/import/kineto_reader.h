#pragma once
// torch.profiler's Chrome-trace JSON (Kineto), `.json` or `.json.gz`, read with RapidJSON's SAX
// reader in one pass and bounded memory: only what the analysis needs is kept (rank_trace.h).
// Both shapes are read:
//   * the object form Kineto writes: {"schemaVersion", "deviceProperties", "distributedInfo":
//     {"rank", "world_size", "pg_config": [{"pg_name", "pg_desc", "ranks"}]}, "baseTimeNanoseconds",
//     "traceEvents": [...]}; ts and dur are microseconds (three decimals) relative to
//     baseTimeNanoseconds, or absolute microseconds in files that predate it;
//   * the bare array of events torch's own exporter writes when built without Kineto (Debian's
//     python3-torch): [{"name", "ph": "X", "ts", "dur", "tid", "pid": "CPU functions"}, ...].
// Device events are those of categories kernel, gpu_memcpy and gpu_memset, on lanes pid = device,
// tid = stream; a launch is a cuda_runtime or cuda_driver event, linked to its device event by
// args.correlation (the ac2g flow's id). Every flow (ph s/f) must have both ends.

#include "rank_trace.h"
#include "read_options.h"

#include <string>

namespace meshbench::import {

// Whether the file's first megabyte looks like a torch.profiler trace (a "traceEvents" key, or an
// array of events with "ph"): for the files of a folder, where other JSON is passed over.
bool looksLikeKinetoTrace(const std::string& path);

// Throws ImportError naming the file and the event (its index and timestamp) for what is wrong.
RankTrace readKinetoTrace(const std::string& path, NameTable& names, const ReadOptions& options);

}  // namespace meshbench::import
