#pragma once
// The Designer: the job form, the cluster topology, the plan inspector and the layout search
// around one JobDocument.

#include <QWidget>

class QLabel;
class QPushButton;

namespace meshbench::app {

class JobDocument;
class JobForm;
class PlanInspector;
class SearchPanel;
class TopologyView;

class DesignerView : public QWidget {
    Q_OBJECT
public:
    explicit DesignerView(QWidget* parent = nullptr);

    JobDocument* document() const { return m_document; }
    JobForm* form() const { return m_form; }
    TopologyView* topology() const { return m_topology; }
    PlanInspector* inspector() const { return m_inspector; }
    SearchPanel* search() const { return m_search; }

    // File errors come back in `error` (for the caller's status bar or dialog); the view is unchanged then.
    bool loadFile(const QString& path, QString* error = nullptr);
    bool saveFile(const QString& path, QString* error = nullptr);

public slots:
    // Emits launchRequested with the job's JSON when it plans without errors.
    void requestLaunch();

signals:
    // The designed job, as the JSON text of its spec file, to run on an engine.
    void launchRequested(const QByteArray& jobJson);
    // Whether the job currently plans without errors (so it can be launched).
    void launchableChanged(bool launchable);

private:
    void updateStatus();

    JobDocument* m_document;
    JobForm* m_form;
    TopologyView* m_topology;
    PlanInspector* m_inspector;
    SearchPanel* m_search;
    QLabel* m_status;
    QPushButton* m_launch;
};

}  // namespace meshbench::app
