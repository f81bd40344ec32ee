#pragma once
// Small real session files for the sessions suites, written with store::SessionWriter.

#include "store/session_store.h"

#include <QString>

#include <vector>

namespace sessions_samples {

using namespace meshbench;

struct Step {
    std::int32_t step;
    double beginSeconds, endSeconds;
    double loss, bubble;
    std::int64_t tokens;
};

struct Memory {
    std::uint32_t rank;
    std::int32_t step;
    wire::MemoryCategory category;
    std::int64_t peak;
};

inline void write(const QString& path, const std::string& name, const std::string& layout, std::int64_t createdNs,
                  store::Outcome outcome, const std::vector<Step>& steps, const std::vector<Memory>& memory = {})
{
    store::SessionHeader header;
    header.name = name;
    header.jobSpec = "{}";
    header.planJson = "{}";
    header.layout = layout;
    header.createdNs = createdNs;
    header.engineVersion = "test";
    for (int r = 0; r < 2; ++r)
        header.ranks.push_back({r, 0, r, 0, 0, 0, r, "host", 0});
    store::SessionWriter writer(path.toStdString(), header);
    wire::Batch metrics{0, 0, {}};
    for (const Step& s : steps)
        metrics.records.push_back(wire::StepMetricsRecord{s.step, std::int64_t(s.beginSeconds * 1e9),
                                                          std::int64_t(s.endSeconds * 1e9), s.loss, 0.01, 1.0, 1e-3, 0,
                                                          s.bubble, s.tokens});
    writer.append(metrics);
    for (const Memory& m : memory)
        writer.append(
            wire::Batch{m.rank, 0, {wire::MemorySampleRecord{m.step, 1'000 + m.step, m.category, m.peak / 2, m.peak}}});
    writer.setOutcome({outcome, outcome == store::Outcome::Failed ? "rank 1 exited with status 3" : "",
                       outcome == store::Outcome::Failed ? 1 : -1, createdNs + 1});
    writer.flush();
}

}  // namespace sessions_samples
