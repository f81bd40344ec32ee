// CpuBackend attention against references worked independently here, all in double precision:
// a naive O(S^2) forward (full score row, causal mask, softmax), its analytic backward, and central
// finite differences of that forward. The kernel under test is blocked (FlashAttention, Dao et al.
// 2022) with an online softmax; shapes straddle its 64-row blocks and use grouped kv heads.

#include "kernels/cpu/cpu_backend.h"

#include <QtTest>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

// Every operator new in this process is counted while g_counting is set, so a test can bound what the
// kernel allocates during one call (the memory property is structural, not a matter of luck).
namespace {
std::atomic<bool> g_counting{false};
std::atomic<std::size_t> g_allocatedBytes{0};

void* countedAlloc(std::size_t n, std::size_t align)
{
    if (g_counting.load(std::memory_order_relaxed))
        g_allocatedBytes.fetch_add(n, std::memory_order_relaxed);
    void* p = nullptr;
    if (align <= alignof(std::max_align_t))
        p = std::malloc(n == 0 ? 1 : n);
    else
        p = std::aligned_alloc(align, (n + align - 1) / align * align);
    if (p == nullptr)
        throw std::bad_alloc();
    return p;
}
}  // namespace

void* operator new(std::size_t n) { return countedAlloc(n, 0); }
void* operator new[](std::size_t n) { return countedAlloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return countedAlloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return countedAlloc(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace meshbench::kernels;

namespace {

std::vector<float> randomVector(std::size_t n, double lo, double hi, std::uint32_t seed)
{
    std::mt19937 gen(seed);
    std::vector<float> x(n);
    for (float& e : x)
        e = static_cast<float>(lo + (hi - lo) * (static_cast<double>(gen()) / 4294967296.0));
    return x;
}

std::vector<double> toDouble(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::size_t qSize(const AttentionShape& s) { return static_cast<std::size_t>(s.batch) * s.seq * s.heads * s.headDim; }
std::size_t kvSize(const AttentionShape& s)
{
    return static_cast<std::size_t>(s.batch) * s.seq * s.kvHeads * s.headDim;
}
std::size_t lseSize(const AttentionShape& s) { return static_cast<std::size_t>(s.batch) * s.heads * s.seq; }

// Element offsets: q/out [B, S, H, D], k/v [B, S, Hkv, D], lse [B, H, S].
std::size_t qAt(const AttentionShape& s, int b, int i, int h)
{
    return ((static_cast<std::size_t>(b) * s.seq + i) * s.heads + h) * s.headDim;
}
std::size_t kvAt(const AttentionShape& s, int b, int j, int h)
{
    const int g = h / (s.heads / s.kvHeads);
    return ((static_cast<std::size_t>(b) * s.seq + j) * s.kvHeads + g) * s.headDim;
}

double dot(const double* a, const double* b, int n)
{
    double r = 0.0;
    for (int d = 0; d < n; ++d)
        r += a[d] * b[d];
    return r;
}

// Probabilities of query row i against keys 0..i (full row, causal mask, max-shifted softmax); returns lse.
double referenceRow(const AttentionShape& s, const double* q, const double* k, int b, int h, int i,
                    std::vector<double>& p)
{
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.headDim));
    p.assign(static_cast<std::size_t>(i) + 1, 0.0);
    double m = -INFINITY;
    for (int j = 0; j <= i; ++j) {
        p[j] = scale * dot(q + qAt(s, b, i, h), k + kvAt(s, b, j, h), s.headDim);
        m = std::max(m, p[j]);
    }
    double sum = 0.0;
    for (int j = 0; j <= i; ++j) {
        p[j] = std::exp(p[j] - m);
        sum += p[j];
    }
    for (double& e : p)
        e /= sum;
    return m + std::log(sum);
}

struct Forward {
    std::vector<double> out;
    std::vector<double> lse;
};

Forward referenceForward(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                         const std::vector<double>& v)
{
    Forward f{std::vector<double>(qSize(s), 0.0), std::vector<double>(lseSize(s), 0.0)};
    std::vector<double> p;
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
            for (int i = 0; i < s.seq; ++i) {
                f.lse[(static_cast<std::size_t>(b) * s.heads + h) * s.seq + i] =
                    referenceRow(s, q.data(), k.data(), b, h, i, p);
                double* o = f.out.data() + qAt(s, b, i, h);
                for (int j = 0; j <= i; ++j)
                    for (int d = 0; d < s.headDim; ++d)
                        o[d] += p[j] * v[kvAt(s, b, j, h) + d];
            }
    return f;
}

struct Grads {
    std::vector<double> dq, dk, dv;
};

// Analytic backward of the naive forward: dV = P^T dO, dP = dO V^T, dS = P o (dP - rowsum(P o dP)),
// dQ = scale dS K, dK = scale dS^T Q; kv gradients summed over the query heads of a group.
Grads referenceBackward(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
                        const std::vector<double>& v, const std::vector<double>& dOut)
{
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.headDim));
    const int D = s.headDim;
    Grads g{std::vector<double>(qSize(s), 0.0), std::vector<double>(kvSize(s), 0.0),
            std::vector<double>(kvSize(s), 0.0)};
    std::vector<double> p, dp;
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
            for (int i = 0; i < s.seq; ++i) {
                referenceRow(s, q.data(), k.data(), b, h, i, p);
                const double* doi = dOut.data() + qAt(s, b, i, h);
                dp.assign(p.size(), 0.0);
                double di = 0.0;
                for (int j = 0; j <= i; ++j) {
                    dp[j] = dot(doi, v.data() + kvAt(s, b, j, h), D);
                    di += p[j] * dp[j];
                }
                for (int j = 0; j <= i; ++j) {
                    const double ds = p[j] * (dp[j] - di);
                    for (int d = 0; d < D; ++d) {
                        g.dq[qAt(s, b, i, h) + d] += scale * ds * k[kvAt(s, b, j, h) + d];
                        g.dk[kvAt(s, b, j, h) + d] += scale * ds * q[qAt(s, b, i, h) + d];
                        g.dv[kvAt(s, b, j, h) + d] += p[j] * doi[d];
                    }
                }
            }
    return g;
}

