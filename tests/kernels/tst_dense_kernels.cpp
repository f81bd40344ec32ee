#include "kernels/cpu/cpu_backend.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

using namespace meshbench::kernels;

// Tolerances. The kernels are fp32; every reference here is computed in double from the same fp32
// inputs, so what is compared is the kernels' rounding error (plus, for gradients, the error of the
// finite difference itself).
//
// - A float sum or dot product of n terms has a rounding error of at most about n * eps32 times the
//   sum of the magnitudes of its terms (Higham, Accuracy and Stability, ch. 3), whatever the order.
//   Every kernel output here is a short formula over such reductions (n = the row length, 1 for
//   elementwise kernels), so it is allowed an error of kSlack * (n + 8) * eps32 relative to
//   |want| + max |want| (the second term is the magnitude of the terms that may cancel; the + 8
//   covers the handful of roundings outside the reduction, and libm's erfc / exp / log, which are
//   within a few ulp). kSlack = 8 leaves room for the constant factors in those bounds; a wrong
//   formula misses by orders of magnitude more.
// - Central differences of a double forward with step d = 1e-4 * scale have a truncation error of
//   d^2 / 6 |f'''| ~ 1e-9 and a cancellation error of eps64 |L| / d ~ 1e-10 for the losses here
//   (|L| < 1e3), both far below the fp32 allowance above, which is never smaller than
//   8 * 9 * 1.2e-7 ~ 9e-6 relative.
namespace {

constexpr double kEps32 = std::numeric_limits<float>::epsilon();
constexpr double kSlack = 8.0;

double allowance(int reductionLength) { return kSlack * (reductionLength + 8) * kEps32; }

std::vector<float> randomVector(std::mt19937& rng, std::size_t n, float lo = -1.0f, float hi = 1.0f)
{
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v)
        x = dist(rng);
    return v;
}

std::vector<double> toDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double maxAbs(const std::vector<double>& v)
{
    double m = 0.0;
    for (double x : v)
        m = std::max(m, std::abs(x));
    return m;
}

// Element i passes when |got - want| <= tol (|want_i| + scale), scale being the magnitude of the
// terms that may cancel in it: max |want| unless the caller knows better (termScale < 0). Returns an
// empty string or the first failure.
QByteArray compare(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what,
                   double termScale = -1.0)
{
    if (got.size() != want.size())
        return QByteArray(what) + ": size " + QByteArray::number(qulonglong(got.size())) + " vs " +
               QByteArray::number(qulonglong(want.size()));
    const double scale = termScale >= 0.0 ? termScale : maxAbs(want);
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double err = std::abs(double(got[i]) - want[i]);
        if (!(err <= tol * (std::abs(want[i]) + scale)))
            return QByteArray(what) + "[" + QByteArray::number(qulonglong(i)) + "]: got " +
                   QByteArray::number(double(got[i]), 'g', 10) + ", want " + QByteArray::number(want[i], 'g', 10) +
                   ", error " + QByteArray::number(err, 'g', 3) + " > " +
                   QByteArray::number(tol * (std::abs(want[i]) + scale), 'g', 3);
    }
    return {};
}

// Central finite differences of f at `at`, step d in every coordinate.
std::vector<double> numericGradient(std::vector<double> at, const std::function<double(const std::vector<double>&)>& f,
                                    double d)
{
    std::vector<double> grad(at.size());
    for (std::size_t i = 0; i < at.size(); ++i) {
        const double saved = at[i];
        at[i] = saved + d;
        const double plus = f(at);
        at[i] = saved - d;
        const double minus = f(at);
        at[i] = saved;
        grad[i] = (plus - minus) / (2.0 * d);
    }
    return grad;
}

// The terms of a normalisation's dx = rstd (g - ...), g = dOut * gamma, are of size rstd |g|; dx
// itself can be far smaller where they cancel (h = 1 RMSNorm: dx = rstd g (1 - xhat^2), xhat^2 =
// 1 - eps / x^2), so its rounding error is measured against max over rows of rstd |g|.
double normTermScale(const std::vector<float>& rstd, const std::vector<float>& dOut, const std::vector<float>& gamma)
{
    const std::size_t h = gamma.size();
    double scale = 0.0;
    for (std::size_t i = 0; i < dOut.size(); ++i)
        scale = std::max(scale, double(rstd[i / h]) * std::abs(double(dOut[i]) * double(gamma[i % h])));
    return scale;
}

double dot(const std::vector<double>& a, const std::vector<double>& b)
{
    double s = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i)
        s += a[i] * b[i];
    return s;
}

// ----- double-precision reference forwards (plain loops) -----

