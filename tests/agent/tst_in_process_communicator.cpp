// agent/runtime's in-process communicator: members as threads, each collective checked against the
// same arithmetic done serially here, and every member holding the very same bits; point to point in
// the order sent per tag. The parallel modules' unit tests stand on it.

#include "agent/runtime/in_process_communicator.h"

#include <QtTest>

#include <functional>
#include <thread>

using namespace meshbench::agent;

namespace {

// Runs body(rank, communicator) on `size` threads at once.
void onEveryMember(int size, const std::function<void(int, Communicator&)>& body)
{
    InProcessGroup group(size);
    std::vector<std::unique_ptr<Communicator>> members;
    for (int r = 0; r < size; ++r)
        members.push_back(group.member(r));
    std::vector<std::thread> threads;
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
            c.allReduceSum(reduced[std::size_t(r)].data(), mine.size());
            scattered[std::size_t(r)].resize(kPerRank);
            c.reduceScatterSum(mine.data(), scattered[std::size_t(r)].data(), kPerRank);
            // The member's own block inside the output, as ZeRO gathers parameters.
            gathered[std::size_t(r)].assign(kSize * kPerRank, -1.0f);
            std::copy(mine.begin(), mine.begin() + kPerRank, gathered[std::size_t(r)].begin() + r * kPerRank);
            c.allGather(gathered[std::size_t(r)].data() + r * kPerRank, gathered[std::size_t(r)].data(), kPerRank);
            exchanged[std::size_t(r)].resize(kSize * kPerRank);
            c.allToAll(mine.data(), exchanged[std::size_t(r)].data(), kPerRank);
            broadcasted[std::size_t(r)] = mine;
            c.broadcast(broadcasted[std::size_t(r)].data(), mine.size(), 2);
            double value = double(r) * 1.5;
            c.allReduceMax(&value, 1);
            maxima[std::size_t(r)] = value;
        });
        for (int r = 0; r < kSize; ++r) {
            for (std::size_t i = 0; i < kSize * kPerRank; ++i) {
                float sum = 0;   // in member order, as the communicator promises
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
                    c.send(message, 2, 1, i % 2);
                }
                c.waitSends();
            } else {
                float message[2];
                for (int tag : {1, 1, 0, 0, 0}) {
                    c.recv(message, 2, 0, tag);
                    received.push_back(message[0]);
                }
            }
        });
        QCOMPARE(received, (std::vector<float>{1, 3, 0, 2, 4}));
    }

    void aWrongSizeIsAnError()
    {
        InProcessGroup group(2);
        QVERIFY_THROWS_EXCEPTION(CommError, group.member(2));
        std::unique_ptr<Communicator> a = group.member(0), b = group.member(1);
        const float three[3] = {1, 2, 3};
        a->send(three, 3, 1, 0);
        float two[2];
        QVERIFY_THROWS_EXCEPTION(CommError, b->recv(two, 2, 0, 0));
    }
};

QTEST_APPLESS_MAIN(TestInProcessCommunicator)
#include "tst_in_process_communicator.moc"
