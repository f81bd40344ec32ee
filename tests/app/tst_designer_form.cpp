// JobForm and PlanInspector through the DesignerView: typing into fields re-plans, the memory chart
// shows the plan's per-stage memory, and engine and input errors appear next to their fields.
#include "designer/designer_view.h"
#include "designer/job_document.h"
#include "designer/job_form.h"
#include "designer/plan_inspector.h"
#include "designer/topology_view.h"

#include <qcustomplot.h>

#include <algorithm>

#include <QCheckBox>
#include <QComboBox>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTest>

using namespace meshbench::app;

namespace {

const QString kJobs = QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/");

// Types text into a line edit as a user would: select all, type, Enter.
void type(QLineEdit* line, const QString& text)
{
    line->setFocus();
    line->selectAll();
    QTest::keyClick(line, Qt::Key_Backspace);
    QTest::keyClicks(line, text);
    QTest::keyClick(line, Qt::Key_Return);
}

}  // namespace

class TestDesignerForm : public QObject {
    Q_OBJECT
private slots:
    void init()
    {
        m_view = std::make_unique<DesignerView>();
        m_view->resize(1400, 900);
        m_view->show();
        QVERIFY(QTest::qWaitForWindowExposed(m_view.get()));
        QString error;
        QVERIFY2(m_view->loadFile(kJobs + "demo.json", &error), qPrintable(error));
    }
    void cleanup() { m_view.reset(); }

    void showsTheDocument()
    {
        JobForm* form = m_view->form();
        QCOMPARE(qobject_cast<QLineEdit*>(form->editor("parallel.tp"))->text(), QString("2"));
        QCOMPARE(qobject_cast<QLineEdit*>(form->editor("model.moe.capacity_factor"))->text(), QString("1.25"));
        QCOMPARE(qobject_cast<QComboBox*>(form->editor("parallel.schedule"))->currentText(), QString("1f1b"));
        QCOMPARE(qobject_cast<QComboBox*>(form->editor("cluster.preset"))->currentText(), QString("custom"));
        QVERIFY(!qobject_cast<QCheckBox*>(form->editor("parallel.sequence_parallel"))->isChecked());
        // A value the document leaves out shows the engine's default.
        QCOMPARE(qobject_cast<QLineEdit*>(form->editor("parallel.virtual_stages"))->text(), QString("1"));
    }

    void typingReplansAndUpdatesTheChart()
    {
        JobDocument* doc = m_view->document();
        QSignalSpy plans(doc, &JobDocument::planChanged);
        type(qobject_cast<QLineEdit*>(m_view->form()->editor("parallel.micro_batch_size")), "4");
        QCOMPARE(plans.count(), 1);
        const meshbench::plan::Plan* plan = doc->plan();
        QVERIFY(plan);
        QCOMPARE(plan->spec.parallel.microBatchSize, 4);

        // The demo's stages hold a few MB each, far below the CPU device's memory (this machine's RAM
        // per core): the chart is in MB and scaled to the bars, the capacity named in the axis label.
        const double highest =
            std::max_element(plan->stages.begin(), plan->stages.end(), [](const auto& a, const auto& b) {
                return a.memory.total() < b.memory.total();
            })->memory.total();
        QVERIFY2(highest >= 1e6 && highest < 1e8, qPrintable(QString::number(highest)));
        QVERIFY(highest < 0.05 * plan->deviceMemory);
        PlanInspector* inspector = m_view->inspector();
        checkMemoryBars(*plan, 1e6);
        const QCPAxis* values = inspector->memoryPlot()->yAxis;
        QVERIFY2(values->label().startsWith("memory per GPU (MB); capacity ") && values->label().endsWith(" off scale"),
                 qPrintable(values->label()));
        QCOMPARE(values->range().upper, highest / 1e6 * 1.15);
        QVERIFY(inspector->summaryText().contains("bubble ratio"));
    }

