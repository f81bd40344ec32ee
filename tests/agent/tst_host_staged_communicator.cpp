// agent/runtime's host staging: every operation over device memory that the host cannot touch
// (tests/agent/far_backend.h, whose pointers fault when dereferenced, as a GPU's would) gives the
// same bits as the same operation over host memory, and reaches that memory through the backend's
// copies only.

#include "agent/runtime/host_staged_communicator.h"
#include "agent/runtime/in_process_communicator.h"
#include "far_backend.h"

#include <QtTest>

#include <functional>
#include <thread>

using namespace meshbench::agent;
using meshbench::kernels::ConstDevPtr;
using meshbench::kernels::DevPtr;
using meshbench::kernels::DType;

namespace {

using meshbench::agent::testing::FarBackend;

constexpr int kSize = 4;

// Member r's input: distinct values whose sums depend on the order of addition.
std::vector<float> inputOf(int r, std::size_t n)
{
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = 0.1f * float(r + 1) + 0.013f * float(i) + 1e-7f * float(i * i);
    return v;
}

// Uneven blocks, one of them empty, as ZeRO shards and the MoE dispatch have.
std::vector<std::size_t> blocks() { return {3, 0, 5, 2}; }

// What member r ends with after each operation of the interface.
struct Results {
    std::vector<float> reduced, scattered, gathered, broadcasted, exchanged, received;
};

// How host vectors become the buffers the communicator is given, and come back.
struct Buffers {
    std::function<DevPtr(const std::vector<float>&)> in;
    std::function<std::vector<float>(DevPtr, std::size_t)> out;
};

Results exercise(int r, Communicator& c, const Buffers& b)
{
    const std::vector<std::size_t> counts = blocks();
    const std::size_t sum = 10;
    Results results;

    DevPtr data = b.in(inputOf(r, sum));
    c.startAllReduce(data, sum).wait();
    results.reduced = b.out(data, sum);

    DevPtr in = b.in(inputOf(r, sum));
    DevPtr scattered = b.in(std::vector<float>(counts[std::size_t(r)], -1.0f));
    PendingComm scatter = c.startReduceScatter(in, scattered, counts);
    scatter.wait();
    results.scattered = b.out(scattered, counts[std::size_t(r)]);

    DevPtr mine = b.in(inputOf(r, counts[std::size_t(r)]));
    DevPtr gathered = b.in(std::vector<float>(sum, -1.0f));
    c.startAllGather(mine, gathered, counts).wait();
    results.gathered = b.out(gathered, sum);

    DevPtr root = b.in(r == 2 ? inputOf(r, 7) : std::vector<float>(7, -1.0f));
    c.startBroadcast(root, 7, 2).wait();
    results.broadcasted = b.out(root, 7);

    // Member r sends counts[(r + p) % size] elements to member p.
    std::vector<std::size_t> sends(kSize), recvs(kSize);
    for (int p = 0; p < kSize; ++p) {
        sends[std::size_t(p)] = counts[std::size_t((r + p) % kSize)];
        recvs[std::size_t(p)] = counts[std::size_t((p + r) % kSize)];
    }
    DevPtr toAll = b.in(inputOf(r, 10));
    DevPtr fromAll = b.in(std::vector<float>(10, -1.0f));
    c.startAllToAll(toAll, sends, fromAll, recvs).wait();
    results.exchanged = b.out(fromAll, 10);

    // A ring: send to the next member, receive from the previous.
    DevPtr message = b.in(inputOf(r, 4));
    c.send(message, 4, (r + 1) % kSize, 7);
    DevPtr arrived = b.in(std::vector<float>(4, -1.0f));
    c.recv(arrived, 4, (r + kSize - 1) % kSize, 7);
    c.waitSends();
    results.received = b.out(arrived, 4);
    return results;
}

std::vector<Results>
onEveryMember(const std::function<Results(int, Communicator&)>& body,
              const std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>)>& wrap)
{
    InProcessGroup group(kSize);
    std::vector<std::unique_ptr<Communicator>> members;
    members.reserve(std::size_t(kSize));
    for (int r = 0; r < kSize; ++r)
        members.push_back(wrap(group.member(r)));
    std::vector<Results> results(kSize);
    std::vector<std::thread> threads;
    threads.reserve(std::size_t(kSize));
    for (int r = 0; r < kSize; ++r)
        threads.emplace_back([&, r] { results[std::size_t(r)] = body(r, *members[std::size_t(r)]); });
    for (std::thread& t : threads)
        t.join();
    return results;
}

}  // namespace

