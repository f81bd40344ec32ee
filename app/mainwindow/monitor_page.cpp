#include "monitor_page.h"

#include "client/engine_client.h"
#include "monitor/monitor_charts.h"
#include "monitor/run_state.h"
#include "timeline/span_kind_legend.h"
#include "timeline/timeline_data.h"
#include "timeline/timeline_loaders.h"
#include "timeline/timeline_view.h"

#include "live/session_findings.h"
#include "plan/mesh.h"
#include "store/session_store.h"

#include <QLabel>
#include <QListWidget>
#include <QSplitter>
#include <QVBoxLayout>

namespace meshbench::app {

MonitorPage::MonitorPage(EngineClient* client, QWidget* parent)
    : QWidget(parent), m_client(client), m_state(new RunState(this)), m_data(new TimelineData(this)),
      m_predicted(new TimelineData(this)), m_timeline(new TimelineView), m_legend(new SpanKindLegend),
      m_charts(new MonitorCharts), m_findings(new QListWidget),
      m_title(new QLabel(tr("No run yet: launch the designed job (Ctrl+R) or open a session.")))
{
    m_title->setWordWrap(true);
    m_title->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_timeline->setData(m_data);
    m_timeline->setOverlay(m_predicted);
    m_charts->setRunState(m_state);
    // Findings are sentences: wrapped to the pane's width, never scrolled sideways.
    m_findings->setWordWrap(true);
    m_findings->setResizeMode(QListView::Adjust);
    m_findings->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_findings->setMinimumWidth(260);
    m_findings->setToolTip(tr("What the run shows, worst first, with a suggestion for each"));

    auto* side = new QSplitter(Qt::Horizontal);
    side->addWidget(m_charts);
    auto* findingsBox = new QWidget;
    auto* findingsLayout = new QVBoxLayout(findingsBox);
    findingsLayout->setContentsMargins(0, 0, 0, 0);
    findingsLayout->addWidget(new QLabel(tr("<b>Findings</b>")));
    findingsLayout->addWidget(m_findings);
    side->addWidget(findingsBox);
    side->setStretchFactor(0, 3);
    side->setStretchFactor(1, 1);

    auto* timelineBox = new QWidget;
    auto* timelineLayout = new QVBoxLayout(timelineBox);
    timelineLayout->setContentsMargins(0, 0, 0, 0);
    timelineLayout->setSpacing(2);
    timelineLayout->addWidget(m_legend);
    timelineLayout->addWidget(m_timeline, 1);

    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(timelineBox);
    split->addWidget(side);
    // The charts need more height than a handful of rank rows.
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    split->setSizes({300, 600});

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_title);
    layout->addWidget(split, 1);

    if (m_client) {
        connect(m_client, &EngineClient::stepArrived, m_state, &RunState::onStep);
        connect(m_client, &EngineClient::memoryArrived, m_state, &RunState::onMemory);
        connect(m_client, &EngineClient::jobChanged, m_state, &RunState::onJob);
        connect(m_client, &EngineClient::spansArrived, this, [this](const QString& source, const wire::Batch& batch) {
            if (source != m_source)
                return;
            m_data->appendBatch(batch);
            if (m_rankTimes)
                m_rankTimes->add(batch);
        });
    }
    connect(m_state, &RunState::stepsChanged, this, &MonitorPage::updateFindings);
    connect(m_state, &RunState::stepsChanged, this, &MonitorPage::updatePrediction);
    connect(m_state, &RunState::specChanged, this, [this] {
        m_predicted->clear();
        if (m_state->plan())
            m_predicted->loadPlan(*m_state->plan(), PlanRows::PerRank);
    });
    connect(m_state, &RunState::stepsChanged, this, &MonitorPage::updateStatus);
    connect(m_state, &RunState::stateChanged, this, &MonitorPage::updateStatus);
}

MonitorPage::~MonitorPage() = default;

void MonitorPage::follow(const QString& source, const plan::JobSpec& spec, const store::SessionReader* replayed)
{
    m_source = source;
    m_state->clear();
    m_state->setSource(source);
    m_state->setSpec(spec);
    const plan::Mesh mesh(spec.parallel);
    m_data->clear();
    m_data->setRows(rowsForMesh(mesh));
    if (replayed)
        m_data->showKernelsOf(*replayed);
    markOverlappedPairs();
    m_rankTimes = std::make_unique<live::RankTimes>(mesh.worldSize());
    m_storedFindings.reset();
    m_timeline->setFollowLive(true);
    m_title->setText(tr("Following %1").arg(source));
    m_findings->clear();
    updateStatus();
}

