// agent/runtime's choice of communicators: plain MPI groups stay as they are on host memory; on
// device memory whose ranks share a GPU every group is host-staged, and says why; NCCL, where this
// build has it, is found at run time and named with its version.

#include "agent/runtime/device_groups.h"
#include "agent/runtime/in_process_communicator.h"
#if MESHBENCH_HAVE_CUDA
#include "agent/runtime/nccl_communicator.h"
#endif
#include "far_backend.h"
#include "kernels/cpu/cpu_backend.h"

#include <QRegularExpression>
#include <QtTest>

#include <thread>

using namespace meshbench;
using namespace meshbench::agent;

namespace {

plan::Mesh demoMesh()
{
    plan::ParallelSpec p;
    p.dp = 2;
    p.tp = 2;
    return plan::Mesh(p);
}

// The communicators of one rank's groups, in a fixed order.
std::vector<const Communicator*> members(const ProcessGroups& g)
{
    return {g.world.get(), g.tensor.get(), g.pipeline.get(), g.data.get(), g.expert.get(), g.expertData.get()};
}

}  // namespace

class TestDeviceGroups : public QObject {
    Q_OBJECT

private slots:
    void hostMemoryKeepsPlainMpi()
    {
        InProcessMesh mesh(demoMesh());
        kernels::CpuBackend cpu;
        const std::vector<const Communicator*> before = members(mesh.groups(0));
        QCOMPARE(QString::fromStdString(attachDeviceCommunicators(mesh.groups(0), cpu, true)), QString("mpi"));
        QVERIFY(members(mesh.groups(0)) == before);
    }

    void sharedDevicesStageEveryGroupThroughTheHost()
    {
        InProcessMesh mesh(demoMesh());
        testing::FarBackend far;
        std::vector<std::string> said(std::size_t(mesh.worldSize()));
        std::vector<std::thread> threads;
        for (int r = 0; r < mesh.worldSize(); ++r)
            threads.emplace_back([&, r] {
                said[std::size_t(r)] = attachDeviceCommunicators(mesh.groups(r), far, true);
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
                if (sum[0] != float(r + other) || sum[1] != 2.0f || sum[2] != 1.0f)
                    said[std::size_t(r)] = "wrong sum";
            });
        for (std::thread& t : threads)
            t.join();
        for (const std::string& s : said)
            QCOMPARE(QString::fromStdString(s), QString("mpi, host-staged (ranks share a GPU, which NCCL refuses)"));
    }

    void ncclIsFoundAtRunTimeAndNamed()
    {
#if MESHBENCH_HAVE_CUDA
        const NcclAvailability nccl = ncclAvailability();
        const QString description = QString::fromStdString(nccl.description);
        if (nccl.available)
            QVERIFY2(QRegularExpression("^NCCL 2\\.\\d+\\.\\d+$").match(description).hasMatch(), qPrintable(description));
        else
            QVERIFY2(description.contains("libnccl.so.2") && description.contains("LD_LIBRARY_PATH"),
                     qPrintable(description));
#else
        QSKIP("this build has no CUDA, so no NCCL");
#endif
    }
};

QTEST_APPLESS_MAIN(TestDeviceGroups)
#include "tst_device_groups.moc"
