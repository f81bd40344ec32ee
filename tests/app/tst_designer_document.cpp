// JobDocument: JSON paths, validation and re-planning on every change, files, and the re-plan time.
#include "designer/job_document.h"

#include "plan/capability.h"
#include "plan/planner.h"
#include "store/session_store.h"

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

using namespace meshbench::app;

namespace {
const QString kJobs = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/");

// A one-rank run of `job` as the agent would have stored it: `steps` steps of `stepMs`, each
// with one forward and one backward of `computeMs` in all.
void writeSession(const std::string& path, const nlohmann::json& job, int steps, double stepMs, double computeMs)
{
    using namespace meshbench;
    store::SessionHeader header;
    header.name = "calibration test";
    header.jobSpec = job.dump();
    header.ranks = {store::RankInfo{0, 0, 0, 0, 0, 0, 0, "", 0}};
    store::SessionWriter writer(path, header);
    const auto ns = [](double ms) { return std::int64_t(ms * 1e6); };
    for (int step = 1; step <= steps; ++step) {
        const std::int64_t t = ns(stepMs) * step;
        wire::SpanRecord forward;
        forward.step = step;
        forward.microbatch = 0;
        forward.kind = wire::SpanKind::Forward;
        forward.beginNs = t;
        forward.endNs = t + ns(computeMs / 3);
        wire::SpanRecord backward = forward;
        backward.kind = wire::SpanKind::Backward;
        backward.beginNs = forward.endNs;
        backward.endNs = t + ns(computeMs);
        wire::StepMetricsRecord metrics;
        metrics.step = step;
        metrics.beginNs = t;
        metrics.endNs = t + ns(stepMs);
        writer.append(wire::Batch{0, std::uint64_t(step), {forward, backward, metrics}});
    }
    writer.setOutcome({store::Outcome::Completed, "", -1, ns(stepMs) * (steps + 1)});
}
}  // namespace

class TestDesignerDocument : public QObject {
    Q_OBJECT
private slots:
    void loadsAndPlansTheDemo()
    {
        JobDocument doc;
        QVERIFY(!doc.plan());  // an empty document does not plan
        QVERIFY(!doc.errors().isEmpty());
        QSignalSpy plans(&doc, &JobDocument::planChanged);
        QString error;
        QVERIFY2(doc.loadFile(kJobs + "demo.json", &error), qPrintable(error));
        QCOMPARE(plans.count(), 1);
        QVERIFY(doc.errors().isEmpty());
        QVERIFY(doc.plan());
        QCOMPARE(doc.plan()->worldSize, 8);
        QCOMPARE(int(doc.plan()->stages.size()), 2);
        QCOMPARE(doc.value("parallel.tp").get<int>(), 2);
        QCOMPARE(doc.value("model.moe.experts").get<int>(), 4);
        QVERIFY(doc.value("model.nothing.here").is_null());
    }