// Empty when |got - want| <= atol + rtol |want| everywhere, else the worst element.
QString compare(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol,
                const char* what)
{
    if (got.size() != want.size())
        return QStringLiteral("%1: size %2 != %3").arg(what).arg(got.size()).arg(want.size());
    double worst = 0.0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double excess = std::abs(got[i] - want[i]) - (atol + rtol * std::abs(want[i]));
        if (!(excess <= worst)) {  // also catches NaN
            worst = std::isnan(excess) ? INFINITY : excess;
            at = i;
        }
    }
    if (worst <= 0.0)
        return {};
    return QStringLiteral("%1[%2]: got %3, want %4 (atol %5, rtol %6)")
        .arg(what)
        .arg(at)
        .arg(static_cast<double>(got[at]), 0, 'g', 9)
        .arg(want[at], 0, 'g', 9)
        .arg(atol)
        .arg(rtol);
}

struct Problem {
    AttentionShape shape;
    std::vector<float> q, k, v, dOut;
};

Problem makeProblem(const AttentionShape& s, double qRange, std::uint32_t seed)
{
    // q spans a wider range than k so that softmax rows are far from uniform and the online
    // maximum really moves between tiles.
    return {s, randomVector(qSize(s), -qRange, qRange, seed), randomVector(kvSize(s), -1.0, 1.0, seed + 1),
            randomVector(kvSize(s), -1.0, 1.0, seed + 2), randomVector(qSize(s), -1.0, 1.0, seed + 3)};
}

void addShapeColumns()
{
    QTest::addColumn<int>("batch");
    QTest::addColumn<int>("seq");
    QTest::addColumn<int>("heads");
    QTest::addColumn<int>("kvHeads");
    QTest::addColumn<int>("headDim");
}

AttentionShape fetchShape()
{
    QFETCH(int, batch);
    QFETCH(int, seq);
    QFETCH(int, heads);
    QFETCH(int, kvHeads);
    QFETCH(int, headDim);
    return {batch, seq, heads, kvHeads, headDim};
}

