// agent/parallel/tensor_parallel: Megatron's column- and row-parallel linears, sequence
// parallelism's gather and reduce-scatter, the vocabulary-parallel embedding and cross-entropy, on
// in-process tensor groups of 2 and 4 threads (and without a group), each against the dense
// single-rank computation written here with plain loops (in double where arithmetic is involved).
//
// Tolerances. The module computes in fp32 (OpenBLAS GEMMs, the group's fp32 sums); the references
// are exact up to double rounding. A float sum of n terms is within n x 2^-24 x sum |terms| of the
// exact one (Higham's gamma_n); with at most 64 terms here that is below 4e-6 x sum |terms|, so
// 1e-5 x (sum |terms|) bounds every linear and reduction result with room to spare. Copies
// (embedding rows, gathers) and float scatter-adds done in the same token order are compared
// exactly.

#include "agent/parallel/tensor_parallel.h"
#include "agent/runtime/device_buffer.h"
#include "agent/runtime/in_process_communicator.h"

#include "kernels/cpu/cpu_backend.h"

#include "parallel_test_support.h"

#include <QtTest>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using kernels::f32;
using meshbench::agent::testing::randomValues;

namespace {

constexpr int kTokens = 8;  // divisible by every tp below
constexpr int kIn = 16;
constexpr int kOut = 12;
constexpr int kHidden = 6;
constexpr int kVocab = 16;

std::vector<std::int32_t> randomIds(int n, int vocab, std::uint32_t seed)
{
    std::mt19937 engine(seed);
    std::uniform_int_distribution<std::int32_t> pick(0, vocab - 1);
    std::vector<std::int32_t> ids(std::size_t(n), 0);
    for (std::int32_t& id : ids)
        id = pick(engine);
    return ids;
}

// Runs body(rank, tensorParallel, backend) on every member of a tensor group of tp threads, each
// with a CPU backend of its own; tp == 1 means no group at all (TensorParallel(backend)), on this
// thread.
void onEveryRank(int tp, bool sequenceParallel,
                 const std::function<void(int, TensorParallel&, kernels::Backend&)>& body)
{
    if (tp == 1) {
        kernels::CpuBackend backend;
        TensorParallel local(backend);
        body(0, local, backend);
        return;
    }
    InProcessGroup group(tp);
    std::vector<std::unique_ptr<Communicator>> members;
    members.reserve(std::size_t(tp));
    for (int r = 0; r < tp; ++r)
        members.push_back(group.member(r));
    std::vector<std::thread> threads;
    threads.reserve(std::size_t(tp));
    for (int r = 0; r < tp; ++r)
        threads.emplace_back([&, r] {
            kernels::CpuBackend backend;
            TensorParallel tensor(backend, members[std::size_t(r)].get(), sequenceParallel);
            body(r, tensor, backend);
        });
    for (std::thread& t : threads)
        t.join();
}

// Host values through a device buffer and back.
DeviceBuffer uploaded(kernels::Backend& backend, const std::vector<float>& values)
{
    DeviceBuffer buffer(backend, values.size());
    backend.upload(buffer.ptr(), values.data(), values.size());
    return buffer;
}
std::vector<float> downloaded(kernels::Backend& backend, const DeviceBuffer& buffer)
{
    std::vector<float> values(buffer.size());
    backend.download(values.data(), buffer.ptr(), values.size());
    return values;
}

// Rows [first, first + count) of a row-major [rows, width] matrix.
std::vector<float> rowsOf(const std::vector<float>& m, int width, int first, int count)
{
    return {m.begin() + std::ptrdiff_t(first) * width, m.begin() + std::ptrdiff_t(first + count) * width};
}
// Columns [first, first + count) of a row-major [rows, width] matrix, as [rows, count].
std::vector<float> columnsOf(const std::vector<float>& m, int width, int first, int count)
{
    const int rows = int(m.size()) / width;
    std::vector<float> block;
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < count; ++j)
            block.push_back(m[std::size_t(i) * std::size_t(width) + std::size_t(first + j)]);
    return block;
}

// A reference value and the error its float computation may have.
struct Expected {
    std::vector<double> value;
    std::vector<double> tolerance;
};

