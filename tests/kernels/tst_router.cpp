// CpuBackend MoE routing: hand-worked cases for top-k, capacity dropping (lowest probability first,
// ties drop the later token) and row layout; the Switch/GShard auxiliary loss worked by hand (Fedus et
// al. 2021, eq. 4) and its gradient against finite differences; permute / combine round trips; and
// combineBackward + routerBackward against finite differences of L = sum(out o R) in double.

#include "kernels/cpu/cpu_backend.h"

#include <QtTest>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

using namespace meshbench::kernels;

namespace {

// Caller-side storage for one Routing, poisoned so that every field must be written by route().
struct RoutingBuffers {
    RouterShape shape;
    std::vector<float> probs, weightOf;
    std::vector<int> expertOf, rowOf, tokenOfRow, countOf, routedOf;

    explicit RoutingBuffers(const RouterShape& s)
        : shape(s), probs(static_cast<std::size_t>(s.tokens) * s.experts, NAN),
          weightOf(static_cast<std::size_t>(s.tokens) * s.topK, NAN),
          expertOf(static_cast<std::size_t>(s.tokens) * s.topK, -7),
          rowOf(static_cast<std::size_t>(s.tokens) * s.topK, -7),
          tokenOfRow(static_cast<std::size_t>(s.experts) * s.capacity, -7),
          countOf(static_cast<std::size_t>(s.experts), -7), routedOf(static_cast<std::size_t>(s.experts), -7)
    {
    }
    Routing view()
    {
        return {probs.data(),      expertOf.data(), weightOf.data(), rowOf.data(),
                tokenOfRow.data(), countOf.data(),  routedOf.data()};
    }
};

std::vector<float> randomVector(std::size_t n, double lo, double hi, std::uint32_t seed)
{
    std::mt19937 gen(seed);
    std::vector<float> x(n);
    for (float& e : x)
        e = static_cast<float>(lo + (hi - lo) * (static_cast<double>(gen()) / 4294967296.0));
    return x;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Softmax of one row in double (the reference for the router's probabilities).
std::vector<double> softmax(const double* x, int n)
{
    double m = x[0];
    for (int i = 1; i < n; ++i)
        m = std::max(m, x[i]);
    std::vector<double> p(n);
    double sum = 0.0;
    for (int i = 0; i < n; ++i)
        sum += p[i] = std::exp(x[i] - m);
    for (double& e : p)
        e /= sum;
    return p;
}

bool close(double got, double want, double atol, double rtol)
{
    return std::abs(got - want) <= atol + rtol * std::abs(want);
}

// The invariants every routing satisfies, independently of how it was computed.
QString checkInvariants(const RoutingBuffers& r)
{
    const RouterShape& s = r.shape;
    std::vector<int> kept(s.experts, 0), routed(s.experts, 0);
    for (int t = 0; t < s.tokens; ++t)
        for (int j = 0; j < s.topK; ++j) {
            const int slot = t * s.topK + j;
            const int e = r.expertOf[slot];
            if (e < 0 || e >= s.experts)
                return QStringLiteral("expertOf[%1] = %2").arg(slot).arg(e);
            if (r.weightOf[slot] != r.probs[t * s.experts + e])
                return QStringLiteral("weightOf[%1] is not probs of its expert").arg(slot);
            ++routed[e];
            const int row = r.rowOf[slot];
            if (row == -1)
                continue;
            ++kept[e];
            if (row < e * s.capacity || row >= (e + 1) * s.capacity)
                return QStringLiteral("rowOf[%1] = %2 outside expert %3's block").arg(slot).arg(row).arg(e);
            if (r.tokenOfRow[row] != t)
                return QStringLiteral("tokenOfRow[%1] = %2, expected %3").arg(row).arg(r.tokenOfRow[row]).arg(t);
        }
    for (int e = 0; e < s.experts; ++e) {
        if (routed[e] != r.routedOf[e] || kept[e] != r.countOf[e] || kept[e] > s.capacity)
            return QStringLiteral("expert %1: routed %2/%3, kept %4/%5")
                .arg(e)
                .arg(r.routedOf[e])
                .arg(routed[e])
                .arg(r.countOf[e])
                .arg(kept[e]);
        int previous = -1;
        for (int row = e * s.capacity; row < (e + 1) * s.capacity; ++row) {
            const int t = r.tokenOfRow[row];
            const bool used = row < e * s.capacity + kept[e];
            if (used != (t >= 0) || (used && t <= previous))
                return QStringLiteral("expert %1's block is not its kept tokens in token order").arg(e);
            previous = t;
        }
    }
    return {};
}

}  // namespace

class TestRouter : public QObject {
    Q_OBJECT

private slots:
    void capacityFormula_data();
    void capacityFormula();
    void dropsLowestProbabilityThenLaterToken();
    void topTwoOrderAndTiesToLowerExpert();
    void keptRowsFollowTokenOrder();
    void softmaxIsStableForLargeLogits();
    void auxLossWorkedByHand();
    void auxLossGradientMatchesFiniteDifferences();
    void permuteCombineRoundTrip();
    void permuteBackwardIsTheAdjointAndAccumulates();
    void combineAndRouterBackwardMatchFiniteDifferences();
    void routerBackwardSumsRepeatedExperts();
    void rejectsBadShapes();
};

void TestRouter::capacityFormula_data()
{
    QTest::addColumn<int>("tokens");
    QTest::addColumn<int>("experts");
    QTest::addColumn<int>("topK");
    QTest::addColumn<double>("factor");
    QTest::addColumn<int>("capacity");
    QTest::newRow("10 x 2 / 4 x 1.25 = 6.25 -> 7") << 10 << 4 << 2 << 1.25 << 7;
    QTest::newRow("4 x 1 / 2 x 1.0 = 2") << 4 << 2 << 1 << 1.0 << 2;
    QTest::newRow("16 x 2 / 8 x 1.5 = 6") << 16 << 8 << 2 << 1.5 << 6;
    QTest::newRow("10 x 1 / 5 x 1.1 = 2.2 -> 3") << 10 << 5 << 1 << 1.1 << 3;
    QTest::newRow("1 x 1 / 8 x 1.0 = 0.125 -> 1") << 1 << 8 << 1 << 1.0 << 1;
    QTest::newRow("tiny factor, at least 1") << 3 << 4 << 1 << 0.01 << 1;
    QTest::newRow("4096 x 2 / 64 x 1.0 = 128") << 4096 << 64 << 2 << 1.0 << 128;
}

void TestRouter::capacityFormula()
{
    QFETCH(int, tokens);
    QFETCH(int, experts);
    QFETCH(int, topK);
    QFETCH(double, factor);
    QFETCH(int, capacity);
    QCOMPARE(routerCapacity(tokens, experts, topK, factor), capacity);
}

void TestRouter::dropsLowestProbabilityThenLaterToken()
{
    // T = 4, E = 2, k = 1, capacity 1.
    //   t0 [2, 0] -> e0, p = sigmoid(2) = 0.881     t1 [0, 1] -> e1, p = sigmoid(1) = 0.731
    //   t2 [3, 0] -> e0, p = sigmoid(3) = 0.953     t3 [0, 1] -> e1, p = 0.731 (tie with t1)
    // e0 keeps t2 (higher probability) and drops t0; e1 keeps t1 and drops t3 (tie: later token goes).
    CpuBackend backend;
    const RouterShape s{4, 2, 1, 1};
    const std::vector<float> logits{2, 0, 0, 1, 3, 0, 0, 1};
    RoutingBuffers r(s);
    backend.route(s, logits.data(), r.view());

    const double p0 = sigmoid(2.0), p1 = sigmoid(1.0), p2 = sigmoid(3.0);
    const std::vector<double> probs{p0, 1 - p0, 1 - p1, p1, p2, 1 - p2, 1 - p1, p1};
    for (std::size_t i = 0; i < probs.size(); ++i)
        QVERIFY2(close(r.probs[i], probs[i], 1e-7, 1e-6), qPrintable(QString::number(i)));
    QCOMPARE(r.expertOf, (std::vector<int>{0, 1, 0, 1}));
    QCOMPARE(r.weightOf, (std::vector<float>{r.probs[0], r.probs[3], r.probs[4], r.probs[7]}));
    QCOMPARE(r.rowOf, (std::vector<int>{-1, 1, 0, -1}));
    QCOMPARE(r.tokenOfRow, (std::vector<int>{2, 1}));
    QCOMPARE(r.countOf, (std::vector<int>{1, 1}));
    QCOMPARE(r.routedOf, (std::vector<int>{2, 2}));
    const QString err = checkInvariants(r);
    QVERIFY2(err.isEmpty(), qPrintable(err));
}

void TestRouter::topTwoOrderAndTiesToLowerExpert()
{
    // T = 2, E = 4, k = 2, capacity 2 (nothing dropped).
    //   t0 [0.1, 2.0, -1.0, 1.5]: experts 1 then 3.   t1 [1, 1, 1, 0]: three-way tie, experts 0 then 1.
    // Blocks of 2 rows: e0 [0, 2) holds t1; e1 [2, 4) holds t0, t1 in token order; e3 [6, 8) holds t0.
    CpuBackend backend;
    const RouterShape s{2, 4, 2, 2};
    const std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.5f, 1, 1, 1, 0};
    RoutingBuffers r(s);
    backend.route(s, logits.data(), r.view());

    const double z0 = std::exp(0.1) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.5);
    const double z1 = 3 * std::exp(1.0) + 1.0;
    QCOMPARE(r.expertOf, (std::vector<int>{1, 3, 0, 1}));
    QVERIFY(close(r.weightOf[0], std::exp(2.0) / z0, 1e-7, 1e-6));
    QVERIFY(close(r.weightOf[1], std::exp(1.5) / z0, 1e-7, 1e-6));
    QVERIFY(close(r.weightOf[2], std::exp(1.0) / z1, 1e-7, 1e-6));
    QCOMPARE(r.weightOf[3], r.weightOf[2]);
    QCOMPARE(r.rowOf, (std::vector<int>{2, 6, 0, 3}));
    QCOMPARE(r.tokenOfRow, (std::vector<int>{1, -1, 0, 1, -1, -1, 0, -1}));
    QCOMPARE(r.countOf, (std::vector<int>{1, 2, 0, 1}));
    QCOMPARE(r.routedOf, (std::vector<int>{1, 2, 0, 1}));
    const QString err = checkInvariants(r);
    QVERIFY2(err.isEmpty(), qPrintable(err));
}

