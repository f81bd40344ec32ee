// agent/runtime's NCCL groups over the fake NCCL (tests/agent/fake_nccl.cpp), whose ranks are
// threads or handles of this process, with host streams whose work is done at once: the calls the
// agent makes, in the order it makes them, with no GPU. One world communicator is created and the
// summing groups are split from it, the pipeline getting none; a failed call inside a group ends
// the group before the communicator is aborted (issue 27, finding 21); a peer that never comes
// ends creation, a split or the first collective at the deadline, a wait keeps the host's messages
// moving, and a peer's failure ends a wait at once (finding 22).

#include "agent/runtime/device_groups.h"
#include "agent/runtime/in_process_communicator.h"
#if MESHBENCH_HAVE_CUDA
#include "agent/runtime/nccl_comm.h"
#include "agent/runtime/nccl_communicator.h"
#include "fake_nccl.h"
#endif
#include "far_backend.h"
#include "kernels/backend_choice.h"
#include "parallel_test_support.h"
#if MESHBENCH_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

#include <QtTest>

#include <functional>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using meshbench::agent::testing::onEveryRank;
#if MESHBENCH_HAVE_CUDA
using meshbench::agent::testing::HostStream;
#endif

namespace {

#if MESHBENCH_HAVE_CUDA
// Long enough never to be reached where every peer is there; the tests of a missing peer use kShort.
constexpr std::chrono::milliseconds kLong{60000};
constexpr std::chrono::milliseconds kShort{50};

NcclContext contextOf(const NcclLibrary& library)
{
    return {library, [] { return std::make_unique<HostStream>(); }, kLong};
}

plan::Mesh meshOf(int dp, int pp, int tp, int ep)
{
    plan::ParallelSpec p;
    p.dp = dp;
    p.pp = pp;
    p.tp = tp;
    p.ep = ep;
    return plan::Mesh(p);
}

// What `call` threw as CommError ("" if it returned).
std::string commErrorOf(const std::function<void()>& call)
{
    try {
        call();
    } catch (const CommError& e) {
        return e.what();
    }
    return "";
}

ncclConfig_t nonBlocking()
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    return config;
}

// Rank 1 of a two-rank communicator whose rank 0 is the agent's: it joins, and then does only
// what the test says.
struct Peer {
    const NcclLibrary& library;
    ncclComm_t comm = nullptr;
    Peer(const NcclLibrary& l, const ncclUniqueId& id) : library(l)
    {
        ncclConfig_t config = nonBlocking();
        library.commInitRankConfig(&comm, 2, id, 1, &config);
    }
    ~Peer() { library.commDestroy(comm); }
};
#endif

}  // namespace

class TestNcclCommunicator : public QObject {
    Q_OBJECT

private slots:
#if MESHBENCH_HAVE_CUDA
    void groupsAreSplitFromOneWorldCommunicator()
    {
        agent::testing::FakeNccl fake;
        {
            InProcessMesh mesh(meshOf(2, 2, 2, 1));
            const std::vector<std::string> said = onEveryRank(mesh, [&](int r) {
                agent::testing::FarBackend far;
                ProcessGroups& groups = mesh.groups(r);
                std::string description = attachDeviceCommunicators(groups, far, false, contextOf(fake.library));
                const kernels::DevPtr x = far.allocate(1, kernels::DType::F32);
                groups.tensor->allReduceSum(x, 1);
                groups.data->allReduceSum(x, 1);
                // A pipeline message arrives (over MPI, host-staged: the fake moves no data).
                const float sent = float(100 + r);
                float received = 0;
                if (groups.coord.pp == 0) {
                    far.copyFromHost(x, &sent, 1);
                    groups.pipeline->send(x, 1, 1, 7);
                    groups.pipeline->waitSends();
                } else {
                    groups.pipeline->recv(x, 1, 0, 7);
                    far.copyToHost(&received, x, 1);
                }
                far.release(x);
                const int from = r - groups.mesh.groupStride(plan::GroupKind::Pipeline);
                return groups.coord.pp == 0 || received == float(100 + from) ? description
                                                                             : "lost the pipeline message";
            });
            for (const std::string& s : said)
                QCOMPARE(QString::fromStdString(s),
                         QString("nccl (NCCL 2.99.0; pipeline messages over MPI, host-staged)"));
            // One communicator over the 8 ranks; each rank splits off its tensor, data and expert-data
            // groups (2 members each; the expert group has 1), none for the pipeline.
            QCOMPARE(fake.calls("ncclGetUniqueId"), 1);
            QCOMPARE(fake.calls("ncclCommInitRankConfig"), 8);
            QCOMPARE(fake.calls("ncclCommSplit"), 8 * 3);
            QCOMPARE(fake.calls("ncclAllReduce"), 8 * 2);
            QCOMPARE(fake.calls("ncclSend") + fake.calls("ncclRecv"), 0);
            // The world communicator went once the groups were split, finalised before destroyed.
            QCOMPARE(fake.live(), 8 * 3);
            QCOMPARE(fake.calls("ncclCommFinalize"), 8);
            QCOMPARE(fake.calls("ncclCommDestroy"), 8);
        }
        QCOMPARE(fake.live(), 0);
        QCOMPARE(fake.aborted(), 0);
        QCOMPARE(fake.misuses(), 0);
    }

