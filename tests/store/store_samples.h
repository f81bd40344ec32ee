#pragma once
// Sessions for the store tests: a header, records of every type with distinctive values, and the
// writing of them.

#include "store/session_store.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace samples {

using namespace meshbench;

inline store::SessionHeader header(int ranks, std::int64_t createdNs = 1'700'000'000'123'456'789)
{
    store::SessionHeader h;
    h.name = "demo, \"quoted\"";
    h.jobSpec = "{\n  \"model\": {\"layers\": 4},\n  \"parallel\": {\"dp\": 2, \"pp\": 2}\n}\n";
    h.planJson = R"({"valid":true,"bubble_ratio":0.25})";
    h.layout = "dp2 pp2 tp1 ep2 1f1b";
    h.createdNs = createdNs;
    h.engineVersion = "0.1.0";
    for (int r = 0; r < ranks; ++r)
        h.ranks.push_back({r, r / 2, r % 2, 0, r / 2, r / 2, r % 2, "", 0});
    return h;
}

// One record of each type from `rank`, times from `t` on, every step field set to `tag`.
inline std::vector<wire::Record> everyRecordType(std::int64_t t, std::int32_t tag, std::uint32_t rank)
{
    wire::SpanRecord span{
        tag, 1, 0, 3, wire::SpanKind::SendActivation, 1, t, t + 1500, std::numeric_limits<std::uint64_t>::max()};
    wire::ExpertLoadRecord load{tag, 3, {10, 0, 4'000'000'000u, 7}, {1, 0, 5, 0}};
    wire::MemorySampleRecord memory{tag, t + 10, wire::MemoryCategory::Activations, 123'456'789'012, -1};
    wire::StepMetricsRecord metrics{tag,       t - 500, t + 2000,  2.718281828459045,  1e-3,
                                    0.1 + 0.2, 3e-4,    12345.678, 0.3333333333333333, 1 << 20};
    wire::NodeSampleRecord node{t + 20, "node-" + std::to_string(rank), 64LL << 30, 12LL << 30, 0, 80LL << 30, -1,
                                0.625f};
    wire::LogRecord log{t + 30, wire::LogLevel::Warning,
                        "step " + std::to_string(tag) + ": loss, \"spiked\"\nsecond line é"};
    wire::HeartbeatRecord heartbeat{t + 40,
                                    wire::RankState::Running,
                                    tag,
                                    4242 + int(rank),
                                    -7,
                                    std::numeric_limits<std::uint64_t>::max() - 1,
                                    "host " + std::to_string(rank)};
    wire::ClockOffsetRecord clock{t + 50, -3'000'000'000 + std::int64_t(rank), 120'000 + tag};
    std::vector<wire::Record> records;
    records.reserve(8);
    records.emplace_back(span);
    records.emplace_back(std::move(load));
    records.emplace_back(memory);
    records.emplace_back(metrics);
    records.emplace_back(std::move(node));
    records.emplace_back(std::move(log));
    records.emplace_back(std::move(heartbeat));
    records.emplace_back(clock);
    return records;
}

}  // namespace samples