void TestRouter::keptRowsFollowTokenOrder()
{
    CpuBackend backend;
    {
        // Five tokens all to e0 with p = 0.6, 0.9, 0.7, 0.95, 0.8 (logit ln(p / (1 - p)) against 0),
        // capacity 2: e0 keeps t3 and t1, laid out by token: t1 -> row 0, t3 -> row 1.
        const RouterShape s{5, 2, 1, 2};
        std::vector<float> logits;
        for (double p : {0.6, 0.9, 0.7, 0.95, 0.8})
            logits.insert(logits.end(), {static_cast<float>(std::log(p / (1 - p))), 0.0f});
        RoutingBuffers r(s);
        backend.route(s, logits.data(), r.view());
        QCOMPARE(r.rowOf, (std::vector<int>{-1, 0, -1, 1, -1}));
        QCOMPARE(r.tokenOfRow, (std::vector<int>{1, 3, -1, -1}));
        QCOMPARE(r.countOf, (std::vector<int>{2, 0}));
        QCOMPARE(r.routedOf, (std::vector<int>{5, 0}));
    }
    {
        // One expert: every probability is exactly 1, so ties alone decide: the first 3 tokens stay.
        const RouterShape s{5, 1, 1, 3};
        const std::vector<float> logits{0.3f, -2.0f, 5.0f, 0.0f, 1.0f};
        RoutingBuffers r(s);
        backend.route(s, logits.data(), r.view());
        QCOMPARE(r.probs, (std::vector<float>(5, 1.0f)));
        QCOMPARE(r.rowOf, (std::vector<int>{0, 1, 2, -1, -1}));
        QCOMPARE(r.tokenOfRow, (std::vector<int>{0, 1, 2}));
        QCOMPARE(r.countOf, (std::vector<int>{3}));
        QCOMPARE(r.routedOf, (std::vector<int>{5}));
    }
}

