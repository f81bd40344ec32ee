// agent/parallel/expert_dispatcher: the MoE all-to-all dispatcher on in-process expert groups of
// 2 and 4 threads, 4 and 8 experts, top-2 routing with capacity dropping. Each rank routes its own
// tokens with the CPU backend's router; the "experts" on the owners' side multiply their rows by
// (global expert id + 1), so the dense result is written here from the Routing arrays alone:
//   y_t      = sum over kept slots j of w_tj (e_tj + 1) x_t
//   dx_t     = sum over kept slots j of w_tj (e_tj + 1) dy_t
//   dW_tj    = dy_t . (e_tj + 1) x_t on kept slots, 0 on dropped ones.
// The owner-side blocks are checked against what each source routed (counts and rows), and the
// group's results against the same tokens with no group (ep = 1), bit for bit.
//
// Tolerance: the module's sums are fp32 over at most k = 2 terms (y, dx) or double dots of fp32
// products (dW); the references are double. 1e-5 x sum |terms| bounds the float rounding of those
// short sums (a few 2^-24 relative) with a wide margin. Moved rows are compared exactly.

#include "agent/parallel/expert_dispatcher.h"
#include "agent/runtime/in_process_communicator.h"

#include "kernels/cpu/cpu_backend.h"

#include "parallel_test_support.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <random>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using meshbench::agent::testing::randomValues;

