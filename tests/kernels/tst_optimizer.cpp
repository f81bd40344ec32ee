#include "kernels/cpu/cpu_backend.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace meshbench::kernels;

namespace {

constexpr double kEps32 = std::numeric_limits<float>::epsilon();
constexpr double kEps64 = std::numeric_limits<double>::epsilon();

struct Hyper {
    float lr = 0.1f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weightDecay = 0.01f;
};

// The reference AdamW (Loshchilov & Hutter 2019) in double, on the same fp32 hyperparameters the
// kernel receives (0.999f is not 0.999, and 1 - beta2 magnifies that difference a thousandfold).
struct RefAdamW {
    std::vector<double> p, m, v;

    void step(const std::vector<float>& grad, const Hyper& hp, int t, float gradScale)
    {
        const double b1 = hp.beta1, b2 = hp.beta2;
        const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
        for (std::size_t i = 0; i < p.size(); ++i) {
            const double g = double(grad[i]) * double(gradScale);
            m[i] = b1 * m[i] + (1.0 - b1) * g;
            v[i] = b2 * v[i] + (1.0 - b2) * g * g;
            const double update = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + double(hp.eps));
            p[i] -= double(hp.lr) * (update + double(hp.weightDecay) * p[i]);
        }
    }
};

bool near(double got, double want, double tol) { return std::abs(got - want) <= tol; }

}  // namespace

class TestOptimizer : public QObject {
    Q_OBJECT

private slots:
    void oneStepByHand();
    void secondStepUsesState();
    void gradScaleScalesTheGradient();
    void weightDecayIsDecoupled();
    void epsilonOutsideTheSquareRoot();
    void randomStepsMatchDoubleReference_data();
    void randomStepsMatchDoubleReference();
    void refusesBadArguments();
    void sumSquares_data();
    void sumSquares();

private:
    CpuBackend m_cpu{1};
};

void TestOptimizer::oneStepByHand()
{
    // p = 1, g = 0.5, lr = 0.1, betas (0.9, 0.999), eps = 1e-8, wd = 0.01, t = 1:
    // m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25,
    // p = 1 - 0.1 (0.5 / (0.5 + 1e-8) + 0.01 x 1) = 0.899000002 (to 9 digits).
    const Hyper hp;
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    m_cpu.adamw(f32(&p), f32(&g), f32(&m), f32(&v), 1, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weightDecay, 1, 1.0f);
    const double wantP = 1.0 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1.0);
    // At t = 1 the bias corrections cancel the (1 - beta) factors, so the decimal value holds to a
    // few roundings of numbers of size 1 (the fp32 lr 0.1f is 1.5e-9 off 0.1, well inside).
    QVERIFY2(near(p, wantP, 4 * kEps32),
             qPrintable(QString("p = %1, want %2").arg(double(p), 0, 'g', 12).arg(wantP, 0, 'g', 12)));
    // m and v carry 1 - beta of the fp32 betas: compare with those, to a few roundings.
    const double wantM = (1.0 - double(hp.beta1)) * 0.5, wantV = (1.0 - double(hp.beta2)) * 0.25;
    QVERIFY(near(m, wantM, 4 * kEps32 * wantM));
    QVERIFY(near(v, wantV, 4 * kEps32 * wantV));
    QVERIFY(near(m, 0.05, 1e-6));     // the decimal values, up to the representation of 0.9f
    QVERIFY(near(v, 0.00025, 1e-8));  // and 0.999f (1.2e-5 relative in 1 - beta2)
}

