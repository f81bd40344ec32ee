#pragma once
// Findings' figures against hand-worked values, for the findings' tests.

#include <QString>
#include <QtTest>

#include <algorithm>
#include <cmath>

// Within `tolerance` of the expected value, relative to it (absolute for values under 1).
inline bool nearFigure(double actual, double expected, double tolerance)
{
    return std::abs(actual - expected) <= tolerance * std::max(1.0, std::abs(expected));
}

// A finding's figure `key` is present and within `tolerance` of `expected`.
#define CHECK_FIGURE_WITHIN(finding, key, expected, tolerance)                                                         \
    do {                                                                                                               \
        const std::optional<double> actual_ = (finding).figure(key);                                                   \
        const double expected_ = (expected);                                                                           \
        QVERIFY2(actual_.has_value(), key " is missing");                                                              \
        QVERIFY2(nearFigure(*actual_, expected_, (tolerance)),                                                         \
                 qPrintable(QString(key " %1 != %2").arg(*actual_, 0, 'g', 17).arg(expected_, 0, 'g', 17)));           \
    } while (false)
