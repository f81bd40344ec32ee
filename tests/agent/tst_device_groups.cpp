// agent/runtime's choice of communicators: plain MPI groups stay as they are on host memory; on
// device memory whose ranks share a GPU every group is host-staged, and says why; NCCL, where this
// build has it, is found at run time and named with its version. The ranks choose together: with
// the fake NCCL (tests/agent/fake_nccl.cpp), a rank whose own view forbids NCCL keeps every rank
// from creating a communicator, where a rank that chose alone would wait for it until the deadline.

#include "agent/runtime/device_groups.h"
#include "agent/runtime/in_process_communicator.h"
#if MESHBENCH_HAVE_CUDA
#include "agent/runtime/nccl_communicator.h"
#include "fake_nccl.h"
#endif
#include "far_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "parallel_test_support.h"

#include <QRegularExpression>
#include <QtTest>

#include <functional>
#include <set>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using meshbench::agent::testing::onEveryRank;
#if MESHBENCH_HAVE_CUDA
using meshbench::agent::testing::HostStream;
#endif

namespace {

plan::Mesh demoMesh()
{
    plan::ParallelSpec p;
    p.dp = 2;
    p.tp = 2;
    return plan::Mesh(p);
}

plan::Mesh dataParallel(int ranks)
{
    plan::ParallelSpec p;
    p.dp = ranks;
    return plan::Mesh(p);
}

// The communicators of one rank's groups, in a fixed order.
std::vector<const Communicator*> members(const ProcessGroups& g)
{
    return {g.world.get(), g.tensor.get(), g.pipeline.get(), g.data.get(), g.expert.get(), g.expertData.get()};
}

#if MESHBENCH_HAVE_CUDA
NcclContext contextOf(const NcclLibrary& library)
{
    // Short: on a wrong choice, the ranks that entered NCCL would end here instead of hanging.
    return {library, [] { return std::make_unique<HostStream>(); }, std::chrono::seconds(10)};
}
#endif

}  // namespace

class TestDeviceGroups : public QObject {
    Q_OBJECT

private slots:
    void hostMemoryKeepsPlainMpi()
    {
        InProcessMesh mesh(demoMesh());
        kernels::CpuBackend cpu;
        const std::vector<const Communicator*> before = members(mesh.groups(0));
        const std::vector<std::string> said =
            onEveryRank(mesh, [&](int r) { return attachDeviceCommunicators(mesh.groups(r), cpu, true); });
        for (const std::string& s : said)
            QCOMPARE(QString::fromStdString(s), QString("mpi"));
        QVERIFY(members(mesh.groups(0)) == before);
    }

    void sharedDevicesStageEveryGroupThroughTheHost()
    {
        InProcessMesh mesh(demoMesh());
        agent::testing::FarBackend far;
        const std::vector<std::string> said = onEveryRank(mesh, [&](int r) {
            std::string description = attachDeviceCommunicators(mesh.groups(r), far, true);
            // A data-parallel sum over device memory through the staged group.
            const kernels::DevPtr x = far.allocate(3, kernels::DType::F32);
            const float mine[3] = {float(r), 1.0f, 0.5f};
            far.copyFromHost(x, mine, 3);
            mesh.groups(r).data->allReduceSum(x, 3);
            float sum[3];
            far.copyToHost(sum, x, 3);
            far.release(x);
            const int other = mesh.groups(r).coord.dp == 0 ? r + mesh.groups(r).mesh.groupStride(plan::GroupKind::Data)
                                                           : r - mesh.groups(r).mesh.groupStride(plan::GroupKind::Data);
            return sum[0] == float(r + other) && sum[1] == 2.0f && sum[2] == 1.0f ? description : "wrong sum";
        });
        for (const std::string& s : said)
            QCOMPARE(QString::fromStdString(s), QString("mpi, host-staged (ranks share a GPU, which NCCL refuses)"));
    }

    void ncclIsFoundAtRunTimeAndNamed()
    {
#if MESHBENCH_HAVE_CUDA
        const NcclAvailability nccl = ncclAvailability();
        const QString description = QString::fromStdString(nccl.description);
        if (nccl.available)
            QVERIFY2(QRegularExpression("^NCCL 2\\.\\d+\\.\\d+$").match(description).hasMatch(),
                     qPrintable(description));
        else
            QVERIFY2(description.contains("libnccl.so.2") && description.contains("LD_LIBRARY_PATH"),
                     qPrintable(description));
#else
        QSKIP("this build has no CUDA, so no NCCL");
#endif
    }