void TestOptimizer::secondStepUsesState()
{
    const Hyper hp;
    float p = 1.0f, m = 0.0f, v = 0.0f;
    const float g1 = 0.5f, g2 = -0.25f;
    m_cpu.adamw(f32(&p), f32(&g1), f32(&m), f32(&v), 1, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weightDecay, 1, 1.0f);
    m_cpu.adamw(f32(&p), f32(&g2), f32(&m), f32(&v), 1, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weightDecay, 2, 1.0f);
    // By hand, in double on the fp32 hyperparameters:
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, wd = hp.weightDecay, eps = hp.eps;
    double wantP = 1.0, wantM = 0.0, wantV = 0.0;
    int t = 0;
    for (double g : {0.5, -0.25}) {
        ++t;
        wantM = b1 * wantM + (1 - b1) * g;
        wantV = b2 * wantV + (1 - b2) * g * g;
        const double mHat = wantM / (1 - std::pow(b1, t)), vHat = wantV / (1 - std::pow(b2, t));
        wantP -= lr * (mHat / (std::sqrt(vHat) + eps) + wd * wantP);
    }
    // Step 2 in decimal: m = 0.045 - 0.025 = 0.02, m^ = 0.02 / 0.19, v = 0.00024975 + 0.0000625,
    // v^ = v / 0.001999.
    QVERIFY2(near(p, wantP, 16 * kEps32),
             qPrintable(QString("p = %1, want %2").arg(double(p), 0, 'g', 12).arg(wantP, 0, 'g', 12)));
    // m cancels (0.045 - 0.025): its error is relative to the terms, 0.05.
    QVERIFY(near(m, wantM, 8 * kEps32 * 0.05));
    QVERIFY(near(v, wantV, 8 * kEps32 * wantV));
}

void TestOptimizer::gradScaleScalesTheGradient()
{
    // gradScale 0.5 on g = 1 is exactly the step on g = 0.5 (the product is exact).
    const Hyper hp;
    float p1 = 1.0f, m1 = 0.0f, v1 = 0.0f, p2 = 1.0f, m2 = 0.0f, v2 = 0.0f;
    const float half = 0.5f, one = 1.0f;
    m_cpu.adamw(f32(&p1), f32(&half), f32(&m1), f32(&v1), 1, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weightDecay, 1,
                1.0f);
    m_cpu.adamw(f32(&p2), f32(&one), f32(&m2), f32(&v2), 1, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weightDecay, 1, 0.5f);
    QCOMPARE(m2, m1);
    QCOMPARE(v2, v1);
    QCOMPARE(p2, p1);
    // And it scales m linearly and v quadratically over a second, different step.
    const float g = 0.75f;
    RefAdamW ref{{1.0}, {double(m2)}, {double(v2)}};
    ref.p[0] = double(p2);
    m_cpu.adamw(f32(&p2), f32(&g), f32(&m2), f32(&v2), 1, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weightDecay, 2, 0.25f);
    ref.step({g}, hp, 2, 0.25f);
    QVERIFY(near(m2, ref.m[0], 8 * kEps32 * 0.05));
    QVERIFY(near(v2, ref.v[0], 8 * kEps32 * ref.v[0]));
    QVERIFY(near(p2, ref.p[0], 16 * kEps32));
}

void TestOptimizer::weightDecayIsDecoupled()
{
    // Zero gradient on zero state: the Adam part is 0 / (0 + eps) = 0 and only the decay acts,
    // p -= lr wd p, whatever the step's bias corrections.
    std::vector<float> p = {2.0f, -4.0f, 0.0f}, g(3, 0.0f), m(3, 0.0f), v(3, 0.0f);
    m_cpu.adamw(f32(p.data()), f32(g.data()), f32(m.data()), f32(v.data()), 3, 0.5f, 0.9f, 0.999f, 1e-8f, 0.1f, 7,
                1.0f);
    QVERIFY(near(p[0], 2.0 * (1.0 - 0.05), 4 * kEps32 * 2));
    QVERIFY(near(p[1], -4.0 * (1.0 - 0.05), 4 * kEps32 * 4));
    QCOMPARE(p[2], 0.0f);
    QCOMPARE(m, std::vector<float>(3, 0.0f));
    QCOMPARE(v, std::vector<float>(3, 0.0f));
}