// Tolerances (fp32 kernel vs double reference, unit roundoff u = 2^-24 ~ 6e-8).
// Forward: a score is a D-term dot product, error ~ sqrt(D) u |s| <= 1e-6 for these inputs; exp turns it
// into the same relative error of each probability; the output is a convex combination of |v| <= 1
// summed tile-wise (64-term sgemm sums, then one add per tile), so its error is bounded by about
// (64 + S/64) u + 1e-6 ~ 1e-5 even at S = 4096 (observed: <= 2e-7). Hence 1e-5 absolute for out; lse
// (log S + max score, up to ~ 10 here) gets 1e-5 absolute plus 3e-6 relative.
constexpr double kOutTol = 1e-5;
constexpr double kLseTol = 1e-5;
constexpr double kLseRtol = 3e-6;
// Backward: dS = P o (dP - Di) subtracts two O(|dO||v|) numbers (cancellation adds ~ D u of those), and
// dq, dk, dv sum up to S such terms, per kv head over the H/Hkv query heads of its group too; gradients
// are O(0.01 - 1). 2e-5 absolute + 1e-4 relative is ~ 10x the largest error observed (2e-6) and far
// below what an indexing, masking or scaling mistake does (O(0.01) and up).
constexpr double kGradAtol = 2e-5;
constexpr double kGradRtol = 1e-4;

struct KernelRun {
    std::vector<float> out, lse, dq, dk, dv;
};

KernelRun runKernel(CpuBackend& backend, const Problem& pb, bool withBackward)
{
    const AttentionShape& s = pb.shape;
    // Poison the outputs: the kernels must overwrite every element.
    KernelRun r{std::vector<float>(qSize(s), NAN), std::vector<float>(lseSize(s), NAN), {}, {}, {}};
    backend.attentionForward(s, f32(pb.q.data()), f32(pb.k.data()), f32(pb.v.data()), f32(r.out.data()),
                             f32(r.lse.data()));
    if (withBackward) {
        r.dq.assign(qSize(s), 1e3f);
        r.dk.assign(kvSize(s), -1e3f);
        r.dv.assign(kvSize(s), NAN);
        backend.attentionBackward(s, f32(pb.dOut.data()), f32(pb.q.data()), f32(pb.k.data()), f32(pb.v.data()),
                                  f32(r.out.data()), f32(r.lse.data()), f32(r.dq.data()), f32(r.dk.data()),
                                  f32(r.dv.data()));
    }
    return r;
}

}  // namespace

class TestAttention : public QObject {
    Q_OBJECT

private slots:
    void forwardMatchesReference_data();
    void forwardMatchesReference();
    void forwardIsStableForLargeScores();
    void backwardMatchesAnalyticReference_data();
    void backwardMatchesAnalyticReference();
    void backwardMatchesFiniteDifferences_data();
    void backwardMatchesFiniteDifferences();
    void longSequenceStaysWithinBlockMemory();
    void rejectsBadShapes();
};

void TestAttention::forwardMatchesReference_data()
{
    addShapeColumns();
    QTest::newRow("S1") << 1 << 1 << 1 << 1 << 8;
    QTest::newRow("S7 H2") << 1 << 7 << 2 << 2 << 8;
    QTest::newRow("S64 one full block, GQA 2/1") << 1 << 64 << 2 << 1 << 16;
    QTest::newRow("S65 B2 GQA 4/2") << 2 << 65 << 4 << 2 << 16;
    QTest::newRow("S130 GQA 4/1 (MQA)") << 1 << 130 << 4 << 1 << 8;
    QTest::newRow("S130 B2 MHA 4/4") << 2 << 130 << 4 << 4 << 16;
    QTest::newRow("S200 B2 GQA 4/2") << 2 << 200 << 4 << 2 << 8;
}

void TestAttention::forwardMatchesReference()
{
    const AttentionShape s = fetchShape();
    const Problem pb = makeProblem(s, 3.0, 11u);
    CpuBackend backend;
    const KernelRun got = runKernel(backend, pb, false);
    const Forward want = referenceForward(s, toDouble(pb.q), toDouble(pb.k), toDouble(pb.v));
    QString err = compare(got.out, want.out, kOutTol, 0.0, "out");
    QVERIFY2(err.isEmpty(), qPrintable(err));
    err = compare(got.lse, want.lse, kLseTol, kLseRtol, "lse");
    QVERIFY2(err.isEmpty(), qPrintable(err));

    // Causality, independently of the reference: the first query row attends to key 0 alone.
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
            for (int d = 0; d < s.headDim; ++d)
                QCOMPARE(got.out[qAt(s, b, 0, h) + d], pb.v[kvAt(s, b, 0, h) + d]);
}

