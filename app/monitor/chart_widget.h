#pragma once
// The common frame of the Monitor's charts: one QCustomPlot (several axis rects where a chart has
// several panels, so one file exports the whole chart), an optional row of controls above it, the
// RunState it follows, and styling from the widget's palette so light and dark themes both read.
//
// Updates are incremental: a chart appends the steps that arrived since it last looked, and
// rebuilds only when the state's generation moves (a seek, a late step, a new session) or its
// spec changes. Memory updates come in bursts (one per category per rank), so they are coalesced
// into one refresh per event-loop pass. Every change ends in a queued replot.
//
// Every layout pass fits the plot to its size (the Monitor gives a chart as little as 500 x 250
// px): each axis gets as many ticks as its labels have room for, and each legend row wraps onto as
// many lines as its entries need. Labels and legends use fonts a little smaller than the widget's.
//
// A right click offers "Export as PNG…" and "Export as PDF…": a save dialog picks the file (or the
// chooser a caller installs), exportImage writes it, exportFinished says how it went.

// The engine headers use the names `slots` and `emit`: they go before any Qt header.
#include "monitor/run_state.h"

#include <QPointer>
#include <QSharedPointer>
#include <QWidget>

#include <cstddef>
#include <functional>

class QCustomPlot;
class QCPAxisTicker;
class QCPLegend;
class QHBoxLayout;
class QMenu;

namespace meshbench::app {

// A fixed categorical palette (stages, categories, series): mid-lightness hues that read on both
// a light and a dark background.
QColor seriesColor(int index);
// Tick labels of a 0..1 ratio as percentages.
QSharedPointer<QCPAxisTicker> percentTicker();

class ChartWidget : public QWidget {
    Q_OBJECT
public:
    ~ChartWidget() override;

    void setRunState(RunState* state);
    RunState* runState() const { return m_state; }
    QCustomPlot* plot() const { return m_plot; }

    // Writes the chart as PNG or PDF, chosen by the file's suffix. `size` defaults to the chart's
    // size on screen (1200 x 800 when it has none yet). False with `error` on failure.
    bool exportImage(const QString& path, QSize size = {}, QString* error = nullptr);

    // Asks for the file to export to: given a suggested file name ("memory-chart.png") and a file
    // dialog filter, returns the path, or an empty string for "cancelled". The default opens a
    // QFileDialog.
    using PathChooser = std::function<QString(const QString& suggestedName, const QString& filter)>;
    void setPathChooser(PathChooser chooser);
    // The right-click menu: its actions export as PNG and as PDF.
    QMenu* contextMenu() const { return m_menu; }
    // Asks for a path (the suffix, "png" or "pdf", is added when missing) and exports to it;
    // nothing happens when the choice is cancelled.
    void exportWithChosenPath(const QString& suffix);

Q_SIGNALS:
    // After an export from the menu: `error` is empty when `path` was written.
    void exportFinished(const QString& path, const QString& error);

protected:
    explicit ChartWidget(QWidget* parent);

    // Drops every plotted point and re-reads the spec (stage count, layers, capacity).
    virtual void reset() = 0;
    // Steps [first, end) of the state are new.
    virtual void appendSteps(std::size_t first) = 0;
    // The state's memory changed (coalesced).
    virtual void refreshMemory() {}
    // Colours, pens and fonts that come from the palette, applied after the common styling.
    virtual void applyPalette() {}

    // A row above the plot for the chart's controls, created on first use.
    QHBoxLayout* controls();
    // Applies the palette and fonts to every axis, grid, legend, colour scale and title of the plot,
    // then applyPalette(): call it once a subclass has laid out its panels.
    void restyle();
    // Puts `legend` in a row of its own at `row` of the plot layout (the rows from there move
    // down), laid out horizontally, so that it never hides data.
    void legendRow(QCPLegend* legend, int row);
    // reset() and append every step: for a control that changes what the whole chart shows.
    void rebuild();
    void replot();

    void changeEvent(QEvent* event) override;

private:
    // After a layout pass: tick counts and legend wraps for the sizes it gave. True when one changed
    // (the layout then runs again).
    bool fitToSize();
    void onStepsChanged();
    void onMemoryChanged();

    QCustomPlot* m_plot = nullptr;
    QHBoxLayout* m_controls = nullptr;
    QMenu* m_menu = nullptr;
    PathChooser m_chooser;
    QPointer<RunState> m_state;
    std::size_t m_consumed = 0;  // steps of the state already plotted
    int m_generation = -1;       // the state's generation they belong to
    bool m_memoryPending = false;
};

}  // namespace meshbench::app
