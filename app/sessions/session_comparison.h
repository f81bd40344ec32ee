#pragma once
// Two or more sessions side by side (e.g. 1F1B against interleaved): a table of the measured
// bubble, step time, tokens/s, final loss and peak memory per rank, with each later session's
// difference from A in percent, and beside it the same sessions' curves laid over each other
// (ComparisonChart). The sessions are read off the GUI thread (the chart replays each one's spans);
// compared() says when the table and chart show them. A session that cannot be read shows its error
// inline and leaves the others (and the widget) usable.

#include "sessions/compared_session.h"

#include <QStringList>
#include <QWidget>

#include <optional>
#include <vector>

class QLabel;
class QTableWidget;
class QThread;

namespace meshbench::app {

class ComparisonChart;

class SessionComparison : public QWidget {
    Q_OBJECT

public:
    explicit SessionComparison(QWidget* parent = nullptr);
    ~SessionComparison() override;

    // Column 0 the metric, then one column per session (A, B, ...), then one per later session
    // ("B vs A", ...) in percent; numbers also under Qt::UserRole (raw units: ratios, seconds, bytes;
    // the difference in percent).
    QTableWidget* table() const { return m_table; }
    // The readable sessions' curves.
    ComparisonChart* chart() const { return m_chart; }
    QString errorText() const;

public slots:
    // Reads every file on a worker thread (the whole session: the chart replays its spans), then
    // fills the table and the chart and emits compared(); errors go to the inline label, and the
    // readable sessions are still shown. A newer compare() or clear() supersedes one under way.
    void compare(const QStringList& paths);
    void compare(const QString& pathA, const QString& pathB) { compare(QStringList{pathA, pathB}); }
    void clear();

signals:
    void compared();

private:
    struct Loaded;
    void display(const Loaded& loaded);
    void fill(const std::vector<std::optional<ComparedSession>>& sessions);

    QLabel* m_title = nullptr;
    QLabel* m_error = nullptr;
    QTableWidget* m_table = nullptr;
    ComparisonChart* m_chart = nullptr;
    int m_generation = 0;             // of the latest compare() or clear(); older results are dropped
    std::vector<QThread*> m_readers;  // still reading; waited for on destruction
};

}  // namespace meshbench::app
