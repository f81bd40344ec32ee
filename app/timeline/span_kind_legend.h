#pragma once
// A one-line key to the timeline's colours: a swatch and a name for each kind of block the
// TimelineView paints, drawn the way the view draws it (point-to-point transfers as a thin bar,
// data-parallel reductions hatched) and in its colours (TimelineStyle::kindColor), so the two can
// never disagree. Kinds the view paints alike share an entry (send and receive of activations);
// idle time, a gap in the timeline, ends the row as an empty box. A schedule with several model
// chunks per stage (interleaved, the V schedules) adds the shading of later chunks, and one with
// overlapped F&B pairs (DualPipeV) the pair's border (setScheduleMarks).
//
// The entries flow left to right and wrap onto more lines only when the widget is too narrow
// (heightForWidth): at 1000 px it is a single line as tall as the text.

#include "wire/telemetry.h"

#include <QWidget>

#include <vector>

namespace meshbench::app {

class SpanKindLegend : public QWidget {
    Q_OBJECT
public:
    // How a schedule's blocks are told apart beyond their kind.
    enum class Mark { None, LaterChunk, OverlappedPair };
    struct Entry {
        std::vector<wire::SpanKind> kinds;  // painted alike; Idle alone for the gap entry
        QString name;
        Mark mark = Mark::None;  // a mark entry shows the kinds its swatch is made of
    };

    explicit SpanKindLegend(QWidget* parent = nullptr);

    // The mark entries after the kinds: later chunks' lighter shades, the F&B pair's border.
    void setScheduleMarks(bool laterChunks, bool overlappedPairs);

    const std::vector<Entry>& entries() const { return m_entries; }
    // Where entry `index`'s swatch is drawn at the widget's current width.
    QRect swatchRect(std::size_t index) const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override;

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    // The swatch rect of each entry for a given width (text follows its swatch); lines wrap.
    std::vector<QRect> layoutFor(int width) const;
    int lineHeight() const;
    int entryWidth(const Entry& entry) const;
    void paintSwatch(QPainter& painter, const Entry& entry, const QRect& rect) const;

    std::vector<Entry> m_entries;
};

}  // namespace meshbench::app