std::vector<double> layerNormRef(const std::vector<double>& x, const std::vector<double>& gamma,
                                 const std::vector<double>& beta, int T, int h, double eps)
{
    std::vector<double> out(x.size());
    for (int t = 0; t < T; ++t) {
        const double* row = x.data() + std::size_t(t) * h;
        double mean = 0.0;
        for (int j = 0; j < h; ++j)
            mean += row[j];
        mean /= h;
        double var = 0.0;
        for (int j = 0; j < h; ++j)
            var += (row[j] - mean) * (row[j] - mean);
        var /= h;
        const double rstd = 1.0 / std::sqrt(var + eps);
        for (int j = 0; j < h; ++j)
            out[std::size_t(t) * h + j] = (row[j] - mean) * rstd * gamma[j] + beta[j];
    }
    return out;
}

std::vector<double> rmsNormRef(const std::vector<double>& x, const std::vector<double>& gamma, int T, int h, double eps)
{
    std::vector<double> out(x.size());
    for (int t = 0; t < T; ++t) {
        const double* row = x.data() + std::size_t(t) * h;
        double ms = 0.0;
        for (int j = 0; j < h; ++j)
            ms += row[j] * row[j];
        const double rstd = 1.0 / std::sqrt(ms / h + eps);
        for (int j = 0; j < h; ++j)
            out[std::size_t(t) * h + j] = row[j] * rstd * gamma[j];
    }
    return out;
}

double geluRef(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double siluRef(double x) { return x / (1.0 + std::exp(-x)); }

std::vector<double> swigluRef(const std::vector<double>& x, int T, int f)
{
    std::vector<double> out(std::size_t(T) * f);
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < f; ++j) {
            const double gate = x[std::size_t(t) * 2 * f + j];
            const double up = x[std::size_t(t) * 2 * f + f + j];
            out[std::size_t(t) * f + j] = siluRef(gate) * up;
        }
    return out;
}

double crossEntropyRef(const std::vector<double>& logits, const std::vector<int>& targets, int T, int V)
{
    double loss = 0.0;
    for (int t = 0; t < T; ++t) {
        const double* row = logits.data() + std::size_t(t) * V;
        const double mx = *std::max_element(row, row + V);
        double sum = 0.0;
        for (int j = 0; j < V; ++j)
            sum += std::exp(row[j] - mx);
        loss += mx + std::log(sum) - row[targets[t]];
    }
    return loss;
}

void addShapeColumns()
{
    QTest::addColumn<int>("T");
    QTest::addColumn<int>("h");
    QTest::newRow("3x5") << 3 << 5;
    QTest::newRow("4x8") << 4 << 8;
    QTest::newRow("5x17") << 5 << 17;
    QTest::newRow("7x33") << 7 << 33;
    QTest::newRow("2x1") << 2 << 1;
    QTest::newRow("2x203") << 2 << 203;
}

}  // namespace

class TestDenseKernels : public QObject {
    Q_OBJECT

private slots:
    void dtypes();
    void routerCapacityFormula();
    void memory();
    void refusesBf16();

    void gemm_data();
    void gemm();
    void gemmBetaZeroIgnoresC();
    void gemmRejectsBadLeadingDimension();
    void addAndScale();

    void embeddingForward();
    void embeddingBackwardAccumulates();
    void embeddingBackwardMatchesFiniteDifferences();

    void layerNorm_data() { addShapeColumns(); }
    void layerNorm();
    void rmsNorm_data() { addShapeColumns(); }
    void rmsNorm();

    void geluKnownPoints();
    void gelu_data();
    void gelu();
    void swigluKnownPoints();
    void swiglu_data() { addShapeColumns(); }
    void swiglu();

    void crossEntropyUniform();
    void crossEntropyTwoClasses();
    void crossEntropy_data() { addShapeColumns(); }
    void crossEntropy();
    void crossEntropyAliasedAndStable();
    void crossEntropyRejectsTargets();

private:
    CpuBackend m_cpu{1};
};

void TestDenseKernels::dtypes()
{
    QCOMPARE(dtypeSize(DType::F32), std::size_t(4));
    QCOMPARE(dtypeSize(DType::BF16), std::size_t(2));
    QCOMPARE(dtypeName(DType::F32), std::string_view("f32"));
    QCOMPARE(dtypeName(DType::BF16), std::string_view("bf16"));
}

void TestDenseKernels::routerCapacityFormula()
{
    QCOMPARE(routerCapacity(8, 4, 2, 1.0), 4);     // 8 x 2 / 4
    QCOMPARE(routerCapacity(8, 4, 2, 1.25), 5);    // 4 x 1.25
    QCOMPARE(routerCapacity(7, 3, 2, 1.0), 5);     // ceil(4.67)
    QCOMPARE(routerCapacity(10, 1, 1, 1.1), 11);   // 10 x 1.1 is 11.000000000000002 in binary
    QCOMPARE(routerCapacity(100, 8, 2, 1.5), 38);  // ceil(37.5)
    QCOMPARE(routerCapacity(3, 4, 1, 1.0), 1);     // ceil(0.75)
    QCOMPARE(routerCapacity(1, 64, 1, 1.0), 1);
    QCOMPARE(routerCapacity(16, 4, 1, 0.0), 1);  // at least one row
    QCOMPARE(routerCapacity(0, 4, 1, 1.0), 1);
    QVERIFY_THROWS_EXCEPTION(KernelError, routerCapacity(8, 0, 1, 1.0));
}