void TestAttention::forwardIsStableForLargeScores()
{
    // Scores of several hundred: exp without the running-max shift would overflow fp32 (exp(89) = inf).
    const AttentionShape s{1, 150, 2, 1, 16};
    Problem pb = makeProblem(s, 1.0, 23u);
    for (float& x : pb.q)
        x *= 200.0f;
    CpuBackend backend;
    const KernelRun got = runKernel(backend, pb, false);
    const Forward want = referenceForward(s, toDouble(pb.q), toDouble(pb.k), toDouble(pb.v));
    double maxLse = 0.0;
    for (double x : want.lse)
        maxLse = std::max(maxLse, x);
    QVERIFY2(maxLse > 100.0, "the test must produce scores far beyond fp32 exp's range");
    // Score errors now scale with |s| (hundreds): u |s| ~ 2e-5 absolute per score, which exp carries
    // into the probabilities' relative error (observed 9e-6 on out), so out gets 1e-4 here.
    QString err = compare(got.out, want.out, 1e-4, 0.0, "out");
    QVERIFY2(err.isEmpty(), qPrintable(err));
    err = compare(got.lse, want.lse, kLseTol, kLseRtol, "lse");
    QVERIFY2(err.isEmpty(), qPrintable(err));
}

void TestAttention::backwardMatchesAnalyticReference_data()
{
    addShapeColumns();
    QTest::newRow("S1") << 1 << 1 << 1 << 1 << 8;
    QTest::newRow("S7 GQA 4/2") << 1 << 7 << 4 << 2 << 8;
    QTest::newRow("S65 B2 GQA 4/2") << 2 << 65 << 4 << 2 << 16;
    QTest::newRow("S130 GQA 4/1") << 1 << 130 << 4 << 1 << 8;
    QTest::newRow("S130 B2 MHA 2/2") << 2 << 130 << 2 << 2 << 16;
}

void TestAttention::backwardMatchesAnalyticReference()
{
    const AttentionShape s = fetchShape();
    const Problem pb = makeProblem(s, 2.0, 31u);
    CpuBackend backend;
    const KernelRun got = runKernel(backend, pb, true);
    const Grads want = referenceBackward(s, toDouble(pb.q), toDouble(pb.k), toDouble(pb.v), toDouble(pb.dOut));
    QString err = compare(got.dq, want.dq, kGradAtol, kGradRtol, "dq");
    QVERIFY2(err.isEmpty(), qPrintable(err));
    err = compare(got.dk, want.dk, kGradAtol, kGradRtol, "dk");
    QVERIFY2(err.isEmpty(), qPrintable(err));
    err = compare(got.dv, want.dv, kGradAtol, kGradRtol, "dv");
    QVERIFY2(err.isEmpty(), qPrintable(err));
}

void TestAttention::backwardMatchesFiniteDifferences_data()
{
    addShapeColumns();
    QTest::addColumn<int>("samples");  // entries checked per tensor, 0 = all
    QTest::newRow("S9 GQA 4/2, every entry") << 1 << 9 << 4 << 2 << 8 << 0;
    QTest::newRow("S5 B2 GQA 2/1, every entry") << 2 << 5 << 2 << 1 << 16 << 0;
    QTest::newRow("S70 GQA 2/1, sampled across the block edge") << 1 << 70 << 2 << 1 << 8 << 120;
}