    void aFailedCallInAGroupEndsTheGroupBeforeTheAbort_data()
    {
        QTest::addColumn<QString>("function");  // the call that fails, on rank 0
        QTest::addColumn<QString>("operation");
        QTest::newRow("uneven reduce-scatter") << "ncclReduce"
                                               << "ncclReduce (uneven reduce-scatter)";
        QTest::newRow("uneven all-gather") << "ncclBroadcast"
                                           << "ncclBroadcast (uneven all-gather)";
        QTest::newRow("all-to-all") << "ncclSend"
                                    << "ncclSend/ncclRecv (all-to-all)";
    }
    void aFailedCallInAGroupEndsTheGroupBeforeTheAbort()
    {
        QFETCH(QString, function);
        QFETCH(QString, operation);
        agent::testing::FakeNccl fake;
        fake.failNext(qPrintable(function), 0, ncclUnhandledCudaError);
        InProcessMesh mesh(meshOf(2, 1, 1, 2));
        const std::vector<std::string> said = onEveryRank(mesh, [&](int r) -> std::string {
            agent::testing::FarBackend far;
            ProcessGroups& groups = mesh.groups(r);
            attachDeviceCommunicators(groups, far, false, contextOf(fake.library));
            if (r != 0)
                return "";
            float in[3] = {}, out[3] = {};
            const kernels::DevPtr inPtr{in, kernels::DType::F32}, outPtr{out, kernels::DType::F32};
            const bool toAll = function == "ncclSend";
            Communicator& group = toAll ? *groups.expert : *groups.data;
            const std::string failure = commErrorOf([&] {
                if (function == "ncclReduce")
                    group.startReduceScatter(inPtr, outPtr, {1, 2}).wait();
                else if (function == "ncclBroadcast")
                    group.startAllGather(inPtr, outPtr, {1, 2}).wait();
                else
                    group.startAllToAll(inPtr, {1, 1}, outPtr, {1, 1}).wait();
            });
            const int depth = fake.groupDepth();
            const std::string later = commErrorOf([&] { group.startAllReduce(outPtr, 1).wait(); });
            return failure + " | depth " + std::to_string(depth) + " | " + later;
        });
        const QString expected =
            QString("NCCL: %1: %2: fake: unhandled cuda error | depth 0 | NCCL: ncclAllReduce: the "
                    "communicator was aborted after an earlier failure")
                .arg(operation, function);
        QCOMPARE(QString::fromStdString(said[0]), expected);
        QCOMPARE(QString::fromStdString(said[1]), QString());
        QCOMPARE(fake.aborted(), 1);
        // The group was ended while the communicator was alive; nothing touched it after the abort.
        QCOMPARE(fake.misuses(), 0);
        QCOMPARE(fake.calls("ncclAllReduce"), 0);
    }