void TestDenseKernels::memory()
{
    for (std::size_t n :
         {std::size_t(0), std::size_t(1), std::size_t(15), std::size_t(16), std::size_t(17), std::size_t(1001)}) {
        DevPtr p = m_cpu.allocate(n, DType::F32);
        QVERIFY(p.data != nullptr);
        QCOMPARE(p.dtype, DType::F32);
        QCOMPARE(reinterpret_cast<std::uintptr_t>(p.data) % 64, std::uintptr_t(0));
        const float* f = static_cast<const float*>(p.data);
        QVERIFY(std::all_of(f, f + n, [](float x) { return x == 0.0f; }));

        std::vector<float> src(n);
        for (std::size_t i = 0; i < n; ++i)
            src[i] = float(i) * 0.5f - 3.0f;
        m_cpu.upload(p, src.data(), n);
        std::vector<float> back(n, -1.0f);
        m_cpu.download(back.data(), p, n);
        QCOMPARE(back, src);

        DevPtr q = m_cpu.allocate(n, DType::F32);
        m_cpu.copy(q, p, n);
        m_cpu.download(back.data(), q, n);
        QCOMPARE(back, src);

        m_cpu.fill(q, 2.5f, n);
        m_cpu.download(back.data(), q, n);
        QCOMPARE(back, std::vector<float>(n, 2.5f));
        m_cpu.download(back.data(), p, n);  // the source of the copy is untouched
        QCOMPARE(back, src);

        m_cpu.release(q);
        m_cpu.release(p);
    }
    m_cpu.release(DevPtr{});  // releasing null is a no-op
}

void TestDenseKernels::refusesBf16()
{
    std::vector<float> buf(64, 1.0f);
    const DevPtr bf16{buf.data(), DType::BF16};
    const DevPtr ok = f32(buf.data());
    try {
        asF32(bf16);
        QFAIL("asF32 accepted a bf16 pointer");
    } catch (const KernelError& e) {
        QVERIFY2(std::string(e.what()).find("bf16") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(KernelError, asF32(ConstDevPtr(bf16)));
    QCOMPARE(asF32(ok), buf.data());
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.allocate(4, DType::BF16));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.upload(bf16, buf.data(), 4));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.add(bf16, ok, 4));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.add(ok, bf16, 4));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.gemm(false, false, 2, 2, 2, 1.0f, ok, 2, ok, 2, 0.0f, bf16, 2));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.layerNormForward(ok, ok, bf16, 2, 4, 1e-5f, ok, ok, ok));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.geluForward(bf16, ok, 4));
    const int targets[2] = {0, 1};
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.crossEntropy(bf16, targets, 2, 4, 1.0f, ok));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.sumSquares(bf16, 4));
    // Nothing was written through the refused pointers.
    QVERIFY(std::all_of(buf.begin(), buf.end(), [](float x) { return x == 1.0f; }));
}

void TestDenseKernels::gemm_data()
{
    QTest::addColumn<bool>("transA");
    QTest::addColumn<bool>("transB");
    QTest::addColumn<int>("M");
    QTest::addColumn<int>("N");
    QTest::addColumn<int>("K");
    QTest::addColumn<float>("alpha");
    QTest::addColumn<float>("beta");
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            const QByteArray tag = QByteArray(ta ? "T" : "N") + (tb ? "T" : "N");
            QTest::newRow(tag + " 5x7x3") << ta << tb << 5 << 7 << 3 << 1.0f << 0.0f;
            QTest::newRow(tag + " 13x11x9 beta") << ta << tb << 13 << 11 << 9 << 0.75f << -0.5f;
            QTest::newRow(tag + " 1x33x17 beta") << ta << tb << 1 << 33 << 17 << -1.25f << 1.0f;
            QTest::newRow(tag + " 31x1x65 beta") << ta << tb << 31 << 1 << 65 << 2.0f << 0.25f;
            QTest::newRow(tag + " 4x6x0 beta") << ta << tb << 4 << 6 << 0 << 1.0f << 0.5f;
        }
}