    void largeModelsAreChartedInGigabytesUnderTheCapacity()
    {
        QVERIFY(m_view->loadFile(kJobs + "gpt3-175b.json"));
        const meshbench::plan::Plan* plan = m_view->document()->plan();
        QVERIFY(plan);
        QCOMPARE(plan->deviceMemory, 80e9);  // H100 SXM
        checkMemoryBars(*plan, 1e9);
        const QCPAxis* values = m_view->inspector()->memoryPlot()->yAxis;
        QCOMPARE(values->label(), QString("memory per GPU (GB)"));
        QCOMPARE(values->range().upper, 80 * 1.15);  // the capacity is the top of the scale
    }

    void legendNeverCoversTheBars()
    {
        for (const char* job : {"demo.json", "gpt3-175b.json"}) {
            QVERIFY(m_view->loadFile(kJobs + job));
            QCustomPlot* plot = m_view->inspector()->memoryPlot();
            plot->replot();
            QVERIFY(plot->legend->visible());
            QCOMPARE(plot->legend->itemCount(), int(PlanInspector::CategoryCount));
            const QRect legend = plot->legend->outerRect();
            QVERIFY(!legend.isEmpty());
            QVERIFY2(!legend.intersects(plot->axisRect()->rect()), job);
        }
    }
    void indivisibleTpShowsTheEngineMessageNextToTp()
    {
        auto* tp = qobject_cast<QLineEdit*>(m_view->form()->editor("parallel.tp"));
        QSignalSpy plans(m_view->document(), &JobDocument::planChanged);
        type(tp, "3");
        QCOMPARE(plans.count(), 1);
        QVERIFY(!m_view->document()->plan());
        const QString message = m_view->form()->errorText("parallel.tp");
        QVERIFY2(message.contains("4 attention heads do not split over tp=3"), qPrintable(message));
        QCOMPARE(tp->toolTip(), message);
        QVERIFY(m_view->form()->errorText("parallel.pp").isEmpty());
        // The chart empties and says why.
        QCOMPARE(m_view->inspector()->memoryBars(PlanInspector::Weights)->data()->size(), 0);

        type(tp, "2");
        QVERIFY(m_view->document()->plan());
        QVERIFY(m_view->form()->errorText("parallel.tp").isEmpty());
        QVERIFY(m_view->form()->generalErrorText().isEmpty());
    }

    void aLayoutTheAgentRefusesIsShownInvalidNextToItsKey()
    {
        // Hidden 132 over the demo's 4 heads is a head dimension of 33: planned (its costs can be
        // read) but refused by plan::agentCanRun, as rotary embeddings need pairs, so the form
        // shows why beside "Hidden" and nothing launches.
        auto* hidden = qobject_cast<QLineEdit*>(m_view->form()->editor("model.hidden"));
        QSignalSpy launchable(m_view.get(), &DesignerView::launchableChanged);
        QSignalSpy launches(m_view.get(), &DesignerView::launchRequested);
        type(hidden, "132");
        const QString message = m_view->form()->errorText("model.hidden");
        QVERIFY2(message.contains("head dimension of 33") && message.contains("need an even head dimension"),
                 qPrintable(message));
        QVERIFY(m_view->document()->plan());
        QCOMPARE(launchable.count(), 1);
        QCOMPARE(launchable.last().at(0).toBool(), false);
        m_view->requestLaunch();
        QCOMPARE(launches.count(), 0);

        type(hidden, "128");
        QVERIFY(m_view->form()->errorText("model.hidden").isEmpty());
        QCOMPARE(launchable.last().at(0).toBool(), true);
        m_view->requestLaunch();
        QCOMPARE(launches.count(), 1);
    }