    void aMissingPeerEndsCreationAtTheDeadline()
    {
        agent::testing::FakeNccl fake;
        ncclUniqueId id{};
        QCOMPARE(fake.library.getUniqueId(&id), ncclSuccess);
        const std::string failure = commErrorOf([&] { NcclComm::initRank(fake.library, 2, id, 0, kShort); });
        QCOMPARE(QString::fromStdString(failure),
                 QString("NCCL: ncclCommInitRankConfig did not finish within 50 ms (a peer never joined it: it "
                         "stopped, or took another path)"));
        QCOMPARE(fake.aborted(), 1);
        QCOMPARE(fake.live(), 0);
        QCOMPARE(fake.misuses(), 0);
    }

    void aMissingPeerEndsASplitAtTheDeadline()
    {
        agent::testing::FakeNccl fake;
        ncclUniqueId id{};
        QCOMPARE(fake.library.getUniqueId(&id), ncclSuccess);
        {
            const Peer peer(fake.library, id);
            const std::unique_ptr<NcclComm> world = NcclComm::initRank(fake.library, 2, id, 0, kShort);
            const std::string failure = commErrorOf([&] { world->split(0, 0); });
            QCOMPARE(QString::fromStdString(failure),
                     QString("NCCL: ncclCommSplit did not finish within 50 ms (a peer never joined it: it stopped, or "
                             "took another path)"));
            QCOMPARE(fake.aborted(), 1);  // the new communicator; the world is still usable
        }
        QCOMPARE(fake.calls("ncclCommDestroy"), 2);
        QCOMPARE(fake.live(), 0);
        QCOMPARE(fake.misuses(), 0);
    }

    void aMissingPeerEndsTheFirstCollectiveAtTheDeadline_data()
    {
        QTest::addColumn<bool>("peerCalls");
        QTest::addColumn<QString>("expected");
        QTest::newRow("the peer calls it") << true << QString();
        QTest::newRow("the peer never does")
            << false
            << QString("NCCL: ncclAllReduce did not finish within 50 ms (a peer never joined it: it stopped, or took "
                       "another path)");
    }
    void aMissingPeerEndsTheFirstCollectiveAtTheDeadline()
    {
        QFETCH(bool, peerCalls);
        QFETCH(QString, expected);
        agent::testing::FakeNccl fake;
        ncclUniqueId id{};
        QCOMPARE(fake.library.getUniqueId(&id), ncclSuccess);
        const Peer peer(fake.library, id);
        const std::unique_ptr<NcclComm> comm = NcclComm::initRank(fake.library, 2, id, 0, kShort);
        float x = 0;
        if (peerCalls)
            QCOMPARE(fake.library.allReduce(&x, &x, 1, ncclFloat32, ncclSum, peer.comm, nullptr), ncclInProgress);
        const std::string failure = commErrorOf([&] {
            comm->enqueued(fake.library.allReduce(&x, &x, 1, ncclFloat32, ncclSum, comm->handle(), nullptr),
                           "ncclAllReduce");
        });
        QCOMPARE(QString::fromStdString(failure), expected);
        QCOMPARE(fake.aborted(), peerCalls ? 0 : 1);
        QCOMPARE(fake.misuses(), 0);
    }

    void theHostAdvancesWhileAWaitPolls()
    {
        // The peer joins the collective only once this rank's host has moved (as a peer waiting for
        // one of our MPI messages would): the wait must make progress, not only watch the clock.
        agent::testing::FakeNccl fake;
        ncclUniqueId id{};
        QCOMPARE(fake.library.getUniqueId(&id), ncclSuccess);
        const Peer peer(fake.library, id);
        const std::unique_ptr<NcclComm> comm = NcclComm::initRank(fake.library, 2, id, 0, kLong);
        float x = 0;
        int polls = 0;
        comm->whilePolling([&] {
            if (++polls == 3)
                fake.library.allReduce(&x, &x, 1, ncclFloat32, ncclSum, peer.comm, nullptr);
        });
        const std::string failure = commErrorOf([&] {
            comm->enqueued(fake.library.allReduce(&x, &x, 1, ncclFloat32, ncclSum, comm->handle(), nullptr),
                           "ncclAllReduce");
        });
        QCOMPARE(QString::fromStdString(failure), QString());
        QCOMPARE(polls, 3);
        QCOMPARE(fake.aborted(), 0);
        QCOMPARE(fake.misuses(), 0);
    }