void TestRouter::softmaxIsStableForLargeLogits()
{
    // exp(1000) overflows even double; the row maximum must be subtracted first.
    // [1000, 999, -1000] -> [1 / (1 + e^-1), e^-1 / (1 + e^-1), ~0].
    CpuBackend backend;
    const RouterShape s{1, 3, 2, 1};
    const std::vector<float> logits{1000.0f, 999.0f, -1000.0f};
    RoutingBuffers r(s);
    backend.route(s, logits.data(), r.view());
    QVERIFY(close(r.probs[0], sigmoid(1.0), 1e-7, 1e-6));
    QVERIFY(close(r.probs[1], 1.0 - sigmoid(1.0), 1e-7, 1e-6));
    QCOMPARE(r.probs[2], 0.0f);
    QCOMPARE(r.expertOf, (std::vector<int>{0, 1}));
}

void TestRouter::auxLossWorkedByHand()
{
    // T = 2, E = 2, k = 1, coef = 0.01.
    //   t0 logits [ln 3, 0]   -> p = [0.75, 0.25] -> e0
    //   t1 logits [ln 1.5, 0] -> p = [0.6, 0.4]   -> e0
    // f = routed / (T k) = [2/2, 0/2] = [1, 0];  P = mean p = [0.675, 0.325]
    // loss = coef E sum f_i P_i = 0.01 * 2 * (1 * 0.675 + 0 * 0.325) = 0.0135.
    // Gradient: dP = coef E f = [0.02, 0], dprobs[t] = dP / T = [0.01, 0];
    //   t0: s = 0.75 * 0.01 = 0.0075, dLogits = [0.75 (0.01 - 0.0075), 0.25 (0 - 0.0075)] = [0.001875, -0.001875]
    //   t1: s = 0.6 * 0.01 = 0.006,   dLogits = [0.6 (0.01 - 0.006), 0.4 (0 - 0.006)]    = [0.0024, -0.0024]
    CpuBackend backend;
    const RouterShape s{2, 2, 1, 2};
    const std::vector<float> logits{static_cast<float>(std::log(3.0)), 0.0f, static_cast<float>(std::log(1.5)), 0.0f};
    RoutingBuffers r(s);
    backend.route(s, logits.data(), r.view());
    QCOMPARE(r.routedOf, (std::vector<int>{2, 0}));

    std::vector<float> dLogits{1.0f, 2.0f, 3.0f, 4.0f};  // the gradient is added to what is there
    const double loss = backend.auxLoss(s, r.view(), 0.01f, dLogits.data());
    QVERIFY2(close(loss, 0.0135, 0.0, 1e-6), qPrintable(QString::number(loss, 'g', 10)));
    const std::vector<double> want{1.001875, 1.998125, 3.0024, 3.9976};
    for (std::size_t i = 0; i < want.size(); ++i)
        QVERIFY2(close(dLogits[i], want[i], 1e-6, 0.0), qPrintable(QString::number(i)));

    // No gradient wanted: the loss alone.
    QVERIFY(close(backend.auxLoss(s, r.view(), 0.01f, nullptr), 0.0135, 0.0, 1e-6));
    // Uniform probabilities: P = [0.5, 0.5]; the ties send both tokens to e0, f = [1, 0];
    // loss = 0.01 * 2 * (1 * 0.5) = 0.01.
    const std::vector<float> uniform{0, 0, 0, 0};
    backend.route(s, uniform.data(), r.view());
    QCOMPARE(r.routedOf, (std::vector<int>{2, 0}));
    QVERIFY(close(backend.auxLoss(s, r.view(), 0.01f, nullptr), 0.01, 0.0, 1e-6));
}