void TestOptimizer::epsilonOutsideTheSquareRoot()
{
    // g = 1e-8 at t = 1: m^ = g, v^ = g^2, so the update is g / (|g| + eps) = 1/2 with eps outside
    // the root (it would be 1e-4 with eps inside: g / sqrt(g^2 + eps)).
    float p = 0.0f, g = 1e-8f, m = 0.0f, v = 0.0f;
    m_cpu.adamw(f32(&p), f32(&g), f32(&m), f32(&v), 1, 1.0f, 0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f);
    const double gd = g, want = -gd / (gd + double(1e-8f));
    QVERIFY2(near(p, want, 16 * kEps32),
             qPrintable(QString("p = %1, want %2").arg(double(p), 0, 'g', 9).arg(want, 0, 'g', 9)));
}

void TestOptimizer::randomStepsMatchDoubleReference_data()
{
    QTest::addColumn<int>("n");
    QTest::addColumn<int>("steps");
    QTest::addColumn<float>("beta2");
    QTest::addColumn<float>("gradScale");
    QTest::newRow("333 x 100, beta2 0.95") << 333 << 100 << 0.95f << 1.0f;
    QTest::newRow("64 x 200, beta2 0.999, scaled") << 64 << 200 << 0.999f << 0.3f;
    QTest::newRow("7 x 50") << 7 << 50 << 0.99f << 1.0f;
}

void TestOptimizer::randomStepsMatchDoubleReference()
{
    QFETCH(int, n);
    QFETCH(int, steps);
    QFETCH(float, beta2);
    QFETCH(float, gradScale);
    Hyper hp;
    hp.lr = 1e-2f;
    hp.beta2 = beta2;
    hp.weightDecay = 0.1f;
    std::mt19937 rng(2024);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const auto count = static_cast<std::size_t>(n);
    std::vector<float> p(count), m(count), v(count), g(count);
    for (float& x : p)
        x = 2.0f * dist(rng);
    RefAdamW ref{{p.begin(), p.end()}, std::vector<double>(p.size(), 0.0), std::vector<double>(p.size(), 0.0)};
    for (int t = 1; t <= steps; ++t) {
        // Gradients with a persistent sign per element plus noise, so m does not just average out.
        for (std::size_t i = 0; i < g.size(); ++i)
            g[i] = (i % 3 == 0 ? 0.5f : -0.2f) + dist(rng);
        m_cpu.adamw(f32(p.data()), f32(g.data()), f32(m.data()), f32(v.data()), p.size(), hp.lr, hp.beta1, hp.beta2,
                    hp.eps, hp.weightDecay, t, gradScale);
        ref.step(g, hp, t, gradScale);
    }
    // Error budget per step: the rounding of p -= ... (eps32 |p|), and lr times the error of the
    // Adam ratio m^ / (sqrt(v^) + eps). That ratio is bounded by 1 in magnitude (Kingma & Ba 2015,
    // sec. 2.1, for 1 - beta1 <= sqrt(1 - beta2)) and its relative error is a few roundings plus
    // the error m and v accumulate as running averages: each step adds ~2 eps32 of relative error,
    // and an average forgets it at rate beta, so after t steps it holds at most 2 eps32
    // min(t, 1 / (1 - beta)): <= 20 eps32 for m (beta1 = 0.9), and eps32 min(steps, 1 / (1 - beta2))
    // for sqrt v. Errors add at most linearly over the steps:
    //   |p - ref| <= steps eps32 (max |p| + lr (1 + 20 + min(steps, 1 / (1 - beta2)))).
    double maxP = 0.0;
    for (double x : ref.p)
        maxP = std::max(maxP, std::abs(x));
    const double memoryV = std::min(double(steps), 1.0 / (1.0 - double(beta2)));
    const double tol = steps * kEps32 * (maxP + double(hp.lr) * (21.0 + memoryV));
    // The budget is a worst case, yet under a tenth of one step's update (lr |ratio| ~ lr): a wrong
    // formula, e.g. a missing bias correction or coupled weight decay, is off by far more.
    QVERIFY(tol < 0.1 * double(hp.lr));
    for (std::size_t i = 0; i < p.size(); ++i) {
        QVERIFY2(near(p[i], ref.p[i], tol), qPrintable(QString("p[%1] = %2, want %3, tolerance %4")
                                                           .arg(i)
                                                           .arg(double(p[i]), 0, 'g', 10)
                                                           .arg(ref.p[i], 0, 'g', 10)
                                                           .arg(tol, 0, 'g', 3)));
        // The running averages: relative to their terms (|g| <= 1.5 gradScale, so |m| and v's
        // terms are bounded by that and its square).
        const double gMax = 1.5 * double(gradScale);
        QVERIFY(near(m[i], ref.m[i], 2 * kEps32 / (1.0 - double(hp.beta1)) * gMax * 2));
        QVERIFY(near(v[i], ref.v[i], 2 * kEps32 / (1.0 - double(beta2)) * gMax * gMax * 2));
    }
}

