// The findings that read device time and kernels (an imported trace's): late collectives, exposed
// communication per dimension and launch-bound steps, on hand-built device time and kernels whose
// figures are worked out below, and once on a real import of tests/import/make_gpu_traces.py's
// traces, whose straggler is known.

#include "common/finding_checks.h"

#include "common/process_run.h"

#include "import/trace_import.h"
#include "live/device_evidence.h"
#include "live/findings.h"
#include "live/session_findings.h"
#include "plan/mesh.h"
#include "store/session_store.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <functional>

using namespace meshbench;
using live::Finding;
using live::FindingKind;
using store::DeviceClass;

namespace {

// dp 2 x pp 2 x tp 2 on one node of 8 H100s, as the import's generator lays it out: TP groups
// {0,1} {2,3} {4,5} {6,7}, DP groups {0,2} {1,3} {4,6} {5,7}.
plan::JobSpec testSpec()
{
    const nlohmann::json doc = nlohmann::json::parse(R"({
      "name": "device findings test",
      "model": { "layers": 8, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 512, "seq_len": 128 },
      "parallel": { "dp": 2, "pp": 2, "tp": 2, "schedule": "1f1b", "microbatches": 4, "micro_batch_size": 2 },
      "cluster": { "nodes": 1, "devices_per_node": 8, "device": "h100-sxm" },
      "train": { "steps": 30 }
    })");
    const plan::LoadResult loaded = plan::loadJobSpec(doc);
    if (!loaded.valid())
        qFatal("test spec is invalid: %s: %s", loaded.errors.front().path.c_str(),
               loaded.errors.front().message.c_str());
    return *loaded.spec;
}

constexpr std::int64_t kUs = 1000;
constexpr int kSteps = 6;  // steps 1..6: step 1 is warm-up, 2..6 are read

store::KernelRow kernel(std::int64_t begin, std::int64_t end, int stream, DeviceClass c, int step)
{
    store::KernelRow k;
    k.beginNs = begin;
    k.endNs = end;
    k.stream = stream;
    k.deviceClass = c;
    k.step = step;
    return k;
}

// Kernels and device time of every rank and step, built by a function per (rank, step) that
// appends the rank's kernels and device time rows of the step (its times relative to `base`).
struct Device {
    std::vector<store::DeviceTimeRow> rows;
    std::vector<std::pair<std::uint32_t, store::KernelRow>> kernels;

    void row(int rank, int step, DeviceClass c, std::int64_t busy, std::int64_t exposed)
    {
        rows.push_back({rank, step, c, busy, exposed});
    }
    live::DeviceEvidence evidence(const plan::Mesh& mesh) const
    {
        live::DeviceEvidence ev(mesh, rows);
        for (const auto& [rank, k] : kernels)
            ev.addKernel(rank, k);
        ev.finish();
        return ev;
    }
};

// A transformer step with TP overlapped (Megatron's --tp-comm-overlap style): per rank and step,
// ten GEMMs of 900 µs, 100 µs apart (a long wait, not a launch gap); under each GEMM a TP
// all-reduce whose members begin 100 µs into it and which ends 100 µs after its last member begins;
// then the DP gradient all-reduce alone, from 10 000 µs for `dpUs`. The step's window is
// 10 000 + dpUs µs. `lateRank` starts its TP all-reduces `lateUs` after the others.
//   busy/exposed: gemm 9000/9000; comm-tp: each member from its begin to the common end, hidden;
//   comm-dp dpUs/dpUs; idle 10 x 100 = 1000 µs.
Device transformerSteps(const plan::Mesh& mesh, int lateRank = -1, std::int64_t lateUs = 0, std::int64_t dpUs = 400)
{
    Device d;
    for (int step = 1; step <= kSteps; ++step)
        for (int r = 0; r < mesh.worldSize(); ++r) {
            const std::int64_t base = std::int64_t(step) * 1'000'000'000;
            const std::vector<int> tp = mesh.groupOf(plan::GroupKind::Tensor, r);
            const bool groupLate = std::find(tp.begin(), tp.end(), lateRank) != tp.end();
            const std::int64_t myLate = r == lateRank ? lateUs : 0;
            std::int64_t tpBusy = 0;
            for (int k = 0; k < 10; ++k) {
                const std::int64_t g = base + k * 1000 * kUs;
                d.kernels.push_back({std::uint32_t(r), kernel(g, g + 900 * kUs, 7, DeviceClass::Gemm, step)});
                const std::int64_t begin = g + (100 + myLate) * kUs;
                const std::int64_t end = g + (200 + (groupLate ? lateUs : 0)) * kUs;
                d.kernels.push_back({std::uint32_t(r), kernel(begin, end, 20, DeviceClass::CommTensor, step)});
                tpBusy += end - begin;
            }
            const std::int64_t dp = base + 10'000 * kUs;
            d.kernels.push_back({std::uint32_t(r), kernel(dp, dp + dpUs * kUs, 32, DeviceClass::CommData, step)});
            d.row(r, step, DeviceClass::Gemm, 9000 * kUs, 9000 * kUs);
            d.row(r, step, DeviceClass::CommTensor, tpBusy, 0);
            d.row(r, step, DeviceClass::CommData, dpUs * kUs, dpUs * kUs);
            d.row(r, step, DeviceClass::Idle, 1000 * kUs, 1000 * kUs);
        }
    return d;
}

