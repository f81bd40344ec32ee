#include "timeline/timeline_style.h"

#include "plan/units.h"

#include <algorithm>
#include <cmath>

namespace meshbench::app {

std::int64_t TimelineStyle::niceTickStep(double nsPerPixel, double minPixels)
{
    const double raw = std::max(1.0, nsPerPixel * minPixels);
    double decade = std::pow(10.0, std::floor(std::log10(raw)));
    for (;;) {
        for (const double m : {1.0, 2.0, 5.0})
            if (m * decade >= raw * (1 - 1e-12))
                return std::int64_t(std::llround(m * decade));
        decade *= 10;
    }
}

QString TimelineStyle::formatTick(std::int64_t ns, std::int64_t step)
{
    // The largest unit with at most one decimal at this step: 1.5 ms, 250 ns, 1230 us.
    const plan::TimeUnit unit = plan::timeUnitFor(10.0 * double(std::llabs(step)) * 1e-9);
    const double unitNs = unit.seconds * 1e9;
    const int decimals = std::max(0, int(std::ceil(std::log10(unitNs / double(step)) - 1e-9)));
    return QStringLiteral("%1 %2").arg(double(ns) / unitNs, 0, 'f', decimals).arg(QLatin1String(unit.name));
}

QString TimelineStyle::formatDuration(std::int64_t ns)
{
    const plan::TimeUnit unit = plan::timeUnitFor(double(ns) * 1e-9);
    if (unit.seconds < 1e-6)
        return QStringLiteral("%1 ns").arg(ns);
    // Full precision, trailing zeros dropped: 1.5 ms, 1.234567 ms.
    QString number = QString::number(double(ns) / (unit.seconds * 1e9), 'f', 6);
    while (number.endsWith(QLatin1Char('0')))
        number.chop(1);
    if (number.endsWith(QLatin1Char('.')))
        number.chop(1);
    return number + QLatin1Char(' ') + QLatin1String(unit.name);
}

QColor TimelineStyle::kindColor(wire::SpanKind kind)
{
    switch (kind) {
    case wire::SpanKind::Forward:
        return QColor(0x4E, 0x79, 0xA7);
    case wire::SpanKind::Backward:
        return QColor(0x59, 0xA1, 0x4F);
    case wire::SpanKind::WeightGrad:
        return QColor(0xB0, 0x7A, 0xA1);
    case wire::SpanKind::SendActivation:
    case wire::SpanKind::RecvActivation:
        return QColor(0xF2, 0x8E, 0x2B);
    case wire::SpanKind::SendGradient:
    case wire::SpanKind::RecvGradient:
        return QColor(0xED, 0xC9, 0x48);
    case wire::SpanKind::Optimizer:
        return QColor(0xE1, 0x57, 0x59);
    case wire::SpanKind::DataParallelReduce:
        return QColor(0x76, 0xB7, 0xB2);
    case wire::SpanKind::Idle:
        break;
    }
    return QColor(0xBA, 0xB0, 0xAC);
}

QColor TimelineStyle::chunkColor(wire::SpanKind kind, int chunk)
{
    // Later model chunks (interleaved, the V schedules) in lighter shades of the kind's colour, as
    // the zero-bubble paper's figures tell a V's two chunks apart.
    const QColor color = kindColor(kind);
    return chunk > 0 ? color.lighter(100 + 35 * std::min(chunk, 3)) : color;
}

QColor TimelineStyle::pairBorderColor() { return QColor(0x1F, 0x1F, 0x1F); }

QColor TimelineStyle::classColor(KindClass cls)
{
    switch (cls) {
    case KindClass::Forward:
        return kindColor(wire::SpanKind::Forward);
    case KindClass::Backward:
        return kindColor(wire::SpanKind::Backward);
    case KindClass::WeightGrad:
        return kindColor(wire::SpanKind::WeightGrad);
    case KindClass::PointToPoint:
        return kindColor(wire::SpanKind::SendActivation);
    case KindClass::DataParallelReduce:
        return kindColor(wire::SpanKind::DataParallelReduce);
    case KindClass::Optimizer:
        return kindColor(wire::SpanKind::Optimizer);
    }
    return kindColor(wire::SpanKind::Idle);
}

QColor TimelineStyle::deviceClassColor(store::DeviceClass cls)
{
    switch (cls) {
    case store::DeviceClass::Gemm:
        return QColor(0x1F, 0x5F, 0xA8);
    case store::DeviceClass::Attention:
        return QColor(0x7B, 0x4F, 0xB5);
    case store::DeviceClass::OtherCompute:
        return QColor(0x7F, 0xA6, 0xC9);
    case store::DeviceClass::CommTensor:
        return QColor(0xE0, 0x5A, 0x1B);
    case store::DeviceClass::CommPipeline:
        return kindColor(wire::SpanKind::SendActivation);
    case store::DeviceClass::CommData:
        return kindColor(wire::SpanKind::DataParallelReduce);
    case store::DeviceClass::CommExpert:
        return QColor(0xC7, 0x2E, 0x4F);
    case store::DeviceClass::CommOther:
        return QColor(0xA6, 0x8A, 0x5B);
    case store::DeviceClass::Memcpy:
        return QColor(0x3C, 0x9A, 0x4A);
    case store::DeviceClass::Memset:
        return QColor(0x9C, 0xCF, 0x8E);
    case store::DeviceClass::Idle:
        break;
    }
    return kindColor(wire::SpanKind::Idle);
}

}  // namespace meshbench::app
