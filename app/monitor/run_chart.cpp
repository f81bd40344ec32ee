#include "monitor/run_chart.h"

namespace meshbench::app {

void RunChart::setRunState(RunState* state)
{
    if (m_state)
        disconnect(m_state, nullptr, this, nullptr);
    m_state = state;
    if (state) {
        connect(state, &RunState::specChanged, this, &RunChart::rebuild);
        connect(state, &RunState::stepsChanged, this, &RunChart::onStepsChanged);
        connect(state, &RunState::memoryChanged, this, &RunChart::onMemoryChanged);
    }
    rebuild();
}

void RunChart::rebuild()
{
    reset();
    m_consumed = 0;
    if (m_state) {
        m_generation = m_state->generation();
        appendSteps(0);
        m_consumed = m_state->steps().size();
        refreshMemory();
    }
    replot();
}

void RunChart::onStepsChanged()
{
    if (m_state->generation() != m_generation) {
        rebuild();
        return;
    }
    const std::size_t count = m_state->steps().size();
    if (count > m_consumed) {
        appendSteps(m_consumed);
        m_consumed = count;
        replot();
    }
}

void RunChart::onMemoryChanged()
{
    if (m_memoryPending)
        return;
    m_memoryPending = true;
    QMetaObject::invokeMethod(
        this,
        [this] {
            m_memoryPending = false;
            if (m_state) {
                refreshMemory();
                replot();
            }
        },
        Qt::QueuedConnection);
}

}  // namespace meshbench::app
