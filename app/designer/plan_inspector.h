#pragma once
// What the planner predicts for the designed job: memory per GPU of each pipeline stage as
// stacked bars against the device capacity, FLOPs, the step time broken down by cause, MFU,
// tokens/s, and the simulated schedule on the timeline with its bubble ratio.

#include <QWidget>

class QCPBars;
class QCPItemStraightLine;
class QCPItemText;
class QCustomPlot;
class QLabel;

namespace meshbench::plan {
struct Plan;
}

namespace meshbench::app {

class TimelineData;
class TimelineView;

class PlanInspector : public QWidget {
    Q_OBJECT
public:
    enum Category { Weights, Grads, Optimizer, Activations, CategoryCount };

    explicit PlanInspector(QWidget* parent = nullptr);

    // The bars of one memory category, one data point per stage at key = stage, value in the
    // chart's unit: plan::byteUnitFor the top of the scale, named in the value axis label.
    QCPBars* memoryBars(Category category) const { return m_bars[category]; }
    // The device capacity in the chart's unit, drawn as a labelled line (0 without a plan).
    double capacity() const { return m_capacityValue; }
    // The figures as shown: FLOPs, step breakdown, MFU, tokens/s, bubble.
    QString summaryText() const;
    QCustomPlot* memoryPlot() const { return m_plot; }
    TimelineView* timeline() const { return m_timeline; }

public slots:
    // Null clears everything and says why nothing is shown. With a datasheet plan (the same job
    // without its calibration) the summary shows both predictions. Plans are read during the call only.
    void setPlan(const meshbench::plan::Plan* plan, const meshbench::plan::Plan* datasheet = nullptr);

private:
    QCustomPlot* m_plot;
    QCPBars* m_bars[CategoryCount];
    QCPItemStraightLine* m_capacity;
    QCPItemText* m_capacityLabel;
    double m_capacityValue = 0;
    QLabel* m_summary;
    QLabel* m_bubble;
    TimelineData* m_timelineData;
    TimelineView* m_timeline;
};

}  // namespace meshbench::app