namespace {

constexpr int kTokens = 16;  // per rank
constexpr int kWidth = 5;
constexpr int kTopK = 2;
constexpr double kCapacityFactor = 1.0;

// The host arrays of kernels::Routing, sized as backend.h documents.
struct RoutingArrays {
    RoutingArrays(const kernels::RouterShape& s)
        : probs(std::size_t(s.tokens) * std::size_t(s.experts)), expertOf(std::size_t(s.tokens) * std::size_t(s.topK)),
          weightOf(expertOf.size()), rowOf(expertOf.size()),
          tokenOfRow(std::size_t(s.experts) * std::size_t(s.capacity)), countOf(std::size_t(s.experts)),
          routedOf(std::size_t(s.experts))
    {
    }
    kernels::Routing view()
    {
        return {probs.data(),      expertOf.data(), weightOf.data(), rowOf.data(),
                tokenOfRow.data(), countOf.data(),  routedOf.data()};
    }
    std::vector<float> probs;
    std::vector<int> expertOf;
    std::vector<float> weightOf;
    std::vector<int> rowOf;
    std::vector<int> tokenOfRow;
    std::vector<int> countOf;
    std::vector<int> routedOf;
};

// One rank's tokens and what the dispatcher gave back.
struct RankRun {
    RankRun(const kernels::RouterShape& s) : routing(s) {}
    std::vector<float> x, dy;
    RoutingArrays routing;
    ExpertRoute route;
    std::vector<float> expertIn;  // owner side, after dispatch
    std::vector<float> y, dx, dWeight;
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The experts of this rank (owner side): rows of block b = source x local + l, below its count,
// times (global expert id + 1); the rows past a block's count are NaN, which the dispatcher must
// never read.
std::vector<float> applyExperts(const std::vector<float>& in, const ExpertRoute& route, int rank, int localExperts)
{
    std::vector<float> out(in.size(), kNaN);
    for (std::size_t b = 0; b < route.received.size(); ++b) {
        const float factor = float(rank * localExperts + int(b) % localExperts + 1);
        for (int i = 0; i < route.received[b]; ++i)
            for (int c = 0; c < kWidth; ++c) {
                const std::size_t at = (b * std::size_t(route.capacity) + std::size_t(i)) * kWidth + std::size_t(c);
                out[at] = factor * in[at];
            }
    }
    return out;
}

// Routes, dispatches, runs the experts, combines, and back again, for one rank of the group.
void runRank(kernels::Backend& backend, ExpertDispatcher& dispatcher, int rank, const kernels::RouterShape& shape,
             const std::vector<float>& logits, RankRun& run)
{
    const kernels::Routing routing = run.routing.view();
    backend.route(shape, logits.data(), routing);
    const std::size_t blockRows = std::size_t(shape.experts) * std::size_t(shape.capacity) * kWidth;
    const int local = dispatcher.localExperts(shape.experts);

    DeviceBuffer x(backend, run.x.size()), expertIn(backend, blockRows), expertOut(backend, blockRows),
        rows(backend, blockRows), y(backend, run.x.size());
    backend.upload(x.ptr(), run.x.data(), run.x.size());
    run.route = dispatcher.dispatch(shape, routing, x.ptr(), kWidth, expertIn.ptr());
    run.expertIn.resize(blockRows);
    backend.download(run.expertIn.data(), expertIn.ptr(), blockRows);
    const std::vector<float> outHost = applyExperts(run.expertIn, run.route, rank, local);
    backend.upload(expertOut.ptr(), outHost.data(), blockRows);
    dispatcher.combine(shape, routing, run.route, expertOut.ptr(), kWidth, rows.ptr(), y.ptr());
    run.y.resize(run.x.size());
    backend.download(run.y.data(), y.ptr(), run.y.size());

    // Backward: the experts' Jacobian is the same scaling.
    DeviceBuffer dy(backend, run.dy.size()), dExpertOut(backend, blockRows), dExpertIn(backend, blockRows),
        dx(backend, run.x.size());
    backend.upload(dy.ptr(), run.dy.data(), run.dy.size());
    run.dWeight.assign(std::size_t(shape.tokens) * std::size_t(shape.topK), kNaN);
    dispatcher.combineBackward(shape, routing, run.route, dy.ptr(), rows.ptr(), kWidth, dExpertOut.ptr(),
                               run.dWeight.data());
    std::vector<float> gradHost(blockRows);
    backend.download(gradHost.data(), dExpertOut.ptr(), blockRows);
    gradHost = applyExperts(gradHost, run.route, rank, local);
    backend.upload(dExpertIn.ptr(), gradHost.data(), blockRows);
    backend.fill(dx.ptr(), 9.0f, dx.size());  // overwritten
    dispatcher.dispatchBackward(shape, routing, run.route, dExpertIn.ptr(), kWidth, dx.ptr());
    run.dx.resize(run.x.size());
    backend.download(run.dx.data(), dx.ptr(), run.dx.size());
}

// Empty when got is within 1e-5 x magnitude of want, else the numbers.
QString notClose(const char* what, int rank, std::size_t i, float got, double want, double magnitude)
{
    if (std::abs(double(got) - want) <= 1e-5 * magnitude)
        return {};
    return QStringLiteral("rank %1 %2[%3] = %4, dense %5 (+- %6)")
        .arg(rank)
        .arg(what)
        .arg(i)
        .arg(double(got), 0, 'g', 9)
        .arg(want, 0, 'g', 9)
        .arg(1e-5 * magnitude, 0, 'g', 3);
}

}  // namespace

class TestExpertDispatcher : public QObject {
    Q_OBJECT

private slots:
    void dispatchAndCombineEqualTheDenseMixture_data()
    {
        QTest::addColumn<int>("ep");
        QTest::addColumn<int>("experts");
        QTest::newRow("ep2 E4") << 2 << 4;
        QTest::newRow("ep2 E8") << 2 << 8;
        QTest::newRow("ep4 E4") << 4 << 4;
        QTest::newRow("ep4 E8") << 4 << 8;
    }
    void dispatchAndCombineEqualTheDenseMixture()
    {
        QFETCH(int, ep);
        QFETCH(int, experts);
        kernels::RouterShape shape;
        shape.tokens = kTokens;
        shape.experts = experts;
        shape.topK = kTopK;
        shape.capacity = kernels::routerCapacity(kTokens, experts, kTopK, kCapacityFactor);
        const int local = experts / ep;
        const int C = shape.capacity;

        std::vector<std::vector<float>> logits;
        std::vector<RankRun> runs;
        for (int r = 0; r < ep; ++r) {
            // Skewed per rank (expert e gets a bias growing with (e + r) mod E), so experts overflow
            // and drop on some ranks while others stay under capacity, and the sources' counts differ.
            logits.push_back(randomValues(std::size_t(kTokens) * std::size_t(experts), 100 + std::uint32_t(r), 1.5f));
            for (int t = 0; t < kTokens; ++t)
                for (int e = 0; e < experts; ++e)
                    logits.back()[std::size_t(t) * std::size_t(experts) + std::size_t(e)] +=
                        0.5f * float((e + r) % experts);
            runs.emplace_back(shape);
            runs.back().x = randomValues(std::size_t(kTokens) * kWidth, 200 + std::uint32_t(r));
            runs.back().dy = randomValues(std::size_t(kTokens) * kWidth, 300 + std::uint32_t(r));
        }

        // The group: ranks as threads, each with its backend, its tokens and its routing.
        {
            InProcessGroup group(ep);
            std::vector<std::unique_ptr<Communicator>> members;
            members.reserve(std::size_t(ep));
            for (int r = 0; r < ep; ++r)
                members.push_back(group.member(r));
            std::vector<std::thread> threads;
            threads.reserve(std::size_t(ep));
            for (int r = 0; r < ep; ++r)
                threads.emplace_back([&, r] {
                    kernels::CpuBackend backend;
                    ExpertDispatcher dispatcher(backend, members[std::size_t(r)].get());
                    runRank(backend, dispatcher, r, shape, logits[std::size_t(r)], runs[std::size_t(r)]);
                });
            for (std::thread& t : threads)
                t.join();
        }

        // The cases this needs: dropped and kept assignments, blocks under capacity, and sources
        // whose counts for the same expert differ (so a wrong split-size exchange shows).
        int dropped = 0, kept = 0, underCapacity = 0, countsDiffer = 0;
        QString counts;
        for (const RankRun& run : runs) {
            for (int row : run.routing.rowOf)
                (row < 0 ? dropped : kept) += 1;
            for (int e = 0; e < experts; ++e) {
                underCapacity += run.routing.countOf[std::size_t(e)] < C;
                countsDiffer += run.routing.countOf[std::size_t(e)] != runs[0].routing.countOf[std::size_t(e)];
                counts += QString::number(run.routing.countOf[std::size_t(e)]) + (e + 1 < experts ? "," : "; ");
            }
        }
        QVERIFY2(dropped > 0 && kept > 0 && underCapacity > 0 && countsDiffer > 0,
                 qPrintable(QStringLiteral("capacity %1, kept %2, dropped %3, counts per rank %4")
                                .arg(C)
                                .arg(kept)
                                .arg(dropped)
                                .arg(counts)));

        for (int o = 0; o < ep; ++o) {
            const RankRun& owner = runs[std::size_t(o)];
            QCOMPARE(owner.route.capacity, C);
            QCOMPARE(owner.route.sent, owner.routing.countOf);
            QCOMPARE(int(owner.route.received.size()), experts);
            // Block (source s, local expert l) holds what s kept for expert o x local + l, in its
            // permuted order: the tokens tokenOfRow names.
            for (int s = 0; s < ep; ++s)
                for (int l = 0; l < local; ++l) {
                    const RankRun& source = runs[std::size_t(s)];
                    const int e = o * local + l, b = s * local + l;
                    QCOMPARE(owner.route.received[std::size_t(b)], source.routing.countOf[std::size_t(e)]);
                    for (int i = 0; i < source.routing.countOf[std::size_t(e)]; ++i) {
                        const int t = source.routing.tokenOfRow[std::size_t(e) * std::size_t(C) + std::size_t(i)];
                        QVERIFY(t >= 0 && t < kTokens);
                        for (int c = 0; c < kWidth; ++c)
                            QCOMPARE(owner.expertIn[(std::size_t(b) * std::size_t(C) + std::size_t(i)) * kWidth +
                                                    std::size_t(c)],
                                     source.x[std::size_t(t) * kWidth + std::size_t(c)]);
                    }
                }
        }

        // The tokens' side: the dense mixture and its gradients, from each rank's Routing arrays.
        for (int r = 0; r < ep; ++r) {
            const RankRun& run = runs[std::size_t(r)];
            for (int t = 0; t < kTokens; ++t) {
                for (int c = 0; c < kWidth; ++c) {
                    const std::size_t i = std::size_t(t) * kWidth + std::size_t(c);
                    double y = 0, yMagnitude = 0, dx = 0, dxMagnitude = 0;
                    for (int j = 0; j < kTopK; ++j) {
                        const std::size_t slot = std::size_t(t) * kTopK + std::size_t(j);
                        if (run.routing.rowOf[slot] < 0)
                            continue;
                        const double scale =
                            double(run.routing.weightOf[slot]) * double(run.routing.expertOf[slot] + 1);
                        y += scale * double(run.x[i]);
                        yMagnitude += std::abs(scale * double(run.x[i]));
                        dx += scale * double(run.dy[i]);
                        dxMagnitude += std::abs(scale * double(run.dy[i]));
                    }
                    QString failure = notClose("y", r, i, run.y[i], y, yMagnitude);
                    QVERIFY2(failure.isEmpty(), qPrintable(failure));
                    failure = notClose("dx", r, i, run.dx[i], dx, dxMagnitude);
                    QVERIFY2(failure.isEmpty(), qPrintable(failure));
                }
                for (int j = 0; j < kTopK; ++j) {
                    const std::size_t slot = std::size_t(t) * kTopK + std::size_t(j);
                    double dot = 0, magnitude = 0;
                    if (run.routing.rowOf[slot] >= 0)
                        for (int c = 0; c < kWidth; ++c) {
                            const std::size_t i = std::size_t(t) * kWidth + std::size_t(c);
                            const double term =
                                double(run.dy[i]) * double(run.routing.expertOf[slot] + 1) * double(run.x[i]);
                            dot += term;
                            magnitude += std::abs(term);
                        }
                    const QString failure = notClose("dWeight", r, slot, run.dWeight[slot], dot, magnitude);
                    QVERIFY2(failure.isEmpty(), qPrintable(failure));
                }
            }
        }

        // No group (ep = 1) on the same tokens: one rank owns every expert, the same results.
        for (int r = 0; r < ep; ++r) {
            const RankRun& grouped = runs[std::size_t(r)];
            RankRun alone(shape);
            alone.x = grouped.x;
            alone.dy = grouped.dy;
            kernels::CpuBackend backend;
            ExpertDispatcher dispatcher(backend, nullptr);
            QCOMPARE(dispatcher.size(), 1);
            runRank(backend, dispatcher, 0, shape, logits[std::size_t(r)], alone);
            QCOMPARE(alone.route.sent, grouped.route.sent);
            QCOMPARE(alone.route.received, alone.routing.countOf);
            QCOMPARE(alone.y, grouped.y);
            QCOMPARE(alone.dx, grouped.dx);
            QCOMPARE(alone.dWeight, grouped.dWeight);
        }
    }
};

QTEST_APPLESS_MAIN(TestExpertDispatcher)
#include "tst_expert_dispatcher.moc"