bool MonitorPage::showSession(const QString& path, QString* error)
{
    try {
        const store::SessionReader reader(path.toStdString());
        QString why;
        if (!m_state->loadSession(reader, &why)) {
            if (error)
                *error = why;
            return false;
        }
        m_source.clear();
        m_state->setSource(QStringLiteral("-"));  // a stored session: no live source applies
        m_data->loadSession(reader);
        markOverlappedPairs();
        m_rankTimes.reset();
        try {
            m_storedFindings = live::sessionFindings(reader, path.toStdString());
        } catch (const std::exception&) {
            m_storedFindings.reset();  // what the steps alone say, as for a session of an older build
        }
        m_timeline->fitAll();
        m_title->setText(tr("Session %1 (%2)").arg(QString::fromStdString(reader.header().name), path));
    } catch (const std::exception& e) {
        if (error)
            *error = QString::fromUtf8(e.what());
        return false;
    }
    updateFindings();
    updatePrediction();
    updateStatus();
    return true;
}

void MonitorPage::markOverlappedPairs()
{
    const auto& plan = m_state->plan();
    if (!plan)
        return;
    const auto overlapped = overlappedOpsOf(plan->schedule);
    m_data->setOverlappedOps(overlapped);
    m_legend->setScheduleMarks(plan->spec.parallel.virtualStages > 1, !overlapped.empty());
}

void MonitorPage::updateFindings()
{
    const auto& spec = m_state->spec();
    if (!spec || m_state->steps().empty())
        return;
    std::vector<live::RankMemory> memory;
    for (const auto& [rank, track] : m_state->memory())
        memory.push_back(track.latest);
    m_findings->clear();
    try {
        const std::vector<live::Finding> found =
            m_storedFindings
                ? *m_storedFindings
                : live::findFindings({*spec, m_state->plan(), m_state->steps(), memory, m_rankTimes.get()});
        for (const live::Finding& f : found)
            m_findings->addItem(QString::fromStdString(live::describe(f)));
        if (found.empty())
            m_findings->addItem(tr("Nothing stands out: the bubble, the experts and memory are as planned."));
    } catch (const std::exception& e) {
        m_findings->addItem(tr("Findings unavailable: %1").arg(QString::fromUtf8(e.what())));
    }
}

void MonitorPage::updatePrediction()
{
    const auto& steps = m_state->steps();
    if (steps.empty())
        return;
    // The planned step is drawn over the newest measured one, so the two compare op by op.
    m_timeline->alignOverlayToStep(steps.back().step);
    // Following live shows the last few steps: wide enough to see the schedule repeat, narrow
    // enough to see its blocks.
    constexpr std::int64_t kStepsShown = 3;
    const live::StepAggregate& last = steps.back();
    std::int64_t period = last.pipelineEndNs - last.pipelineBeginNs;
    if (steps.size() >= 2 && steps[steps.size() - 2].pipelineBeginNs > 0)
        period = std::max(period, last.pipelineBeginNs - steps[steps.size() - 2].pipelineBeginNs);
    if (period > 0)
        m_timeline->setLiveWindow(kStepsShown * period);
}

void MonitorPage::updateStatus()
{
    QString text = runPhaseName(m_state->phase());
    if (m_state->currentStep() > 0 || !m_state->steps().empty())
        text += tr(" · step %1").arg(m_state->steps().empty() ? m_state->currentStep() : m_state->steps().back().step);
    if (!m_state->steps().empty())
        if (const QString time = stepTimeText(m_state->steps().back()); !time.isEmpty())
            text += tr(" · ") + time;
    text += tr(" · %1 lost").arg(m_state->lostRecords());
    emit statusChanged(text);
    // Why a run failed or stopped belongs where the user looks, above its timeline.
    if (!m_source.isEmpty() && !m_state->cause().isEmpty())
        m_title->setText(tr("%1: %2: %3").arg(m_source, runPhaseName(m_state->phase()), m_state->cause()));
}

}  // namespace meshbench::app