void TestDenseKernels::gemm()
{
    QFETCH(bool, transA);
    QFETCH(bool, transB);
    QFETCH(int, M);
    QFETCH(int, N);
    QFETCH(int, K);
    QFETCH(float, alpha);
    QFETCH(float, beta);
    std::mt19937 rng(1234);
    // Padded leading dimensions, so that lda / ldb / ldc are honoured and not assumed.
    const int aRows = transA ? K : M, aCols = transA ? M : K;
    const int bRows = transB ? N : K, bCols = transB ? K : N;
    const int lda = aCols + 3, ldb = bCols + 2, ldc = N + 1;
    const auto A = randomVector(rng, std::size_t(std::max(aRows, 1)) * lda);
    const auto B = randomVector(rng, std::size_t(std::max(bRows, 1)) * ldb);
    const auto C0 = randomVector(rng, std::size_t(M) * ldc);
    auto a = [&](int i, int k) { return double(transA ? A[std::size_t(k) * lda + i] : A[std::size_t(i) * lda + k]); };
    auto b = [&](int k, int j) { return double(transB ? B[std::size_t(j) * ldb + k] : B[std::size_t(k) * ldb + j]); };

    auto C = C0;
    m_cpu.gemm(transA, transB, M, N, K, alpha, f32(A.data()), lda, f32(B.data()), ldb, beta, f32(C.data()), ldc);

    // Naive triple loop in double. Error bound (Higham 3.5): |C - ref| <= gamma_K |alpha| sum |a||b|
    // plus the roundings of the alpha and beta products, gamma_K ~ K eps32 / 2; allowed 2 (K + 2) eps32.
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < ldc; ++j) {
            const std::size_t at = std::size_t(i) * ldc + j;
            if (j >= N) {
                QCOMPARE(C[at], C0[at]);  // padding untouched
                continue;
            }
            double ref = 0.0, magnitude = 0.0;
            for (int k = 0; k < K; ++k) {
                ref += a(i, k) * b(k, j);
                magnitude += std::abs(a(i, k) * b(k, j));
            }
            ref = double(alpha) * ref + double(beta) * double(C0[at]);
            magnitude = std::abs(double(alpha)) * magnitude + std::abs(double(beta) * double(C0[at]));
            const double tol = 2.0 * (K + 2) * kEps32 * magnitude;
            QVERIFY2(
                std::abs(double(C[at]) - ref) <= tol,
                qPrintable(
                    QString("C[%1,%2] = %3, want %4").arg(i).arg(j).arg(double(C[at]), 0, 'g', 9).arg(ref, 0, 'g', 9)));
        }
}

void TestDenseKernels::gemmBetaZeroIgnoresC()
{
    // beta = 0 means C is not read (BLAS semantics): stale NaNs in C must not survive.
    const std::vector<float> A = {1, 2, 3, 4, 5, 6};  // [2, 3]
    const std::vector<float> B = {1, 0, 0, 1, 1, 1};  // [3, 2]
    std::vector<float> C(4, std::numeric_limits<float>::quiet_NaN());
    m_cpu.gemm(false, false, 2, 2, 3, 1.0f, f32(A.data()), 3, f32(B.data()), 2, 0.0f, f32(C.data()), 2);
    QCOMPARE(C, (std::vector<float>{4, 5, 10, 11}));
}

void TestDenseKernels::gemmRejectsBadLeadingDimension()
{
    std::vector<float> buf(64);
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.gemm(false, false, 2, 3, 4, 1.0f, f32(buf.data()), 3, f32(buf.data()),
                                                     3, 0.0f, f32(buf.data()), 3));
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.gemm(false, false, -1, 3, 4, 1.0f, f32(buf.data()), 4, f32(buf.data()),
                                                     3, 0.0f, f32(buf.data()), 3));
}

void TestDenseKernels::addAndScale()
{
    std::vector<float> x = {1.0f, -2.0f, 0.5f, 3.0f, 7.0f};
    std::vector<float> y = {10.0f, 20.0f, 30.0f, 40.0f, 50.0f};
    m_cpu.add(f32(x.data()), f32(y.data()), 4);  // the fifth element is outside n
    QCOMPARE(y, (std::vector<float>{11.0f, 18.0f, 30.5f, 43.0f, 50.0f}));
    m_cpu.scale(f32(y.data()), -0.5f, 5);
    QCOMPARE(y, (std::vector<float>{-5.5f, -9.0f, -15.25f, -21.5f, -25.0f}));
    QCOMPARE(x, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, 7.0f}));
}

void TestDenseKernels::embeddingForward()
{
    const int V = 5, h = 3;
    std::vector<float> table(V * h);
    for (int i = 0; i < V * h; ++i)
        table[i] = float(i);
    const std::vector<int> ids = {4, 0, 4, 2};
    std::vector<float> out(ids.size() * h, -1.0f);
    m_cpu.embeddingForward(ids.data(), int(ids.size()), f32(table.data()), h, f32(out.data()));
    QCOMPARE(out, (std::vector<float>{12, 13, 14, 0, 1, 2, 12, 13, 14, 6, 7, 8}));
    const int bad[1] = {-1};
    QVERIFY_THROWS_EXCEPTION(KernelError, m_cpu.embeddingForward(bad, 1, f32(table.data()), h, f32(out.data())));
}

