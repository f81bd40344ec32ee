#pragma once
// Nsight Systems reports exported with `nsys export --type sqlite`: kernels, copies and memsets
// (CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY, _MEMSET), the runtime calls that launched them
// (CUPTI_ACTIVITY_KIND_RUNTIME, joined by correlationId), NVTX ranges (NVTX_EVENTS: push/pop 59,
// start/end 60; marks 34 are passed over; names from `text` or StringIds by `textId`) and the
// session's start (TARGET_INFO_SESSION_START_TIME), which puts its times on the host's clock.
// NCCL's own ranges (in the domain a row 75 names "NCCL") give each NCCL kernel launched inside
// one its call, communicator and peer from their payload (NVTX_EVENTS.jsonText or jsonTextId);
// which ranks share a communicator is known only once every rank's export is read
// (placeCommunicators). globalTid packs the process and thread: pid = globalTid / 2^24 % 2^24,
// tid = globalTid % 2^24. An export names no rank: the importer takes it from the file name.

#include "rank_trace.h"
#include "read_options.h"

#include <string>

namespace meshbench::import {

// The export schema versions this reader knows (META_DATA_EXPORT's EXPORT_SCHEMA_VERSION major).
constexpr int kNsysSchemaMajorMin = 2;
constexpr int kNsysSchemaMajorMax = 3;

// Throws ImportError for a file that is no nsys export, or one of a schema version it does not know.
RankTrace readNsysExport(const std::string& path, NameTable& names, const ReadOptions& options);

}  // namespace meshbench::import