    void theAgentsRefusalIsAnErrorOnItsKeyAndTheLayoutStillPlans()
    {
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "demo.json"));
        QVERIFY(doc.launchable());
        // pp 2 x 8,192 micro-batches: valid, priced, but more pipeline messages than MPI tags.
        doc.set("parallel.microbatches", 8192);
        QCOMPARE(doc.errors().size(), 1);
        const QStringList tags = doc.errorsAt("parallel.microbatches");
        QCOMPARE(tags.size(), 1);
        QCOMPARE(tags.first(), QString::fromStdString(meshbench::plan::agentRefusals(*doc.spec()).front().message));
        QVERIFY2(tags.first().contains("needs 32768 pipeline message tags"), qPrintable(tags.first()));
        QVERIFY(doc.plan());
        QVERIFY(!doc.launchable());
        doc.set("parallel.microbatches", 4096);  // 16,384 messages
        QVERIFY(doc.errors().isEmpty());
        QVERIFY(doc.launchable());
        // ZeRO with the demo's ep 2 is run by the agent: no refusal.
        doc.set("parallel.zero", 1);
        QVERIFY(doc.errors().isEmpty());
        QVERIFY(doc.launchable());
    }

    void everyChangeRevalidatesAndReplans()
    {
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "demo.json"));
        QSignalSpy plans(&doc, &JobDocument::planChanged);
        QSignalSpy errors(&doc, &JobDocument::errorsChanged);
        doc.set("parallel.tp", 3);  // 4 heads do not split over 3
        QCOMPARE(plans.count(), 1);
        QCOMPARE(plans.last().at(0).value<const meshbench::plan::Plan*>(), nullptr);
        QCOMPARE(errors.count(), 1);
        QVERIFY(!doc.plan());
        QVERIFY(doc.spec());  // a layout error keeps the spec for drawing
        const QStringList tp = doc.errorsAt("parallel.tp");
        QVERIFY(!tp.isEmpty());
        QVERIFY2(tp.first().contains("4 attention heads do not split over tp=3"), qPrintable(tp.first()));

        doc.set("parallel.tp", 2);
        QVERIFY(doc.plan());
        QVERIFY(doc.errors().isEmpty());
        QCOMPARE(errors.count(), 2);

        // A bigger micro-batch doubles the activations of every stage, nothing else.
        const double before = doc.plan()->stages[0].memory.activations;
        const double weights = doc.plan()->stages[0].memory.weights;
        doc.set("parallel.micro_batch_size", 4);
        QCOMPARE(doc.plan()->spec.parallel.microBatchSize, 4);
        QCOMPARE(doc.plan()->stages[0].memory.weights, weights);
        QVERIFY(doc.plan()->stages[0].memory.activations > before);
    }

    void structuralErrorsKeepNoSpec()
    {
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "demo.json"));
        doc.set("parallel.dp", "two");
        QVERIFY(!doc.spec());
        QVERIFY(!doc.errorsAt("parallel.dp").isEmpty());
        // A path through a non-object replaces it instead of throwing.
        doc.set("model", 5);
        doc.set("model.layers", 4);
        QCOMPARE(doc.value("model.layers").get<int>(), 4);
        // null removes a key
        doc.set("model.layers", nullptr);
        QVERIFY(doc.value("model.layers").is_null());
    }

    void mergeIsOneChange()
    {
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "demo.json"));
        QSignalSpy plans(&doc, &JobDocument::planChanged);
        doc.merge({{"parallel", {{"dp", 4}, {"pp", 1}}}});
        QCOMPARE(plans.count(), 1);
        QVERIFY(doc.plan());
        QCOMPARE(doc.plan()->spec.parallel.dp, 4);
        QCOMPARE(doc.plan()->spec.parallel.pp, 1);
        QCOMPARE(doc.plan()->spec.parallel.tp, 2);  // untouched
    }

    void savesAndLoadsBack()
    {
        QTemporaryDir dir;
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "gpt3-175b.json"));
        doc.set("parallel.microbatches", 96);
        const QString path = dir.filePath("job.json");
        QVERIFY(doc.saveFile(path));
        JobDocument again;
        QVERIFY(again.loadFile(path));
        QVERIFY(again.json() == doc.json());
        QCOMPARE(again.plan()->spec.parallel.microbatches, 96);

        QString error;
        QFile bad(dir.filePath("bad.json"));
        QVERIFY(bad.open(QIODevice::WriteOnly));
        bad.write("{ not json");
        bad.close();
        QVERIFY(!again.loadFile(bad.fileName(), &error));
        QVERIFY(!error.isEmpty());
        QVERIFY(again.json() == doc.json());  // unchanged
        QVERIFY(!again.loadFile(dir.filePath("missing.json"), &error));
    }

    void replansEveryChange_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("path");
        QTest::addColumn<int>("a");
        QTest::addColumn<int>("b");
        QTest::newRow("demo") << "demo.json"
                              << "parallel.microbatches" << 4 << 8;
        QTest::newRow("gpt3-175b") << "gpt3-175b.json"
                                   << "parallel.microbatches" << 192 << 96;
    }

    // Every field change is validated and planned at once (bench_designer times it).
    void replansEveryChange()
    {
        QFETCH(QString, file);
        QFETCH(QString, path);
        QFETCH(int, a);
        QFETCH(int, b);
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + file));
        for (int i = 0; i < 4; ++i) {
            const int value = i % 2 ? a : b;
            doc.set(path, value);
            QVERIFY(doc.plan());
            QCOMPARE(doc.plan()->spec.parallel.microbatches, value);
        }
    }

    void calibratesFromASessionAndKeepsTheTablePlanBeside()
    {
        // One rank of the demo model on the cpu device, measured at 1.5 times the table's step (a
        // slower device: one faster than the table by more than its GEMMs' headroom to the peak
        // cannot be calibrated to).
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "demo.json"));
        doc.merge({{"parallel", {{"dp", 1}, {"pp", 1}, {"tp", 1}, {"ep", 1}}}, {"cluster", {{"devices_per_node", 1}}}});
        QVERIFY(doc.plan());
        QVERIFY(!doc.datasheetPlan());
        const double tablePlan = doc.plan()->step.total;
        QTemporaryDir dir;
        const QString session = dir.filePath(QStringLiteral("run.meshbench"));
        const double stepMs = 1.5 * tablePlan * 1e3;
        writeSession(session.toStdString(), doc.json(), 6, stepMs, 0.75 * stepMs);

        QStringList report;
        QString error;
        QVERIFY2(doc.calibrateFrom({session}, &report, &error), qPrintable(error));
        QVERIFY(!report.isEmpty());
        QCOMPARE(QString::fromStdString(doc.value("cluster.calibration.source").get<std::string>()),
                 QStringLiteral("run.meshbench"));
        // The calibrated plan meets the measured step; the table's plan is kept beside it, unchanged.
        QVERIFY2(std::abs(doc.plan()->step.total / (stepMs * 1e-3) - 1) < 1e-3,
                 qPrintable(QString::number(doc.plan()->step.total)));
        QVERIFY(doc.datasheetPlan());
        QCOMPARE(doc.datasheetPlan()->step.total, tablePlan);

        // Back to the table: the calibration goes, and so does the second plan.
        doc.set(QStringLiteral("cluster.calibration"), nullptr);
        QVERIFY(!doc.datasheetPlan());
        QCOMPARE(doc.plan()->step.total, tablePlan);
    }

    void aSessionThatCannotCalibrateLeavesTheDocumentAlone()
    {
        JobDocument doc;
        QVERIFY(doc.loadFile(kJobs + "demo.json"));
        QTemporaryDir dir;
        QStringList report;
        QString error;
        const QString missing = dir.filePath(QStringLiteral("missing.meshbench"));
        QVERIFY(!doc.calibrateFrom({missing}, &report, &error));
        QVERIFY2(error.contains(QStringLiteral("missing.meshbench")), qPrintable(error));
        // A session with no step past the first holds nothing to fit.
        const QString empty = dir.filePath(QStringLiteral("empty.meshbench"));
        writeSession(empty.toStdString(), doc.json(), 0, 40.0, 30.0);
        QVERIFY(!doc.calibrateFrom({empty}, &report, &error));
        QVERIFY2(error.contains(QStringLiteral("empty.meshbench")), qPrintable(error));
        QVERIFY(doc.value("cluster.calibration").is_null());
        QVERIFY(!doc.datasheetPlan());
    }
};

QTEST_GUILESS_MAIN(TestDesignerDocument)
#include "tst_designer_document.moc"