void TestDenseKernels::embeddingBackwardAccumulates()
{
    const int V = 4, h = 2;
    const std::vector<int> ids = {2, 0, 2, 2, 1};
    const std::vector<float> dOut = {1.0f, 0.5f, 2.0f, -1.0f, 0.25f, 4.0f, -3.0f, 8.0f, 0.5f, 0.5f};
    std::vector<float> dTable(V * h, 1.0f);  // existing gradient: the kernel adds to it
    m_cpu.embeddingBackward(ids.data(), int(ids.size()), f32(dOut.data()), h, f32(dTable.data()));
    // Row 2 collects tokens 0, 2 and 3; row 3 is never used.
    const std::vector<float> want = {
        1.0f + 2.0f, 1.0f - 1.0f, 1.0f + 0.5f, 1.0f + 0.5f, 1.0f + 1.0f + 0.25f - 3.0f, 1.0f + 0.5f + 4.0f + 8.0f,
        1.0f,        1.0f};
    QCOMPARE(dTable, want);
}

void TestDenseKernels::embeddingBackwardMatchesFiniteDifferences()
{
    std::mt19937 rng(7);
    const int V = 6, h = 9, T = 11;
    std::vector<int> ids(T);
    std::uniform_int_distribution<int> pick(0, V - 2);  // the last row stays unused
    for (int& id : ids)
        id = pick(rng);
    ids[3] = ids[7] = ids[9];
    const auto table = randomVector(rng, std::size_t(V) * h);
    const auto w = randomVector(rng, std::size_t(T) * h);  // L = sum w . embedding(table)
    const auto wd = toDouble(w);
    auto loss = [&](const std::vector<double>& tab) {
        double s = 0.0;
        for (int t = 0; t < T; ++t)
            for (int j = 0; j < h; ++j)
                s += wd[std::size_t(t) * h + j] * tab[std::size_t(ids[t]) * h + j];
        return s;
    };
    const auto want = numericGradient(toDouble(table), loss, 1e-4);
    std::vector<float> dTable(table.size(), 0.0f);
    m_cpu.embeddingBackward(ids.data(), T, f32(w.data()), h, f32(dTable.data()));
    // Each element sums at most T terms.
    const QByteArray failure = compare(dTable, want, allowance(T), "dTable");
    QVERIFY2(failure.isEmpty(), failure.constData());
}

void TestDenseKernels::layerNorm()
{
    QFETCH(int, T);
    QFETCH(int, h);
    std::mt19937 rng(std::uint32_t(100 * T + h));
    const float eps = 1e-5f;
    auto x = randomVector(rng, std::size_t(T) * h);
    for (std::size_t i = 0; i < x.size(); ++i)
        x[i] += 2.0f;  // an offset the variance must not cancel on
    const auto gamma = randomVector(rng, std::size_t(h), 0.5f, 1.5f);
    const auto beta = randomVector(rng, std::size_t(h));
    const auto w = randomVector(rng, std::size_t(T) * h);  // L = sum w . out, so dOut = w

    std::vector<float> out(x.size()), mean(static_cast<std::size_t>(T)), rstd(static_cast<std::size_t>(T));
    m_cpu.layerNormForward(f32(x.data()), f32(gamma.data()), f32(beta.data()), T, h, eps, f32(out.data()),
                           f32(mean.data()), f32(rstd.data()));
    const auto xd = toDouble(x), gd = toDouble(gamma), bd = toDouble(beta), wd = toDouble(w);
    QByteArray failure = compare(out, layerNormRef(xd, gd, bd, T, h, eps), allowance(h), "out");
    QVERIFY2(failure.isEmpty(), failure.constData());

    // dx overwrites (start from garbage); dGamma and dBeta accumulate onto 1.
    std::vector<float> dx(x.size(), 1e6f), dGamma(std::size_t(h), 1.0f), dBeta(std::size_t(h), 1.0f);
    m_cpu.layerNormBackward(f32(w.data()), f32(x.data()), f32(gamma.data()), f32(mean.data()), f32(rstd.data()), T, h,
                            f32(dx.data()), f32(dGamma.data()), f32(dBeta.data()));
    const double d = 1e-4;
    const auto wantDx = numericGradient(
        xd, [&](const std::vector<double>& v) { return dot(wd, layerNormRef(v, gd, bd, T, h, eps)); }, d);
    auto wantDGamma = numericGradient(
        gd, [&](const std::vector<double>& v) { return dot(wd, layerNormRef(xd, v, bd, T, h, eps)); }, d);
    auto wantDBeta = numericGradient(
        bd, [&](const std::vector<double>& v) { return dot(wd, layerNormRef(xd, gd, v, T, h, eps)); }, d);
    for (int j = 0; j < h; ++j) {
        wantDGamma[j] += 1.0;
        wantDBeta[j] += 1.0;
    }
    failure = compare(dx, wantDx, allowance(h), "dx", normTermScale(rstd, w, gamma));
    QVERIFY2(failure.isEmpty(), failure.constData());
    // dGamma and dBeta sum T rows of terms each.
    failure = compare(dGamma, wantDGamma, allowance(h + T), "dGamma");
    QVERIFY2(failure.isEmpty(), failure.constData());
    failure = compare(dBeta, wantDBeta, allowance(T), "dBeta");
    QVERIFY2(failure.isEmpty(), failure.constData());
}