// Every rank runs `count` compute kernels of `kernelUs` each step, with `gapUs` of idle before
// each but the first, except that only every `gapEvery`-th boundary has a gap (the others are
// back to back).
Device smallKernelSteps(const plan::Mesh& mesh, int count, std::int64_t kernelUs, std::int64_t gapUs, int gapEvery = 1)
{
    Device d;
    for (int step = 1; step <= kSteps; ++step)
        for (int r = 0; r < mesh.worldSize(); ++r) {
            std::int64_t t = std::int64_t(step) * 1'000'000'000;
            std::int64_t idle = 0;
            for (int i = 0; i < count; ++i) {
                if (i > 0 && i % gapEvery == 0) {
                    t += gapUs * kUs;
                    idle += gapUs * kUs;
                }
                d.kernels.push_back(
                    {std::uint32_t(r), kernel(t, t + kernelUs * kUs, 7, DeviceClass::OtherCompute, step)});
                t += kernelUs * kUs;
            }
            d.row(r, step, DeviceClass::OtherCompute, count * kernelUs * kUs, count * kernelUs * kUs);
            d.row(r, step, DeviceClass::Idle, idle, idle);
        }
    return d;
}

std::vector<Finding> find(const plan::JobSpec& spec, const live::DeviceEvidence& ev)
{
    return live::findFindings({spec, nullptr, {}, {}, nullptr, 0, &ev});
}

std::vector<Finding> ofKind(const std::vector<Finding>& all, FindingKind kind)
{
    std::vector<Finding> out;
    for (const Finding& f : all)
        if (f.kind == kind)
            out.push_back(f);
    return out;
}

QByteArray listed(const std::vector<Finding>& findings)
{
    QByteArray text;
    for (const Finding& f : findings)
        text += QByteArray::fromStdString(live::describe(f)) + "\n";
    return text;
}

bool near(double actual, double expected, double tolerance = 1e-9) { return nearFigure(actual, expected, tolerance); }

#define CHECK_FIGURE(finding, key, expected) CHECK_FIGURE_WITHIN(finding, key, expected, 1e-9)

bool mentions(const std::string& text, const std::string& part)
{
    if (text.find(part) != std::string::npos)
        return true;
    qWarning("'%s' does not mention '%s'", text.c_str(), part.c_str());
    return false;
}

}  // namespace

class TestDeviceFindings : public QObject {
    Q_OBJECT

private slots:
    // The healthy transformer step: TP hidden under the GEMMs, DP 400 of 10 400 µs (3.8%), idle
    // gaps of 100 µs (waits, not launches), every member on time: nothing.
    void healthyDeviceTimeHasNoFindings()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        const live::DeviceEvidence ev = transformerSteps(mesh).evidence(mesh);
        QCOMPARE(ev.steps(), (std::vector<std::int32_t>{2, 3, 4, 5, 6}));  // step 1 is warm-up
        const live::RankStepDevice* d = ev.at(3, 5);
        QVERIFY(d != nullptr);
        QCOMPARE(d->windowNs, 10'400 * kUs);
        QCOMPARE(d->kernels, 21);
        QCOMPARE(d->gaps, 10);
        QCOMPARE(d->shortGaps, 0);
        QVERIFY(d->collectives[0] && d->collectives[1] && !d->collectives[2]);  // tp, dp; no ep groups
        QCOMPARE(d->collectives[0]->latenessNs, std::int64_t(0));
        QCOMPARE(d->collectives[0]->durationNs, 100 * kUs);
        QCOMPARE(d->collectives[0]->count, 10);
        const std::vector<Finding> found = find(spec, ev);
        QVERIFY2(found.empty(), listed(found).constData());
    }