class TestHostStagedCommunicator : public QObject {
    Q_OBJECT

private slots:
    void stagedOperationsGiveTheHostBits()
    {
        // Host memory straight to the in-process group: the reference.
        std::vector<std::vector<std::vector<float>>> owned(kSize);
        const auto host = [&](int r) {
            return Buffers{[&, r](const std::vector<float>& v) {
                               owned[std::size_t(r)].push_back(v);
                               return DevPtr{owned[std::size_t(r)].back().data(), DType::F32};
                           },
                           [](DevPtr p, std::size_t n) {
                               const float* f = static_cast<const float*>(p.data);
                               return std::vector<float>(f, f + n);
                           }};
        };
        for (auto& o : owned)
            o.reserve(16);  // the pointers handed out stay valid
        const std::vector<Results> expected =
            onEveryMember([&](int r, Communicator& c) { return exercise(r, c, host(r)); },
                          [](std::unique_ptr<Communicator> c) { return c; });

        // The same through host staging over memory only the backend can reach.
        FarBackend far;
        std::vector<std::vector<DevPtr>> allocated(kSize);
        const auto device = [&](int r) {
            return Buffers{[&, r](const std::vector<float>& v) {
                               const DevPtr p = far.allocate(v.size(), DType::F32);
                               far.copyFromHost(p, v.data(), v.size());
                               allocated[std::size_t(r)].push_back(p);
                               return p;
                           },
                           [&](DevPtr p, std::size_t n) {
                               std::vector<float> v(n);
                               far.copyToHost(v.data(), p, n);
                               return v;
                           }};
        };
        const std::vector<Results> staged =
            onEveryMember([&](int r, Communicator& c) { return exercise(r, c, device(r)); },
                          [&](std::unique_ptr<Communicator> c) {
                              return std::make_unique<HostStagedCommunicator>(std::move(c), far);
                          });
        for (auto& list : allocated)
            for (DevPtr p : list)
                far.release(p);

        for (int r = 0; r < kSize; ++r) {
            const Results& e = expected[std::size_t(r)];
            const Results& s = staged[std::size_t(r)];
            QCOMPARE(s.reduced, e.reduced);
            QCOMPARE(s.scattered, e.scattered);
            QCOMPARE(s.gathered, e.gathered);
            QCOMPARE(s.broadcasted, e.broadcasted);
            QCOMPARE(s.exchanged, e.exchanged);
            QCOMPARE(s.received, e.received);
        }
        // The reference itself is the arithmetic: member 0's reduce-scatter block is the sum of the
        // members' first three elements in member order.
        for (std::size_t i = 0; i < 3; ++i) {
            float sum = 0;
            for (int r = 0; r < kSize; ++r)
                sum += inputOf(r, 10)[i];
            QCOMPARE(expected[0].scattered[i], sum);
        }
        QCOMPARE(expected[3].broadcasted, inputOf(2, 7));
        QVERIFY(far.copiedElements() > 0);
    }

    void aDroppedOperationStillLandsOnTheDevice()
    {
        // A PendingComm destroyed unwaited is waited for, output copy included.
        FarBackend far;
        InProcessGroup group(2);
        std::vector<std::unique_ptr<Communicator>> members;
        members.reserve(2);
        for (int r = 0; r < 2; ++r)
            members.push_back(std::make_unique<HostStagedCommunicator>(group.member(r), far));
        std::vector<std::vector<float>> out(2);
        std::vector<std::thread> threads;
        threads.reserve(2);
        for (int r = 0; r < 2; ++r)
            threads.emplace_back([&, r] {
                const DevPtr p = far.allocate(3, DType::F32);
                const std::vector<float> mine = inputOf(r, 3);
                far.copyFromHost(p, mine.data(), 3);
                {
                    PendingComm dropped = members[std::size_t(r)]->startAllReduce(p, 3);
                }
                out[std::size_t(r)].resize(3);
                far.copyToHost(out[std::size_t(r)].data(), p, 3);
                far.release(p);
            });
        for (std::thread& t : threads)
            t.join();
        for (std::size_t i = 0; i < 3; ++i)
            QCOMPARE(out[0][i], inputOf(0, 3)[i] + inputOf(1, 3)[i]);
        QCOMPARE(out[1], out[0]);
    }
};

QTEST_APPLESS_MAIN(TestHostStagedCommunicator)
#include "tst_host_staged_communicator.moc"
