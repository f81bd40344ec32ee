#pragma once
// Two sessions side by side (e.g. 1F1B against interleaved): measured bubble, step time, tokens/s,
// final loss and peak memory per rank, with B's difference from A in percent. A session that
// cannot be read shows its error inline and leaves the other side (and the widget) usable.

#include <QString>
#include <QWidget>

#include <cstdint>
#include <optional>
#include <vector>

class QLabel;
class QTableWidget;

namespace meshbench::store {
class SessionReader;
}

namespace meshbench::app {

// What the comparison shows of one session. Step figures come from the step metrics (one record
// per step; a step reported twice counts once). Step 1 carries the warm-up (first-touch
// allocation, cold caches), so the means leave it out whenever later steps exist.
struct SessionFigures {
    QString name;
    QString layout;
    int steps = 0;
    std::optional<double> meanBubble;          // mean of the steps' bubble_ratio
    std::optional<double> meanStepSeconds;     // mean of end - begin
    std::optional<double> tokensPerSecond;     // tokens over the steps' summed time
    std::optional<double> finalLoss;           // the last step's loss
    // Per rank (index = rank): the largest, over steps, of the sum over categories of each
    // category's peak in that step (its current bytes where a sample has no peak); nullopt for a
    // rank without samples.
    std::vector<std::optional<std::int64_t>> peakMemoryBytes;
};
// Throws store::StoreError when the file turns out to be corrupt.
SessionFigures sessionFigures(const store::SessionReader& session);

class SessionComparison : public QWidget {
    Q_OBJECT

public:
    explicit SessionComparison(QWidget* parent = nullptr);

    // Column 0 the metric, 1 A, 2 B, 3 B vs A in percent; numbers also under Qt::UserRole (raw
    // units: ratios, seconds, bytes; the difference in percent).
    QTableWidget* table() const { return m_table; }
    QString errorText() const;

public slots:
    // Reads both files (a few queries each) and fills the table; errors go to the inline label,
    // and the readable side is still shown.
    void compare(const QString& pathA, const QString& pathB);
    void clear();

private:
    void fill(const std::optional<SessionFigures>& a, const std::optional<SessionFigures>& b);

    QLabel* m_title = nullptr;
    QLabel* m_error = nullptr;
    QTableWidget* m_table = nullptr;
};

}  // namespace meshbench::app