// Empty when every got[i] is within tolerance[i] of want[i]; otherwise the first mismatch's numbers.
QString mismatch(const std::vector<float>& got, const Expected& want, const QString& what)
{
    if (got.size() != want.value.size())
        return QStringLiteral("%1: %2 values, expected %3").arg(what).arg(got.size()).arg(want.value.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!(std::abs(double(got[i]) - want.value[i]) <= want.tolerance[i]))
            return QStringLiteral("%1[%2] = %3, expected %4 +- %5")
                .arg(what)
                .arg(i)
                .arg(double(got[i]), 0, 'g', 9)
                .arg(want.value[i], 0, 'g', 9)
                .arg(want.tolerance[i], 0, 'g', 3);
    return {};
}
QString mismatchExact(const std::vector<float>& got, const std::vector<float>& want, const QString& what)
{
    if (got.size() != want.size())
        return QStringLiteral("%1: %2 values, expected %3").arg(what).arg(got.size()).arg(want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i])
            return QStringLiteral("%1[%2] = %3, expected exactly %4")
                .arg(what)
                .arg(i)
                .arg(double(got[i]), 0, 'g', 9)
                .arg(double(want[i]), 0, 'g', 9);
    return {};
}

// Rows [first, first + count) of a [rows, width] expectation.
Expected rowsOf(const Expected& e, int width, int first, int count)
{
    const auto begin = std::ptrdiff_t(first) * width, end = std::ptrdiff_t(first + count) * width;
    return {{e.value.begin() + begin, e.value.begin() + end}, {e.tolerance.begin() + begin, e.tolerance.begin() + end}};
}
Expected columnsOf(const Expected& e, int width, int first, int count)
{
    Expected block;
    const int rows = int(e.value.size()) / width;
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < count; ++j) {
            block.value.push_back(e.value[std::size_t(i) * std::size_t(width) + std::size_t(first + j)]);
            block.tolerance.push_back(e.tolerance[std::size_t(i) * std::size_t(width) + std::size_t(first + j)]);
        }
    return block;
}

// start + x W^T for x [T, in], W [out, in], start [T, out] (zero when empty), in double, with the
// float bound 1e-5 x (|start| + sum |x W|).
Expected linearReference(const std::vector<float>& x, const std::vector<float>& w, int tokens, int out, int in,
                         const std::vector<float>& start)
{
    Expected e;
    for (int t = 0; t < tokens; ++t)
        for (int o = 0; o < out; ++o) {
            const double s0 = start.empty() ? 0.0 : double(start[std::size_t(t) * std::size_t(out) + std::size_t(o)]);
            double sum = s0, magnitude = std::abs(s0);
            for (int i = 0; i < in; ++i) {
                const double term = double(x[std::size_t(t) * std::size_t(in) + std::size_t(i)]) *
                                    double(w[std::size_t(o) * std::size_t(in) + std::size_t(i)]);
                sum += term;
                magnitude += std::abs(term);
            }
            e.value.push_back(sum);
            e.tolerance.push_back(1e-5 * magnitude);
        }
    return e;
}

void addSizes()
{
    QTest::addColumn<int>("tp");
    QTest::addColumn<bool>("sp");
    QTest::newRow("no group") << 1 << false;
    QTest::newRow("tp2") << 2 << false;
    QTest::newRow("tp2 sp") << 2 << true;
    QTest::newRow("tp4") << 4 << false;
    QTest::newRow("tp4 sp") << 4 << true;
}

}  // namespace

class TestTensorParallel : public QObject {
    Q_OBJECT

private slots:
    void columnParallelLinearGivesItsBlockOfColumns_data() { addSizes(); }
    void columnParallelLinearGivesItsBlockOfColumns()
    {
        QFETCH(int, tp);
        QFETCH(bool, sp);
        const std::vector<float> x = randomValues(std::size_t(kTokens) * kIn, 1);
        const std::vector<float> w = randomValues(std::size_t(kOut) * kIn, 2);
        const Expected dense = linearReference(x, w, kTokens, kOut, kIn, {});
        const int outLocal = kOut / tp;
        std::vector<QString> failures(static_cast<std::size_t>(tp));
        onEveryRank(tp, sp, [&](int r, TensorParallel& tensor, kernels::Backend& backend) {
            // The whole input (with sequence parallelism a caller gathers it first), this rank's rows of W.
            DeviceBuffer xd = uploaded(backend, x), wd = uploaded(backend, rowsOf(w, kIn, r * outLocal, outLocal));
            DeviceBuffer y(backend, std::size_t(kTokens) * std::size_t(outLocal));
            backend.fill(y.ptr(), 7.0f, y.size());  // overwritten, not added to
            tensor.columnParallelLinear(xd.ptr(), kTokens, wd.ptr(), outLocal, kIn, y.ptr());
            failures[std::size_t(r)] = mismatch(downloaded(backend, y), columnsOf(dense, kOut, r * outLocal, outLocal),
                                                QStringLiteral("rank %1 y").arg(r));
        });
        for (const QString& failure : failures)
            QVERIFY2(failure.isEmpty(), qPrintable(failure));
    }

