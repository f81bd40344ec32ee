// agent/train's Trainer on in-process groups (ranks as threads, agent/runtime's InProcessMesh):
// every layout below runs the same steps as one device - loss, aux loss and gradient norm step by
// step, and the parameters and Adam moments afterwards - in seconds, without mpirun. The
// reference is a Trainer without groups on the same job (plan::singleDeviceSpec: the same global
// batch through one pipeline), never a value copied from the layout's own output.
//
// Tolerances, as tst_parallel argues them for mpirun. The layout computes the same fp32 arithmetic
// as one device except for the order of additions: gradients summed over the data group (member
// order) instead of accumulated micro-batch after micro-batch, partial sums of TP-split GEMMs,
// stages' loss sums. That is ~1e-7 relative per step, far inside the 1e-5 asked of the metrics.
// Parameters get 1e-5 of the tensor's scale plus 1e-3 of Adam's reach (lr x steps), because Adam
// normalises each update to about lr whatever the gradient's size, so an element with a gradient
// near zero may move by a visibly different fraction of lr; moments get 1e-3 of their scale. A
// wrong data shard or a missing reduction moves elements by O(lr) per step and fails both.
// The MemoryLedger is process-wide and every rank thread allocates from it: no memory here.

#include "agent/runtime/device_groups.h"
#include "agent/runtime/in_process_communicator.h"
#include "agent/train/trainer.h"

#include "kernels/cpu/cpu_backend.h"

#include "far_backend.h"
#include "layout_equivalence.h"
#include <QTemporaryDir>

#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

using namespace meshbench;
using namespace meshbench::agent;
using nlohmann::json;
using namespace meshbench::agent::testing;

namespace {

constexpr int kSteps = 3;
constexpr double kLr = 0.003;

struct Layout {
    int dp = 1;
    int pp = 1;
    int tp = 1;
    int ep = 1;
    int zero = 0;
    bool moe = false;
    const char* schedule = "1f1b";
    bool sequenceParallel = false;
    bool overlap = true;  // the data-parallel buckets reduce during the backward
    int ranks() const { return dp * pp * tp; }
};

// tst_parallel's model and batch: 4 layers, hidden 32, tied embeddings (the default), 8 micro-batches
// of 2 on one device.
json job(const Layout& l)
{
    return equivalenceJob(l.moe,
                          {{"dp", l.dp},
                           {"pp", l.pp},
                           {"ep", l.ep},
                           {"tp", l.tp},
                           {"sequence_parallel", l.sequenceParallel},
                           {"zero", l.zero},
                           {"overlap_grad_reduce", l.overlap},
                           {"schedule", l.schedule}},
                          l.ranks(), kSteps, kLr);
}

plan::JobSpec specOf(const json& doc)
{
    const plan::LoadResult loaded = plan::loadJobSpec(doc);
    if (!loaded.valid())
        qFatal("test job does not load: %s", loaded.errors.front().message.c_str());
    return *loaded.spec;
}

// body(rank, groups) on one thread per rank of the mesh. A rank that throws ends the test at once
// (its peers would wait for it at their next rendezvous forever).
void onEveryRank(InProcessMesh& mesh, const std::function<void(int, const ProcessGroups&)>& body)
{
    std::vector<std::thread> threads;
    threads.reserve(std::size_t(mesh.worldSize()));
    for (int rank = 0; rank < mesh.worldSize(); ++rank)
        threads.emplace_back([&, rank] {
            try {
                body(rank, mesh.groups(rank));
            } catch (const std::exception& e) {
                qFatal("rank %d: %s", rank, e.what());
            }
        });
    for (std::thread& t : threads)
        t.join();
}

}  // namespace

Q_DECLARE_METATYPE(Layout)

class TestTrainer : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void meshGroupsFollowThePlan_data();
    void meshGroupsFollowThePlan();
    void layoutEqualsOneDevice_data();
    void layoutEqualsOneDevice();
    void deviceMemoryRunsTheSameSteps_data();
    void deviceMemoryRunsTheSameSteps();

private:
    QTemporaryDir m_dir;
    std::map<QString, std::vector<StepMetrics>> m_singles;  // one-device steps by reference name
};

void TestTrainer::initTestCase() { QVERIFY(m_dir.isValid()); }

