#pragma once
// Memory per rank: a stacked bar of the current bytes by category (params, grads, optimizer,
// activations, workspace) with the peak as a marker and the device's capacity as a line, so the
// rank that will run out shows first; below it, the total of a chosen rank over time.
//
// When the largest peak is under 5% of the capacity (a CPU run holds megabytes against a nominal
// device), a full-height capacity line would flatten the bars to nothing: the value axis is then
// scaled to the data and the capacity is named in a note instead.

#include "monitor/run_chart.h"

#include <array>

class QComboBox;
class QCPBars;
class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;

namespace meshbench::app {

class MemoryChart : public RunChart {
    Q_OBJECT
public:
    explicit MemoryChart(QWidget* parent = nullptr);

    // Keys are ranks, values in unitBytes(): the decimal unit plan::byteUnitFor picks for the top
    // of the value axis (GB, or MB / kB while it tops out lower), so that the ticks are whole
    // numbers rather than 0.001s.
    double unitBytes() const { return m_unit; }
    QCPBars* categoryBars(wire::MemoryCategory category) const { return m_bars[std::size_t(category)]; }
    // The sum of the category peaks: what the rank would hold if every category peaked together.
    QCPGraph* peakGraph() const { return m_peak; }
    // The capacity line is shown while it is on the scale, the note (top right) while it is not.
    QCPItemStraightLine* capacityLine() const { return m_capacity; }
    QCPItemText* capacityNote() const { return m_capacityNote; }
    // Key: seconds since the rank's first sample; value: total in unitBytes().
    QCPGraph* historyGraph() const { return m_history; }
    void setHistoryRank(std::uint32_t rank);
    int historyRank() const;

protected:
    void reset() override;
    void appendSteps(std::size_t) override {}
    void refreshMemory() override;
    void applyPalette() override;

private:
    void syncRankChoices();
    // Scales the value axis to the largest figure held (bytes) and places the capacity line or note.
    void fitValueAxis(double largestBytes);
    void refreshHistory();

    QComboBox* m_rank = nullptr;
    std::array<QCPBars*, wire::kMemoryCategories> m_bars{};
    QCPGraph* m_peak = nullptr;
    QCPItemStraightLine* m_capacity = nullptr;
    QCPItemText* m_capacityNote = nullptr;
    double m_unit = 0;  // bytes per axis unit; set by the first fit
    QCPGraph* m_history = nullptr;
    int m_plottedRank = -1;           // the rank m_history holds
    std::size_t m_plottedPoints = 0;  // of its history
    std::int64_t m_historyOrigin = 0;
};

}  // namespace meshbench::app