void TestDenseKernels::rmsNorm()
{
    QFETCH(int, T);
    QFETCH(int, h);
    std::mt19937 rng(std::uint32_t(200 * T + h));
    const float eps = 1e-6f;
    const auto x = randomVector(rng, std::size_t(T) * h);
    const auto gamma = randomVector(rng, std::size_t(h), 0.5f, 1.5f);
    const auto w = randomVector(rng, std::size_t(T) * h);

    std::vector<float> out(x.size()), rstd(static_cast<std::size_t>(T));
    m_cpu.rmsNormForward(f32(x.data()), f32(gamma.data()), T, h, eps, f32(out.data()), f32(rstd.data()));
    const auto xd = toDouble(x), gd = toDouble(gamma), wd = toDouble(w);
    QByteArray failure = compare(out, rmsNormRef(xd, gd, T, h, eps), allowance(h), "out");
    QVERIFY2(failure.isEmpty(), failure.constData());
    for (int t = 0; t < T; ++t) {
        double ms = 0.0;
        for (int j = 0; j < h; ++j)
            ms += xd[std::size_t(t) * h + j] * xd[std::size_t(t) * h + j];
        const double want = 1.0 / std::sqrt(ms / h + eps);
        QVERIFY(std::abs(double(rstd[t]) - want) <= allowance(h) * want);
    }

    std::vector<float> dx(x.size(), -1e6f), dGamma(std::size_t(h), 1.0f);
    m_cpu.rmsNormBackward(f32(w.data()), f32(x.data()), f32(gamma.data()), f32(rstd.data()), T, h, f32(dx.data()),
                          f32(dGamma.data()));
    const double d = 1e-4;
    const auto wantDx = numericGradient(
        xd, [&](const std::vector<double>& v) { return dot(wd, rmsNormRef(v, gd, T, h, eps)); }, d);
    auto wantDGamma = numericGradient(
        gd, [&](const std::vector<double>& v) { return dot(wd, rmsNormRef(xd, v, T, h, eps)); }, d);
    for (double& g : wantDGamma)
        g += 1.0;
    failure = compare(dx, wantDx, allowance(h), "dx", normTermScale(rstd, w, gamma));
    QVERIFY2(failure.isEmpty(), failure.constData());
    failure = compare(dGamma, wantDGamma, allowance(h + T), "dGamma");
    QVERIFY2(failure.isEmpty(), failure.constData());
}

void TestDenseKernels::geluKnownPoints()
{
    // x Phi(x): Phi(1) = 0.8413447460685429, Phi(-1) = 0.15865525393145707,
    // Phi(-5) = 2.866515718791939e-07, Phi(3) = 0.9986501019683699.
    const std::vector<float> x = {0.0f, 1.0f, -1.0f, -5.0f, 3.0f};
    const std::vector<double> want = {0.0, 0.8413447460685429, -0.15865525393145707, -1.4332578593959696e-06,
                                      2.9959503059051097};
    std::vector<float> out(x.size());
    m_cpu.geluForward(f32(x.data()), f32(out.data()), x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        // A few ulp from erfc plus the rounding of x / sqrt 2 amplified by |d ln erfc / dz| ~ 2 z in
        // the tail (z = 3.5 at x = -5): 64 eps32 relative covers both.
        QVERIFY2(std::abs(double(out[i]) - want[i]) <= 64 * kEps32 * std::abs(want[i]),
                 qPrintable(QString("gelu(%1) = %2, want %3")
                                .arg(double(x[i]))
                                .arg(double(out[i]), 0, 'g', 9)
                                .arg(want[i], 0, 'g', 9)));
    }
}

void TestDenseKernels::gelu_data()
{
    QTest::addColumn<int>("n");
    for (int n : {1, 7, 16, 61})
        QTest::newRow(QByteArray::number(n)) << n;
}

void TestDenseKernels::gelu()
{
    QFETCH(int, n);
    std::mt19937 rng(std::uint32_t(300 + n));
    const auto x = randomVector(rng, std::size_t(n), -4.0f, 4.0f);
    const auto w = randomVector(rng, std::size_t(n));
    std::vector<float> out(x.size()), dx(x.size(), 1e6f);
    m_cpu.geluForward(f32(x.data()), f32(out.data()), x.size());
    m_cpu.geluBackward(f32(w.data()), f32(x.data()), f32(dx.data()), x.size());
    const auto xd = toDouble(x), wd = toDouble(w);
    std::vector<double> wantOut(xd.size());
    for (std::size_t i = 0; i < xd.size(); ++i)
        wantOut[i] = geluRef(xd[i]);
    const auto wantDx = numericGradient(
        xd,
        [&](const std::vector<double>& v) {
            double s = 0.0;
            for (std::size_t i = 0; i < v.size(); ++i)
                s += wd[i] * geluRef(v[i]);
            return s;
        },
        4e-4);  // 1e-4 x the input scale
    // Elementwise: reduction length 1.
    QByteArray failure = compare(out, wantOut, allowance(1), "out");
    QVERIFY2(failure.isEmpty(), failure.constData());
    failure = compare(dx, wantDx, allowance(1), "dx");
    QVERIFY2(failure.isEmpty(), failure.constData());
}

