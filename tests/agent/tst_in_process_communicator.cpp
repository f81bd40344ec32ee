// agent/runtime's in-process communicator: members as threads, each collective checked against the
// same arithmetic done serially here, and every member holding the very same bits; point to point in
// the order sent per tag. The parallel modules' unit tests stand on it.

#include "agent/runtime/in_process_communicator.h"

#include <QtTest>

#include <functional>
#include <thread>

using namespace meshbench::agent;
using meshbench::kernels::f32;

namespace {

// Runs body(rank, communicator) on `size` threads at once.
void onEveryMember(int size, const std::function<void(int, Communicator&)>& body)
{
    InProcessGroup group(size);
    std::vector<std::unique_ptr<Communicator>> members;
    members.reserve(std::size_t(size));
    for (int r = 0; r < size; ++r)
        members.push_back(group.member(r));
    std::vector<std::thread> threads;
    threads.reserve(std::size_t(size));
    for (int r = 0; r < size; ++r)
        threads.emplace_back([&, r] { body(r, *members[std::size_t(r)]); });
    for (std::thread& t : threads)
        t.join();
}

// Member r's value for element i: distinct, and not exactly representable sums (order matters).
float valueOf(int r, std::size_t i) { return 0.1f * float(r + 1) + 0.01f * float(i); }

}  // namespace

class TestInProcessCommunicator : public QObject {
    Q_OBJECT

private slots:
    void collectivesGiveTheSerialResult()
    {
        constexpr int kSize = 4;
        constexpr std::size_t kPerRank = 3;
        std::vector<std::vector<float>> reduced(kSize), scattered(kSize), gathered(kSize), exchanged(kSize),
            broadcasted(kSize);
        std::vector<double> maxima(kSize);
        onEveryMember(kSize, [&](int r, Communicator& c) {
            std::vector<float> mine(kSize * kPerRank);
            for (std::size_t i = 0; i < mine.size(); ++i)
                mine[i] = valueOf(r, i);
            reduced[std::size_t(r)] = mine;
            c.allReduceSum(f32(reduced[std::size_t(r)].data()), mine.size());
            scattered[std::size_t(r)].resize(kPerRank);
            c.reduceScatterSum(f32(mine.data()), f32(scattered[std::size_t(r)].data()), kPerRank);
            // The member's own block inside the output, as ZeRO gathers parameters.
            gathered[std::size_t(r)].assign(kSize * kPerRank, -1.0f);
            std::copy(mine.begin(), mine.begin() + kPerRank, gathered[std::size_t(r)].begin() + r * kPerRank);
            c.allGather(f32(gathered[std::size_t(r)].data() + r * kPerRank), f32(gathered[std::size_t(r)].data()),
                        kPerRank);
            exchanged[std::size_t(r)].resize(kSize * kPerRank);
            c.allToAll(f32(mine.data()), f32(exchanged[std::size_t(r)].data()), kPerRank);
            broadcasted[std::size_t(r)] = mine;
            c.broadcast(f32(broadcasted[std::size_t(r)].data()), mine.size(), 2);
            double value = double(r) * 1.5;
            c.allReduceMax(&value, 1);
            maxima[std::size_t(r)] = value;
        });
        for (int r = 0; r < kSize; ++r) {
            for (std::size_t i = 0; i < kSize * kPerRank; ++i) {
                float sum = 0;  // in member order, as the communicator promises
                for (int q = 0; q < kSize; ++q)
                    sum += valueOf(q, i);
                QCOMPARE(reduced[std::size_t(r)][i], sum);
                const int owner = int(i / kPerRank);
                QCOMPARE(gathered[std::size_t(r)][i], valueOf(owner, i % kPerRank));
                QCOMPARE(exchanged[std::size_t(r)][i], valueOf(owner, std::size_t(r) * kPerRank + i % kPerRank));
                QCOMPARE(broadcasted[std::size_t(r)][i], valueOf(2, i));
            }
            for (std::size_t i = 0; i < kPerRank; ++i)
                QCOMPARE(scattered[std::size_t(r)][i], reduced[0][std::size_t(r) * kPerRank + i]);
            QCOMPARE(maxima[std::size_t(r)], 4.5);
        }
    }

    void manyCollectivesInARowStayInStep()
    {
        // Back to back, the buffers doubling as outputs: a member that read a value another had
        // already written for the next round would get a sum that mixes rounds.
        constexpr int kSize = 3;
        std::vector<int> wrong(kSize, 0);
        onEveryMember(kSize, [&](int r, Communicator& c) {
            for (int round = 1; round <= 300; ++round) {
                double value = double((r + 1) * round);
                c.allReduceSum(&value, 1);
                wrong[std::size_t(r)] += value != 6.0 * round;
            }
        });
        QCOMPARE(wrong, std::vector<int>(kSize, 0));
    }

    void pointToPointKeepsOrderPerTag()
    {
        std::vector<float> received;
        onEveryMember(2, [&](int r, Communicator& c) {
            if (r == 0) {
                for (int i = 0; i < 5; ++i) {
                    const float message[2] = {float(i), float(10 + i)};
                    c.send(f32(message), 2, 1, i % 2);
                }
                c.waitSends();
            } else {
                float message[2];
                for (int tag : {1, 1, 0, 0, 0}) {
                    c.recv(f32(message), 2, 0, tag);
                    received.push_back(message[0]);
                }
            }
        });
        QCOMPARE(received, (std::vector<float>{1, 3, 0, 2, 4}));
    }