void TestAttention::backwardMatchesFiniteDifferences()
{
    // L(q, k, v) = sum(out o R) with R = dOut, so dL/dx is exactly what the backward returns for dOut = R.
    // Central differences of the double forward with step 1e-4: truncation ~ eps^2 |L'''| / 6 ~ 1e-8 and
    // rounding ~ 1e-16 |L| / eps ~ 1e-11, so the difference quotient is exact to far below the fp32
    // kernel's own error and the backward tolerances above apply unchanged.
    const AttentionShape s = fetchShape();
    QFETCH(int, samples);
    const Problem pb = makeProblem(s, 2.0, 47u);
    CpuBackend backend;
    const KernelRun got = runKernel(backend, pb, true);

    std::vector<double> q = toDouble(pb.q), k = toDouble(pb.k), v = toDouble(pb.v);
    const std::vector<double> r = toDouble(pb.dOut);
    auto loss = [&]() {
        const Forward f = referenceForward(s, q, k, v);
        return dot(f.out.data(), r.data(), static_cast<int>(f.out.size()));
    };
    constexpr double eps = 1e-4;
    std::mt19937 pick(5u);
    auto check = [&](std::vector<double>& x, const std::vector<float>& grad, const char* what) {
        const std::size_t n = x.size();
        const std::size_t count = samples == 0 ? n : static_cast<std::size_t>(samples);
        for (std::size_t c = 0; c < count; ++c) {
            const std::size_t i = samples == 0 ? c : pick() % n;
            const double saved = x[i];
            x[i] = saved + eps;
            const double up = loss();
            x[i] = saved - eps;
            const double down = loss();
            x[i] = saved;
            const double fd = (up - down) / (2 * eps);
            const double g = grad[i];
            if (std::abs(g - fd) > kGradAtol + kGradRtol * std::abs(fd))
                return QStringLiteral("%1[%2]: backward %3, finite difference %4").arg(what).arg(i).arg(g).arg(fd);
        }
        return QString();
    };
    QString err = check(q, got.dq, "dq");
    QVERIFY2(err.isEmpty(), qPrintable(err));
    err = check(k, got.dk, "dk");
    QVERIFY2(err.isEmpty(), qPrintable(err));
    err = check(v, got.dv, "dv");
    QVERIFY2(err.isEmpty(), qPrintable(err));
}