    void badInputInEveryNumericFieldIsReportedInline()
    {
        JobForm* form = m_view->form();
        // The form's number fields: 7 of the model, 6 of its MoE, 8 of the layout (dp, pp, tp, ep,
        // zero, virtual stages, micro-batches and their size) and 8 of the cluster (nodes, devices
        // per node, NVLink domain, two bandwidths, two latencies, compute efficiency).
        QStringList numeric;
        for (const QString& path : form->paths())
            if (qobject_cast<QLineEdit*>(form->editor(path)))
                numeric << path;
        QCOMPARE(numeric.size(), 7 + 6 + 8 + 8);
        for (const QString& path : numeric) {
            auto* line = qobject_cast<QLineEdit*>(form->editor(path));
            const QString before = line->text();
            const nlohmann::json original = m_view->document()->json();
            type(line, "12abc");
            QVERIFY2(form->errorText(path).contains("'12abc' is not"), qPrintable(path));
            QVERIFY2(m_view->document()->json() == original, qPrintable(path));  // nothing written
            type(line, "99999999999999999999999");
            QVERIFY2(!form->errorText(path).isEmpty(), qPrintable(path));
            type(line, "0");      // zero: the engine's range check, or a valid zero (zero stage, latencies)
            type(line, "1e300");  // not a whole number, or beyond the engine's range for the field
            QVERIFY2(!form->errorText(path).isEmpty(), qPrintable(path));
            type(line, before);
            QVERIFY2(form->errorText(path).isEmpty(), qPrintable(path + ": " + form->errorText(path)));
        }
        QVERIFY(m_view->document()->plan());
    }

    void zeroAndHugeGetTheEnginesMessages()
    {
        JobForm* form = m_view->form();
        type(qobject_cast<QLineEdit*>(form->editor("model.layers")), "0");
        QVERIFY2(!form->errorText("model.layers").isEmpty(), "layers = 0");
        type(qobject_cast<QLineEdit*>(form->editor("model.layers")), "4");
        type(qobject_cast<QLineEdit*>(form->editor("parallel.dp")), "1000000000");
        QVERIFY2(!form->errorText("parallel.dp").isEmpty(), "dp = 1e9");
        type(qobject_cast<QLineEdit*>(form->editor("parallel.dp")), "4");  // 4 x 2 x 2 = 16 ranks on 8 devices
        QVERIFY2(form->errorText("parallel.dp").contains("16 ranks"), qPrintable(form->errorText("parallel.dp")));
        type(qobject_cast<QLineEdit*>(form->editor("cluster.nodes")), "2");
        QVERIFY(m_view->document()->plan());
        QVERIFY(form->errorText("parallel.dp").isEmpty());
    }

    void choicesAndPresets()
    {
        JobForm* form = m_view->form();
        auto* schedule = qobject_cast<QComboBox*>(form->editor("parallel.schedule"));
        schedule->setCurrentText("interleaved");
        QCOMPARE(m_view->document()->value("parallel.schedule").get<std::string>(), "interleaved");
        schedule->setCurrentText("zb-h1");
        QVERIFY(m_view->document()->plan());
        QCOMPARE(m_view->document()->plan()->spec.parallel.schedule, meshbench::plan::ScheduleKind::ZeroBubbleH1);

        auto* preset = qobject_cast<QComboBox*>(form->editor("cluster.preset"));
        preset->setCurrentText("dgx-h100");
        QCOMPARE(m_view->document()->value("cluster").dump(), std::string(R"({"preset":"dgx-h100"})"));
        // The preset's figures show in the cluster fields.
        QCOMPARE(qobject_cast<QLineEdit*>(form->editor("cluster.devices_per_node"))->text(), QString("8"));
        QCOMPARE(qobject_cast<QComboBox*>(form->editor("cluster.device"))->currentText(), QString("h100-sxm"));
        preset->setCurrentText("custom");
        QVERIFY(m_view->document()->value("cluster.preset").is_null());
        QCOMPARE(m_view->document()->value("cluster.device").get<std::string>(), "h100-sxm");
        QVERIFY(m_view->document()->plan());

        // An empty expert count makes the model dense; ep must then be 1.
        type(qobject_cast<QLineEdit*>(form->editor("model.moe.experts")), "");
        QVERIFY(m_view->document()->value("model.moe").is_null());
        QVERIFY(form->errorText("parallel.ep").contains("needs an MoE model"));
    }

