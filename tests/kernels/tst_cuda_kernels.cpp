// kernels/cuda against kernels/cpu, operation by operation, on fresh random inputs: fp32 to a few
// ulp of the CPU's result (the device's expf/erfcf are within 2 ulp of the host's; GEMMs reorder
// their sums), bf16 against the CPU run on the same bf16-rounded inputs (only the accumulation
// order and the output's rounding differ). Without a usable CUDA device - every development and
// CI machine - each test skips, saying why; the device check runs them on a GPU.

#include "kernels/backend_choice.h"
#include "kernels/cpu/cpu_backend.h"
#if MESHBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

#include "common/random_values.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

using namespace meshbench::kernels;
using meshbench::testing::randomValues;

namespace {

// Round to the nearest bf16 (ties to even), as __float2bfloat16 does, kept in a float.
float roundToBf16(float x)
{
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    bits &= 0xFFFF0000u;
    std::memcpy(&x, &bits, sizeof bits);
    return x;
}

struct Buffer {
    Backend& backend;
    DevPtr ptr;
    Buffer(Backend& b, const std::vector<float>& values, DType dtype = DType::F32)
        : backend(b), ptr(b.allocate(values.size(), dtype))
    {
        b.upload(ptr, values.data(), values.size());
    }
    ~Buffer() { backend.release(ptr); }
    std::vector<float> read(std::size_t n) const
    {
        std::vector<float> out(n);
        backend.download(out.data(), ptr, n);
        return out;
    }
};

// |got - want| <= tolerance x max(1, |want|) everywhere, or the first element that is not.
QString farFrom(const std::vector<float>& got, const std::vector<float>& want, double tolerance)
{
    for (std::size_t i = 0; i < want.size(); ++i)
        if (!(std::abs(double(got[i]) - double(want[i])) <= tolerance * std::max(1.0, std::abs(double(want[i])))))
            return QStringLiteral("[%1]: cuda %2, cpu %3").arg(i).arg(got[i], 0, 'g', 9).arg(want[i], 0, 'g', 9);
    return {};
}

}  // namespace

class TestCudaKernels : public QObject {
    Q_OBJECT

private slots:
    void init()
    {
        const DeviceStatus device = cudaDeviceStatus();
        if (!device.usable)
            QSKIP(qPrintable(QString::fromStdString(device.description)));
#if MESHBENCH_HAVE_CUDA
        m_cuda = cuda::makeBackend(0);
#endif
    }

    void memoryRoundTrips()
    {
        const std::vector<float> x = randomValues(1000, 1);
        QCOMPARE(Buffer(*m_cuda, x).read(x.size()), x);
        std::vector<float> rounded(x.size());
        for (std::size_t i = 0; i < x.size(); ++i)
            rounded[i] = roundToBf16(x[i]);
        QCOMPARE(Buffer(*m_cuda, x, DType::BF16).read(x.size()), rounded);
        Buffer filled(*m_cuda, x);
        m_cuda->fill(filled.ptr, 2.5f, x.size());
        QCOMPARE(filled.read(x.size()), std::vector<float>(x.size(), 2.5f));
    }

    void emptyTransfersLeaveNoErrorBehind()
    {
        // A bf16 upload or download of nothing used to launch a zero-block conversion, whose error the
        // next operation then reported as its own (issue 27, finding 23).
        const DevPtr p = m_cuda->allocate(4, DType::BF16);
        std::vector<float> host{1, 2, 3, 4};
        m_cuda->upload(p, host.data(), 0);
        m_cuda->download(host.data(), p, 0);
        QCOMPARE(host, (std::vector<float>{1, 2, 3, 4}));
        m_cuda->fill(p, 1.5f, host.size());
        m_cuda->download(host.data(), p, host.size());
        QCOMPARE(host, std::vector<float>(host.size(), 1.5f));
        m_cuda->release(p);
    }

