#pragma once
// Expert load: a heat map of the tokens routed to each expert, either experts x steps for one MoE
// layer (which expert stays hot, and since when) or layers x experts for one step (where the
// imbalance sits in the model); below it, per step, the worst layer's imbalance (max / mean), the
// p95 of the imbalance over layers and the fraction of tokens dropped by capacity; and a line
// naming the hottest experts of the latest step with their overload factor.

#include "monitor/run_chart.h"

#include <vector>

class QComboBox;
class QCPColorMap;
class QCPColorScale;
class QCPGraph;
class QLabel;
class QSpinBox;

namespace meshbench::app {

class ExpertLoadView : public RunChart {
    Q_OBJECT
public:
    enum class Mode { ExpertsBySteps, LayersByExperts };

    explicit ExpertLoadView(QWidget* parent = nullptr);

    void setMode(Mode mode);
    Mode mode() const;
    // The MoE layer (global index) of the experts x steps map.
    void setLayer(int layer);
    int layer() const;
    // The step of the layers x experts map; -1 follows the latest.
    void setStep(int step);

    // ExpertsBySteps: key = step, value = expert. LayersByExperts: key = expert, value = the
    // layer's position among the MoE layers (ticks name the layer). Cells without data are NaN.
    QCPColorMap* heatmap() const { return m_map; }
    QCPGraph* imbalanceGraph() const { return m_imbalance; }
    QCPGraph* p95Graph() const { return m_p95; }
    QCPGraph* droppedGraph() const { return m_dropped; }
    QString hottestText() const;

protected:
    void reset() override;
    void appendSteps(std::size_t first) override;

private:
    void syncLayerChoices();
    // Experts x steps: the column of `step`, growing the map (doubling) when it is full.
    void writeStepColumn(const live::StepAggregate& step);
    void drawLayersByExperts();
    void updateHottest(const live::StepAggregate& step);
    void setHottest(const QString& text);
    void setAxisLabels();

    QComboBox* m_mode = nullptr;
    QComboBox* m_layer = nullptr;
    QSpinBox* m_step = nullptr;
    QLabel* m_hottest = nullptr;
    QCPColorMap* m_map = nullptr;
    QCPColorScale* m_scale = nullptr;
    QCPGraph* m_imbalance = nullptr;
    QCPGraph* m_p95 = nullptr;
    QCPGraph* m_dropped = nullptr;
    std::vector<int> m_layers;  // the combo's layers
    int m_firstColumnStep = 0;  // the step of the map's first column
    int m_columns = 0;          // the map's allocated columns (0: no map yet)
    double m_maxTokens = 0;
    double m_maxImbalance = 0;
    double m_maxDropped = 0;
};

}  // namespace meshbench::app
