// The clock exchange (wire/clock.h): its frames byte for byte, NTP's arithmetic worked by hand,
// and a rank's clock followed through its drift.

#include "wire/clock.h"

#include <QtTest>

using namespace meshbench::wire;

class TestClock : public QObject {
    Q_OBJECT

private slots:
    void requestFrameFollowsTheLayout()
    {
        const std::vector<std::uint8_t> frame = encodeClockRequest({7, 0x0102030405060708});
        const std::vector<std::uint8_t> golden = {0x4D, 0x42, 0x43, 0x51, 0x07, 0x00, 0x00, 0x00,
                                                  0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
        QCOMPARE(frame, golden);
        QCOMPARE(decodeClockRequest(frame), std::optional<ClockRequest>(ClockRequest{7, 0x0102030405060708}));
    }

    void replyRoundTrips()
    {
        const ClockReply reply{3, -5, std::numeric_limits<std::int64_t>::max(),
                               std::numeric_limits<std::int64_t>::min()};
        const std::vector<std::uint8_t> frame = encodeClockReply(reply);
        QCOMPARE(frame.size(), std::size_t(32));
        QCOMPARE(decodeClockReply(frame), std::optional<ClockReply>(reply));
    }

    void anythingElseDecodesToNothing()
    {
        std::vector<std::uint8_t> request = encodeClockRequest({1, 2});
        std::vector<std::uint8_t> reply = encodeClockReply({1, 2, 3, 4});
        QVERIFY(!decodeClockReply(request));  // a request is not a reply
        QVERIFY(!decodeClockRequest(reply));
        QVERIFY(!decodeClockRequest({}));
        request.push_back(0);  // one byte too many
        QVERIFY(!decodeClockRequest(request));
        request.resize(15);  // one too few
        QVERIFY(!decodeClockRequest(request));
        reply[0] ^= 0xFF;  // bad magic
        QVERIFY(!decodeClockReply(reply));
    }

    void offsetAndRoundTripByHand()
    {
        // The rank sends at 1000 on its clock; the engine, 3900 ahead, takes it at 5000 and answers
        // at 5100; the reply reaches the rank at 1300: 200 ns on the wire (100 each way) and 100 ns
        // in the engine.
        const ClockMeasurement m = measureClock({0, 1000, 5000, 5100}, 1300);
        QCOMPARE(m.offsetNs, std::int64_t(-3900));
        QCOMPARE(m.roundTripNs, std::int64_t(200));
        QCOMPARE(m.midpointNs, std::int64_t(1150));
        // Legs of 150 and 50 ns: the offset is off by half their difference, within half the round trip.
        const ClockMeasurement skewed = measureClock({0, 1000, 5050, 5150}, 1300);
        QCOMPARE(skewed.roundTripNs, std::int64_t(200));
        QCOMPARE(skewed.offsetNs, std::int64_t(-3950));
    }

    void unknownClockMovesNothing()
    {
        const RankClock clock;
        QVERIFY(!clock.known());
        QCOMPARE(clock.toEngine(12345), std::int64_t(12345));
    }

    void followsALinearDrift()
    {
        // 3 s ahead, gaining 20 us per second (20 ppm), sampled every 5 s: least squares is exact on
        // a line, so 5 s after the last sample the offset is 3 s + 15 s x 20 us.
        RankClock clock;
        const std::int64_t second = 1'000'000'000;
        for (int i = 0; i <= 2; ++i)
            clock.add(i * 5 * second, 3 * second + i * 5 * 20'000);
        QCOMPARE(clock.driftNsPerSecond(), 20'000.0);
        QCOMPARE(clock.offsetAt(15 * second), 3 * second + 300'000);
        QCOMPARE(clock.toEngine(15 * second), 15 * second - 3 * second - 300'000);
    }

    void driftNeedsASecondAndStaysWithinNtpsBound()
    {
        RankClock early;
        early.add(0, 0);
        early.add(500'000'000, 1'000'000);  // 2000 ppm over half a second: too short to fit
        QCOMPARE(early.driftNsPerSecond(), 0.0);
        QCOMPARE(early.offsetAt(10'000'000'000), std::int64_t(1'000'000));
        RankClock broken;
        broken.add(0, 0);
        broken.add(2'000'000'000, 4'000'000);  // 2000 ppm: held to 500
        QCOMPARE(broken.driftNsPerSecond(), 500'000.0);
    }
};

QTEST_GUILESS_MAIN(TestClock)
#include "tst_clock.moc"