    void rawCopiesAndTheAllocatorsFigures()
    {
        // Raw bf16 words go out and back unconverted (what host staging moves).
        const std::vector<std::uint16_t> words{0x3f80, 0xc040, 0x0001, 0x7f7f, 0x8000};
        const DevPtr p = m_cuda->allocate(words.size(), DType::BF16);
        m_cuda->copyFromHost(p, words.data(), words.size());
        std::vector<std::uint16_t> back(words.size());
        m_cuda->copyToHost(back.data(), p, words.size());
        QCOMPARE(back, words);
        QVERIFY(!m_cuda->hostAddressable());
        // The block is cached, and a new buffer of the same size reuses it zero-filled.
        const DeviceMemory before = m_cuda->deviceMemory();
        QCOMPARE(before.inUseBytes, std::int64_t(512));
        m_cuda->release(p);
        const DevPtr again = m_cuda->allocate(words.size(), DType::BF16);
        QCOMPARE(again.data, p.data);
        m_cuda->copyToHost(back.data(), again, words.size());
        QCOMPARE(back, std::vector<std::uint16_t>(words.size(), 0));
        m_cuda->release(again);
        const DeviceMemory after = m_cuda->deviceMemory();
        QCOMPARE(after.inUseBytes, std::int64_t(0));
        QCOMPARE(after.reservedBytes, before.reservedBytes);
        QVERIFY(after.deviceTotalBytes > after.deviceUsedBytes && after.deviceUsedBytes > 0);
    }

    void timeMarksFollowTheQueuedWork()
    {
        // A mark after a large fill is reached after the fill has run: the interval is positive,
        // and marks in order give ordered times.
        const std::size_t n = std::size_t(64) << 20;
        const DevPtr p = m_cuda->allocate(n, DType::F32);
        const TimeMark a = m_cuda->markTime();
        m_cuda->fill(p, 1.0f, n);
        const TimeMark b = m_cuda->markTime();
        m_cuda->fill(p, 2.0f, n);
        const TimeMark c = m_cuda->markTime();
        const double ab = m_cuda->secondsBetween(a, b), ac = m_cuda->secondsBetween(a, c);
        QVERIFY2(ab > 0 && ac > ab, qPrintable(QStringLiteral("%1 %2").arg(ab).arg(ac)));
        m_cuda->forgetTimeMarks();
        QVERIFY_THROWS_EXCEPTION(KernelError, m_cuda->secondsBetween(a, b));
        m_cuda->release(p);
    }

    void elementwiseMatchesTheCpu_data()
    {
        QTest::addColumn<int>("dtype");
        QTest::newRow("f32") << int(DType::F32);
        QTest::newRow("bf16") << int(DType::BF16);
    }

    void elementwiseMatchesTheCpu()
    {
        QFETCH(int, dtype);
        const DType type = DType(dtype);
        const int T = 37, f = 53;
        std::vector<float> x = randomValues(std::size_t(T) * 2 * f, 2, 2.0f),
                           dy = randomValues(std::size_t(T) * 2 * f, 3);
        if (type == DType::BF16)
            for (std::vector<float>* v : {&x, &dy})
                for (float& e : *v)
                    e = roundToBf16(e);
        // fp32: a few ulp; bf16: the output's own rounding (2^-8) on top.
        const double tolerance = type == DType::F32 ? 1e-6 : 1.0 / 256;
        const std::size_t n = x.size(), half = std::size_t(T) * std::size_t(f);
        const auto compare = [&](const char* what, auto run, std::size_t outSize) {
            Buffer cx(m_cpu, x), cdy(m_cpu, dy), cout(m_cpu, std::vector<float>(n));
            Buffer gx(*m_cuda, x, type), gdy(*m_cuda, dy, type), gout(*m_cuda, std::vector<float>(n), type);
            run(m_cpu, cx.ptr, cdy.ptr, cout.ptr);
            run(*m_cuda, gx.ptr, gdy.ptr, gout.ptr);
            const QString problem = farFrom(gout.read(outSize), cout.read(outSize), tolerance);
            QVERIFY2(problem.isEmpty(), qPrintable(QString(what) + problem));
        };
        compare(
            "gelu", [&](Backend& b, DevPtr in, DevPtr, DevPtr out) { b.geluForward(in, out, n); }, n);
        compare(
            "gelu backward", [&](Backend& b, DevPtr in, DevPtr d, DevPtr out) { b.geluBackward(d, in, out, n); }, n);
        compare(
            "swiglu", [&](Backend& b, DevPtr in, DevPtr, DevPtr out) { b.swigluForward(in, T, f, out); }, half);
        compare(
            "swiglu backward", [&](Backend& b, DevPtr in, DevPtr d, DevPtr out) { b.swigluBackward(d, in, T, f, out); },
            n);
        compare(
            "add", [&](Backend& b, DevPtr in, DevPtr d, DevPtr) { b.add(in, d, n); }, 0);
        compare(
            "scale", [&](Backend& b, DevPtr in, DevPtr, DevPtr) { b.scale(in, 0.75f, n); }, 0);
        Buffer cx(m_cpu, x), gx(*m_cuda, x, type);
        const double cpu = m_cpu.sumSquares(cx.ptr, n), gpu = m_cuda->sumSquares(gx.ptr, n);
        QVERIFY2(std::abs(gpu - cpu) <= 1e-12 * cpu,
                 qPrintable(QStringLiteral("sum of squares %1 vs %2").arg(gpu).arg(cpu)));
    }