void TestDenseKernels::swigluKnownPoints()
{
    // T = 1, f = 3: gates (1, 0, -100), ups (2, 5, 3). silu(1) = 0.7310585786300049.
    const std::vector<float> x = {1.0f, 0.0f, -100.0f, 2.0f, 5.0f, 3.0f};
    std::vector<float> out(3), dx(6);
    m_cpu.swigluForward(f32(x.data()), 1, 3, f32(out.data()));
    QVERIFY(std::abs(double(out[0]) - 2 * 0.7310585786300049) <= 8 * kEps32);
    QCOMPARE(out[1], 0.0f);
    QVERIFY(std::abs(out[2]) < 1e-30f);  // saturated, no NaN
    const std::vector<float> dOut = {1.0f, 1.0f, 1.0f};
    m_cpu.swigluBackward(f32(dOut.data()), f32(x.data()), 1, 3, f32(dx.data()));
    // d/dgate at a = 1: up s (1 + a (1 - s)), s = sigmoid(1); d/dup = silu(1).
    const double s = 0.7310585786300049;
    QVERIFY(std::abs(double(dx[0]) - 2 * s * (1 + (1 - s))) <= 8 * kEps32);
    QVERIFY(std::abs(double(dx[1]) - 5 * 0.5) <= 8 * kEps32);  // silu'(0) = 1/2
    QVERIFY(std::isfinite(dx[2]) && std::abs(dx[2]) < 1e-30f);
    QVERIFY(std::abs(double(dx[3]) - s) <= 8 * kEps32);
    QCOMPARE(dx[4], 0.0f);
    QVERIFY(std::isfinite(dx[5]) && std::abs(dx[5]) < 1e-30f);
}

void TestDenseKernels::swiglu()
{
    QFETCH(int, T);
    QFETCH(int, h);
    const int f = h;
    std::mt19937 rng(std::uint32_t(400 * T + f));
    const auto x = randomVector(rng, std::size_t(T) * 2 * f, -4.0f, 4.0f);
    const auto w = randomVector(rng, std::size_t(T) * f);
    std::vector<float> out(std::size_t(T) * f), dx(x.size(), 1e6f);
    m_cpu.swigluForward(f32(x.data()), T, f, f32(out.data()));
    m_cpu.swigluBackward(f32(w.data()), f32(x.data()), T, f, f32(dx.data()));
    const auto xd = toDouble(x), wd = toDouble(w);
    QByteArray failure = compare(out, swigluRef(xd, T, f), allowance(1), "out");
    QVERIFY2(failure.isEmpty(), failure.constData());
    const auto wantDx = numericGradient(
        xd, [&](const std::vector<double>& v) { return dot(wd, swigluRef(v, T, f)); }, 4e-4);
    failure = compare(dx, wantDx, allowance(1), "dx");
    QVERIFY2(failure.isEmpty(), failure.constData());
}

void TestDenseKernels::crossEntropyUniform()
{
    // Equal logits: every token costs ln V, and the gradient is gradScale (1/V - onehot). The
    // offset 1000 checks that the row maximum is subtracted before exp.
    const int T = 3, V = 7;
    for (float level : {0.0f, 1000.0f}) {
        std::vector<float> logits(std::size_t(T) * V, level), d(logits.size());
        const std::vector<int> targets = {0, 6, 3};
        const double loss = m_cpu.crossEntropy(f32(logits.data()), targets.data(), T, V, 0.5f, f32(d.data()));
        QVERIFY(std::abs(loss - T * std::log(7.0)) <= 1e-12 * loss);
        for (int t = 0; t < T; ++t)
            for (int j = 0; j < V; ++j) {
                const double want = 0.5 * (1.0 / V - (j == targets[t] ? 1.0 : 0.0));
                QVERIFY(std::abs(double(d[std::size_t(t) * V + j]) - want) <= 4 * kEps32 * std::abs(want));
            }
    }
}