    void aPeersFailureEndsTheWaitAtOnce()
    {
        agent::testing::FakeNccl fake;
        ncclUniqueId id{};
        QCOMPARE(fake.library.getUniqueId(&id), ncclSuccess);
        const std::unique_ptr<NcclComm> comm = NcclComm::initRank(fake.library, 1, id, 0, kLong);
        fake.setAsyncError(0, ncclRemoteError);
        const std::string failure = commErrorOf([&] { comm->waitUntil([] { return false; }, "ncclAllReduce"); });
        QCOMPARE(QString::fromStdString(failure),
                 QString("NCCL: ncclAllReduce: fake: remote process exited or there was a network error"));
        QCOMPARE(fake.aborted(), 1);
    }

    void anOperationThatNeverFinishesEndsAtTheDeadline()
    {
        agent::testing::FakeNccl fake;
        ncclUniqueId id{};
        QCOMPARE(fake.library.getUniqueId(&id), ncclSuccess);
        const std::unique_ptr<NcclComm> comm = NcclComm::initRank(fake.library, 1, id, 0, kShort);
        const std::string failure = commErrorOf([&] { comm->waitUntil([] { return false; }, "ncclAllReduce"); });
        QCOMPARE(QString::fromStdString(failure),
                 QString("NCCL: ncclAllReduce did not finish within 50 ms (a peer stopped, or MESHBENCH_NCCL_TIMEOUT_S "
                         "is too short for this message)"));
        QCOMPARE(fake.aborted(), 1);
    }

    void theSameCallsRunOnNcclItself()
    {
        // For the device check (no GPU here): creation, a split and a collective on one rank with the
        // real libnccl.so.2, non-blocking as the agent makes them.
        const kernels::DeviceStatus device = kernels::cudaDeviceStatus();
        if (!device.usable)
            QSKIP(qPrintable(QString::fromStdString(device.description)));
        const NcclLibrary& nccl = NcclLibrary::process();
        if (!nccl.loaded)
            QSKIP(qPrintable(QString::fromStdString(nccl.description)));
        const std::unique_ptr<kernels::Backend> cuda = kernels::cuda::makeBackend(0);
        ncclUniqueId id{};
        QCOMPARE(nccl.getUniqueId(&id), ncclSuccess);
        const std::unique_ptr<NcclComm> world = NcclComm::initRank(nccl, 1, id, 0, kLong);
        const std::unique_ptr<NcclComm> group = world->split(0, 0);
        const std::vector<float> values{1, 2, 3, 4};
        const kernels::DevPtr in = cuda->allocate(values.size(), kernels::DType::F32);
        const kernels::DevPtr out = cuda->allocate(values.size(), kernels::DType::F32);
        cuda->upload(in, values.data(), values.size());
        const auto stream = static_cast<cudaStream_t>(kernels::cuda::computeStream(*cuda));
        group->enqueued(nccl.allReduce(in.data, out.data, values.size(), ncclFloat32, ncclSum, group->handle(), stream),
                        "ncclAllReduce");
        std::vector<float> sum(values.size());
        cuda->download(sum.data(), out, sum.size());  // in stream order, after the reduction
        QCOMPARE(sum, values);                        // one rank's sum is its own block
        cuda->release(out);
        cuda->release(in);
    }

    void aCommunicatorLeftInOrderIsFinalisedAndDestroyed()
    {
        agent::testing::FakeNccl fake;
        ncclUniqueId id{};
        QCOMPARE(fake.library.getUniqueId(&id), ncclSuccess);
        NcclComm::initRank(fake.library, 1, id, 0, kShort).reset();
        QCOMPARE(fake.calls("ncclCommFinalize"), 1);
        QCOMPARE(fake.calls("ncclCommDestroy"), 1);
        QCOMPARE(fake.aborted(), 0);
        QCOMPARE(fake.live(), 0);
    }
#else
    void needsNccl() { QSKIP("this build has no CUDA, so no NCCL"); }
#endif
};

QTEST_APPLESS_MAIN(TestNcclCommunicator)
#include "tst_nccl_communicator.moc"