    // Rank 5 starts each of its 10 TP all-reduces 200 µs after rank 4, which waits: rank 4's
    // kernels last 300 µs, rank 5's 100 µs, the collective's median 200 µs. Rank 5's lateness is
    // 200 µs (> the 20 µs floor and > 25% of 200 µs); the group waits 10 x 200 / 10 400 = 19.23%
    // of the step. Rank 4 is early (-200 µs), the other groups and every DP group on time.
    void aRankWhoseCollectivesStartLate()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        const live::DeviceEvidence ev = transformerSteps(mesh, 5, 200).evidence(mesh);
        QCOMPARE(ev.at(4, 4)->collectives[0]->latenessNs, -200 * kUs);
        const std::vector<Finding> found = find(spec, ev);
        QCOMPARE(int(found.size()), 1);
        const Finding& f = found[0];
        QCOMPARE(f.kind, FindingKind::LateCollectives);
        QCOMPARE(f.rank, std::optional<int>(5));
        QCOMPARE(f.stage, std::optional<int>(mesh.coordOf(5).pp));
        QCOMPARE(f.category, std::optional<std::string>("tp"));
        CHECK_FIGURE(f, "lateness_s", 200e-6);
        CHECK_FIGURE(f, "collective_s", 200e-6);
        CHECK_FIGURE(f, "collectives", 10);
        CHECK_FIGURE(f, "group_size", 2);
        CHECK_FIGURE(f, "wait_share", 10 * 200.0 / 10'400);
        CHECK_FIGURE(f, "compute_ratio", 1);
        CHECK_FIGURE(f, "explained_by_compute_s", 0);
        QVERIFY(near(f.severity, 10 * 200.0 / 10'400));
        QVERIFY(mentions(f.title, "rank 5 starts its TP collectives 200"));
        QVERIFY(mentions(f.title, "(ranks 4, 5)"));
        // Its compute is as fast as its peer's: the delay is before its kernels start.
        QVERIFY(mentions(f.suggestion, "garbage collection"));
        QCOMPARE(live::findingKindName(f.kind), std::string_view("late_collectives"));
    }

    // Under the thresholds: 15 µs late is under the 20 µs floor (clock alignment and launch
    // jitter); 60 µs late against a collective of 1.1 ms is under a quarter of it.
    void collectivesLateByLittleAreNotFindings()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        QVERIFY(ofKind(find(spec, transformerSteps(mesh, 5, 15).evidence(mesh)), FindingKind::LateCollectives).empty());
        // 60 µs late, every collective's transfer 1000 µs longer than above: durations 1160 and
        // 1100 µs, median 1130: 60 < 282.5.
        Device d = transformerSteps(mesh, 5, 60);
        for (auto& [rank, k] : d.kernels)
            if (k.deviceClass == DeviceClass::CommTensor)
                k.endNs += 1000 * kUs;
        const live::DeviceEvidence ev = d.evidence(mesh);
        QCOMPARE(ev.at(2, 5)->collectives[0]->latenessNs, 60 * kUs);
        QCOMPARE(ev.at(2, 5)->collectives[0]->durationNs, 1130 * kUs);
        QVERIFY(ofKind(find(spec, ev), FindingKind::LateCollectives).empty());
    }

    // A member missing one of the step's all-reduces breaks the k-th-kernel pairing: its group's
    // step is skipped, never matched wrongly.
    void mismatchedCollectiveCountsAreSkipped()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        Device d = transformerSteps(mesh, 5, 200);
        for (auto it = d.kernels.begin(); it != d.kernels.end(); ++it)
            if (it->first == 4 && it->second.step == 3 && it->second.deviceClass == DeviceClass::CommTensor) {
                d.kernels.erase(it);
                break;
            }
        const live::DeviceEvidence ev = d.evidence(mesh);
        QVERIFY(!ev.at(3, 5)->collectives[0]);
        QVERIFY(ev.at(4, 5)->collectives[0]);
        QCOMPARE(int(ofKind(find(spec, ev), FindingKind::LateCollectives).size()), 1);  // the other steps
    }

