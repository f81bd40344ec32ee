// Plan and search reports: the JSON keys other tools rely on, and text that agrees with them.

#include "plan/report.h"
#include "plan/units.h"

#include "common/demo_spec.h"

#include <QtTest>

using namespace meshbench::plan;
using meshbench::testing::demoSpec;
using nlohmann::json;

class TestReport : public QObject {
    Q_OBJECT
private slots:
    void planJsonHasTheContractKeys();
    void planJsonScheduleIsTheSimulatedOpList();
    void planJsonLeavesOutAHugeOpList();
    void planTextShowsMemoryTableAndTimeline();
    void unitCostsReportTheScheduleAlone();
    void unitCostsAreShapedPerStage();
    void searchJsonListsTheBestLayouts();
    void byteUnitIsTheLargestDecimalUnitReached_data();
    void byteUnitIsTheLargestDecimalUnitReached();
    void formatting();
};

void TestReport::planJsonHasTheContractKeys()
{
    const Plan plan = makePlan(demoSpec());
    const json j = planToJson(plan);
    for (const char* key : {"valid", "errors", "world_size", "params_total", "params_per_gpu_max", "memory_bytes",
                            "flops_per_step", "step_time_s", "tokens_per_s", "mfu", "bubble_ratio", "schedule"})
        QVERIFY2(j.contains(key), key);
    QCOMPARE(j["valid"].get<bool>(), true);
    QVERIFY(j["errors"].empty());
    QCOMPARE(j["world_size"].get<int>(), 8);
    const json& m = j["memory_bytes"];
    QCOMPARE(m["total"].get<double>(), m["weights"].get<double>() + m["grads"].get<double>() +
                                           m["optimizer"].get<double>() + m["activations"].get<double>());
    QCOMPARE(m["total"].get<double>(), plan.mostLoaded().total());
    QCOMPARE(j["params_total"].get<double>(), plan.parameters.total);
    QCOMPARE(j["step_time_s"].get<double>(), plan.step.total);
    QCOMPARE(j["bubble_ratio"].get<double>(), plan.simulation.overallBubbleRatio);
    // The spec goes along in full, so the plan can be reproduced.
    QVERIFY(loadJobSpec(j["spec"]).valid());
}

void TestReport::planJsonScheduleIsTheSimulatedOpList()
{
    const Plan plan = makePlan(demoSpec());
    const json schedule = planToJson(plan)["schedule"];
    QCOMPARE(int(schedule.size()), plan.spec.parallel.pp);
    for (std::size_t s = 0; s < schedule.size(); ++s) {
        const json& ops = schedule[s]["ops"];
        QCOMPARE(ops.size(), plan.simulation.timeline[s].size());
        int forwards = 0;
        double previousEnd = 0;
        for (const json& op : ops) {
            QVERIFY(op["end"].get<double>() >= op["begin"].get<double>());
            QVERIFY(op["begin"].get<double>() >= previousEnd - 1e-15);  // one op at a time per stage
            previousEnd = op["end"].get<double>();
            forwards += op["op"] == "F";
        }
        QCOMPARE(forwards, plan.spec.parallel.microbatches);
    }
}