void TestDenseKernels::crossEntropyTwoClasses()
{
    // Logits (1, 2). Target 1: loss = ln(1 + e^-1) = 0.31326168751822286, softmax = (s, 1 - s) with
    // s = sigmoid(-1) = 0.2689414213699951, so dLogits = (s, -s). Target 0: loss = 1 + ln(1 + e^-1),
    // dLogits = (s - 1, 1 - s).
    const std::vector<float> logits = {1.0f, 2.0f, 1.0f, 2.0f};
    const std::vector<int> targets = {1, 0};
    std::vector<float> d(4);
    const double loss = m_cpu.crossEntropy(f32(logits.data()), targets.data(), 2, 2, 1.0f, f32(d.data()));
    const double s = 0.2689414213699951;
    QVERIFY(std::abs(loss - (0.31326168751822286 + 1.3132616875182228)) <= 16 * kEps32);
    const std::vector<double> want = {s, -s, s - 1.0, 1.0 - s};
    for (std::size_t i = 0; i < 4; ++i)
        QVERIFY2(
            std::abs(double(d[i]) - want[i]) <= 8 * kEps32,
            qPrintable(QString("d[%1] = %2, want %3").arg(i).arg(double(d[i]), 0, 'g', 9).arg(want[i], 0, 'g', 9)));
}

void TestDenseKernels::crossEntropy()
{
    QFETCH(int, T);
    QFETCH(int, h);
    const int V = h;
    std::mt19937 rng(std::uint32_t(500 * T + V));
    const auto logits = randomVector(rng, std::size_t(T) * V, -3.0f, 3.0f);
    std::vector<int> targets(static_cast<std::size_t>(T));
    std::uniform_int_distribution<int> pick(0, V - 1);
    for (int& t : targets)
        t = pick(rng);
    const float gradScale = 0.25f;
    std::vector<float> d(logits.size(), 1e6f);
    const double loss = m_cpu.crossEntropy(f32(logits.data()), targets.data(), T, V, gradScale, f32(d.data()));
    const auto ld = toDouble(logits);
    const double wantLoss = crossEntropyRef(ld, targets, T, V);
    // Per token: the rounding of x - max (eps32 |x|, |x| <= 3) and of exp (a few ulp of a sum that
    // is at least 1) give an absolute error of a few eps32 each: 16 eps32 (1 + 3) per token.
    QVERIFY2(std::abs(loss - wantLoss) <= 16 * kEps32 * 4 * T,
             qPrintable(QString("loss %1, want %2").arg(loss, 0, 'g', 12).arg(wantLoss, 0, 'g', 12)));
    auto wantD = numericGradient(
        ld, [&](const std::vector<double>& v) { return crossEntropyRef(v, targets, T, V); }, 3e-4);
    for (double& g : wantD)
        g *= gradScale;
    const QByteArray failure = compare(d, wantD, allowance(V), "dLogits");
    QVERIFY2(failure.isEmpty(), failure.constData());
}

void TestDenseKernels::crossEntropyAliasedAndStable()
{
    std::mt19937 rng(99);
    const int T = 5, V = 37;
    auto logits = randomVector(rng, std::size_t(T) * V, -20.0f, 20.0f);
    // exp(100) overflows float (its largest exponent is about 88.7); subtracting the row maximum
    // keeps every exp in (0, 1].
    logits[3] = 80.0f;
    logits[40] = 100.0f;
    const std::vector<int> targets = {3, 0, 36, 17, 9};
    std::vector<float> separate(logits.size());
    const double loss = m_cpu.crossEntropy(f32(logits.data()), targets.data(), T, V, 1.0f, f32(separate.data()));
    QVERIFY(std::isfinite(loss));
    QVERIFY(std::all_of(separate.begin(), separate.end(), [](float x) { return std::isfinite(x); }));
    // Each row of the gradient sums to 0 (softmax sums to 1).
    for (int t = 0; t < T; ++t) {
        double sum = 0.0;
        for (int j = 0; j < V; ++j)
            sum += separate[std::size_t(t) * V + j];
        QVERIFY(std::abs(sum) <= allowance(V));
    }
    const double wantLoss = crossEntropyRef(toDouble(logits), targets, T, V);
    QVERIFY(std::abs(loss - wantLoss) <= 16 * kEps32 * 101 * T);
    // In place: the same numbers.
    auto inPlace = logits;
    const double aliasedLoss = m_cpu.crossEntropy(f32(inPlace.data()), targets.data(), T, V, 1.0f, f32(inPlace.data()));
    QCOMPARE(aliasedLoss, loss);
    QCOMPARE(inPlace, separate);
}

void TestDenseKernels::crossEntropyRejectsTargets()
{
    std::vector<float> logits = {0.5f, 1.0f, -1.0f, 2.0f, 0.0f, 3.0f};
    const auto before = logits;
    for (int bad : {-1, 3, 1000}) {
        const std::vector<int> targets = {1, bad};
        try {
            m_cpu.crossEntropy(f32(logits.data()), targets.data(), 2, 3, 1.0f, f32(logits.data()));
            QFAIL("an out-of-range target was accepted");
        } catch (const KernelError& e) {
            QVERIFY2(std::string(e.what()).find(std::to_string(bad)) != std::string::npos, e.what());
        }
        QCOMPARE(logits, before);  // refused before anything was written, even in place
    }
}

QTEST_APPLESS_MAIN(TestDenseKernels)
#include "tst_dense_kernels.moc"