void TestTrainer::meshGroupsFollowThePlan_data()
{
    QTest::addColumn<Layout>("layout");
    QTest::newRow("dp2 ep2") << Layout{2, 1, 1, 2};
    QTest::newRow("dp2 pp2") << Layout{2, 2};
    QTest::newRow("dp2 tp2") << Layout{2, 1, 2};
    QTest::newRow("dp4 pp2 tp2 ep2") << Layout{4, 2, 2, 2};
}

void TestTrainer::meshGroupsFollowThePlan()
{
    // Each rank's communicator of a kind has engine/plan's group for that rank: its size, this
    // rank's place in it, and members that meet - a sum of world ranks over it is the sum over
    // Mesh::groupOf's members.
    QFETCH(Layout, layout);
    const plan::Mesh mesh(layout.dp, layout.pp, layout.tp, layout.ep);
    QCOMPARE(mesh.worldSize(), layout.ranks());
    InProcessMesh groups(mesh);
    QCOMPARE(groups.worldSize(), layout.ranks());
    const std::pair<plan::GroupKind, std::unique_ptr<Communicator> ProcessGroups::*> kinds[] = {
        {plan::GroupKind::Tensor, &ProcessGroups::tensor},
        {plan::GroupKind::Pipeline, &ProcessGroups::pipeline},
        {plan::GroupKind::Data, &ProcessGroups::data},
        {plan::GroupKind::Expert, &ProcessGroups::expert},
        {plan::GroupKind::ExpertData, &ProcessGroups::expertData}};
    struct Seen {
        int size = 0, rank = 0;
        double sum = 0;
    };
    std::vector<std::vector<Seen>> seen(std::size_t(layout.ranks()), std::vector<Seen>(std::size(kinds) + 1));
    onEveryRank(groups, [&](int rank, const ProcessGroups& g) {
        std::vector<Seen>& mine = seen[std::size_t(rank)];
        for (std::size_t k = 0; k < std::size(kinds); ++k) {
            Communicator& comm = *(g.*(kinds[k].second));
            double value = rank;
            comm.allReduceSum(&value, 1);
            mine[k] = {comm.size(), comm.rank(), value};
        }
        double value = rank;
        g.world->allReduceSum(&value, 1);
        mine.back() = {g.world->size(), g.world->rank(), value};
    });
    for (int rank = 0; rank < layout.ranks(); ++rank) {
        const ProcessGroups& g = groups.groups(rank);
        QCOMPARE(g.worldRank, rank);
        QCOMPARE(g.coord.dp, mesh.coordOf(rank).dp);
        QCOMPARE(g.coord.pp, mesh.coordOf(rank).pp);
        QCOMPARE(g.coord.tp, mesh.coordOf(rank).tp);
        QCOMPARE(g.coord.ep, mesh.coordOf(rank).ep);
        for (std::size_t k = 0; k < std::size(kinds); ++k) {
            const std::vector<int> members = mesh.groupOf(kinds[k].first, rank);
            const Seen& s = seen[std::size_t(rank)][k];
            const QByteArray what = QByteArray("rank ") + QByteArray::number(rank) + " " +
                                    QByteArray(plan::groupKindName(kinds[k].first).data(),
                                               qsizetype(plan::groupKindName(kinds[k].first).size()));
            QVERIFY2(s.size == int(members.size()), what.constData());
            QVERIFY2(members[std::size_t(s.rank)] == rank, what.constData());
            double sum = 0;
            for (int m : members)
                sum += m;
            QVERIFY2(s.sum == sum, what.constData());
        }
        const Seen& w = seen[std::size_t(rank)].back();
        QCOMPARE(w.size, layout.ranks());
        QCOMPARE(w.rank, rank);
        const int rankSum = layout.ranks() * (layout.ranks() - 1) / 2;  // 0 + 1 + ... + (n - 1): exact in int
        QCOMPARE(w.sum, double(rankSum));
    }
}

