// live::SessionReplay, the one pass of a stored session through the live aggregator that the
// engine's replay, the Monitor and the session comparison share: every stored step comes out once
// with its stored figures, the admit hook leaves records out, a pass from a time starts there, the
// steps the aggregator only flushes come flagged as the end, and memory comes per changed rank.

#include "live/session_replay.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <map>

using namespace meshbench;

namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

std::string demoSpecText()
{
    QFile file(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"));
    if (!file.open(QIODevice::ReadOnly))
        qFatal("demo.json missing");
    return file.readAll().toStdString();
}

// The demo's 8 ranks; rank 0 sends the metrics of steps 1..3 (step s from s to s + 0.5 s, loss
// 4 - s, 1024 tokens) and a memory sample in each step; rank 5 one sample in step 2.
std::string writeSession(const QTemporaryDir& dir)
{
    store::SessionHeader header;
    header.name = "replayed";
    header.jobSpec = demoSpecText();
    for (int r = 0; r < 8; ++r)
        header.ranks.push_back({r, 0, r / 4, 0, 0, 0, r, "localhost", 100 + r});
    std::string path = dir.filePath(QStringLiteral("replayed.meshbench")).toStdString();
    store::SessionWriter writer(path, header);
    for (int step = 1; step <= 3; ++step) {
        wire::StepMetricsRecord m{};
        m.step = step;
        m.beginNs = step * kSecond;
        m.endNs = step * kSecond + kSecond / 2;
        m.loss = 4.0 - step;
        m.tokens = 1024;
        m.tokensPerSecond = 2048;  // as the agent reports it: tokens over the step's 0.5 s
        writer.append(wire::Batch{0, 0, {m}});
        writer.append(wire::Batch{
            0, 0, {wire::MemorySampleRecord{step, m.endNs, wire::MemoryCategory::Params, 1000, 1000 * step}}});
        if (step == 2)
            writer.append(wire::Batch{
                5, 0, {wire::MemorySampleRecord{step, m.endNs, wire::MemoryCategory::Activations, 70, 77}}});
    }
    writer.setOutcome({store::Outcome::Completed, "", -1, 4 * kSecond});
    writer.flush();
    return path;
}

struct Played {
    std::map<std::int32_t, live::StepAggregate> steps;
    int stepsAtEnd = 0;
    int duplicates = 0;
    std::map<std::uint32_t, live::RankMemory> memory;
};

Played play(const live::SessionReplay& replay, live::SessionReplay::Handlers handlers = {},
            std::int64_t from = std::numeric_limits<std::int64_t>::min())
{
    Played out;
    handlers.steps = [&out](std::vector<live::StepAggregate> steps, bool atEnd) {
        for (live::StepAggregate& step : steps) {
            out.stepsAtEnd += atEnd ? 1 : 0;
            out.duplicates += out.steps.count(step.step) ? 1 : 0;
            out.steps[step.step] = std::move(step);
        }
    };
    handlers.memory = [&out](const std::vector<live::RankMemory>& memory) {
        for (const live::RankMemory& m : memory)
            out.memory[m.rank] = m;
    };
    replay.play(handlers, from);
    return out;
}

}  // namespace

class TestSessionReplay : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void everyStoredStepOnceWithItsFigures()
    {
        QTemporaryDir dir;
        const store::SessionReader reader(writeSession(dir));
        const live::SessionReplay replay(reader);
        QCOMPARE(replay.spec().parallel.worldSize(), 8);
        QCOMPARE(replay.plan().worldSize, 8);

        const Played played = play(replay);
        QCOMPARE(int(played.steps.size()), 3);
        QCOMPARE(played.duplicates, 0);
        QVERIFY(played.stepsAtEnd >= 1);  // the last step has nothing after it to close it
        for (int step = 1; step <= 3; ++step) {
            const live::StepAggregate& s = played.steps.at(step);
            QCOMPARE(*s.loss, 4.0 - step);
            QCOMPARE(*s.stepSeconds, 0.5);
            QCOMPARE(*s.tokensPerSecond, 2048.0);
            // The plan's figures ride along.
            QCOMPARE(*s.plannedStepSeconds, replay.plan().step.total);
        }
        // Rank 0's newest sample and peak; rank 5's one sample; no other rank sent any.
        QCOMPARE(int(played.memory.size()), 2);
        const auto params = std::size_t(wire::MemoryCategory::Params);
        QCOMPARE(played.memory.at(0).current[params], std::int64_t(1000));
        QCOMPARE(played.memory.at(0).peak[params], std::int64_t(3000));
        QCOMPARE(played.memory.at(5).peak[std::size_t(wire::MemoryCategory::Activations)], std::int64_t(77));

        // A second pass starts afresh: the same steps again.
        const Played again = play(replay);
        QCOMPARE(int(again.steps.size()), 3);
        QCOMPARE(*again.steps.at(3).loss, 1.0);
    }

    void admitLeavesRecordsOut()
    {
        QTemporaryDir dir;
        const store::SessionReader reader(writeSession(dir));
        const live::SessionReplay replay(reader);
        live::SessionReplay::Handlers handlers;
        int seen = 0;
        handlers.admit = [&seen](std::uint32_t rank, const wire::Record& record) {
            ++seen;
            const auto* metrics = std::get_if<wire::StepMetricsRecord>(&record);
            return !(rank == 0 && metrics != nullptr && metrics->step == 2);
        };
        const Played played = play(replay, handlers);
        QCOMPARE(seen, 3 + 3 + 1);  // every stored record is offered
        QVERIFY(played.steps.count(1) && played.steps.count(3));
        // Step 2 has only its memory samples: no metrics, so no loss or step time.
        QVERIFY(!played.steps.count(2) || !played.steps.at(2).loss);
    }

    void aPassFromATimeStartsThere()
    {
        QTemporaryDir dir;
        const store::SessionReader reader(writeSession(dir));
        const live::SessionReplay replay(reader);
        const Played played = play(replay, {}, 3 * kSecond);
        QCOMPARE(int(played.steps.size()), 1);
        QCOMPARE(*played.steps.at(3).loss, 1.0);
        QCOMPARE(int(played.memory.size()), 1);  // rank 5's sample is from step 2
    }

    void aDamagedSpecIsRefusedWithTheSessionNamed()
    {
        QTemporaryDir dir;
        store::SessionHeader header;
        header.name = "damaged";
        header.jobSpec = "{\"model\": {}}";
        header.ranks.push_back({0, 0, 0, 0, 0, 0, 0, "localhost", 1});
        const std::string path = dir.filePath(QStringLiteral("damaged.meshbench")).toStdString();
        {
            store::SessionWriter writer(path, header);
            writer.flush();
        }
        const store::SessionReader reader(path);
        try {
            const live::SessionReplay replay(reader, "damaged.meshbench");
            QFAIL("a spec that does not validate was replayed");
        } catch (const store::StoreError& e) {
            QVERIFY2(QString::fromUtf8(e.what()).startsWith(QStringLiteral("damaged.meshbench: ")), e.what());
        }
    }
};

QTEST_MAIN(TestSessionReplay)
#include "tst_session_replay.moc"
