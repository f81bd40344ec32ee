#pragma once
// The rank <-> (dp, pp, tp, ep) mapping, every process group, and the placement of ranks on
// (node, device). The GUI draws this and the agent builds its communicators from it.

#include "job_spec.h"

#include <string>
#include <vector>

namespace meshbench::plan {

struct MeshCoord {
    int dp = 0;
    int pp = 0;
    int tp = 0;
    int ep = 0;   // dp % ep: position inside the expert-parallel group
    int edp = 0;  // dp / ep: position inside the expert-data-parallel group
};

enum class GroupKind { Tensor, Pipeline, Data, Expert, ExpertData };
std::string_view groupKindName(GroupKind kind);

// Ranks are laid out with TP innermost; by default DP next and PP outermost (Megatron's
// tp-cp-ep-dp-pp order without context parallelism, EP being the inner part of DP).
class Mesh {
public:
    Mesh(int dp, int pp, int tp, int ep, RankOrder order = RankOrder::TpDpPp);
    explicit Mesh(const ParallelSpec& parallel);

    int worldSize() const { return m_dp * m_pp * m_tp; }
    int dp() const { return m_dp; }
    int pp() const { return m_pp; }
    int tp() const { return m_tp; }
    int ep() const { return m_ep; }

    MeshCoord coordOf(int rank) const;
    int rankOf(int dp, int pp, int tp) const;

    // The ranks that share a group with `rank`, in group order (group rank 0 first).
    std::vector<int> groupOf(GroupKind kind, int rank) const;
    // Every group of a kind; each rank is in exactly one.
    std::vector<std::vector<int>> groups(GroupKind kind) const;
    int groupSize(GroupKind kind) const;
    // Rank distance between consecutive members of a group, and a rank's index inside its group.
    int groupStride(GroupKind kind) const;
    int indexInGroup(GroupKind kind, int rank) const;

private:
    int m_dp, m_pp, m_tp, m_ep;
    int m_dpStride, m_ppStride;
};

struct DevicePlace {
    int node = 0;
    int device = 0;  // local index on the node
    int domain = 0;  // NVLink domain
};

// Rank r runs on node r / devices_per_node, device r % devices_per_node (mpirun's by-slot fill).
DevicePlace placeRank(int rank, const ClusterSpec& cluster);

// Whether every group of this kind stays inside one NVLink domain.
bool groupsStayInDomain(const Mesh& mesh, GroupKind kind, const ClusterSpec& cluster);
// How many members of one group of `kind` share an NVLink domain (the group's size when it stays
// inside one): a group crossing the network with k members per domain spreads its rings over
// their k NICs.
int groupMembersPerDomain(const Mesh& mesh, GroupKind kind, const ClusterSpec& cluster);

// Human-readable warnings about the placement, e.g. TP groups that cross node boundaries.
std::vector<std::string> placementWarnings(const Mesh& mesh, const ClusterSpec& cluster);

}  // namespace meshbench::plan