    // The DP all-reduce alone for 2 500 µs after 10 000 µs of the rest: 2 500 / 12 500 = 20% of
    // every rank's step, exposed.
    void exposedDataParallelCommunication()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        const std::vector<Finding> found = find(spec, transformerSteps(mesh, -1, 0, 2500).evidence(mesh));
        QCOMPARE(int(found.size()), 1);
        const Finding& f = found[0];
        QCOMPARE(f.kind, FindingKind::ExposedCommunication);
        QCOMPARE(f.category, std::optional<std::string>("dp"));
        CHECK_FIGURE(f, "share", 0.2);
        CHECK_FIGURE(f, "exposed_s", 2500e-6);
        CHECK_FIGURE(f, "window_s", 12'500e-6);
        CHECK_FIGURE(f, "worst_share", 0.2);
        QVERIFY(near(f.severity, 0.2));
        QVERIFY(mentions(f.title, "DP communication is exposed for 20.0%"));
        // overlap_grad_reduce is on (the spec's default): bigger buckets and more micro-batches.
        QVERIFY(mentions(f.suggestion, "parallel.grad_bucket_mb (now 25)"));
        QVERIFY(f.suggestion.find("set parallel.overlap_grad_reduce") == std::string::npos);

        // 1 250 / 11 250 = 11.1%: still above the tenth; 1 000 / 11 000 = 9.1%: not.
        QCOMPARE(int(ofKind(find(spec, transformerSteps(mesh, -1, 0, 1250).evidence(mesh)),
                            FindingKind::ExposedCommunication)
                         .size()),
                 1);
        QVERIFY(
            ofKind(find(spec, transformerSteps(mesh, -1, 0, 1000).evidence(mesh)), FindingKind::ExposedCommunication)
                .empty());
    }

