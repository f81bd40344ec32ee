// agent/distributed/gradient_norm: the global norm from ranks' sums of squares, on in-process groups of
// threads, against the whole model's sum worked by hand: tensors held whole count once, tensor-
// parallel parts and expert blocks are summed over their groups, ZeRO shards over the data group and
// stages over the pipeline group.

#include "agent/distributed/gradient_norm.h"
#include "agent/runtime/in_process_communicator.h"

#include <QtTest>

#include <cmath>
#include <functional>
#include <thread>

using namespace meshbench::agent;

namespace {

// Four ranks as threads, each given its squares and its groups; returns each rank's norm.
std::vector<double>
normsOf(const std::function<GradientSquares(int)>& squaresOf,
        const std::function<GradientNormGroups(int, std::vector<std::unique_ptr<Communicator>>&)>& groupsOf)
{
    std::vector<double> norms(4);
    std::vector<std::thread> ranks;
    ranks.reserve(4);
    for (int r = 0; r < 4; ++r)
        ranks.emplace_back([&, r] {
            std::vector<std::unique_ptr<Communicator>> owned;
            const GradientNormGroups groups = groupsOf(r, owned);
            norms[std::size_t(r)] = globalGradientNorm(squaresOf(r), groups);
        });
    for (std::thread& t : ranks)
        t.join();
    return norms;
}

}  // namespace

class TestGradientNorm : public QObject {
    Q_OBJECT

private slots:
    void tensorAndExpertSplitsCountEachPartOnce()
    {
        // tp2 x ep2: rank r = (tp r % 2, ep r / 2). Tensor groups {0, 1} {2, 3}; expert groups {0, 2} {1, 3}.
        // Whole tensors: 1 on every rank (once). TP parts: 2 and 3 (the same on both ep ranks). Expert
        // blocks: 5 and 7 (the same on both tp ranks). TP parts of expert blocks: 11, 13, 17, 19.
        // The model: 1 + (2 + 3) + (5 + 7) + (11 + 13 + 17 + 19) = 78.
        InProcessGroup tensor0(2), tensor1(2), expert0(2), expert1(2);
        const auto norms = normsOf(
            [](int r) {
                const double tp[2] = {2, 3}, ep[2] = {5, 7}, both[4] = {11, 13, 17, 19};
                return GradientSquares{1, tp[r % 2], ep[r / 2], both[r]};
            },
            [&](int r, std::vector<std::unique_ptr<Communicator>>& owned) {
                owned.push_back((r / 2 == 0 ? tensor0 : tensor1).member(r % 2));
                owned.push_back((r % 2 == 0 ? expert0 : expert1).member(r / 2));
                return GradientNormGroups{nullptr, owned[0].get(), owned[1].get(), nullptr};
            });
        for (double norm : norms)
            QCOMPARE(norm, std::sqrt(78.0));
    }

    void zeroShardsAndStagesAddUp()
    {
        // dp2 (ZeRO) x pp2: rank r = (dp r % 2, stage r / 2). Each rank's shard of a whole tensor:
        // 1, 2 (stage 0) and 4, 8 (stage 1), so the model is 1 + 2 + 4 + 8 = 15.
        InProcessGroup data0(2), data1(2), pipe0(2), pipe1(2);
        const auto norms = normsOf(
            [](int r) {
                return GradientSquares{double(1 << r), 0, 0, 0};
            },
            [&](int r, std::vector<std::unique_ptr<Communicator>>& owned) {
                owned.push_back((r / 2 == 0 ? data0 : data1).member(r % 2));
                owned.push_back((r % 2 == 0 ? pipe0 : pipe1).member(r / 2));
                return GradientNormGroups{owned[0].get(), nullptr, nullptr, owned[1].get()};
            });
        for (double norm : norms)
            QCOMPARE(norm, std::sqrt(15.0));
    }

    void expertShardsAddUpOverTheExpertDataGroup()
    {
        // dp4 x ep2 with ZeRO: rank r = (ep r % 2, expert-data index r / 2). Dense shards 1, 2, 4, 8
        // over the data group {0, 1, 2, 3}; expert blocks sharded over the expert-data groups {0, 2}
        // and {1, 3}: rank r holds 16 << r of its block. Blocks are summed over the EP groups
        // {0, 1} and {2, 3} too, so each expert element counts once: 15 + (16 + 32 + 64 + 128) = 255.
        InProcessGroup data(4), expertData0(2), expertData1(2), expert0(2), expert1(2);
        const auto norms = normsOf(
            [](int r) {
                return GradientSquares{double(1 << r), 0, double(16 << r), 0};
            },
            [&](int r, std::vector<std::unique_ptr<Communicator>>& owned) {
                owned.push_back(data.member(r));
                owned.push_back((r % 2 == 0 ? expertData0 : expertData1).member(r / 2));
                owned.push_back((r / 2 == 0 ? expert0 : expert1).member(r % 2));
                GradientNormGroups groups;
                groups.zeroShards = owned[0].get();
                groups.expertZeroShards = owned[1].get();
                groups.expert = owned[2].get();
                return groups;
            });
        for (double norm : norms)
            QCOMPARE(norm, std::sqrt(255.0));
    }
};

QTEST_APPLESS_MAIN(TestGradientNorm)
#include "tst_gradient_norm.moc"