void TestRouter::auxLossGradientMatchesFiniteDifferences()
{
    // With f held at the routed counts, L(logits) = coef E sum_i f_i mean_t softmax(logits_t)_i; central
    // differences in double (step 1e-4: truncation ~ 1e-9 |L'''|, rounding ~ 1e-12) are exact far below
    // the kernel's fp32 output (6e-8 relative), hence 1e-5 relative + 1e-9 absolute.
    CpuBackend backend;
    const RouterShape s{6, 4, 2, 3};
    const float coef = 0.1f;
    const std::vector<float> logits = randomVector(24, -2.0, 2.0, 3u);
    RoutingBuffers r(s);
    backend.route(s, logits.data(), r.view());
    std::vector<float> dLogits(logits.size(), 0.0f);
    const double loss = backend.auxLoss(s, r.view(), coef, dLogits.data());

    std::vector<double> x(logits.begin(), logits.end());
    auto reference = [&]() {
        double l = 0.0;
        for (int t = 0; t < s.tokens; ++t) {
            const std::vector<double> p = softmax(x.data() + t * s.experts, s.experts);
            for (int e = 0; e < s.experts; ++e)
                l += static_cast<double>(r.routedOf[e]) / (s.tokens * s.topK) * p[e] / s.tokens;
        }
        return static_cast<double>(coef) * s.experts * l;
    };
    QVERIFY2(close(loss, reference(), 0.0, 1e-6), qPrintable(QStringLiteral("%1 vs %2").arg(loss).arg(reference())));
    constexpr double eps = 1e-4;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + eps;
        const double up = reference();
        x[i] = saved - eps;
        const double down = reference();
        x[i] = saved;
        const double fd = (up - down) / (2 * eps);
        QVERIFY2(close(dLogits[i], fd, 1e-9, 1e-5),
                 qPrintable(QStringLiteral("dLogits[%1]: %2 vs finite difference %3").arg(i).arg(dLogits[i]).arg(fd)));
    }
}

