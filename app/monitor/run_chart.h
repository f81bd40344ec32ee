#pragma once
// A Monitor chart: a chart (charts/chart_widget.h) that follows a RunState, live or replayed.
//
// Updates are incremental: a chart appends the steps that arrived since it last looked, and
// rebuilds only when the state's generation moves (a seek, a late step, a new session) or its
// spec changes. Memory updates come in bursts (one per category per rank), so they are coalesced
// into one refresh per event-loop pass. Every change ends in a queued replot.

// The engine headers use the names `slots` and `emit`: they go before any Qt header.
#include "monitor/run_state.h"

#include "charts/chart_widget.h"

#include <QPointer>

#include <cstddef>

namespace meshbench::app {

class RunChart : public ChartWidget {
    Q_OBJECT
public:
    void setRunState(RunState* state);
    RunState* runState() const { return m_state; }

protected:
    explicit RunChart(QWidget* parent) : ChartWidget(parent) {}

    // reset() drops every point and re-reads the spec (stage count, layers, capacity); then the
    // steps [first, end) of the state are new.
    virtual void appendSteps(std::size_t first) = 0;
    // The state's memory changed (coalesced).
    virtual void refreshMemory() {}
    // reset() and append every step.
    void rebuild() override;

private:
    void onStepsChanged();
    void onMemoryChanged();

    QPointer<RunState> m_state;
    std::size_t m_consumed = 0;  // steps of the state already plotted
    int m_generation = -1;       // the state's generation they belong to
    bool m_memoryPending = false;
};

}  // namespace meshbench::app