    void rowKernelsMatchTheCpu_data() { elementwiseMatchesTheCpu_data(); }

    void rowKernelsMatchTheCpu()
    {
        // RMSNorm forward and backward, the embedding both ways (a repeated id), RoPE both ways:
        // row reductions reordered across threads, so a few ulp of the row's scale in fp32.
        QFETCH(int, dtype);
        const DType type = DType(dtype);
        const int T = 24, h = 96, heads = 4, headDim = 24, seq = 8, vocab = 11;
        const double tolerance = type == DType::F32 ? 2e-6 : 1.0 / 128;
        std::vector<float> x = randomValues(std::size_t(T) * h, 11), dy = randomValues(std::size_t(T) * h, 12),
                           gamma = randomValues(std::size_t(h), 13), table = randomValues(std::size_t(vocab) * h, 14);
        if (type == DType::BF16)
            for (std::vector<float>* v : {&x, &dy, &table})
                for (float& e : *v)
                    e = roundToBf16(e);
        std::vector<int> ids(static_cast<std::size_t>(T));
        for (int t = 0; t < T; ++t)
            ids[std::size_t(t)] = (t * 7) % vocab;  // every id, several twice
        const std::size_t n = x.size();

        Buffer cx(m_cpu, x), cdy(m_cpu, dy), cg(m_cpu, gamma), cout(m_cpu, std::vector<float>(n)),
            crstd(m_cpu, std::vector<float>(std::size_t(T))), cdx(m_cpu, std::vector<float>(n)),
            cdg(m_cpu, std::vector<float>(std::size_t(h), 0.5f));
        Buffer gx(*m_cuda, x, type), gdy(*m_cuda, dy, type), gg(*m_cuda, gamma),
            gout(*m_cuda, std::vector<float>(n), type), grstd(*m_cuda, std::vector<float>(std::size_t(T))),
            gdx(*m_cuda, std::vector<float>(n), type), gdg(*m_cuda, std::vector<float>(std::size_t(h), 0.5f));
        m_cpu.rmsNormForward(cx.ptr, cg.ptr, T, h, 1e-5f, cout.ptr, crstd.ptr);
        m_cuda->rmsNormForward(gx.ptr, gg.ptr, T, h, 1e-5f, gout.ptr, grstd.ptr);
        for (const auto& [what, gpu, cpu, size] :
             {std::tuple{"rms norm", &gout, &cout, n}, std::tuple{"rstd", &grstd, &crstd, std::size_t(T)}}) {
            const QString problem = farFrom(gpu->read(size), cpu->read(size), tolerance);
            QVERIFY2(problem.isEmpty(), qPrintable(QString(what) + problem));
        }
        m_cpu.rmsNormBackward(cdy.ptr, cx.ptr, cg.ptr, crstd.ptr, T, h, cdx.ptr, cdg.ptr);
        m_cuda->rmsNormBackward(gdy.ptr, gx.ptr, gg.ptr, grstd.ptr, T, h, gdx.ptr, gdg.ptr);
        // dGamma sums T rows: T ulp of the sum's scale.
        for (const auto& [what, gpu, cpu, size, tol] :
             {std::tuple{"rms norm dx", &gdx, &cdx, n, tolerance},
              std::tuple{"rms norm dgamma", &gdg, &cdg, std::size_t(h), 1e-5}}) {
            const QString problem = farFrom(gpu->read(size), cpu->read(size), tol);
            QVERIFY2(problem.isEmpty(), qPrintable(QString(what) + problem));
        }

        // LayerNorm, with beta = the first row of dy.
        Buffer cmean(m_cpu, std::vector<float>(std::size_t(T))), gmean(*m_cuda, std::vector<float>(std::size_t(T))),
            cdb(m_cpu, std::vector<float>(std::size_t(h), -0.5f)),
            gdb(*m_cuda, std::vector<float>(std::size_t(h), -0.5f));
        m_cpu.layerNormForward(cx.ptr, cg.ptr, cdy.ptr, T, h, 1e-5f, cout.ptr, cmean.ptr, crstd.ptr);
        m_cuda->layerNormForward(gx.ptr, gg.ptr, gdy.ptr, T, h, 1e-5f, gout.ptr, gmean.ptr, grstd.ptr);
        m_cpu.layerNormBackward(cdy.ptr, cx.ptr, cg.ptr, cmean.ptr, crstd.ptr, T, h, cdx.ptr, cdg.ptr, cdb.ptr);
        m_cuda->layerNormBackward(gdy.ptr, gx.ptr, gg.ptr, gmean.ptr, grstd.ptr, T, h, gdx.ptr, gdg.ptr, gdb.ptr);
        for (const auto& [what, gpu, cpu, size, tol] : {std::tuple{"layer norm", &gout, &cout, n, tolerance},
                                                        std::tuple{"mean", &gmean, &cmean, std::size_t(T), 2e-6},
                                                        std::tuple{"layer norm dx", &gdx, &cdx, n, tolerance},
                                                        std::tuple{"dgamma", &gdg, &cdg, std::size_t(h), 1e-5},
                                                        std::tuple{"dbeta", &gdb, &cdb, std::size_t(h), 1e-5}}) {
            const QString problem = farFrom(gpu->read(size), cpu->read(size), tol);
            QVERIFY2(problem.isEmpty(), qPrintable(QString(what) + problem));
        }

        Buffer ct(m_cpu, table), gt(*m_cuda, table, type), cdt(m_cpu, std::vector<float>(table.size(), 0.25f)),
            gdt(*m_cuda, std::vector<float>(table.size(), 0.25f));
        m_cpu.embeddingForward(ids.data(), T, ct.ptr, h, cout.ptr);
        m_cuda->embeddingForward(ids.data(), T, gt.ptr, h, gout.ptr);
        QCOMPARE(gout.read(n), cout.read(n));  // a copy: exact
        m_cpu.embeddingBackward(ids.data(), T, cdy.ptr, h, cdt.ptr);
        m_cuda->embeddingBackward(ids.data(), T, gdy.ptr, h, gdt.ptr);
        QString problem = farFrom(gdt.read(table.size()), cdt.read(table.size()), 1e-6);
        QVERIFY2(problem.isEmpty(), qPrintable("embedding backward" + problem));

        for (const bool inverse : {false, true}) {
            m_cpu.rope(cx.ptr, T, seq, heads, headDim, 10000.0f, inverse);
            m_cuda->rope(gx.ptr, T, seq, heads, headDim, 10000.0f, inverse);
            problem = farFrom(gx.read(n), cx.read(n), tolerance);
            QVERIFY2(problem.isEmpty(), qPrintable(QStringLiteral("rope inverse=%1").arg(inverse) + problem));
        }
    }

