#pragma once
// Memory per rank: a stacked bar of the current bytes by category (params, grads, optimizer,
// activations, workspace) with the peak as a marker and the device's capacity as a line, so the
// rank that will run out shows first; below it, the total of a chosen rank over time.

#include "monitor/chart_widget.h"

#include <array>

class QComboBox;
class QCPBars;
class QCPGraph;
class QCPItemStraightLine;

namespace meshbench::app {

class MemoryChart : public ChartWidget {
    Q_OBJECT
public:
    explicit MemoryChart(QWidget* parent = nullptr);

    // Keys are ranks, values GiB (2^30 bytes).
    QCPBars* categoryBars(wire::MemoryCategory category) const { return m_bars[std::size_t(category)]; }
    // The sum of the category peaks: what the rank would hold if every category peaked together.
    QCPGraph* peakGraph() const { return m_peak; }
    QCPItemStraightLine* capacityLine() const { return m_capacity; }
    // Key: seconds since the rank's first sample; value: total GiB.
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
    void refreshHistory();

    QComboBox* m_rank = nullptr;
    std::array<QCPBars*, wire::kMemoryCategories> m_bars{};
    QCPGraph* m_peak = nullptr;
    QCPItemStraightLine* m_capacity = nullptr;
    QCPGraph* m_history = nullptr;
    int m_plottedRank = -1;          // the rank m_history holds
    std::size_t m_plottedPoints = 0; // of its history
    std::int64_t m_historyOrigin = 0;
};

}  // namespace meshbench::app