    void unevenBlocksGoWhereTheirCountsSay()
    {
        // Member r holds r + 1 elements of the reduce-scatter's result and sends r + q + 1 to q in
        // the all-to-all: the v-forms that ZeRO's shards and the expert dispatcher use.
        constexpr int kSize = 3;
        const std::vector<std::size_t> counts{1, 2, 3};
        std::vector<std::vector<float>> scattered(kSize), gathered(kSize), exchanged(kSize);
        std::vector<std::vector<std::int64_t>> splits(kSize);
        onEveryMember(kSize, [&](int r, Communicator& c) {
            std::vector<float> mine(12);  // the most any member sends in the all-to-all
            for (std::size_t i = 0; i < mine.size(); ++i)
                mine[i] = valueOf(r, i);
            scattered[std::size_t(r)].resize(counts[std::size_t(r)]);
            c.startReduceScatter(f32(mine.data()), f32(scattered[std::size_t(r)].data()), counts).wait();
            gathered[std::size_t(r)].resize(6);
            c.startAllGather(f32(mine.data()), f32(gathered[std::size_t(r)].data()), counts).wait();
            std::vector<std::size_t> sendCounts, recvCounts;
            for (int q = 0; q < kSize; ++q) {
                sendCounts.push_back(std::size_t(r + q + 1));
                recvCounts.push_back(std::size_t(q + r + 1));
            }
            std::vector<float> out(std::size_t(3 * r + 6));
            c.startAllToAll(f32(mine.data()), sendCounts, f32(out.data()), recvCounts).wait();
            exchanged[std::size_t(r)] = out;
            std::vector<std::int64_t> in{10 * r, 10 * r + 1, 10 * r + 2, 10 * r + 3, 10 * r + 4, 10 * r + 5}, split(6);
            c.exchangeCounts(in.data(), split.data(), 2);
            splits[std::size_t(r)] = split;
        });
        for (int r = 0; r < kSize; ++r) {
            const std::size_t first = r == 0 ? 0 : r == 1 ? 1 : 3;
            for (std::size_t i = 0; i < counts[std::size_t(r)]; ++i)
                QCOMPARE(scattered[std::size_t(r)][i],
                         valueOf(0, first + i) + valueOf(1, first + i) + valueOf(2, first + i));
            // Member q's block of the gather is its own first counts[q] elements.
            std::size_t at = 0;
            for (int q = 0; q < kSize; ++q)
                for (std::size_t i = 0; i < counts[std::size_t(q)]; ++i)
                    QCOMPARE(gathered[std::size_t(r)][at++], valueOf(q, i));
            // From q: the elements of q's block for r, which starts after q's blocks for 0 .. r - 1.
            at = 0;
            for (int q = 0; q < kSize; ++q) {
                std::size_t start = 0;
                for (int p = 0; p < r; ++p)
                    start += std::size_t(q + p + 1);
                for (std::size_t i = 0; i < std::size_t(q) + std::size_t(r) + 1; ++i)
                    QCOMPARE(exchanged[std::size_t(r)][at++], valueOf(q, start + i));
            }
            for (int q = 0; q < kSize; ++q)
                for (int j = 0; j < 2; ++j)
                    QCOMPARE(splits[std::size_t(r)][std::size_t(2 * q + j)], std::int64_t(10 * q + 2 * r + j));
        }
    }

    void startedOperationsFinishWhenWaitedInOrder()
    {
        // Two all-reduces started back to back: neither output is written at the start, waiting
        // on the second finishes the first too, and a host reduction runs after both.
        constexpr int kSize = 2;
        std::vector<int> wrong(kSize, 0);
        onEveryMember(kSize, [&](int r, Communicator& c) {
            float a = float(r + 1), b = float(10 * (r + 1));
            PendingComm first = c.startAllReduce(f32(&a), 1);
            PendingComm second = c.startAllReduce(f32(&b), 1);
            wrong[std::size_t(r)] += a != float(r + 1) || b != float(10 * (r + 1));
            second.wait();
            wrong[std::size_t(r)] += a != 3.0f || b != 30.0f || !first.done();
            first.wait();  // a no-op now
            float c1 = float(r);
            PendingComm third = c.startAllReduce(f32(&c1), 1);
            double host = 1.0;
            c.allReduceSum(&host, 1);
            wrong[std::size_t(r)] += !third.done() || c1 != 1.0f || host != 2.0;
        });
        QCOMPARE(wrong, std::vector<int>(kSize, 0));
    }

    void aMismatchedAllToAllIsAnErrorOnEveryMember()
    {
        constexpr int kSize = 2;
        std::vector<int> errors(kSize, 0);
        onEveryMember(kSize, [&](int r, Communicator& c) {
            float in[4] = {}, out[4] = {};
            // Member 0 sends 2 to member 1, which expects 1.
            const std::vector<std::size_t> send =
                r == 0 ? std::vector<std::size_t>{1, 2} : std::vector<std::size_t>{1, 1};
            try {
                c.startAllToAll(f32(in), send, f32(out), {1, 1}).wait();
            } catch (const CommError&) {
                ++errors[std::size_t(r)];
            }
        });
        QCOMPARE(errors, (std::vector<int>{0, 1}));
    }

    void aWrongSizeIsAnError()
    {
        InProcessGroup group(2);
        QVERIFY_THROWS_EXCEPTION(CommError, group.member(2));
        std::unique_ptr<Communicator> a = group.member(0), b = group.member(1);
        const float three[3] = {1, 2, 3};
        a->send(f32(three), 3, 1, 0);
        float two[2];
        QVERIFY_THROWS_EXCEPTION(CommError, b->recv(f32(two), 2, 0, 0));
    }
};

QTEST_APPLESS_MAIN(TestInProcessCommunicator)
#include "tst_in_process_communicator.moc"
