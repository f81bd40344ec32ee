#pragma once
// The Monitor area: the timeline of one run (live, replayed, or a session opened from disk) over
// its charts, with the findings list beside them. It follows one source of the engine's live feed
// at a time; a session opened from a file is aggregated in-process instead.

#include "live/findings.h"

#include <QString>
#include <QWidget>

#include <memory>
#include <optional>
#include <vector>

class QLabel;
class QListWidget;

namespace meshbench::store {
class SessionReader;
}

namespace meshbench::app {

class EngineClient;
class MonitorCharts;
class RunState;
class SpanKindLegend;
class TimelineData;
class TimelineView;

class MonitorPage : public QWidget {
    Q_OBJECT
public:
    explicit MonitorPage(EngineClient* client, QWidget* parent = nullptr);
    ~MonitorPage() override;

    // Follows `source` ("job-N" or "replay-N") of the live feed from now on. A replay gives its
    // session, whose kernels (an imported trace's) the timeline shows under the rows as it zooms in.
    // Throws store::StoreError when that session's kernels cannot be read.
    void follow(const QString& source, const plan::JobSpec& spec, const store::SessionReader* replayed = nullptr);
    // Shows a stored session as a whole; false with `error` when it cannot be read.
    bool showSession(const QString& path, QString* error = nullptr);

    RunState* runState() const { return m_state; }
    TimelineView* timeline() const { return m_timeline; }
    SpanKindLegend* legend() const { return m_legend; }
    MonitorCharts* charts() const { return m_charts; }
    QListWidget* findings() const { return m_findings; }
    const QString& source() const { return m_source; }

signals:
    // One line for the status bar: the job's state, step and lost records.
    void statusChanged(const QString& text);

private:
    // Spans carry no F&B-pair flag: the run's schedule says which ops are paired.
    void markOverlappedPairs();
    void updateFindings();
    void updateStatus();
    void updatePrediction();

    EngineClient* m_client;
    RunState* m_state;
    TimelineData* m_data;
    TimelineData* m_predicted;  // the plan's simulated step, laid over the latest measured one
    TimelineView* m_timeline;
    SpanKindLegend* m_legend;
    MonitorCharts* m_charts;
    QListWidget* m_findings;
    QLabel* m_title;
    QString m_source;
    std::unique_ptr<live::RankTimes> m_rankTimes;
    // A stored session's findings, from all it holds (live::sessionFindings: an imported trace's
    // device time and kernels too); none while following a run or a replay.
    std::optional<std::vector<live::Finding>> m_storedFindings;
};

}  // namespace meshbench::app