void TestRouter::permuteCombineRoundTrip()
{
    // Token t has logits [2 + t, 1, 0] (t even) or [2 + t, 0, 1] (t odd): everyone's first choice is e0,
    // with a probability that grows with t, and the second alternates between e1 and e2. e0 (capacity 4)
    // keeps t2..t5 and drops t0, t1; e1 holds t0, t2, t4 and e2 t1, t3, t5, one row unused in each.
    // With identity experts, combine(permute(x)) = x scaled by the summed weight of its kept slots.
    CpuBackend backend;
    const RouterShape s{6, 3, 2, 4};
    const int h = 5;
    std::vector<float> logits;
    for (int t = 0; t < s.tokens; ++t)
        logits.insert(logits.end(), {2.0f + static_cast<float>(t), t % 2 == 0 ? 1.0f : 0.0f, t % 2 == 0 ? 0.0f : 1.0f});
    RoutingBuffers r(s);
    backend.route(s, logits.data(), r.view());
    QString err = checkInvariants(r);
    QVERIFY2(err.isEmpty(), qPrintable(err));
    QCOMPARE(r.routedOf, (std::vector<int>{6, 3, 3}));
    QCOMPARE(r.countOf, (std::vector<int>{4, 3, 3}));
    QCOMPARE(r.tokenOfRow, (std::vector<int>{2, 3, 4, 5, 0, 2, 4, -1, 1, 3, 5, -1}));
    QCOMPARE(r.rowOf, (std::vector<int>{-1, 4, -1, 8, 0, 5, 1, 9, 2, 6, 3, 10}));

    const std::vector<float> x = randomVector(static_cast<std::size_t>(s.tokens) * h, -1.0, 1.0, 8u);
    const int rows = s.experts * s.capacity;
    std::vector<float> permuted(static_cast<std::size_t>(rows) * h, NAN);
    backend.permute(s, r.view(), f32(x.data()), h, f32(permuted.data()));
    for (int row = 0; row < rows; ++row)
        for (int c = 0; c < h; ++c) {
            const int t = r.tokenOfRow[row];
            QCOMPARE(permuted[row * h + c], t < 0 ? 0.0f : x[t * h + c]);
        }

    std::vector<float> out(x.size(), NAN);
    backend.combine(s, r.view(), f32(permuted.data()), h, f32(out.data()));
    int dropped = 0;
    for (int t = 0; t < s.tokens; ++t) {
        double w = 0.0;
        for (int j = 0; j < s.topK; ++j) {
            if (r.rowOf[t * s.topK + j] >= 0)
                w += r.weightOf[t * s.topK + j];
            else
                ++dropped;
        }
        for (int c = 0; c < h; ++c)
            QVERIFY2(close(out[t * h + c], w * x[t * h + c], 1e-6, 1e-6), qPrintable(QString::number(t)));
    }
    QCOMPARE(dropped, 2);
}