    void crossEntropyMatchesTheCpu()
    {
        // Loss summed in double on both sides; the gradient written over the logits (aliasing).
        const int T = 19, V = 1000;
        const std::vector<float> logits = randomValues(std::size_t(T) * V, 15, 3.0f);
        std::vector<int> targets(static_cast<std::size_t>(T));
        for (int t = 0; t < T; ++t)
            targets[std::size_t(t)] = (t * 97) % V;
        Buffer c(m_cpu, logits), g(*m_cuda, logits);
        const double cpu = m_cpu.crossEntropy(c.ptr, targets.data(), T, V, 0.125f, c.ptr);
        const double gpu = m_cuda->crossEntropy(g.ptr, targets.data(), T, V, 0.125f, g.ptr);
        QVERIFY2(std::abs(gpu - cpu) <= 1e-6 * cpu, qPrintable(QStringLiteral("loss %1 vs %2").arg(gpu).arg(cpu)));
        const QString problem = farFrom(g.read(logits.size()), c.read(logits.size()), 1e-6);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        const int bad[1] = {V};
        QVERIFY_THROWS_EXCEPTION(KernelError, m_cuda->crossEntropy(g.ptr, bad, 1, V, 1.0f, g.ptr));
    }

    void moeKernelsMatchTheCpu()
    {
        // A routing with dropped tokens (capacity factor 1), made by the CPU router; the device's
        // permute, combine and their backwards against the CPU's on it.
        const int T = 32, E = 4, K = 2, h = 16;
        const RouterShape shape{T, E, K, routerCapacity(T, E, K, 1.0)};
        const std::size_t rows = std::size_t(E) * std::size_t(shape.capacity), slotCount = std::size_t(T) * K;
        std::vector<float> logits = randomValues(std::size_t(T) * E, 16, 2.0f), probs(logits.size()),
                           weightOf(slotCount);
        std::vector<int> expertOf(slotCount), rowOf(slotCount), tokenOfRow(rows), countOf(static_cast<std::size_t>(E)),
            routedOf(static_cast<std::size_t>(E));
        const Routing routing{probs.data(),      expertOf.data(), weightOf.data(), rowOf.data(),
                              tokenOfRow.data(), countOf.data(),  routedOf.data()};
        m_cpu.route(shape, logits.data(), routing);
        QVERIFY(std::count(rowOf.begin(), rowOf.end(), -1) > 0);  // some dropped, so the test covers them

        const std::vector<float> x = randomValues(std::size_t(T) * h, 17), expertOut = randomValues(rows * h, 18),
                                 dOut = randomValues(std::size_t(T) * h, 19),
                                 start = randomValues(std::size_t(T) * h, 20);
        Buffer cx(m_cpu, x), gx(*m_cuda, x), ce(m_cpu, expertOut), ge(*m_cuda, expertOut), cd(m_cpu, dOut),
            gd(*m_cuda, dOut), cp(m_cpu, std::vector<float>(rows * h, 9.0f)),
            gp(*m_cuda, std::vector<float>(rows * h, 9.0f)), co(m_cpu, std::vector<float>(std::size_t(T) * h)),
            go(*m_cuda, std::vector<float>(std::size_t(T) * h)), cdx(m_cpu, start), gdx(*m_cuda, start);
        m_cpu.permute(shape, routing, cx.ptr, h, cp.ptr);
        m_cuda->permute(shape, routing, gx.ptr, h, gp.ptr);
        QCOMPARE(gp.read(rows * h), cp.read(rows * h));  // copies and zeros: exact
        m_cpu.combine(shape, routing, ce.ptr, h, co.ptr);
        m_cuda->combine(shape, routing, ge.ptr, h, go.ptr);
        QString problem = farFrom(go.read(std::size_t(T) * h), co.read(std::size_t(T) * h), 1e-6);
        QVERIFY2(problem.isEmpty(), qPrintable("combine" + problem));
        std::vector<float> cpuWeight(slotCount), gpuWeight(slotCount);
        m_cpu.combineBackward(shape, routing, cd.ptr, ce.ptr, h, cp.ptr, cpuWeight.data());
        m_cuda->combineBackward(shape, routing, gd.ptr, ge.ptr, h, gp.ptr, gpuWeight.data());
        problem = farFrom(gp.read(rows * h), cp.read(rows * h), 1e-6) + farFrom(gpuWeight, cpuWeight, 1e-6);
        QVERIFY2(problem.isEmpty(), qPrintable("combine backward" + problem));
        m_cpu.permuteBackward(shape, routing, cp.ptr, h, cdx.ptr);
        m_cuda->permuteBackward(shape, routing, gp.ptr, h, gdx.ptr);
        problem = farFrom(gdx.read(std::size_t(T) * h), cdx.read(std::size_t(T) * h), 1e-6);
        QVERIFY2(problem.isEmpty(), qPrintable("permute backward" + problem));
    }

