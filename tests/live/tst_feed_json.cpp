// The live feed's JSON both ways (engine/live/feed_json): every figure survives a round trip
// through text, and a payload that is not a feed message is refused with the key it gets wrong,
// leaving the output as it was.

#include "live/feed_json.h"

#include "common/step_aggregates.h"

#include <QtTest>

using namespace meshbench;
using namespace step_aggregates;

class TestFeedJson : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void stepRoundTrip_data()
    {
        QTest::addColumn<int>("which");
        QTest::newRow("every optional set") << 0;
        QTest::newRow("every optional unset") << 1;
    }
    void stepRoundTrip()
    {
        QFETCH(int, which);
        const live::StepAggregate original = which == 0 ? fullStep(7) : emptyStep(8);
        // Through text, as the feed carries it.
        const nlohmann::json wire = nlohmann::json::parse(live::toJson(original).dump());
        live::StepAggregate back;
        std::string error;
        QVERIFY2(live::fromJson(wire, back, error), error.c_str());
        step_aggregates::compareSteps(back, original);
        QCOMPARE(back.commSeconds, original.commSeconds);
    }

    void memoryRoundTrip()
    {
        for (const live::RankMemory& original : {memoryOf(3, 123'456'789'012, 1LL << 40, 12345), live::RankMemory{}}) {
            const nlohmann::json wire = nlohmann::json::parse(live::toJson(original).dump());
            live::RankMemory back = memoryOf(9, 1, 1, 1);
            std::string error;
            QVERIFY2(live::fromJson(wire, back, error), error.c_str());
            compareMemory(back, original);
        }
    }

    void badPayloadsAreRefusedByName_data() { malformedStepRows(); }
    void badPayloadsAreRefusedByName()
    {
        QFETCH(QString, key);
        QFETCH(QString, value);
        QFETCH(QString, named);
        const nlohmann::json payload = damagedStep(key, value);
        live::StepAggregate kept = fullStep(42);
        std::string error;
        QVERIFY(!live::fromJson(payload, kept, error));
        QVERIFY2(QString::fromStdString(error).contains(named), error.c_str());
        QCOMPARE(kept.step, 42);  // untouched
    }

    void memoryPayloadErrors()
    {
        nlohmann::json payload = live::toJson(memoryOf(1, 5, 10, 20));
        payload["current"]["params"] = "lots";
        live::RankMemory kept;
        std::string error;
        QVERIFY(!live::fromJson(payload, kept, error));
        QVERIFY2(QString::fromStdString(error).contains("\"current.params\""), error.c_str());
        payload = nlohmann::json::array();
        QVERIFY(!live::fromJson(payload, kept, error));
    }
};

QTEST_APPLESS_MAIN(TestFeedJson)
#include "tst_feed_json.moc"