void TestRouter::permuteBackwardIsTheAdjointAndAccumulates()
{
    // permuteBackward is the transpose of permute: <permute(x), Y> = <x, permuteBackward(Y)>, and it adds.
    CpuBackend backend;
    const RouterShape s{7, 4, 2, 3};
    const int h = 3;
    const std::vector<float> logits = randomVector(28, -2.0, 2.0, 9u);
    RoutingBuffers r(s);
    backend.route(s, logits.data(), r.view());
    const int rows = s.experts * s.capacity;
    const std::vector<float> x = randomVector(static_cast<std::size_t>(s.tokens) * h, -1.0, 1.0, 10u);
    const std::vector<float> y = randomVector(static_cast<std::size_t>(rows) * h, -1.0, 1.0, 11u);
    const std::vector<float> base = randomVector(x.size(), -1.0, 1.0, 12u);
    std::vector<float> permuted(y.size(), NAN);  // unused rows must come back zero
    backend.permute(s, r.view(), f32(x.data()), h, f32(permuted.data()));
    std::vector<float> dx = base;
    backend.permuteBackward(s, r.view(), f32(y.data()), h, f32(dx.data()));

    double lhs = 0.0, rhs = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i)
        lhs += static_cast<double>(permuted[i]) * y[i];
    for (std::size_t i = 0; i < x.size(); ++i)
        rhs += static_cast<double>(x[i]) * (static_cast<double>(dx[i]) - base[i]);
    QVERIFY2(close(rhs, lhs, 1e-5, 1e-6), qPrintable(QStringLiteral("%1 vs %2").arg(rhs).arg(lhs)));
    // And element by element: dx[t] = base[t] + sum of Y over t's kept rows.
    for (int t = 0; t < s.tokens; ++t)
        for (int c = 0; c < h; ++c) {
            double want = base[t * h + c];
            for (int j = 0; j < s.topK; ++j)
                if (const int row = r.rowOf[t * s.topK + j]; row >= 0)
                    want += y[row * h + c];
            QVERIFY(close(dx[t * h + c], want, 1e-6, 1e-6));
        }
}

