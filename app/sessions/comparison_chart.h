#pragma once
// Stored sessions laid over each other, aligned by step (or by stage, or by rank): the chosen
// figure on top, each session in its own colour with its plan's prediction dashed in the same
// colour, and below it every later session's difference from the first (A) where both have the
// point. A right click exports it like the Monitor's charts. It follows no run: setSessions()
// gives it everything it draws.

#include "charts/chart_widget.h"
#include "sessions/compared_session.h"

#include <vector>

class QCPAbstractPlottable;
class QCPAxisRect;
class QCPBarsGroup;
class QCPGraph;
class QComboBox;

namespace meshbench::app {

class ComparisonChart : public ChartWidget {
    Q_OBJECT
public:
    // Per step: loss, step time (ms), tokens/s and the bubble the agent reported; per stage: the
    // mean bubble measured from the spans; per rank: peak memory (GB, decimal).
    enum class Figure { Loss, StepTime, TokensPerSecond, Bubble, StageBubble, PeakMemory };

    explicit ComparisonChart(QWidget* parent = nullptr);

    void setSessions(std::vector<ComparedSession> sessions);
    const std::vector<ComparedSession>& sessions() const { return m_sessions; }
    Figure figure() const { return m_figure; }
    void setFigure(Figure figure);
    QComboBox* figureBox() const { return m_figureBox; }

    // What is drawn for session `i` (in setSessions' order), in the units the axes show: a QCPGraph
    // keyed by step for the per-step figures, QCPBars keyed by stage or rank for the others. null
    // where there is nothing: no plan (or a figure without one, the loss), no difference for A.
    QCPAbstractPlottable* measured(int i) const;
    QCPGraph* planned(int i) const;
    QCPAbstractPlottable* difference(int i) const;

protected:
    void reset() override;

private:
    struct Drawn {
        QCPAbstractPlottable* measured = nullptr;
        QCPGraph* planned = nullptr;
        QCPAbstractPlottable* difference = nullptr;
    };
    void drawPerStep();
    void drawPerKey();  // stages or ranks, as bars

    std::vector<ComparedSession> m_sessions;
    std::vector<Drawn> m_drawn;
    Figure m_figure = Figure::StepTime;
    QComboBox* m_figureBox = nullptr;
    QCPAxisRect* m_values = nullptr;
    QCPAxisRect* m_differences = nullptr;
    QCPBarsGroup* m_barGroup = nullptr;
    QCPBarsGroup* m_differenceGroup = nullptr;
};

}  // namespace meshbench::app
