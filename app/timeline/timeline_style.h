#pragma once
// How the timeline looks and writes times: the kinds' colours, shared by the renderer passes and the
// colour key so the two never disagree, and the ruler's and tooltips' time formats.

#include "timeline/timeline_store.h"

#include "store/imported_trace.h"

#include <QColor>
#include <QString>

#include <cstdint>

namespace meshbench::app {

class TimelineStyle {
public:
    // 1, 2 or 5 x 10^k ns: the smallest such step at least minPixels apart.
    static std::int64_t niceTickStep(double nsPerPixel, double minPixels);
    // A ruler label for a time (relative to the data's begin) on a ruler of the given step: "1.5 ms".
    static QString formatTick(std::int64_t ns, std::int64_t step);
    // A duration at its natural unit with up to 6 significant decimals: "1.234567 ms", "250 ns".
    static QString formatDuration(std::int64_t ns);
    // Fixed categorical colours that read on light and dark backgrounds.
    static QColor kindColor(wire::SpanKind kind);
    // A block of model chunk `chunk` (0 = kindColor), and the border around an F&B pair's blocks.
    static QColor chunkColor(wire::SpanKind kind, int chunk);
    static QColor pairBorderColor();
    static QColor classColor(KindClass cls);
    // A device kernel's class: compute in blues and purple, each parallel dimension's communication
    // in its own warm colour (pipeline and data parallel near their spans' colours), copies in greens.
    static QColor deviceClassColor(store::DeviceClass cls);
    // Data-parallel reductions are hatched: a light fill of their colour with a dark pixel on
    // every fourth diagonal, so they read as communication next to solid compute.
    struct Hatch {
        QRgb light, dark;
        QRgb at(int x, int y) const { return ((x + y) & 3) == 0 ? dark : light; }
    };
    static Hatch hatchOf(const QColor& color) { return {color.lighter(130).rgb(), color.darker(160).rgb()}; }
};

}  // namespace meshbench::app
