#include "device_evidence.h"

#include "findings.h"
#include "steady_state.h"

#include "store/session_store.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace meshbench::live {

namespace {

using store::DeviceClass;

std::int64_t medianNs(std::vector<double> values) { return std::int64_t(std::llround(median(std::move(values)))); }

}  // namespace

store::DeviceClass classOf(CollectiveDim dim)
{
    switch (dim) {
    case CollectiveDim::Tensor:
        return DeviceClass::CommTensor;
    case CollectiveDim::Data:
        return DeviceClass::CommData;
    case CollectiveDim::Expert:
        return DeviceClass::CommExpert;
    }
    return DeviceClass::CommOther;
}

plan::GroupKind groupKindOf(CollectiveDim dim)
{
    switch (dim) {
    case CollectiveDim::Tensor:
        return plan::GroupKind::Tensor;
    case CollectiveDim::Data:
        return plan::GroupKind::Data;
    case CollectiveDim::Expert:
        return plan::GroupKind::Expert;
    }
    return plan::GroupKind::Data;
}

std::int64_t RankStepDevice::computeBusyNs() const
{
    return busyNs[std::size_t(DeviceClass::Gemm)] + busyNs[std::size_t(DeviceClass::Attention)] +
           busyNs[std::size_t(DeviceClass::OtherCompute)];
}

DeviceEvidence::DeviceEvidence(const plan::Mesh& mesh, std::span<const store::DeviceTimeRow> rows) : m_mesh(mesh)
{
    std::set<std::int32_t> all;
    for (const store::DeviceTimeRow& row : rows)
        if (row.rank >= 0 && row.rank < mesh.worldSize() && row.step >= 0)
            all.insert(row.step);
    const std::vector<std::int32_t> steps(all.begin(), all.end());
    m_steps.assign(steps.begin() + std::ptrdiff_t(firstRecentStep(steps.size())), steps.end());
    const std::set<std::int32_t> kept(m_steps.begin(), m_steps.end());
    for (const store::DeviceTimeRow& row : rows) {
        if (row.rank < 0 || row.rank >= mesh.worldSize() || !kept.contains(row.step))
            continue;
        const auto c = std::size_t(row.deviceClass);
        if (c >= std::size_t(store::kDeviceClasses))
            continue;
        RankStepDevice& d = m_data[{row.step, row.rank}];
        d.hasTime = true;
        d.busyNs[c] += std::max<std::int64_t>(0, row.busyNs);
        d.exposedNs[c] += std::max<std::int64_t>(0, row.exposedNs);
    }
}

void DeviceEvidence::addKernel(std::uint32_t rank, const store::KernelRow& kernel)
{
    if (rank >= std::uint32_t(m_mesh.worldSize()) || kernel.endNs < kernel.beginNs ||
        !std::binary_search(m_steps.begin(), m_steps.end(), kernel.step))
        return;
    m_kernels[{kernel.step, int(rank)}].push_back(kernel);
}

void DeviceEvidence::finish()
{
    for (auto& [key, kernels] : m_kernels) {
        std::sort(kernels.begin(), kernels.end(),
                  [](const store::KernelRow& a, const store::KernelRow& b) { return a.beginNs < b.beginNs; });
        RankStepDevice& d = m_data[key];
        d.kernels = int(kernels.size());
        // The union of the step's kernels, every stream: a gap in it is the whole device idle. A gap
        // on the compute stream alone while a collective runs is a wait for the collective.
        std::int64_t begin = kernels.front().beginNs;
        std::int64_t end = kernels.front().endNs;
        for (const store::KernelRow& k : kernels) {
            if (k.beginNs > end) {
                const std::int64_t gap = k.beginNs - end;
                ++d.gaps;
                if (gap < kLaunchGapNs) {
                    ++d.shortGaps;
                    d.shortGapNs += gap;
                }
            }
            end = std::max(end, k.endNs);
        }
        d.windowNs = end - begin;
    }
    for (std::int32_t step : m_steps)
        for (int dim = 0; dim < kCollectiveDims; ++dim)
            matchCollectives(step, CollectiveDim(dim));
    m_kernels.clear();
}

void DeviceEvidence::matchCollectives(std::int32_t step, CollectiveDim dim)
{
    const plan::GroupKind kind = groupKindOf(dim);
    if (m_mesh.groupSize(kind) < 2)
        return;
    const DeviceClass deviceClass = classOf(dim);
    for (const std::vector<int>& group : m_mesh.groups(kind)) {
        // The kernels carry no collective id: the k-th of the class on each member is the k-th
        // collective, as every member issues a group's collectives in the same order (NCCL requires
        // it). A member with another count (a kernel missing from its trace) breaks the pairing,
        // and the group's step is skipped rather than matched wrongly.
        std::vector<std::vector<const store::KernelRow*>> members;
        for (int r : group) {
            std::vector<const store::KernelRow*> mine;
            if (const auto found = m_kernels.find({step, r}); found != m_kernels.end())
                for (const store::KernelRow& k : found->second)
                    if (k.deviceClass == deviceClass)
                        mine.push_back(&k);
            members.push_back(std::move(mine));
        }
        const std::size_t count = members.front().size();
        if (count == 0 || std::any_of(members.begin(), members.end(), [&](const auto& m) { return m.size() != count; }))
            continue;
        std::vector<std::vector<double>> lateness(group.size()), duration(group.size());
        std::vector<double> others, durations;
        for (std::size_t k = 0; k < count; ++k) {
            durations.clear();
            for (const auto& m : members)
                durations.push_back(double(m[k]->endNs - m[k]->beginNs));
            const double d = median(durations);
            for (std::size_t i = 0; i < group.size(); ++i) {
                // Against the others' median, not the whole group's: in a group of two the whole
                // group's median is the midpoint, which halves the figure and makes both members
                // equally off.
                others.clear();
                for (std::size_t j = 0; j < group.size(); ++j)
                    if (j != i)
                        others.push_back(double(members[j][k]->beginNs));
                lateness[i].push_back(double(members[i][k]->beginNs) - median(others));
                duration[i].push_back(d);
            }
        }
        for (std::size_t i = 0; i < group.size(); ++i)
            m_data[{step, group[i]}].collectives[std::size_t(dim)] =
                CollectiveTiming{medianNs(lateness[i]), medianNs(duration[i]), int(count)};
    }
}

const RankStepDevice* DeviceEvidence::at(std::int32_t step, int rank) const
{
    const auto found = m_data.find({step, rank});
    return found == m_data.end() ? nullptr : &found->second;
}

std::optional<DeviceEvidence> readDeviceEvidence(const store::SessionReader& reader, const plan::Mesh& mesh)
{
    const std::vector<store::DeviceTimeRow> rows = reader.deviceTime();
    if (rows.empty())
        return std::nullopt;
    DeviceEvidence evidence(mesh, rows);
    reader.kernels(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(), {},
                   [&evidence](std::uint32_t rank, const store::KernelRow& k) { evidence.addKernel(rank, k); });
    evidence.finish();
    return evidence;
}

}  // namespace meshbench::live