void TestRouter::combineAndRouterBackwardMatchFiniteDifferences()
{
    // L(logits, Y) = sum_t R_t . sum_{kept j} w_tj(logits) Y[row_tj], w = softmax probabilities of the
    // chosen experts. Routing decisions (experts, drops, rows) must not move under the perturbation: the
    // logits are spread over [-3, 3] and every perturbed route() is checked to give the same maps.
    // Finite differences in double (step 1e-4, error ~ 1e-9) against fp32 kernels whose outputs carry
    // ~ 6e-8 relative error, over terms of size ~ 1: 1e-6 absolute + 1e-5 relative.
    CpuBackend backend;
    const RouterShape s{8, 4, 2, 3};  // 16 assignments, 12 rows: some tokens are dropped
    const int h = 3;
    const int rows = s.experts * s.capacity;
    std::vector<float> logits = randomVector(32, -3.0, 3.0, 21u);
    RoutingBuffers base(s);
    backend.route(s, logits.data(), base.view());
    QString err = checkInvariants(base);
    QVERIFY2(err.isEmpty(), qPrintable(err));
    int dropped = 0;
    for (int e = 0; e < s.experts; ++e)
        dropped += base.routedOf[e] - base.countOf[e];
    QVERIFY2(dropped > 0, "the case must include dropped slots");

    const std::vector<float> y = randomVector(static_cast<std::size_t>(rows) * h, -1.0, 1.0, 22u);
    const std::vector<float> rr = randomVector(static_cast<std::size_t>(s.tokens) * h, -1.0, 1.0, 23u);

    // Kernels: dOut = R.
    std::vector<float> dY(y.size(), NAN), dWeight(static_cast<std::size_t>(s.tokens) * s.topK, NAN);
    backend.combineBackward(s, base.view(), f32(rr.data()), f32(y.data()), h, f32(dY.data()), dWeight.data());
    const std::vector<float> prior = randomVector(logits.size(), -1.0, 1.0, 24u);
    std::vector<float> dLogits = prior;
    backend.routerBackward(s, base.view(), dWeight.data(), dLogits.data());
    for (int slot = 0; slot < s.tokens * s.topK; ++slot)
        if (base.rowOf[slot] < 0)
            QCOMPARE(dWeight[slot], 0.0f);

    std::vector<double> x(logits.begin(), logits.end());
    std::vector<double> yd(y.begin(), y.end());
    RoutingBuffers probe(s);
    bool decisionsHeld = true;
    auto loss = [&]() {
        std::vector<float> xf(x.begin(), x.end());
        backend.route(s, xf.data(), probe.view());
        decisionsHeld = decisionsHeld && probe.expertOf == base.expertOf && probe.rowOf == base.rowOf;
        double l = 0.0;
        for (int t = 0; t < s.tokens; ++t) {
            const std::vector<double> p = softmax(x.data() + t * s.experts, s.experts);
            for (int j = 0; j < s.topK; ++j) {
                const int slot = t * s.topK + j;
                const int row = base.rowOf[slot];
                if (row < 0)
                    continue;
                for (int c = 0; c < h; ++c)
                    l += rr[t * h + c] * p[base.expertOf[slot]] * yd[row * h + c];
            }
        }
        return l;
    };
    constexpr double eps = 1e-4;
    auto difference = [&](std::vector<double>& v, std::size_t i) {
        const double saved = v[i];
        v[i] = saved + eps;
        const double up = loss();
        v[i] = saved - eps;
        const double down = loss();
        v[i] = saved;
        return (up - down) / (2 * eps);
    };
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double fd = difference(x, i);
        const double got = static_cast<double>(dLogits[i]) - prior[i];
        QVERIFY2(close(got, fd, 1e-6, 1e-5),
                 qPrintable(QStringLiteral("dLogits[%1]: %2 vs finite difference %3").arg(i).arg(got).arg(fd)));
    }
    QVERIFY2(decisionsHeld, "a perturbation changed the routing; the logits are not separated enough");
    for (std::size_t i = 0; i < yd.size(); ++i) {
        const double fd = difference(yd, i);  // zero for unused rows
        QVERIFY2(close(dY[i], fd, 1e-6, 1e-5),
                 qPrintable(QStringLiteral("dExpertOut[%1]: %2 vs finite difference %3").arg(i).arg(dY[i]).arg(fd)));
    }
}

void TestRouter::routerBackwardSumsRepeatedExperts()
{
    // A hand-made routing that names expert 1 twice: dprobs = [0, 0.3 + 0.7, 0] = [0, 1, 0];
    // s = sum p dprobs = 0.5; dLogits = p o (dprobs - s) = [0.2 (-0.5), 0.5 (0.5), 0.3 (-0.5)].
    CpuBackend backend;
    const RouterShape s{1, 3, 2, 2};
    std::vector<float> probs{0.2f, 0.5f, 0.3f};
    std::vector<int> expertOf{1, 1};
    Routing routing;
    routing.probs = probs.data();
    routing.expertOf = expertOf.data();
    const std::vector<float> dWeight{0.3f, 0.7f};
    std::vector<float> dLogits{0.0f, 0.0f, 0.0f};
    backend.routerBackward(s, routing, dWeight.data(), dLogits.data());
    QVERIFY(close(dLogits[0], -0.1, 1e-7, 0.0));
    QVERIFY(close(dLogits[1], 0.25, 1e-7, 0.0));
    QVERIFY(close(dLogits[2], -0.15, 1e-7, 0.0));
}

void TestRouter::rejectsBadShapes()
{
    CpuBackend backend;
    const std::vector<float> logits(16, 0.0f);
    RoutingBuffers r(RouterShape{2, 4, 2, 2});
    QVERIFY_THROWS_EXCEPTION(KernelError, backend.route(RouterShape{2, 4, 5, 2}, logits.data(), r.view()));
    QVERIFY_THROWS_EXCEPTION(KernelError, backend.route(RouterShape{2, 4, 2, 0}, logits.data(), r.view()));
    QVERIFY_THROWS_EXCEPTION(KernelError, backend.route(RouterShape{2, 4, 2, 2}, logits.data(), Routing{}));
}

QTEST_APPLESS_MAIN(TestRouter)
#include "tst_router.moc"