    void attentionMatchesTheCpu_data()
    {
        QTest::addColumn<int>("headDim");
        QTest::addColumn<int>("dtype");
        QTest::addColumn<int>("seq");
        for (int d : {32, 48})
            for (int dtype : {int(DType::F32), int(DType::BF16)})
                QTest::addRow("d%d %s", d, dtype == int(DType::F32) ? "f32" : "bf16") << d << dtype << 17;
        // The tensor-core forward (bf16, head dims 64 and 128): 150 positions make two whole tiles of
        // 64 and a partial one, so the diagonal, the skipped tiles and the sequence's end are all met.
        for (int d : {64, 128})
            QTest::addRow("d%d bf16 seq 150 (tensor cores)", d) << d << int(DType::BF16) << 150;
    }

    void attentionMatchesTheCpu()
    {
        // Grouped heads (4 over 2); forward and backward against the CPU's tiled kernel on the same
        // (bf16-rounded) inputs. Softmax sums reordered: fp32 a few ulp of 1. bf16: the output's
        // rounding and, on the tensor cores, P rounded to bf16 before P V (as FlashAttention does),
        // each 2^-8 relative, well inside 2^-6.
        QFETCH(int, headDim);
        QFETCH(int, dtype);
        QFETCH(int, seq);
        const DType type = DType(dtype);
        const AttentionShape shape{2, seq, 4, 2, headDim};
        const std::size_t qn = std::size_t(2) * std::size_t(seq) * 4 * std::size_t(headDim), kvn = qn / 2,
                          lsen = std::size_t(2) * 4 * std::size_t(seq);
        std::vector<float> q = randomValues(qn, 21), k = randomValues(kvn, 22), v = randomValues(kvn, 23),
                           dOut = randomValues(qn, 24);
        if (type == DType::BF16)
            for (std::vector<float>* x : {&q, &k, &v, &dOut})
                for (float& e : *x)
                    e = roundToBf16(e);
        const double tolerance = type == DType::F32 ? 1e-5 : 1.0 / 64;
        Buffer cq(m_cpu, q), ck(m_cpu, k), cv(m_cpu, v), cd(m_cpu, dOut), co(m_cpu, std::vector<float>(qn)),
            cl(m_cpu, std::vector<float>(lsen)), cdq(m_cpu, std::vector<float>(qn)),
            cdk(m_cpu, std::vector<float>(kvn)), cdv(m_cpu, std::vector<float>(kvn));
        Buffer gq(*m_cuda, q, type), gk(*m_cuda, k, type), gv(*m_cuda, v, type), gd(*m_cuda, dOut, type),
            go(*m_cuda, std::vector<float>(qn), type), gl(*m_cuda, std::vector<float>(lsen)),
            gdq(*m_cuda, std::vector<float>(qn), type), gdk(*m_cuda, std::vector<float>(kvn), type),
            gdv(*m_cuda, std::vector<float>(kvn), type);
        m_cpu.attentionForward(shape, cq.ptr, ck.ptr, cv.ptr, co.ptr, cl.ptr);
        m_cuda->attentionForward(shape, gq.ptr, gk.ptr, gv.ptr, go.ptr, gl.ptr);
        m_cpu.attentionBackward(shape, cd.ptr, cq.ptr, ck.ptr, cv.ptr, co.ptr, cl.ptr, cdq.ptr, cdk.ptr, cdv.ptr);
        m_cuda->attentionBackward(shape, gd.ptr, gq.ptr, gk.ptr, gv.ptr, go.ptr, gl.ptr, gdq.ptr, gdk.ptr, gdv.ptr);
        for (const auto& [what, gpu, cpu, n] :
             {std::tuple{"out", &go, &co, qn}, std::tuple{"lse", &gl, &cl, lsen}, std::tuple{"dq", &gdq, &cdq, qn},
              std::tuple{"dk", &gdk, &cdk, kvn}, std::tuple{"dv", &gdv, &cdv, kvn}}) {
            const QString problem = farFrom(gpu->read(n), cpu->read(n), tolerance);
            QVERIFY2(problem.isEmpty(), qPrintable(QString(what) + problem));
        }
    }