    void rowParallelLinearAddsTheSumOverRanks_data() { addSizes(); }
    void rowParallelLinearAddsTheSumOverRanks()
    {
        QFETCH(int, tp);
        QFETCH(bool, sp);
        const std::vector<float> x = randomValues(std::size_t(kTokens) * kIn, 3);
        const std::vector<float> w = randomValues(std::size_t(kOut) * kIn, 4);
        const std::vector<float> start = randomValues(std::size_t(kTokens) * kOut, 5);  // dst is added into
        const Expected dense = linearReference(x, w, kTokens, kOut, kIn, start);
        const int inLocal = kIn / tp;
        std::vector<QString> failures(static_cast<std::size_t>(tp));
        std::vector<int> localTokens(static_cast<std::size_t>(tp)), firstTokens(static_cast<std::size_t>(tp));
        onEveryRank(tp, sp, [&](int r, TensorParallel& tensor, kernels::Backend& backend) {
            const int rows = tensor.localTokens(kTokens), first = tensor.firstLocalToken(kTokens);
            localTokens[std::size_t(r)] = rows;
            firstTokens[std::size_t(r)] = first;
            DeviceBuffer xd = uploaded(backend, columnsOf(x, kIn, r * inLocal, inLocal));
            DeviceBuffer wd = uploaded(backend, columnsOf(w, kIn, r * inLocal, inLocal));
            DeviceBuffer dst = uploaded(backend, rowsOf(start, kOut, first, rows));
            tensor.rowParallelLinear(xd.ptr(), kTokens, wd.ptr(), kOut, inLocal, dst.ptr());
            failures[std::size_t(r)] = mismatch(downloaded(backend, dst), rowsOf(dense, kOut, first, rows),
                                                QStringLiteral("rank %1 dst").arg(r));
        });
        for (const QString& failure : failures)
            QVERIFY2(failure.isEmpty(), qPrintable(failure));
        // Sequence parallelism: rank r's rows are [r T/tp, (r + 1) T/tp); otherwise every token.
        for (int r = 0; r < tp; ++r) {
            QCOMPARE(localTokens[std::size_t(r)], sp ? kTokens / tp : kTokens);
            QCOMPARE(firstTokens[std::size_t(r)], sp ? r * kTokens / tp : 0);
        }
    }

    void gatherSequenceJoinsTheRanksRows_data()
    {
        QTest::addColumn<int>("tp");
        QTest::newRow("no group") << 1;
        QTest::newRow("tp2 sp") << 2;
        QTest::newRow("tp4 sp") << 4;
    }
    void gatherSequenceJoinsTheRanksRows()
    {
        // The gather is sequence parallelism's (the model calls it only then); without a group the
        // rank's rows are all rows.
        QFETCH(int, tp);
        const std::vector<float> whole = randomValues(std::size_t(kTokens) * kHidden, 6);
        std::vector<QString> failures(static_cast<std::size_t>(tp));
        onEveryRank(tp, true, [&](int r, TensorParallel& tensor, kernels::Backend& backend) {
            const int rows = tensor.localTokens(kTokens), first = tensor.firstLocalToken(kTokens);
            DeviceBuffer local = uploaded(backend, rowsOf(whole, kHidden, first, rows));
            DeviceBuffer full(backend, whole.size());
            backend.fill(full.ptr(), -3.0f, full.size());
            tensor.gatherSequence(local.ptr(), full.ptr(), whole.size());
            failures[std::size_t(r)] =
                mismatchExact(downloaded(backend, full), whole, QStringLiteral("rank %1 full").arg(r));
        });
        for (const QString& failure : failures)
            QVERIFY2(failure.isEmpty(), qPrintable(failure));
    }