void TestReport::planJsonLeavesOutAHugeOpList()
{
    // Issue 11: 249,999 micro-batches made plan --json print 892 MB. Above kMaxReportedOps the op
    // list is left out, with a warning naming the field to lower; the per-stage figures stay.
    JobSpec spec = demoSpec();
    spec.parallel.microbatches = 200'000;
    const Plan plan = makePlan(spec);
    std::size_t ops = 0;
    for (const auto& stage : plan.simulation.timeline)
        ops += stage.size();
    QVERIFY(ops > kMaxReportedOps);
    const json j = planToJson(plan);
    QCOMPARE(j["schedule"].size(), plan.simulation.timeline.size());
    for (std::size_t s = 0; s < j["schedule"].size(); ++s) {
        QVERIFY(j["schedule"][s]["ops"].empty());
        QCOMPARE(j["schedule"][s]["bubble_ratio"].get<double>(), plan.simulation.bubbleRatio[s]);
    }
    const std::string warning = j["warnings"].back().get<std::string>();
    QVERIFY2(warning.find("the schedule has " + std::to_string(ops) + " ops") != std::string::npos, warning.c_str());
    QVERIFY2(warning.find("parallel.microbatches") != std::string::npos, warning.c_str());
    QVERIFY(j.dump().size() < 100'000);

    // Below the limit (between half of it and all of it) the list is there in full.
    spec.parallel.microbatches = 1;
    while (true) {
        spec.parallel.microbatches *= 2;
        std::size_t count = 0;
        for (const auto& stage : makePlan(spec).simulation.timeline)
            count += stage.size();
        if (count > kMaxReportedOps / 2)
            break;
    }
    const Plan listed = makePlan(spec);
    const json k = planToJson(listed);
    for (std::size_t s = 0; s < k["schedule"].size(); ++s)
        QCOMPARE(k["schedule"][s]["ops"].size(), listed.simulation.timeline[s].size());
}

void TestReport::planTextShowsMemoryTableAndTimeline()
{
    const Plan plan = makePlan(demoSpec());
    const QString text = QString::fromStdString(planToText(plan));
    QVERIFY(text.contains("Memory per GPU"));
    QVERIFY(text.contains(QString::fromStdString(formatBytes(plan.mostLoaded().total()))));
    QVERIFY(text.contains("stage 0  |"));
    QVERIFY(text.contains("stage 1  |"));
    QVERIFY(text.contains(QStringLiteral("MFU %1%").arg(100 * plan.mfu, 0, 'f', 1)));
}

void TestReport::unitCostsReportTheScheduleAlone()
{
    // 1F1B with p = 2, m = 4, F = 1, B = 2: makespan (m + p - 1)(F + B) = 15.
    JobSpec spec = demoSpec();
    const Plan plan = makePlan(spec, UnitCosts{1, 2, 0});
    const json j = planToJson(plan);
    QCOMPARE(j["makespan"].get<double>(), 15.0);
    QCOMPARE(j["bubble_ratio"].get<double>(), 1.0 / 5);
    QVERIFY(QString::fromStdString(planToText(plan)).contains("makespan 15"));
}

void TestReport::unitCostsAreShapedPerStage()
{
    // Interleaved, p = 2, v = 2, m = 4 with F = 1, B = 2 per stage: each chunk does half, and the
    // bubble is (p - 1)/(v m + p - 1) = 1/9 of (v m + p - 1)(F + B)/v = 13.5.
    JobSpec spec = demoSpec();
    spec.parallel.schedule = ScheduleKind::Interleaved;
    spec.parallel.virtualStages = 2;
    QVERIFY(validateLayout(spec).empty());
    const Plan plan = makePlan(spec, UnitCosts{1, 2, 0});
    QCOMPARE(plan.simulation.makespan, 13.5);
    QCOMPARE(plan.simulation.overallBubbleRatio, 1.0 / 9);
}

void TestReport::searchJsonListsTheBestLayouts()
{
    const SearchResult result = searchLayouts(demoSpec(), {3, 0});
    const json j = searchToJson(result);
    QCOMPARE(j["valid"].get<bool>(), true);
    QCOMPARE(j["best"].size(), result.best.size());
    QCOMPARE(j["evaluated"].get<std::uint64_t>(), result.evaluated);
    QCOMPARE(j["best"][0]["step_time_s"].get<double>(), result.best[0].stepTime);
    const int world = j["best"][0]["dp"].get<int>() * j["best"][0]["pp"].get<int>() * j["best"][0]["tp"].get<int>();
    QCOMPARE(world, 8);
}

void TestReport::byteUnitIsTheLargestDecimalUnitReached_data()
{
    QTest::addColumn<double>("bytes");
    QTest::addColumn<double>("unitBytes");
    QTest::addColumn<QString>("name");
    QTest::newRow("zero") << 0.0 << 1.0 << "B";
    QTest::newRow("negative") << -5e6 << 1.0 << "B";
    QTest::newRow("999 B") << 999.0 << 1.0 << "B";
    QTest::newRow("1000 B") << 1000.0 << 1e3 << "kB";
    QTest::newRow("999,999 B") << 999'999.0 << 1e3 << "kB";
    QTest::newRow("1e6") << 1e6 << 1e6 << "MB";
    QTest::newRow("just below 1e9") << 999'999'999.0 << 1e6 << "MB";
    QTest::newRow("1e9") << 1e9 << 1e9 << "GB";
    QTest::newRow("80 GB device") << 80e9 << 1e9 << "GB";
    QTest::newRow("1e12") << 1e12 << 1e12 << "TB";
    QTest::newRow("above TB stays TB") << 5e15 << 1e12 << "TB";
}

void TestReport::byteUnitIsTheLargestDecimalUnitReached()
{
    QFETCH(double, bytes);
    QFETCH(double, unitBytes);
    QFETCH(QString, name);
    const ByteUnit unit = byteUnitFor(bytes);
    QCOMPARE(unit.bytes, unitBytes);
    QCOMPARE(QString::fromLatin1(unit.name), name);
}

void TestReport::formatting()
{
    QCOMPARE(formatBytes(31.40625e9), std::string("31.41 GB"));
    QCOMPARE(formatBytes(350e6), std::string("350.0 MB"));
    QCOMPARE(formatBytes(1.5e12), std::string("1.50 TB"));
    QCOMPARE(formatBytes(1000), std::string("1.0 kB"));
    QCOMPARE(formatBytes(999), std::string("999 B"));
    QCOMPARE(formatBytes(0), std::string("0 B"));
    QCOMPARE(formatSeconds(1.5), std::string("1.500 s"));
    QCOMPARE(formatSeconds(0.0123), std::string("12.30 ms"));
    QCOMPARE(formatSeconds(4.2e-6), std::string("4.2 us"));
    QCOMPARE(formatSeconds(3.5e-7), std::string("350 ns"));
    QCOMPARE(formatSeconds(0), std::string("0 ns"));
    // timeUnitFor, as byteUnitFor: the largest unit the magnitude reaches.
    QCOMPARE(std::string(timeUnitFor(1.0).name), std::string("s"));
    QCOMPARE(std::string(timeUnitFor(0.999).name), std::string("ms"));
    QCOMPARE(std::string(timeUnitFor(-2e-3).name), std::string("ms"));
    QCOMPARE(std::string(timeUnitFor(1e-6).name), std::string("us"));
    QCOMPARE(std::string(timeUnitFor(9.99e-7).name), std::string("ns"));
    QCOMPARE(timeUnitFor(5e-5).seconds, 1e-6);
    QCOMPARE(errorsToText({{"parallel.pp", "bad"}}), std::string("error: parallel.pp: bad\n"));
}

QTEST_APPLESS_MAIN(TestReport)
#include "tst_report.moc"