void TestTrainer::layoutEqualsOneDevice_data()
{
    QTest::addColumn<Layout>("layout");
    //                                             dp pp tp ep zero moe  schedule  sp     overlap
    QTest::newRow("dp2 zero-0") << Layout{2, 1, 1, 1, 0};
    QTest::newRow("dp2 zero-0 no-overlap") << Layout{2, 1, 1, 1, 0, false, "1f1b", false, false};
    QTest::newRow("dp2 zero-1") << Layout{2, 1, 1, 1, 1};
    QTest::newRow("dp2 zero-1 no-overlap") << Layout{2, 1, 1, 1, 1, false, "1f1b", false, false};
    QTest::newRow("dp2 zero-2") << Layout{2, 1, 1, 1, 2};
    QTest::newRow("dp2 zero-2 no-overlap") << Layout{2, 1, 1, 1, 2, false, "1f1b", false, false};
    QTest::newRow("dp2 zero-3") << Layout{2, 1, 1, 1, 3};
    QTest::newRow("dp2 ep2 moe zero-0") << Layout{2, 1, 1, 2, 0, true};
    QTest::newRow("dp2 ep2 moe zero-0 no-overlap") << Layout{2, 1, 1, 2, 0, true, "1f1b", false, false};
    QTest::newRow("dp2 ep2 moe zero-1") << Layout{2, 1, 1, 2, 1, true};
    QTest::newRow("dp2 ep2 moe zero-3") << Layout{2, 1, 1, 2, 3, true};
    QTest::newRow("pp2 1f1b") << Layout{1, 2, 1, 1, 0, false, "1f1b"};
    QTest::newRow("pp2 zb-h1") << Layout{1, 2, 1, 1, 0, false, "zb-h1"};
    QTest::newRow("dp2 pp2 zero-1") << Layout{2, 2, 1, 1, 1};
    QTest::newRow("dp2 pp2 zero-1 no-overlap") << Layout{2, 2, 1, 1, 1, false, "1f1b", false, false};
    QTest::newRow("tp2 sp") << Layout{1, 1, 2, 1, 0, false, "1f1b", true};
    QTest::newRow("dp2 tp2 zero-1") << Layout{2, 1, 2, 1, 1};
}

void TestTrainer::layoutEqualsOneDevice()
{
    QFETCH(Layout, layout);
    const QString tag = QString::fromLatin1(QTest::currentDataTag()).replace(' ', '-');
    const plan::JobSpec spec = specOf(job(layout));
    QVERIFY(spec.model.tiedEmbeddings);  // so that pp2 sums the embedding's two copies

    // One device, once per model and global batch (all the job's one device runs; the layouts'
    // other settings - zero, overlap, schedule - do not reach it).
    const QString reference = QStringLiteral("single-moe%1-batch%2").arg(layout.moe).arg(spec.parallel.globalBatch());
    const QString single = m_dir.filePath(reference + ".safetensors");
    if (!m_singles.count(reference)) {
        kernels::CpuBackend backend;
        Trainer trainer(plan::singleDeviceSpec(spec), backend);
        trainer.initialize();
        std::vector<StepMetrics> steps;
        steps.reserve(std::size_t(kSteps));
        for (int s = 0; s < kSteps; ++s)
            steps.push_back(trainer.step());
        trainer.save(single.toStdString());
        m_singles[reference] = std::move(steps);
    }
    const std::vector<StepMetrics>& expected = m_singles[reference];

    // The layout, one thread per rank; saving is collective and world rank 0 writes.
    const QString parallel = m_dir.filePath(tag + "-parallel.safetensors");
    InProcessMesh mesh{plan::Mesh(spec.parallel)};
    QCOMPARE(mesh.worldSize(), layout.ranks());
    std::vector<std::vector<StepMetrics>> got(std::size_t(layout.ranks()));
    onEveryRank(mesh, [&](int rank, const ProcessGroups& groups) {
        kernels::CpuBackend backend;
        Trainer trainer(spec, backend, &groups);
        trainer.initialize();
        for (int s = 0; s < kSteps; ++s)
            got[std::size_t(rank)].push_back(trainer.step());
        trainer.save(parallel.toStdString());
    });

    // Every rank reports the job's metrics (they are summed over the stages and replicas).
    for (int rank = 0; rank < layout.ranks(); ++rank) {
        QCOMPARE(got[std::size_t(rank)].size(), expected.size());
        for (std::size_t i = 0; i < expected.size(); ++i) {
            const StepMetrics &a = expected[i], &b = got[std::size_t(rank)][i];
            QCOMPARE(b.step, a.step);
            for (auto [key, x, y] : {std::tuple{"loss", a.loss, b.loss}, std::tuple{"aux_loss", a.auxLoss, b.auxLoss},
                                     std::tuple{"grad_norm", a.gradNorm, b.gradNorm}})
                QVERIFY2(agrees(y, x, 1e-5), qPrintable(QStringLiteral("rank %1 step %2 %3: one device %4, layout %5")
                                                            .arg(rank)
                                                            .arg(a.step)
                                                            .arg(key)
                                                            .arg(x, 0, 'g', 10)
                                                            .arg(y, 0, 'g', 10)));
        }
    }
    if (layout.moe)
        QVERIFY(expected.back().auxLoss > 0);
    const QString mismatch = checkpointMismatch(single, parallel, kLr * kSteps);
    QVERIFY2(mismatch.isEmpty(), qPrintable(mismatch));
}

