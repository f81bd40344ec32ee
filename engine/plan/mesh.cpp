#include "mesh.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace meshbench::plan {

std::string_view groupKindName(GroupKind kind)
{
    switch (kind) {
    case GroupKind::Tensor:
        return "tp";
    case GroupKind::Pipeline:
        return "pp";
    case GroupKind::Data:
        return "dp";
    case GroupKind::Expert:
        return "ep";
    case GroupKind::ExpertData:
        return "expert-dp";
    }
    return "?";
}

Mesh::Mesh(int dp, int pp, int tp, int ep, RankOrder order) : m_dp(dp), m_pp(pp), m_tp(tp), m_ep(ep)
{
    if (order == RankOrder::TpDpPp) {
        m_dpStride = tp;
        m_ppStride = tp * dp;
    } else {
        m_ppStride = tp;
        m_dpStride = tp * pp;
    }
}

Mesh::Mesh(const ParallelSpec& p) : Mesh(p.dp, p.pp, p.tp, p.ep, p.order) {}

MeshCoord Mesh::coordOf(int rank) const
{
    MeshCoord c;
    c.tp = rank % m_tp;
    c.dp = rank / m_dpStride % m_dp;
    c.pp = rank / m_ppStride % m_pp;
    c.ep = c.dp % m_ep;
    c.edp = c.dp / m_ep;
    return c;
}

int Mesh::rankOf(int dp, int pp, int tp) const { return tp + dp * m_dpStride + pp * m_ppStride; }

int Mesh::groupSize(GroupKind kind) const
{
    switch (kind) {
    case GroupKind::Tensor:
        return m_tp;
    case GroupKind::Pipeline:
        return m_pp;
    case GroupKind::Data:
        return m_dp;
    case GroupKind::Expert:
        return m_ep;
    case GroupKind::ExpertData:
        return m_dp / m_ep;
    }
    return 1;
}

int Mesh::groupStride(GroupKind kind) const
{
    switch (kind) {
    case GroupKind::Tensor:
        return 1;
    case GroupKind::Pipeline:
        return m_ppStride;
    case GroupKind::Data:
    case GroupKind::Expert:  // ep consecutive data-parallel ranks
        return m_dpStride;
    case GroupKind::ExpertData:
        return m_dpStride * m_ep;
    }
    return 1;
}

int Mesh::indexInGroup(GroupKind kind, int rank) const
{
    const MeshCoord c = coordOf(rank);
    switch (kind) {
    case GroupKind::Tensor:
        return c.tp;
    case GroupKind::Pipeline:
        return c.pp;
    case GroupKind::Data:
        return c.dp;
    case GroupKind::Expert:
        return c.ep;
    case GroupKind::ExpertData:
        return c.edp;
    }
    return 0;
}

std::vector<int> Mesh::groupOf(GroupKind kind, int rank) const
{
    const int stride = groupStride(kind);
    const int first = rank - indexInGroup(kind, rank) * stride;
    std::vector<int> members(std::size_t(groupSize(kind)));
    for (std::size_t i = 0; i < members.size(); ++i)
        members[i] = first + int(i) * stride;
    return members;
}

std::vector<std::vector<int>> Mesh::groups(GroupKind kind) const
{
    // Each group is listed once, from its member with index 0, in increasing rank order.
    std::vector<std::vector<int>> out;
    out.reserve(std::size_t(worldSize() / groupSize(kind)));
    for (int rank = 0; rank < worldSize(); ++rank)
        if (indexInGroup(kind, rank) == 0)
            out.push_back(groupOf(kind, rank));
    return out;
}

DevicePlace placeRank(int rank, const ClusterSpec& cluster)
{
    return {rank / cluster.devicesPerNode, rank % cluster.devicesPerNode, rank / cluster.nvlinkDomain};
}

bool groupsStayInDomain(const Mesh& mesh, GroupKind kind, const ClusterSpec& cluster)
{
    const int size = mesh.groupSize(kind);
    if (size == 1)
        return true;
    // Members increase with their group index and domains are contiguous rank ranges, so a
    // group stays inside a domain exactly when its first and last members do: only a group led
    // from the last `span` ranks of a domain leaves it. A rank's index in its group repeats
    // every stride x size ranks and the domains every `domain`, so one common period is enough.
    const int stride = mesh.groupStride(kind);
    const int span = (size - 1) * stride;
    const int domain = cluster.nvlinkDomain;
    if (span >= domain)
        return false;
    const std::int64_t period = std::lcm<std::int64_t>(domain, std::int64_t(stride) * size);
    const int ranks = int(std::min<std::int64_t>(mesh.worldSize(), period));
    for (int end = domain; end - span < ranks; end += domain)
        for (int rank = end - span; rank < std::min(end, ranks); ++rank)
            if (mesh.indexInGroup(kind, rank) == 0)
                return false;
    return true;
}

int groupMembersPerDomain(const Mesh& mesh, GroupKind kind, const ClusterSpec& cluster)
{
    // Rank 0 leads a group of every kind, and domains are contiguous rank ranges: its members
    // 0, stride, 2 stride, ... below the domain's size share its domain.
    const int size = mesh.groupSize(kind);
    const int stride = std::max(1, mesh.groupStride(kind));
    return std::clamp((cluster.nvlinkDomain + stride - 1) / stride, 1, size);
}

std::vector<std::string> placementWarnings(const Mesh& mesh, const ClusterSpec& cluster)
{
    std::vector<std::string> warnings;
    if (mesh.tp() > 1) {
        for (const std::vector<int>& group : mesh.groups(GroupKind::Tensor)) {
            const DevicePlace first = placeRank(group.front(), cluster);
            const DevicePlace last = placeRank(group.back(), cluster);
            if (first.node != last.node) {
                warnings.push_back(
                    "TP group of ranks " + std::to_string(group.front()) + ".." + std::to_string(group.back()) +
                    " spans nodes " + std::to_string(first.node) + " to " + std::to_string(last.node) +
                    (first.domain != last.domain ? " and leaves its NVLink domain" : " (same NVLink domain)") +
                    "; keep tp within devices_per_node=" + std::to_string(cluster.devicesPerNode));
                break;  // one example is enough: all TP groups have the same shape
            }
        }
    }
    if (mesh.ep() > 1 && !groupsStayInDomain(mesh, GroupKind::Expert, cluster))
        warnings.push_back("EP groups (tp x ep = " + std::to_string(mesh.tp() * mesh.ep()) +
                           " ranks) cross NVLink domains: every MoE layer's all-to-all goes over the network");
    return warnings;
}

}  // namespace meshbench::plan
