#include "designer_view.h"

#include "job_document.h"
#include "job_form.h"
#include "plan_inspector.h"
#include "search_panel.h"
#include "topology_view.h"

#include <QCheckBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QVBoxLayout>

namespace meshbench::app {

DesignerView::DesignerView(QWidget* parent) : QWidget(parent), m_document(new JobDocument(this))
{
    m_form = new JobForm(m_document);
    m_topology = new TopologyView;
    m_inspector = new PlanInspector;
    m_search = new SearchPanel(m_document);

    auto* showDp = new QCheckBox(tr("DP replicas"));
    auto* showEp = new QCheckBox(tr("EP groups"));
    auto* topologyBox = new QWidget;
    auto* topologyLayout = new QVBoxLayout(topologyBox);
    topologyLayout->setContentsMargins(0, 0, 0, 0);
    auto* toggles = new QHBoxLayout;
    toggles->addWidget(new QLabel(tr("Show:")));
    toggles->addWidget(showDp);
    toggles->addWidget(showEp);
    toggles->addStretch(1);
    topologyLayout->addLayout(toggles);
    topologyLayout->addWidget(m_topology, 1);
    connect(showDp, &QCheckBox::toggled, m_topology, &TopologyView::setShowDataParallel);
    connect(showEp, &QCheckBox::toggled, m_topology, &TopologyView::setShowExpertParallel);

    auto* middle = new QSplitter(Qt::Vertical);
    middle->addWidget(topologyBox);
    middle->addWidget(m_search);
    middle->setStretchFactor(0, 3);
    middle->setStretchFactor(1, 2);
    auto* columns = new QSplitter(Qt::Horizontal);
    columns->addWidget(m_form);
    columns->addWidget(middle);
    columns->addWidget(m_inspector);
    columns->setStretchFactor(0, 1);
    columns->setStretchFactor(1, 2);
    columns->setStretchFactor(2, 2);
    columns->setSizes({340, 620, 520});

    m_status = new QLabel;
    m_launch = new QPushButton(tr("Launch"));
    m_launch->setToolTip(tr("Run this job on the engine"));
    auto* bar = new QHBoxLayout;
    bar->addWidget(m_status, 1);
    bar->addWidget(m_launch);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(columns, 1);

    connect(m_launch, &QPushButton::clicked, this, &DesignerView::requestLaunch);
    connect(m_document, &JobDocument::planChanged, m_inspector,
            [this](const plan::Plan* plan) { m_inspector->setPlan(plan, m_document->datasheetPlan()); });
    connect(m_document, &JobDocument::specChanged, this, [this] {
        m_topology->setSpec(m_document->spec());
        updateStatus();
    });
    m_topology->setSpec(m_document->spec());
    m_inspector->setPlan(m_document->plan(), m_document->datasheetPlan());
    updateStatus();
}

bool DesignerView::loadFile(const QString& path, QString* error)
{
    if (!m_document->loadFile(path, error))
        return false;
    m_form->clearInputErrors();
    return true;
}

bool DesignerView::saveFile(const QString& path, QString* error) { return m_document->saveFile(path, error); }

void DesignerView::requestLaunch()
{
    if (m_document->launchable())
        emit launchRequested(m_document->toJsonText());
}

void DesignerView::updateStatus()
{
    const bool launchable = m_document->launchable();
    const QString name =
        m_document->fileName().isEmpty() ? tr("untitled job") : QFileInfo(m_document->fileName()).fileName();
    const int errors = int(m_document->errors().size());
    m_status->setText(tr("%1 — %2, planned in %3 ms")
                          .arg(name, errors == 0 ? tr("valid") : tr("%n error(s)", nullptr, errors))
                          .arg(m_document->lastReplanMs(), 0, 'f', 1));
    if (m_launch->isEnabled() != launchable) {
        m_launch->setEnabled(launchable);
        emit launchableChanged(launchable);
    }
}

}  // namespace meshbench::app
