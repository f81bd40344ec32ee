#pragma once
// Training progress per step: loss and aux loss (two value axes: the aux loss is orders of
// magnitude smaller) above; throughput (tokens/s) and MFU below.

#include "monitor/run_chart.h"

class QCPGraph;

namespace meshbench::app {

class TrainingChart : public RunChart {
    Q_OBJECT
public:
    explicit TrainingChart(QWidget* parent = nullptr);

    // Keys are step numbers. A step without the figure (or with a diverged, non-finite loss)
    // has no point.
    QCPGraph* lossGraph() const { return m_loss; }
    QCPGraph* auxLossGraph() const { return m_auxLoss; }
    QCPGraph* tokensGraph() const { return m_tokens; }
    QCPGraph* mfuGraph() const { return m_mfu; }

protected:
    void reset() override;
    void appendSteps(std::size_t first) override;

private:
    QCPGraph* m_loss = nullptr;
    QCPGraph* m_auxLoss = nullptr;
    QCPGraph* m_tokens = nullptr;
    QCPGraph* m_mfu = nullptr;
};

}  // namespace meshbench::app