void TestAttention::longSequenceStaysWithinBlockMemory()
{
    // S = 4096: a score matrix would be S^2 floats = 64 MiB per head. The kernels may allocate only
    // O(S · block) (here: tiles of 64 x 64 plus per-block row state), so the total that operator new
    // hands out during each call must stay under S · 64 floats = 1 MiB, 1/64 of one score matrix.
    const AttentionShape s{1, 4096, 1, 1, 16};
    const Problem pb = makeProblem(s, 2.0, 59u);
    CpuBackend backend;
    std::vector<float> out(qSize(s)), lse(lseSize(s)), dq(qSize(s)), dk(kvSize(s)), dv(kvSize(s));
    const std::size_t bound = static_cast<std::size_t>(s.seq) * 64 * sizeof(float);

    // The counter itself works: it sees an allocation of a known size (a direct call, which unlike a
    // new-expression may not be elided).
    g_allocatedBytes = 0;
    g_counting = true;
    ::operator delete(::operator new(1000 * sizeof(float)));
    g_counting = false;
    QVERIFY(g_allocatedBytes >= 1000 * sizeof(float));

    g_allocatedBytes = 0;
    g_counting = true;
    backend.attentionForward(s, f32(pb.q.data()), f32(pb.k.data()), f32(pb.v.data()), f32(out.data()), f32(lse.data()));
    g_counting = false;
    const std::size_t forwardBytes = g_allocatedBytes;
    g_allocatedBytes = 0;
    g_counting = true;
    backend.attentionBackward(s, f32(pb.dOut.data()), f32(pb.q.data()), f32(pb.k.data()), f32(pb.v.data()),
                              f32(out.data()), f32(lse.data()), f32(dq.data()), f32(dk.data()), f32(dv.data()));
    g_counting = false;
    const std::size_t backwardBytes = g_allocatedBytes;
    QVERIFY2(forwardBytes < bound, qPrintable(QStringLiteral("forward allocated %1 bytes").arg(forwardBytes)));
    QVERIFY2(backwardBytes < bound, qPrintable(QStringLiteral("backward allocated %1 bytes").arg(backwardBytes)));

    // Values on sampled rows (out, lse, dq) and sampled keys (dk, dv) against the double reference, built
    // row by row in O(S) memory: one pass gives every row's lse and Di = dO_i . out_i.
    const std::vector<double> q = toDouble(pb.q), k = toDouble(pb.k), v = toDouble(pb.v), r = toDouble(pb.dOut);
    const int S = s.seq;
    const int D = s.headDim;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::vector<double> refLse(S), refDi(S), p;
    std::vector<std::vector<double>> refOut;
    const std::vector<int> rows{0, 1, 63, 64, 65, 127, 128, 2047, 2048, 4031, 4032, 4095};
    for (int i = 0; i < S; ++i) {
        refLse[i] = referenceRow(s, q.data(), k.data(), 0, 0, i, p);
        std::vector<double> o(D, 0.0);
        for (int j = 0; j <= i; ++j)
            for (int d = 0; d < D; ++d)
                o[d] += p[j] * v[kvAt(s, 0, j, 0) + d];
        refDi[i] = dot(r.data() + qAt(s, 0, i, 0), o.data(), D);
        if (std::find(rows.begin(), rows.end(), i) != rows.end())
            refOut.push_back(o);
    }
    auto prob = [&](int i, int j) {
        return std::exp(scale * dot(q.data() + qAt(s, 0, i, 0), k.data() + kvAt(s, 0, j, 0), D) - refLse[i]);
    };
    auto dScore = [&](int i, int j) {
        return prob(i, j) * (dot(r.data() + qAt(s, 0, i, 0), v.data() + kvAt(s, 0, j, 0), D) - refDi[i]);
    };
    for (std::size_t n = 0; n < rows.size(); ++n) {
        const int i = rows[n];
        QVERIFY2(std::abs(lse[i] - refLse[i]) <= kLseTol + kLseRtol * std::abs(refLse[i]),
                 qPrintable(QString::number(i)));
        std::vector<double> dqi(D, 0.0);
        for (int j = 0; j <= i; ++j) {
            const double ds = dScore(i, j);
            for (int d = 0; d < D; ++d)
                dqi[d] += scale * ds * k[kvAt(s, 0, j, 0) + d];
        }
        for (int d = 0; d < D; ++d) {
            const std::size_t at = qAt(s, 0, i, 0) + d;
            QVERIFY2(std::abs(out[at] - refOut[n][d]) <= kOutTol, qPrintable(QStringLiteral("out row %1").arg(i)));
            QVERIFY2(std::abs(dq[at] - dqi[d]) <= kGradAtol + kGradRtol * std::abs(dqi[d]),
                     qPrintable(QStringLiteral("dq row %1: %2 vs %3").arg(i).arg(dq[at]).arg(dqi[d])));
        }
    }
    for (int j : rows) {
        std::vector<double> dkj(D, 0.0), dvj(D, 0.0);
        for (int i = j; i < S; ++i) {
            const double pij = prob(i, j);
            const double ds = dScore(i, j);
            for (int d = 0; d < D; ++d) {
                dkj[d] += scale * ds * q[qAt(s, 0, i, 0) + d];
                dvj[d] += pij * r[qAt(s, 0, i, 0) + d];
            }
        }
        for (int d = 0; d < D; ++d) {
            const std::size_t at = kvAt(s, 0, j, 0) + d;
            QVERIFY2(std::abs(dk[at] - dkj[d]) <= kGradAtol + kGradRtol * std::abs(dkj[d]),
                     qPrintable(QStringLiteral("dk key %1: %2 vs %3").arg(j).arg(dk[at]).arg(dkj[d])));
            QVERIFY2(std::abs(dv[at] - dvj[d]) <= kGradAtol + kGradRtol * std::abs(dvj[d]),
                     qPrintable(QStringLiteral("dv key %1: %2 vs %3").arg(j).arg(dv[at]).arg(dvj[d])));
        }
    }
}

void TestAttention::rejectsBadShapes()
{
    CpuBackend backend;
    std::vector<float> buf(64, 0.0f);
    const AttentionShape notGrouped{1, 2, 3, 2, 4};  // 3 query heads cannot share 2 kv heads evenly
    QVERIFY_THROWS_EXCEPTION(KernelError, backend.attentionForward(notGrouped, f32(buf.data()), f32(buf.data()),
                                                                   f32(buf.data()), f32(buf.data()), f32(buf.data())));
    const AttentionShape empty{1, 0, 1, 1, 4};
    QVERIFY_THROWS_EXCEPTION(KernelError, backend.attentionForward(empty, f32(buf.data()), f32(buf.data()),
                                                                   f32(buf.data()), f32(buf.data()), f32(buf.data())));
    const DevPtr bf16{buf.data(), DType::BF16};
    QVERIFY_THROWS_EXCEPTION(KernelError, backend.attentionForward(AttentionShape{}, bf16, f32(buf.data()),
                                                                   f32(buf.data()), f32(buf.data()), f32(buf.data())));
}

QTEST_APPLESS_MAIN(TestAttention)
#include "tst_attention.moc"
