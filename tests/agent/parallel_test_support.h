#pragma once
// What the unit tests of agent/parallel and agent/distributed share: ranks as threads over
// in-process groups, a tiny MoE model, and reproducible random values (tests/common).

#include "agent/layout/parameters.h"
#include "agent/runtime/in_process_communicator.h"

#include "plan/job_spec.h"

#include "common/random_values.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace meshbench::agent::testing {

using meshbench::testing::randomValues;

// Runs body(r) on `count` threads at once.
inline void onThreads(int count, const std::function<void(int)>& body)
{
    std::vector<std::thread> threads;
    threads.reserve(std::size_t(count));
    for (int r = 0; r < count; ++r)
        threads.emplace_back([&, r] { body(r); });
    for (std::thread& t : threads)
        t.join();
}

// Runs body(r) for every rank of the mesh, each on a thread of its own; what each returned, or the
// error it threw ("threw: ...").
inline std::vector<std::string> onEveryRank(InProcessMesh& mesh, const std::function<std::string(int)>& body)
{
    std::vector<std::string> said(std::size_t(mesh.worldSize()));
    onThreads(mesh.worldSize(), [&](int r) {
        try {
            said[std::size_t(r)] = body(r);
        } catch (const std::exception& e) {
            said[std::size_t(r)] = std::string("threw: ") + e.what();
        }
    });
    return said;
}

// Two layers, the first MoE (4 experts, top 2), the second dense: both ranges of the flat buffer.
inline plan::ModelSpec tinyMoeModel()
{
    plan::ModelSpec m;
    m.layers = 2;
    m.hidden = 8;
    m.heads = 2;
    m.kvHeads = 2;
    m.ffnHidden = 24;
    m.vocab = 20;
    m.seqLen = 4;
    m.moe.experts = 4;
    m.moe.topK = 2;
    m.moe.ffnHidden = 12;
    m.moe.everyNLayers = 2;  // layer 0 MoE, layer 1 dense
    return m;
}

// A data group of dp threads with EP carved out of it: rank r is EP rank r % ep, and the ranks with
// the same EP rank form an expert-data group (of dp / ep members; none when that is 1).
struct DataMesh {
    int dp, ep;
};

inline ModelSlice expertSlice(const plan::ModelSpec& model, const DataMesh& mesh, int rank)
{
    ModelSlice slice = ModelSlice::whole(model);
    slice.expertShards = mesh.ep;
    slice.expertShard = rank % mesh.ep;
    return slice;
}

// The world ranks of rank r's group for the dense range (every rank) or the experts' (same EP rank).
inline std::vector<int> groupRanks(const DataMesh& mesh, bool experts, int r)
{
    std::vector<int> ranks;
    for (int q = experts ? r % mesh.ep : 0; q < mesh.dp; q += experts ? mesh.ep : 1)
        ranks.push_back(q);
    return ranks;
}

struct DataRank {
    int rank;
    Communicator* data;
    Communicator* expertData;  // null when the experts' range is held by one member
    int expertDataMember;      // this rank's index in its expert-data group
};

// Runs body on every rank of the mesh at once, each with its groups.
inline void onDataMesh(const DataMesh& mesh, const std::function<void(const DataRank&)>& body)
{
    InProcessGroup data(mesh.dp);
    const int expertGroupSize = mesh.dp / mesh.ep;
    std::vector<std::unique_ptr<InProcessGroup>> expertGroups;
    if (expertGroupSize > 1)
        for (int e = 0; e < mesh.ep; ++e)
            expertGroups.push_back(std::make_unique<InProcessGroup>(expertGroupSize));
    std::vector<std::unique_ptr<Communicator>> dataMembers, expertMembers;
    for (int r = 0; r < mesh.dp; ++r) {
        dataMembers.push_back(data.member(r));
        expertMembers.push_back(expertGroupSize > 1 ? expertGroups[std::size_t(r % mesh.ep)]->member(r / mesh.ep)
                                                    : nullptr);
    }
    onThreads(mesh.dp, [&](int r) {
        body({r, dataMembers[std::size_t(r)].get(), expertMembers[std::size_t(r)].get(), r / mesh.ep});
    });
}

}  // namespace meshbench::agent::testing