void TestTrainer::deviceMemoryRunsTheSameSteps_data()
{
    QTest::addColumn<Layout>("layout");
    QTest::newRow("dp2 ep2 moe zero-1") << Layout{2, 1, 1, 2, 1, true};
    QTest::newRow("dp2 ep2 moe zero-3") << Layout{2, 1, 1, 2, 3, true};
    QTest::newRow("dp2 pp2 zero-1") << Layout{2, 2, 1, 1, 1};
    QTest::newRow("pp2 zb-h1") << Layout{1, 2, 1, 1, 0, false, "zb-h1"};
    QTest::newRow("tp2 sp") << Layout{1, 1, 2, 1, 0, false, "1f1b", true};
}

void TestTrainer::deviceMemoryRunsTheSameSteps()
{
    // The trainer on memory the host cannot touch, with the communicators the agent attaches when
    // ranks share a GPU (MPI-like groups with host staging): every step and the checkpoint are the
    // very bits of the same layout on host memory, so nothing on the way reads or writes device
    // memory except through the backend, as a GPU run needs.
    QFETCH(Layout, layout);
    const QString tag = QString::fromLatin1(QTest::currentDataTag()).replace(' ', '-');
    const plan::JobSpec spec = specOf(job(layout));
    const auto train = [&](bool far, const QString& checkpoint) {
        InProcessMesh mesh{plan::Mesh(spec.parallel)};
        std::vector<std::vector<StepMetrics>> steps(std::size_t(layout.ranks()));
        std::vector<std::string> communicators(std::size_t(layout.ranks()));
        std::size_t staged = 0;
        std::mutex stagedMutex;
        onEveryRank(mesh, [&](int rank, const ProcessGroups&) {
            FarBackend farBackend;
            kernels::CpuBackend cpuBackend;
            kernels::Backend& backend = far ? static_cast<kernels::Backend&>(farBackend) : cpuBackend;
            ProcessGroups& groups = mesh.groups(rank);
            communicators[std::size_t(rank)] = attachDeviceCommunicators(groups, backend, true);
            Trainer trainer(spec, backend, &groups);
            trainer.initialize();
            for (int s = 0; s < kSteps; ++s)
                steps[std::size_t(rank)].push_back(trainer.step());
            trainer.save(checkpoint.toStdString());
            std::lock_guard lock(stagedMutex);
            staged += farBackend.copiedElements();
        });
        return std::tuple{steps, staged, communicators};
    };
    const QString hostFile = m_dir.filePath(tag + "-host.safetensors"),
                  farFile = m_dir.filePath(tag + "-far.safetensors");
    const auto [host, none, plain] = train(false, hostFile);
    const auto [far, staged, attached] = train(true, farFile);
    QCOMPARE(none, std::size_t(0));
    QVERIFY(staged > 0);
    for (int rank = 0; rank < layout.ranks(); ++rank) {
        QCOMPARE(QString::fromStdString(plain[std::size_t(rank)]), QString("mpi"));
        QCOMPARE(QString::fromStdString(attached[std::size_t(rank)]),
                 QString("mpi, host-staged (ranks share a GPU, which NCCL refuses)"));
    }
    for (int rank = 0; rank < layout.ranks(); ++rank)
        for (int s = 0; s < kSteps; ++s) {
            const StepMetrics &a = host[std::size_t(rank)][std::size_t(s)], &b = far[std::size_t(rank)][std::size_t(s)];
            QCOMPARE(b.loss, a.loss);
            QCOMPARE(b.auxLoss, a.auxLoss);
            QCOMPARE(b.gradNorm, a.gradNorm);
        }
    QFile x(hostFile), y(farFile);
    QVERIFY(x.open(QIODevice::ReadOnly) && y.open(QIODevice::ReadOnly));
    QVERIFY(x.size() > 0);
    QVERIFY2(x.readAll() == y.readAll(), "the checkpoints differ");
}

QTEST_APPLESS_MAIN(TestTrainer)
#include "tst_trainer.moc"