    void launchCarriesTheJson()
    {
        QSignalSpy launches(m_view.get(), &DesignerView::launchRequested);
        m_view->requestLaunch();
        QCOMPARE(launches.count(), 1);
        const auto json = nlohmann::json::parse(launches.first().at(0).toByteArray().toStdString());
        QCOMPARE(json["parallel"]["tp"].get<int>(), 2);
        type(qobject_cast<QLineEdit*>(m_view->form()->editor("parallel.tp")), "3");
        m_view->requestLaunch();  // invalid: nothing launched
        QCOMPARE(launches.count(), 1);
    }

    // Every field change re-plans at once (document, form, topology, chart, timeline follow it).
    void viewFollowsEveryFieldChange()
    {
        QVERIFY(m_view->loadFile(kJobs + "gpt3-175b.json"));
        auto* microbatches = qobject_cast<QLineEdit*>(m_view->form()->editor("parallel.microbatches"));
        for (int i = 0; i < 4; ++i) {
            const int m = i % 2 ? 192 : 96;
            type(microbatches, QString::number(m));
            QVERIFY(m_view->document()->plan());
            QCOMPARE(m_view->document()->plan()->spec.parallel.microbatches, m);
        }
    }

    // Selecting a device outlines it in the topology's highlight colour, as the README's picture
    // shows; MESHBENCH_SCREENSHOT_DIR=dir saves the whole view as designer.png there.
    void selectedDeviceIsOutlined()
    {
        QSignalSpy selected(m_view->topology(), &TopologyView::deviceSelected);
        m_view->topology()->selectDevice(5);
        QCOMPARE(selected.count(), 1);
        QCOMPARE(m_view->topology()->selectedDevice(), 5);
        const QImage topology = m_view->topology()->grab().toImage();
        const QRect device = m_view->topology()->deviceRect(5).toAlignedRect();
        const QRgb highlight = m_view->topology()->palette().color(QPalette::Highlight).rgb() & 0xffffff;
        // The outline is 4 px wide along the device's edge: some pixel within 2 px of its top edge.
        bool outlined = false;
        for (int x = device.left(); x <= device.right() && !outlined; ++x)
            for (int y = device.top() - 2; y <= device.top() + 2 && !outlined; ++y)
                outlined = topology.rect().contains(x, y) && (topology.pixel(x, y) & 0xffffff) == highlight;
        QVERIFY2(outlined, "device 5 has no highlight outline");
        if (const QString dir = qEnvironmentVariable("MESHBENCH_SCREENSHOT_DIR"); !dir.isEmpty())
            QVERIFY(m_view->grab().save(dir + "/designer.png"));
    }

private:
    // Every stage's four bars hold its memory in `unitBytes`, as does the capacity line.
    void checkMemoryBars(const meshbench::plan::Plan& plan, double unitBytes)
    {
        PlanInspector* inspector = m_view->inspector();
        for (const auto& stage : plan.stages) {
            auto valueAt = [&](PlanInspector::Category c) {
                const auto it = inspector->memoryBars(c)->data()->findBegin(stage.stage, false);
                return it == inspector->memoryBars(c)->data()->constEnd() ? -1.0 : it->value;
            };
            QCOMPARE(valueAt(PlanInspector::Weights), stage.memory.weights / unitBytes);
            QCOMPARE(valueAt(PlanInspector::Grads), stage.memory.grads / unitBytes);
            QCOMPARE(valueAt(PlanInspector::Optimizer), stage.memory.optimizer / unitBytes);
            QCOMPARE(valueAt(PlanInspector::Activations), stage.memory.activations / unitBytes);
        }
        QCOMPARE(inspector->memoryBars(PlanInspector::Weights)->data()->size(), int(plan.stages.size()));
        QCOMPARE(inspector->capacity(), plan.deviceMemory / unitBytes);
    }

    std::unique_ptr<DesignerView> m_view;
};

QTEST_MAIN(TestDesignerForm)
#include "tst_designer_form.moc"