    // Issue 27, finding 20: each rank's view differs, the choice must not.
    void everyRankMakesTheSameChoice_data()
    {
        QTest::addColumn<int>("ranks");
        QTest::addColumn<QList<int>>("sharing");      // ranks whose GPU another rank of theirs has
        QTest::addColumn<QList<int>>("withoutNccl");  // ranks whose machine has no NCCL
        QTest::addColumn<QList<int>>("onTheCpu");     // ranks whose backend is host memory
        QTest::addColumn<QStringList>("expected");    // what each rank says
        const QString sharing = "mpi, host-staged (ranks share a GPU, which NCCL refuses)";
        QTest::newRow("5 ranks on 4 GPUs")
            << 5 << QList<int>{0, 4} << QList<int>{} << QList<int>{} << QStringList(5, sharing);
        QTest::newRow("a node without NCCL")
            << 4 << QList<int>{} << QList<int>{2, 3} << QList<int>{}
            << QStringList{"mpi, host-staged (rank 3 cannot use NCCL, and every rank must)",
                           "mpi, host-staged (rank 3 cannot use NCCL, and every rank must)",
                           "mpi, host-staged (/nonexistent/libnccl.so.2 not found", "mpi, host-staged (/nonexistent"};
        QTest::newRow("a rank on the CPU") << 3 << QList<int>{} << QList<int>{} << QList<int>{1}
                                           << QStringList{"mpi, host-staged (rank 1 computes in host memory)", "mpi",
                                                          "mpi, host-staged (rank 1 computes in host memory)"};
        QTest::newRow("every rank can") << 4 << QList<int>{} << QList<int>{} << QList<int>{}
                                        << QStringList(4,
                                                       "nccl (NCCL 2.99.0; pipeline messages over MPI, host-staged)");
    }
    void everyRankMakesTheSameChoice()
    {
#if MESHBENCH_HAVE_CUDA
        QFETCH(int, ranks);
        QFETCH(QList<int>, sharing);
        QFETCH(QList<int>, withoutNccl);
        QFETCH(QList<int>, onTheCpu);
        QFETCH(QStringList, expected);
        agent::testing::FakeNccl fake;
        const NcclLibrary missing = NcclLibrary::load("/nonexistent/libnccl.so.2");
        InProcessMesh mesh(dataParallel(ranks));
        const std::vector<std::string> said = onEveryRank(mesh, [&](int r) {
            agent::testing::FarBackend far;
            kernels::CpuBackend cpu;
            kernels::Backend& backend = onTheCpu.contains(r) ? static_cast<kernels::Backend&>(cpu) : far;
            const NcclContext nccl = contextOf(withoutNccl.contains(r) ? missing : fake.library);
            std::string description = attachDeviceCommunicators(mesh.groups(r), backend, sharing.contains(r), nccl);
            // The groups still sum across ranks, whatever each took.
            const kernels::DevPtr x = backend.allocate(1, kernels::DType::F32);
            const float one = 1.0f;
            backend.copyFromHost(x, &one, 1);
            mesh.groups(r).world->allReduceSum(x, 1);
            float sum = 0;
            backend.copyToHost(&sum, x, 1);
            backend.release(x);
            return sum == float(ranks) ? description : "world sum " + std::to_string(sum);
        });
        for (int r = 0; r < ranks; ++r)
            QVERIFY2(QString::fromStdString(said[std::size_t(r)]).startsWith(expected[r]),
                     said[std::size_t(r)].c_str());
        const bool nccl = expected.front().startsWith("nccl");
        // NCCL was entered by every rank or by none; only the world's creation and its split into
        // the data groups (and the expert-data ones, the same ranks with ep 1) when it was.
        QCOMPARE(fake.calls("ncclCommInitRankConfig"), nccl ? ranks : 0);
        QCOMPARE(fake.calls("ncclCommSplit"), nccl ? 2 * ranks : 0);
        QCOMPARE(fake.misuses(), 0);
        QCOMPARE(fake.aborted(), 0);
#else
        QSKIP("this build has no CUDA, so no NCCL");
#endif
    }
};

QTEST_APPLESS_MAIN(TestDeviceGroups)
#include "tst_device_groups.moc"