    // Per dimension, with its own remedy: TP exposed (no overlap) without sequence parallelism.
    void exposedTensorParallelCommunicationSuggestsItsRemedies()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        Device d = transformerSteps(mesh);
        for (store::DeviceTimeRow& row : d.rows)
            if (row.deviceClass == DeviceClass::CommTensor)
                row.exposedNs = 2080 * kUs;  // 20% of 10 400 µs
        const std::vector<Finding> found = find(spec, d.evidence(mesh));
        QCOMPARE(int(found.size()), 1);
        QCOMPARE(found[0].category, std::optional<std::string>("tp"));
        CHECK_FIGURE(found[0], "share", 0.2);
        QVERIFY(mentions(found[0].suggestion, "parallel.sequence_parallel"));
        QVERIFY(mentions(found[0].suggestion, "parallel.tp_comm_overlap"));
        // TP 2 stays in the node's NVLink domain: no placement advice.
        QVERIFY(found[0].suggestion.find("NVLink") == std::string::npos);
    }

    // 2 000 kernels of 20 µs with 5 µs idle between each: 1 999 gaps of 5 µs, 9 995 µs of a
    // 49 995 µs window (19.99%), every boundary a gap: launch-bound on all 8 ranks.
    void aLaunchBoundStep()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        const std::vector<Finding> found = find(spec, smallKernelSteps(mesh, 2000, 20, 5).evidence(mesh));
        QCOMPARE(int(found.size()), 1);
        const Finding& f = found[0];
        QCOMPARE(f.kind, FindingKind::LaunchBound);
        CHECK_FIGURE(f, "short_gap_share", 9995.0 / 49'995);
        CHECK_FIGURE(f, "idle_share", 9995.0 / 49'995);
        CHECK_FIGURE(f, "short_gaps", 1999);
        CHECK_FIGURE(f, "gap_boundaries", 1);
        CHECK_FIGURE(f, "mean_gap_s", 5e-6);
        CHECK_FIGURE(f, "ranks", 8);
        QVERIFY(near(f.severity, 9995.0 / 49'995));
        QVERIFY(mentions(f.title, "1999 idle gaps under 50"));
        QVERIFY(mentions(f.suggestion, "CUDA graphs"));
        QVERIFY(mentions(f.suggestion, "parallel.micro_batch_size (now 2)"));
    }

    // Idle that is not the host: the same kernels 60 µs apart (waits, longer than a launch), back to
    // back (no idle), or short gaps summing to 15% but at only a fifth of the boundaries (100
    // kernels of 50 µs, a 45 µs gap before every fifth: 19 gaps, 855 of 5 855 µs).
    void idleThatIsNotLaunchBound()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh mesh(spec.parallel);
        for (const Device& d : {smallKernelSteps(mesh, 2000, 20, 60), smallKernelSteps(mesh, 2000, 20, 0),
                                smallKernelSteps(mesh, 100, 50, 45, 5)}) {
            const std::vector<Finding> found = find(spec, d.evidence(mesh));
            QVERIFY2(found.empty(), listed(found).constData());
        }
        const live::DeviceEvidence few = smallKernelSteps(mesh, 100, 50, 45, 5).evidence(mesh);
        QCOMPARE(few.at(2, 0)->shortGaps, 19);
        QCOMPARE(few.at(2, 0)->shortGapNs, 855 * kUs);
    }

    // Evidence of another world than the spec's, or none, adds nothing.
    void evidenceOfAnotherLayoutIsIgnored()
    {
        const plan::JobSpec spec = testSpec();
        const plan::Mesh other(4, 1, 1, 1);
        const std::vector<Finding> found = find(spec, smallKernelSteps(other, 2000, 20, 5).evidence(other));
        QVERIFY2(found.empty(), listed(found).constData());
        QVERIFY(live::findFindings({spec, nullptr, {}, {}, nullptr}).empty());
    }

    // A real import: make_gpu_traces.py's 1f1b case, whose straggler rank (answers.json) starts
    // its NCCL kernels 15-40 µs late and computes 4% slower.
    void theStragglerOfAnImportedTrace()
    {
        QTemporaryDir dir;
        const std::string out = dir.path().toStdString() + "/case";
        const ProcessRun run =
            runProcess("python3", {QStringLiteral(MESHBENCH_SOURCE_DIR "/tests/import/make_gpu_traces.py"),
                                   QString::fromStdString(out), "--case", "1f1b", "--seed", "1"});
        QVERIFY2(run.exitCode == 0, qPrintable(run.err));
        std::ifstream answersFile(out + "/answers.json");
        const nlohmann::json answers = nlohmann::json::parse(answersFile);
        const int straggler = answers["stragglers"][0].get<int>();
        import::ImportRequest request;
        for (int r = 0; r < answers["world"].get<int>(); ++r)
            request.paths.push_back(out + "/rank" + std::to_string(r) + "_trace.json.gz");
        request.jobPath = out + "/job.json";
        request.sessionPath = dir.path().toStdString() + "/imported.meshbench";
        import::importTraces(request);

        const store::SessionReader reader(request.sessionPath);
        const std::vector<Finding> found = live::sessionFindings(reader, request.sessionPath);
        qInfo("%s", listed(found).constData());
        // The injected 15-40 µs delay is absorbed where the host runs ahead: rank 4 starts its TP
        // all-reduces about 12 µs after its peer (median), under the 20 µs floor. Its 4% slower
        // compute holds its pipeline replica back, and the whole replica (dp 0: ranks 0, 1, 4, 5)
        // reaches the gradient reduction about 400 µs after the other: one finding, naming rank 4,
        // the member computing the most against its DP peers.
        const std::vector<Finding> late = ofKind(found, FindingKind::LateCollectives);
        QCOMPARE(int(late.size()), 1);
        QCOMPARE(late[0].rank, std::optional<int>(straggler));
        QCOMPARE(late[0].category, std::optional<std::string>("dp"));
        QVERIFY(mentions(late[0].title, "replica"));
        QVERIFY(mentions(late[0].title, "rank " + std::to_string(straggler) + " computes"));
        QVERIFY(*late[0].figure("compute_ratio") > 1.02);
    }
};

QTEST_GUILESS_MAIN(TestDeviceFindings)
#include "tst_device_findings.moc"
