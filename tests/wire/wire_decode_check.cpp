// wire_decode_check FILE: decodes telemetry frames with the engine's own decoder (wire::decodeBatch)
// and prints each record as one JSON line, every field under its record_fields.h name (enumerations
// by their names). FILE holds frames as u32 little-endian length + frame bytes. A frame the decoder
// refuses prints {"frame": N, "error": ...} and makes the exit status 1. Other programs that speak the
// wire format (the Python client, tests/python) check their frames with it.

#include "common/guarded_main.h"

#include "wire/record_fields.h"
#include "wire/telemetry.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <span>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

using namespace meshbench::wire;

namespace {

template <class R>
const char* typeName()
{
    if constexpr (std::is_same_v<R, SpanRecord>)
        return "span";
    else if constexpr (std::is_same_v<R, ExpertLoadRecord>)
        return "expert_load";
    else if constexpr (std::is_same_v<R, MemorySampleRecord>)
        return "memory_sample";
    else if constexpr (std::is_same_v<R, StepMetricsRecord>)
        return "step_metrics";
    else if constexpr (std::is_same_v<R, NodeSampleRecord>)
        return "node_sample";
    else if constexpr (std::is_same_v<R, LogRecord>)
        return "log";
    else if constexpr (std::is_same_v<R, HeartbeatRecord>)
        return "heartbeat";
    else
        return "clock_offset";
}

nlohmann::json toJson(const Record& record)
{
    return std::visit(
        [](const auto& r) {
            using R = std::decay_t<decltype(r)>;
            nlohmann::json out{{"type", typeName<R>()}};
            forEachField(r, [&](const auto& field, const auto& value) {
                using T = std::decay_t<decltype(value)>;
                if constexpr (std::is_enum_v<T>)
                    out[std::string(field.name)] = std::string(EnumInfo<T>::name(value));
                else if constexpr (std::is_floating_point_v<T>)
                    out[std::string(field.name)] = double(value);
                else
                    out[std::string(field.name)] = value;
            });
            return out;
        },
        record);
}

int checkMain(int argc, char** argv)
{
    if (argc != 2) {
        std::cerr << "usage: wire_decode_check FILE (frames as u32 little-endian length + bytes)\n";
        return 2;
    }
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
        std::cerr << "wire_decode_check: cannot open " << argv[1] << "\n";
        return 2;
    }
    const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    int status = 0;
    std::size_t at = 0;
    for (int frame = 0; at < bytes.size(); ++frame) {
        if (bytes.size() - at < 4) {
            std::cerr << "wire_decode_check: " << bytes.size() - at << " stray bytes at the end of the file\n";
            return 2;
        }
        const std::uint32_t length = std::uint32_t(bytes[at]) | std::uint32_t(bytes[at + 1]) << 8 |
                                     std::uint32_t(bytes[at + 2]) << 16 | std::uint32_t(bytes[at + 3]) << 24;
        at += 4;
        if (bytes.size() - at < length) {
            std::cerr << "wire_decode_check: frame " << frame << " is cut short by the end of the file\n";
            return 2;
        }
        const DecodeResult result = decodeBatch(std::span<const std::uint8_t>(bytes.data() + at, length));
        at += length;
        if (!result.batch) {
            std::cout << nlohmann::json{{"frame", frame}, {"error", result.error}}.dump() << "\n";
            status = 1;
            continue;
        }
        for (const Record& record : result.batch->records) {
            nlohmann::json line = toJson(record);
            line["frame"] = frame;
            line["rank"] = result.batch->rank;
            line["sequence"] = result.batch->sequence;
            line["version"] = result.version;
            std::cout << line.dump() << "\n";
        }
    }
    return status;
}
}  // namespace

int main(int argc, char** argv)
{
    return meshbench::testing::guardedMain("wire_decode_check", 2, [&] { return checkMain(argc, argv); });
}
