#pragma once
// Exports of a stored session for other tools.
//
// Chrome trace: the Trace Event Format (JSON object form) that Perfetto UI and chrome://tracing
// open. One process per rank (pid = rank), named "rank 3 (dp1 pp0 tp1 ep1) host:pid"; one thread
// per kind group (compute F/B/W, pipeline send/recv, data-parallel, optimizer, idle); an "X" event
// per span with its step, stage, chunk, micro-batch, bytes and peer in args; a "C" counter per
// rank and memory category; flow arrows from each send to its recv. Times are microseconds
// (doubles) since the session's first timestamp, which metadata.origin_ns gives in nanoseconds.
//
// CSV: one file per table with a header row, RFC 4180 (CRLF line ends, fields with commas,
// quotes or line breaks quoted, quotes doubled); doubles in the shortest form that reads back
// exactly. steps.csv starts with step,loss,aux_loss,tokens_per_s,bubble_ratio.

#include "session_store.h"

#include <string>

namespace meshbench::store {

// An output that cannot be written (the session itself is fine).
class ExportError : public StoreError {
public:
    using StoreError::StoreError;
};

// Both throw ExportError, naming the file, when an output cannot be written, and StoreError when
// the session turns out to be damaged part-way through.
void exportChromeTrace(const SessionReader& session, const std::string& outPath);
void exportCsv(const SessionReader& session, const std::string& outDir);

}  // namespace meshbench::store
