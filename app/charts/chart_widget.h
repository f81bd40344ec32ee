#pragma once
// The common frame of the workbench's charts (the Monitor's, the Designer's search scatter, the
// session comparison): one QCustomPlot (several axis rects where a chart has several panels, so
// one file exports the whole chart), an optional row of controls above it, and styling from the
// widget's palette so light and dark themes both read. The Monitor's charts follow a run on top of
// it (monitor/run_chart.h).
//
// Every layout pass fits the plot to its size (the Monitor gives a chart as little as 500 x 250
// px): each axis gets as many ticks as its labels have room for, and each legend row wraps onto as
// many lines as its entries need. Labels and legends use fonts a little smaller than the widget's.
//
// A right click offers "Export as PNG…" and "Export as PDF…": a save dialog picks the file (or the
// chooser a caller installs), exportImage writes it, exportFinished says how it went.

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

    // Drops every plotted point and re-reads what the chart shows.
    virtual void reset() = 0;
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
    // Draws the chart afresh (reset()), then replots: for a control that changes what the whole
    // chart shows.
    virtual void rebuild();
    void replot();

    void changeEvent(QEvent* event) override;

private:
    // After a layout pass: tick counts and legend wraps for the sizes it gave. True when one changed
    // (the layout then runs again).
    bool fitToSize();

    QCustomPlot* m_plot = nullptr;
    QHBoxLayout* m_controls = nullptr;
    QMenu* m_menu = nullptr;
    PathChooser m_chooser;
};

}  // namespace meshbench::app
