// The steady-state rules every reader of a session shares: warm-up and the median.
#include "live/steady_state.h"

#include <QtTest>

using namespace meshbench::live;

class TestSteadyState : public QObject {
    Q_OBJECT
private slots:
    void warmupIsLeftOutWhenLaterStepsExist()
    {
        QCOMPARE(firstSteadyStep(0), std::size_t(0));
        QCOMPARE(firstSteadyStep(1), std::size_t(0));  // warm-up is all there is
        QCOMPARE(firstSteadyStep(2), std::size_t(1));
        QCOMPARE(firstSteadyStep(300), std::size_t(1));
    }

    void medianOfOddAndEvenCounts()
    {
        QCOMPARE(median({7.0}), 7.0);
        QCOMPARE(median({3.0, 1.0, 2.0}), 2.0);
        // Even: the mean of the two middle values, 2 and 4 here (not either one of them).
        QCOMPARE(median({4.0, 100.0, 1.0, 2.0}), 3.0);
    }
};

QTEST_APPLESS_MAIN(TestSteadyState)
#include "tst_steady_state.moc"