    void adamwMatchesTheCpu()
    {
        const std::size_t n = 4099;
        const std::vector<float> p = randomValues(n, 4), g = randomValues(n, 5, 0.1f), m = randomValues(n, 6, 0.01f);
        std::vector<float> v = randomValues(n, 7, 0.001f);
        for (float& e : v)
            e = e * e;
        Buffer cp(m_cpu, p), cg(m_cpu, g), cm(m_cpu, m), cv(m_cpu, v);
        Buffer gp(*m_cuda, p), gg(*m_cuda, g), gm(*m_cuda, m), gv(*m_cuda, v);
        for (int step = 1; step <= 3; ++step) {
            m_cpu.adamw(cp.ptr, cg.ptr, cm.ptr, cv.ptr, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
            m_cuda->adamw(gp.ptr, gg.ptr, gm.ptr, gv.ptr, n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step, 0.5f);
        }
        // The same function on both sides (elementwise_math.h); only sqrtf's rounding may differ.
        for (const auto& [cpu, gpu] : {std::pair{&cp, &gp}, std::pair{&cm, &gm}, std::pair{&cv, &gv}}) {
            const QString problem = farFrom(gpu->read(n), cpu->read(n), 1e-6);
            QVERIFY2(problem.isEmpty(), qPrintable(problem));
        }
    }

    void gemmMatchesTheCpu_data()
    {
        QTest::addColumn<bool>("transA");
        QTest::addColumn<bool>("transB");
        QTest::addColumn<int>("dtype");
        for (int dtype : {int(DType::F32), int(DType::BF16)})
            for (bool a : {false, true})
                for (bool b : {false, true})
                    QTest::addRow("%s %s %s", a ? "At" : "A", b ? "Bt" : "B", dtype == int(DType::F32) ? "f32" : "bf16")
                        << a << b << dtype;
    }

    void gemmMatchesTheCpu()
    {
        QFETCH(bool, transA);
        QFETCH(bool, transB);
        QFETCH(int, dtype);
        const DType type = DType(dtype);
        const int M = 67, N = 45, K = 129;
        std::vector<float> a = randomValues(std::size_t(M) * K, 8), b = randomValues(std::size_t(K) * N, 9),
                           c = randomValues(std::size_t(M) * N, 10);
        if (type == DType::BF16)
            for (std::vector<float>* v : {&a, &b})
                for (float& e : *v)
                    e = roundToBf16(e);
        const int lda = transA ? M : K, ldb = transB ? K : N;
        Buffer ca(m_cpu, a), cb(m_cpu, b), cc(m_cpu, c);
        Buffer ga(*m_cuda, a, type), gb(*m_cuda, b, type), gc(*m_cuda, c);  // fp32 output and accumulation
        m_cpu.gemm(transA, transB, M, N, K, 0.5f, ca.ptr, lda, cb.ptr, ldb, 0.25f, cc.ptr, N);
        m_cuda->gemm(transA, transB, M, N, K, 0.5f, ga.ptr, lda, gb.ptr, ldb, 0.25f, gc.ptr, N);
        // Sums of K products of unit normals reordered: K x 2^-24 x sqrt(K) or so; 1e-4 is ample.
        const QString problem = farFrom(gc.read(std::size_t(M) * N), cc.read(std::size_t(M) * N), 1e-4);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
    }

private:
    CpuBackend m_cpu;
    std::unique_ptr<Backend> m_cuda;
};

QTEST_APPLESS_MAIN(TestCudaKernels)
#include "tst_cuda_kernels.moc"