    void completePartialSumsOverTheGroup_data() { addSizes(); }
    void completePartialSumsOverTheGroup()
    {
        QFETCH(int, tp);
        QFETCH(bool, sp);
        const std::size_t n = std::size_t(kTokens) * kHidden;
        std::vector<std::vector<float>> partials;
        partials.reserve(std::size_t(tp));
        for (int r = 0; r < tp; ++r)
            partials.push_back(randomValues(n, 10 + std::uint32_t(r)));
        Expected sum{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
        for (std::size_t i = 0; i < n; ++i) {
            for (int r = 0; r < tp; ++r) {
                sum.value[i] += double(partials[std::size_t(r)][i]);
                sum.tolerance[i] += 1e-5 * std::abs(double(partials[std::size_t(r)][i]));
            }
        }
        std::vector<QString> failures(static_cast<std::size_t>(tp));
        onEveryRank(tp, sp, [&](int r, TensorParallel& tensor, kernels::Backend& backend) {
            DeviceBuffer full = uploaded(backend, partials[std::size_t(r)]);
            const int rows = tensor.localTokens(kTokens), first = tensor.firstLocalToken(kTokens);
            if (tensor.sequenceParallel()) {
                DeviceBuffer local(backend, std::size_t(rows) * kHidden);
                tensor.completePartial(full.ptr(), local.ptr(), n);
                failures[std::size_t(r)] = mismatch(downloaded(backend, local), rowsOf(sum, kHidden, first, rows),
                                                    QStringLiteral("rank %1 local").arg(r));
            } else {
                // Completed in place; `local` is the same buffer, as the model passes it.
                tensor.completePartial(full.ptr(), full.ptr(), n);
                failures[std::size_t(r)] =
                    mismatch(downloaded(backend, full), sum, QStringLiteral("rank %1 full").arg(r));
            }
        });
        for (const QString& failure : failures)
            QVERIFY2(failure.isEmpty(), qPrintable(failure));
    }

    void vocabParallelEmbeddingLooksUpAndScattersItsBlock_data() { addSizes(); }
    void vocabParallelEmbeddingLooksUpAndScattersItsBlock()
    {
        QFETCH(int, tp);
        QFETCH(bool, sp);
        const std::vector<float> table = randomValues(std::size_t(kVocab) * kHidden, 20);
        const std::vector<float> dOut = randomValues(std::size_t(kTokens) * kHidden, 21);
        const std::vector<float> gradStart = randomValues(std::size_t(kVocab) * kHidden, 22);  // accumulated into
        std::vector<std::int32_t> ids = randomIds(kTokens, kVocab, 23);
        ids[3] = ids[1];  // a repeated id: its gradient rows add up
        ids[0] = 0;       // the first and last ids of the vocabulary
        ids[kTokens - 1] = kVocab - 1;

        // Dense: the lookup, and the scatter-add in token order (float, as the kernel documents).
        std::vector<float> lookup, tableGrad = gradStart;
        for (int t = 0; t < kTokens; ++t)
            for (int j = 0; j < kHidden; ++j) {
                lookup.push_back(table[std::size_t(ids[std::size_t(t)]) * kHidden + std::size_t(j)]);
                tableGrad[std::size_t(ids[std::size_t(t)]) * kHidden + std::size_t(j)] +=
                    dOut[std::size_t(t) * kHidden + std::size_t(j)];
            }

        const int block = kVocab / tp;
        std::vector<QString> failures(static_cast<std::size_t>(tp));
        std::vector<int> firsts(static_cast<std::size_t>(tp));
        onEveryRank(tp, sp, [&](int r, TensorParallel& tensor, kernels::Backend& backend) {
            firsts[std::size_t(r)] = tensor.vocabFirst(kVocab);
            const int rows = tensor.localTokens(kTokens), first = tensor.firstLocalToken(kTokens);
            DeviceBuffer tableBlock = uploaded(backend, rowsOf(table, kHidden, r * block, block));
            DeviceBuffer stream(backend, std::size_t(rows) * kHidden);
            backend.fill(stream.ptr(), 5.0f, stream.size());  // overwritten
            tensor.embeddingForward(ids, kVocab, tableBlock.ptr(), kHidden, stream.ptr());
            QString failure = mismatchExact(downloaded(backend, stream), rowsOf(lookup, kHidden, first, rows),
                                            QStringLiteral("rank %1 stream").arg(r));

            // The stream's gradient: this rank's rows with sequence parallelism, else all of them.
            DeviceBuffer dStream = uploaded(backend, rowsOf(dOut, kHidden, first, rows));
            DeviceBuffer gradBlock = uploaded(backend, rowsOf(gradStart, kHidden, r * block, block));
            tensor.embeddingBackward(ids, kVocab, dStream.ptr(), kHidden, gradBlock.ptr());
            if (failure.isEmpty())
                failure = mismatchExact(downloaded(backend, gradBlock), rowsOf(tableGrad, kHidden, r * block, block),
                                        QStringLiteral("rank %1 table gradient").arg(r));
            failures[std::size_t(r)] = failure;
        });
        for (const QString& failure : failures)
            QVERIFY2(failure.isEmpty(), qPrintable(failure));
        for (int r = 0; r < tp; ++r)
            QCOMPARE(firsts[std::size_t(r)], r * block);
    }

    void vocabParallelCrossEntropyEqualsTheDenseOne_data() { addSizes(); }
    void vocabParallelCrossEntropyEqualsTheDenseOne()
    {
        // Loss and gradient against the dense log-softmax in double. The module's fp32 parts: the
        // logits are exact inputs; the gradient is rounded to float once or twice (scale x softmax,
        // then minus scale), and without a group the CPU kernel's float exp of a float difference is
        // a few ulps off: every error is well below 1e-6 x lossScale per element and 1e-6 relative on
        // the loss, so 1e-5 (relative to lossScale, the size of the largest gradient entry, and to
        // the loss) leaves a margin of ten.
        QFETCH(int, tp);
        QFETCH(bool, sp);
        const std::vector<float> logits = randomValues(std::size_t(kTokens) * kVocab, 30, 3.0f);
        std::vector<std::int32_t> targets = randomIds(kTokens, kVocab, 31);
        targets[0] = 0;
        targets[kTokens - 1] = kVocab - 1;
        const float lossScale = 1.0f / float(kTokens);

        double denseLoss = 0.0;
        Expected gradient;
        for (int t = 0; t < kTokens; ++t) {
            const float* row = logits.data() + std::size_t(t) * kVocab;
            double max = row[0];
            for (int j = 1; j < kVocab; ++j)
                max = std::max(max, double(row[j]));
            double sum = 0.0;
            for (int j = 0; j < kVocab; ++j)
                sum += std::exp(double(row[j]) - max);
            const double logSum = std::log(sum) + max;
            denseLoss += logSum - double(row[targets[std::size_t(t)]]);
            for (int j = 0; j < kVocab; ++j) {
                const double softmax = std::exp(double(row[j]) - logSum);
                gradient.value.push_back(double(lossScale) * (softmax - (j == targets[std::size_t(t)] ? 1.0 : 0.0)));
                gradient.tolerance.push_back(1e-5 * double(lossScale));
            }
        }

        const int block = kVocab / tp;
        std::vector<double> losses(static_cast<std::size_t>(tp));
        std::vector<QString> failures(static_cast<std::size_t>(tp));
        onEveryRank(tp, sp, [&](int r, TensorParallel& tensor, kernels::Backend& backend) {
            // Every token's logits (the output layer sees all of them), this rank's vocabulary block.
            DeviceBuffer mine = uploaded(backend, columnsOf(logits, kVocab, r * block, block));
            losses[std::size_t(r)] = tensor.crossEntropy(mine.ptr(), targets, kVocab, lossScale);
            failures[std::size_t(r)] =
                mismatch(downloaded(backend, mine), columnsOf(gradient, kVocab, r * block, block),
                         QStringLiteral("rank %1 dLogits").arg(r));
        });
        for (const QString& failure : failures)
            QVERIFY2(failure.isEmpty(), qPrintable(failure));
        for (int r = 0; r < tp; ++r)
            QVERIFY2(std::abs(losses[std::size_t(r)] - denseLoss) <= 1e-5 * denseLoss,
                     qPrintable(QStringLiteral("rank %1 loss %2, dense %3")
                                    .arg(r)
                                    .arg(losses[std::size_t(r)], 0, 'g', 12)
                                    .arg(denseLoss, 0, 'g', 12)));
    }
};

QTEST_APPLESS_MAIN(TestTensorParallel)
#include "tst_tensor_parallel.moc"