void TestOptimizer::refusesBadArguments()
{
    float p = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
    QVERIFY_THROWS_EXCEPTION(
        KernelError, m_cpu.adamw(f32(&p), f32(&g), f32(&m), f32(&v), 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 1.0f));
    QVERIFY_THROWS_EXCEPTION(
        KernelError, m_cpu.adamw(f32(&p), f32(&g), f32(&m), f32(&v), 1, 0.1f, 1.0f, 0.999f, 1e-8f, 0.0f, 1, 1.0f));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.adamw(DevPtr{&p, DType::BF16}, f32(&g), f32(&m), f32(&v), 1, 0.1f, 0.9f,
                                                      0.999f, 1e-8f, 0.0f, 1, 1.0f));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.adamw(f32(&p), ConstDevPtr(&g, DType::BF16), f32(&m), f32(&v), 1, 0.1f,
                                                      0.9f, 0.999f, 1e-8f, 0.0f, 1, 1.0f));
    QCOMPARE(p, 1.0f);  // untouched
    QCOMPARE(m, 0.0f);
}

void TestOptimizer::sumSquares_data()
{
    QTest::addColumn<int>("n");
    for (int n : {0, 1, 3, 4, 5, 17, 1001, 100003})
        QTest::newRow(QByteArray::number(n)) << n;
}

void TestOptimizer::sumSquares()
{
    QFETCH(int, n);
    std::mt19937 rng(std::uint32_t(n + 5));
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    std::vector<float> x(static_cast<std::size_t>(n));
    for (float& e : x)
        e = dist(rng);
    double want = 0.0;
    for (float e : x)
        want += double(e) * double(e);
    const double got = m_cpu.sumSquares(f32(x.data()), x.size());
    // Squares of floats are exact in double; two orders of summing n positive terms differ by at
    // most 2 n eps64 of the total.
    QVERIFY2(near(got, want, 2.0 * (n + 1) * kEps64 * want),
             qPrintable(QString("%1 vs %2").arg(got, 0, 'g', 17).arg(want, 0, 'g', 17)));
    if (n == 0)
        QCOMPARE(got, 0.0);
    // Far beyond fp32 accumulation: a sum whose float running total would lose the small terms.
    // 1e6 + 4095 x 1e-8: in fp32 the small squares vanish (the ulp of 1e6 is 0.0625), an error of
    // 4e-5, far above the double bound of 4096 eps64 1e6 ~ 1e-6.
    std::vector<float> mixed(4096, 1e-4f);
    mixed[0] = 1e3f;
    const double wantMixed = 1e6 + 4095 * double(1e-4f) * double(1e-4f);
    QVERIFY(near(m_cpu.sumSquares(f32(mixed.data()), mixed.size()), wantMixed, 4096 * kEps64 * wantMixed));
}

QTEST_APPLESS_MAIN(TestOptimizer)
#include "tst_optimizer.moc"
