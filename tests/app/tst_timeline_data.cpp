// The timeline's data: level-of-detail buckets against a brute-force sum, sorting under
// out-of-order appends, live batches, change batching, and the session and plan loaders.
#include "timeline/timeline_data.h"

#include "plan/job_spec.h"
#include "plan/planner.h"
#include "store/session_store.h"

#include <nlohmann/json.hpp>

#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <random>

using namespace meshbench;
using namespace meshbench::app;

namespace {

// Sequential spans with random lengths, gaps, kinds (idle included) and a few overlaps.
std::vector<TimelineSpan> randomSpans(std::mt19937_64& rng, std::size_t count, std::int64_t start)
{
    std::uniform_int_distribution<std::int64_t> length(1, 3000), gap(0, 800);
    std::uniform_int_distribution<int> kind(0, wire::kSpanKinds - 1), overlap(0, 9);
    std::vector<TimelineSpan> spans;
    std::int64_t t = start;
    for (std::size_t i = 0; i < count; ++i) {
        TimelineSpan s;
        s.beginNs = t;
        s.endNs = t + length(rng);
        s.kind = wire::SpanKind(kind(rng));
        s.microbatch = int(i % 8);
        s.step = int(i / 100);
        s.bytes = i;
        spans.push_back(s);
        t = overlap(rng) == 0 ? t + 1 : s.endNs + gap(rng);  // 1 in 10 overlaps the next
    }
    return spans;
}

// Busy ns per class of `spans` inside [t0, t1) and the longest of them, span by span.
BucketSummary bruteForce(const std::vector<TimelineSpan>& spans, std::int64_t t0, std::int64_t t1)
{
    BucketSummary sum;
    for (const TimelineSpan& s : spans) {
        const auto cls = kindClassOf(s.kind);
        const std::int64_t overlap = std::min(s.endNs, t1) - std::max(s.beginNs, t0);
        if (cls && overlap > 0) {
            sum.busy[std::size_t(*cls)] += overlap;
            sum.longest = std::max(sum.longest, s.endNs - s.beginNs);
        }
    }
    return sum;
}

// Every level's summaries of `row` for random bucket-aligned windows equal the brute force.
void checkSummaries(const TimelineRow& row, const std::vector<TimelineSpan>& spans, std::mt19937_64& rng)
{
    QVERIFY(row.levels() > 3);
    QCOMPARE(row.bucketCount(row.levels() - 1), std::int64_t(1));
    for (int level = 0; level < row.levels(); ++level) {
        const std::int64_t count = row.bucketCount(level);
        const std::int64_t width = row.bucketWidth(level);
        std::uniform_int_distribution<std::int64_t> pick(0, count - 1);
        for (int trial = 0; trial < 40; ++trial) {
            std::int64_t a = pick(rng), b = pick(rng);
            if (a > b)
                std::swap(a, b);
            const std::int64_t t0 = row.origin() + a * width, t1 = row.origin() + (b + 1) * width;
            std::int64_t covered = 0;
            const BucketSummary lod = row.summary(level, t0, t1, &covered);
            const BucketSummary exact = bruteForce(spans, t0, t1);
            QCOMPARE(lod, exact);
            QCOMPARE(covered, t1 - t0);
            QCOMPARE(lod.dominant(), exact.dominant());
            // A window inside the buckets sums the whole buckets it touches.
            QCOMPARE(row.summary(level, t0 + width / 3, t1 - width / 3), exact);
        }
    }
}

void checkSorted(const TimelineRow& row)
{
    for (std::size_t i = 1; i < row.size(); ++i)
        QVERIFY(row.begin(i - 1) <= row.begin(i));
}

plan::Plan demoPlan(const std::optional<plan::UnitCosts>& unitCosts = std::nullopt,
                    const nlohmann::json& parallelPatch = nullptr)
{
    QFile file(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs/demo.json"));
    if (!file.open(QIODevice::ReadOnly))
        qFatal("demo.json missing");
    nlohmann::json doc = nlohmann::json::parse(file.readAll().toStdString());
    if (!parallelPatch.is_null())
        doc["parallel"].merge_patch(parallelPatch);
    const plan::LoadResult loaded = plan::loadJobSpec(doc);
    if (!loaded.valid())
        qFatal("demo.json invalid: %s", loaded.errors.front().message.c_str());
    return plan::makePlan(*loaded.spec, unitCosts);
}

}  // namespace

class TestTimelineData : public QObject {
    Q_OBJECT
private slots:
    void classesOfKinds();
    void summariesEqualBruteForce();
    void chunkedAppendEqualsOneAppend();
    void outOfOrderAppendKeepsSortAndSummaries();
    void scanStartSkipsOnlyEndedSpans();
    void liveBatches();
    void badTimesDoNotCrash();
    void changedIsBatched();
    void planLoaderPerStage();
    void planLoaderPerRankAndUnitCosts();
    void sessionLoader();
    void overlappedPairsAreMarked();
};

void TestTimelineData::classesOfKinds()
{
    QCOMPARE(kindClassOf(wire::SpanKind::Forward), KindClass::Forward);
    QCOMPARE(kindClassOf(wire::SpanKind::RecvGradient), KindClass::PointToPoint);
    QCOMPARE(kindClassOf(wire::SpanKind::DataParallelReduce), KindClass::DataParallelReduce);
    QVERIFY(!kindClassOf(wire::SpanKind::Idle));
    BucketSummary s;
    QVERIFY(!s.dominant());
    s.busy[2] = 5;
    s.busy[4] = 5;
    QCOMPARE(s.dominant(), KindClass::WeightGrad);  // first on ties
    QCOMPARE(s.total(), std::int64_t(10));
}

void TestTimelineData::summariesEqualBruteForce()
{
    std::mt19937_64 rng(7);
    TimelineStore store;
    store.setBaseShift(8);  // 256 ns level-0 buckets
    const auto spans = randomSpans(rng, 5000, 1'000'000);
    store.append(3, spans);
    QCOMPARE(store.rowCount(), std::size_t(1));
    const TimelineRow& row = store.row(0);
    QCOMPARE(row.baseShift(), 8);
    QCOMPARE(row.origin(), (spans.front().beginNs >> 8) << 8);
    checkSummaries(row, spans, rng);
    // The top bucket holds everything.
    QCOMPARE(row.bucket(row.levels() - 1, 0), bruteForce(spans, row.origin(), row.lastEnd() + 1));
}

void TestTimelineData::chunkedAppendEqualsOneAppend()
{
    std::mt19937_64 rng(11);
    const auto spans = randomSpans(rng, 4000, 0);
    TimelineStore whole, chunked;
    whole.setBaseShift(7);
    chunked.setBaseShift(7);
    whole.append(0, spans);
    std::uniform_int_distribution<std::size_t> chunk(1, 300);
    for (std::size_t i = 0; i < spans.size();) {
        const std::size_t n = std::min(chunk(rng), spans.size() - i);
        chunked.append(0, std::span(spans).subspan(i, n));
        i += n;
    }
    const TimelineRow &a = whole.row(0), &b = chunked.row(0);
    QCOMPARE(b.size(), a.size());
    QCOMPARE(b.levels(), a.levels());
    for (int level = 0; level < a.levels(); ++level) {
        QCOMPARE(b.bucketCount(level), a.bucketCount(level));
        for (std::int64_t j = 0; j < a.bucketCount(level); ++j)
            QCOMPARE(b.bucket(level, j), a.bucket(level, j));
    }
}

void TestTimelineData::outOfOrderAppendKeepsSortAndSummaries()
{
    std::mt19937_64 rng(13);
    auto spans = randomSpans(rng, 3000, 50'000);
    // Spans keep their identity through the sort: bytes = original index.
    TimelineStore store;
    store.setBaseShift(9);
    // Mostly in order, in chunks whose order is locally shuffled, plus a chunk earlier than all.
    std::vector<TimelineSpan> early = randomSpans(rng, 200, 0);
    for (std::size_t k = 0; k < early.size(); ++k)
        early[k].bytes = 100'000 + k;
    for (std::size_t i = 0; i < spans.size(); i += 100) {
        std::vector<TimelineSpan> chunk(spans.begin() + std::ptrdiff_t(i), spans.begin() + std::ptrdiff_t(i + 100));
        std::shuffle(chunk.begin(), chunk.end(), rng);
        store.append(1, chunk);
        if (i == 1500)
            store.append(1, early);  // before the row's origin: the pyramid is rebuilt
    }
    const TimelineRow& row = store.row(0);
    QCOMPARE(row.size(), spans.size() + early.size());
    checkSorted(row);
    std::vector<TimelineSpan> all = spans;
    all.insert(all.end(), early.begin(), early.end());
    for (std::size_t i = 0; i < row.size(); ++i) {
        const TimelineSpan s = row.span(i);
        const TimelineSpan& original = s.bytes >= 100'000 ? early[s.bytes - 100'000] : spans[s.bytes];
        QCOMPARE(s, original);
    }
    QCOMPARE(row.origin(), (early.front().beginNs >> row.baseShift()) << row.baseShift());
    QCOMPARE(store.beginTime(), early.front().beginNs);
    checkSummaries(row, all, rng);
}

void TestTimelineData::scanStartSkipsOnlyEndedSpans()
{
    std::mt19937_64 rng(17);
    const auto spans = randomSpans(rng, 2000, 0);
    TimelineStore store;
    store.append(0, spans);
    const TimelineRow& row = store.row(0);
    std::uniform_int_distribution<std::int64_t> pick(0, row.lastEnd());
    for (int trial = 0; trial < 500; ++trial) {
        const std::int64_t t = pick(rng);
        const std::size_t start = row.scanStart(t);
        for (std::size_t i = 0; i < start; ++i)
            QVERIFY(row.end(i) <= t);
        // The first span that overlaps t lies in the block scanStart points at.
        std::size_t firstOverlap = 0;
        while (firstOverlap < row.size() && row.end(firstOverlap) <= t)
            ++firstOverlap;
        QVERIFY(firstOverlap >= start && firstOverlap - start < 64);
        QCOMPARE(row.lowerBound(t),
                 std::size_t(std::lower_bound(spans.begin(), spans.end(), t,
                                              [](const TimelineSpan& s, std::int64_t v) { return s.beginNs < v; }) -
                             spans.begin()));
    }
}

void TestTimelineData::liveBatches()
{
    TimelineStore store;
    store.setRows({{4, 1, "rank 4 · dp0 pp1 tp0"}});
    wire::Batch batch;
    batch.rank = 2;
    wire::SpanRecord f;
    f.step = 3;
    f.stage = 0;
    f.microbatch = 1;
    f.kind = wire::SpanKind::Forward;
    f.beginNs = 5000;
    f.endNs = 6000;
    batch.records.push_back(f);
    batch.records.push_back(wire::LogRecord{7000, wire::LogLevel::Info, "ignored"});
    wire::SpanRecord b = f;
    b.kind = wire::SpanKind::Backward;
    b.beginNs = 6000;
    b.endNs = 8000;
    batch.records.push_back(b);
    QCOMPARE(store.appendBatch(batch), std::size_t(2));

    batch.rank = 4;
    batch.records = {f};
    QCOMPARE(store.appendBatch(batch), std::size_t(1));

    // Rows in display order: stage 0 (rank 2, made from its spans), then stage 1 (rank 4, declared).
    QCOMPARE(store.rowCount(), std::size_t(2));
    QCOMPARE(store.row(0).info().rank, 2);
    QCOMPARE(store.row(0).info().stage, 0);
    QCOMPARE(store.row(0).info().label, std::string("rank 2"));
    QCOMPARE(store.row(1).info().label, std::string("rank 4 · dp0 pp1 tp0"));
    QCOMPARE(store.rowOfRank(4), 1);
    QCOMPARE(store.rowOfRank(9), -1);
    QCOMPARE(store.spanCount(), std::size_t(3));
    QCOMPARE(store.beginTime(), std::int64_t(5000));
    QCOMPARE(store.endTime(), std::int64_t(8000));
    QCOMPARE(store.stepBegin(3), std::optional<std::int64_t>(5000));
    QVERIFY(!store.stepBegin(4));
    QCOMPARE(store.row(0).span(1).kind, wire::SpanKind::Backward);
    QCOMPARE(store.row(0).span(1).microbatch, 1);
}

void TestTimelineData::badTimesDoNotCrash()
{
    TimelineStore store;
    std::vector<TimelineSpan> spans(3);
    spans[0] = {std::numeric_limits<std::int64_t>::min(), 10, wire::SpanKind::Forward};
    spans[1] = {100, std::numeric_limits<std::int64_t>::max(), wire::SpanKind::Backward};
    spans[2] = {500, 400, wire::SpanKind::Forward};  // reversed: an instant
    store.append(0, spans);
    const TimelineRow& row = store.row(0);
    QCOMPARE(row.size(), std::size_t(3));
    checkSorted(row);
    QCOMPARE(row.span(2).endNs, row.span(2).beginNs);
    // The pyramid coarsened instead of allocating buckets for 2^62 ns.
    QVERIFY(row.bucketCount(0) <= (1 << 16) + 12);
    QVERIFY(row.summary(row.levels() - 1, row.origin(), row.lastEnd()).total() > 0);
}

void TestTimelineData::changedIsBatched()
{
    TimelineData data;
    data.setNotifyInterval(20);
    QSignalSpy changed(&data, &TimelineData::changed);
    QSignalSpy reset(&data, &TimelineData::reset);
    for (int k = 0; k < 100; ++k) {
        wire::Batch batch;
        batch.rank = std::uint32_t(k % 4);
        wire::SpanRecord s;
        s.beginNs = k * 100;
        s.endNs = k * 100 + 50;
        batch.records.push_back(s);
        data.appendBatch(batch);
    }
    QCOMPARE(changed.count(), 0);
    QVERIFY(changed.wait(1000));
    QTest::qWait(60);
    QCOMPARE(changed.count(), 1);
    QCOMPARE(data.store().spanCount(), std::size_t(100));
    QCOMPARE(reset.count(), 0);
    data.clear();
    QCOMPARE(reset.count(), 1);
    QCOMPARE(changed.count(), 2);
    QCOMPARE(data.store().rowCount(), std::size_t(0));
}

void TestTimelineData::planLoaderPerStage()
{
    const plan::Plan plan = demoPlan();
    QVERIFY(plan.simulation.completed);
    QVERIFY(plan.step.dataParallelComm > 0 && plan.step.optimizer > 0);
    TimelineData data;
    data.loadPlan(plan);
    const TimelineStore& store = data.store();
    const std::size_t stages = plan.simulation.timeline.size();
    QCOMPARE(store.rowCount(), std::size_t(plan.spec.parallel.pp));
    QCOMPARE(stages, std::size_t(plan.spec.parallel.pp));
    std::int64_t pipelineEnd = 0;
    for (std::size_t s = 0; s < stages; ++s) {
        const TimelineRow& row = store.row(s);
        QCOMPARE(row.info().stage, int(s));
        // Every op of the stage, then dp-reduce and optimizer.
        const auto& ops = plan.simulation.timeline[s];
        QCOMPARE(row.size(), ops.size() + 2);
        std::size_t computeOps = 0, computeSpans = 0;
        for (const plan::TimedOp& op : ops)
            computeOps += plan::isCompute(op.op.kind);
        for (std::size_t i = 0; i < row.size(); ++i) {
            computeSpans += wire::isComputeKind(row.kind(i));
            if (row.kind(i) != wire::SpanKind::Optimizer && row.kind(i) != wire::SpanKind::DataParallelReduce)
                pipelineEnd = std::max(pipelineEnd, row.end(i));
        }
        QCOMPARE(computeSpans, computeOps);
        QCOMPARE(row.kind(row.size() - 1), wire::SpanKind::Optimizer);
    }
    // The pipeline ends at the makespan; the step at the planner's step total (seconds -> ns).
    QCOMPARE(pipelineEnd, std::llround(plan.simulation.makespan * 1e9));
    QCOMPARE(store.beginTime(), std::int64_t(0));
    QCOMPARE(store.endTime(),
             std::llround((plan.simulation.makespan + plan.step.dataParallelComm + plan.step.optimizer) * 1e9));
    QCOMPARE(store.stepBegin(0), std::optional<std::int64_t>(0));
}

void TestTimelineData::planLoaderPerRankAndUnitCosts()
{
    const plan::Plan costed = demoPlan();
    const TimelineStore perRank = loadPlanTimeline(costed, PlanRows::PerRank);
    QCOMPARE(perRank.rowCount(), std::size_t(costed.worldSize));
    const plan::Mesh mesh(costed.spec.parallel);
    for (std::size_t r = 0; r < perRank.rowCount(); ++r) {
        const TimelineRow& row = perRank.row(r);
        const int stage = mesh.coordOf(row.info().rank).pp;
        QCOMPARE(row.info().stage, stage);
        QCOMPARE(row.size(), costed.simulation.timeline[std::size_t(stage)].size() + 2);
        // Peers are ranks of the same dp and tp on the neighbouring stage.
        for (std::size_t i = 0; i < row.size(); ++i)
            if (row.span(i).peer >= 0)
                QCOMPARE(mesh.coordOf(row.span(i).peer).pp, 1 - stage);
    }

    const plan::Plan unit = demoPlan(plan::UnitCosts{1, 2, 0});
    QCOMPARE(planNsPerUnit(unit), 1e6);
    const TimelineStore shape = loadPlanTimeline(unit);
    for (std::size_t s = 0; s < shape.rowCount(); ++s)
        QCOMPARE(shape.row(s).size(), unit.simulation.timeline[s].size());
    QCOMPARE(shape.endTime(), std::llround(unit.simulation.makespan * 1e6));
    QCOMPARE(loadPlanTimeline(unit, PlanRows::PerStage, 10).endTime(), std::llround(unit.simulation.makespan * 10));
}

void TestTimelineData::overlappedPairsAreMarked()
{
    // dualpipev over the demo's two stages: the planned timeline marks exactly the op list's
    // overlapped F, B and W, and labels each stage with the virtual stages it holds (0 and 3, 1 and 2).
    const plan::Plan plan =
        demoPlan(std::nullopt, {{"schedule", "dualpipev"}, {"virtual_stages", 2}, {"microbatches", 8}});
    QVERIFY(plan.simulation.completed);
    const TimelineStore planned = loadPlanTimeline(plan);
    QCOMPARE(planned.row(0).info().label, std::string("stage 0 \u00b7 chunks 0, 3"));
    QCOMPARE(planned.row(1).info().label, std::string("stage 1 \u00b7 chunks 1, 2"));
    const TimelineStore::OverlappedOps ops = overlappedOpsOf(plan.schedule);
    std::size_t expected = 0;
    for (const auto& stage : plan.schedule.stages)
        expected +=
            std::size_t(std::count_if(stage.begin(), stage.end(), [](const plan::Op& op) { return op.overlapped; }));
    // m = 8, p = 2: stage 0 runs 2 x (8 - 4 + 1) pairs in step 4 and 1 in step 5; stage 1 one
    // fewer (its first F0 and B1 run apart), 2 x 6 - 1: 11 + 11 pairs of three ops.
    QCOMPARE(expected, std::size_t(3 * (11 + 11)));
    QCOMPARE(ops.size(), expected);
    std::size_t marked = 0;
    for (std::size_t r = 0; r < planned.rowCount(); ++r)
        for (std::size_t i = 0; i < planned.row(r).size(); ++i)
            marked += planned.row(r).overlapped(i);
    QCOMPARE(marked, expected);

    // Measured spans carry no flag: the store marks those the schedule pairs, already stored or not.
    TimelineStore measured;
    TimelineSpan paired;
    paired.kind = wire::SpanKind::Forward;
    const plan::Op& first = *std::find_if(plan.schedule.stages[0].begin(), plan.schedule.stages[0].end(),
                                          [](const plan::Op& op) { return op.overlapped; });
    paired.microbatch = first.microbatch;
    paired.chunk = std::int16_t(first.chunk);
    paired.beginNs = 10;
    paired.endNs = 20;
    TimelineSpan alone = paired;
    alone.microbatch = 0;  // F of micro-batch 0 runs in the warm-up, never paired
    alone.beginNs = 0;
    alone.endNs = 5;
    measured.append(0, std::vector<TimelineSpan>{alone, paired});
    measured.setOverlappedOps(ops);
    QVERIFY(!measured.row(0).overlapped(0));
    QVERIFY(measured.row(0).overlapped(1));
    TimelineSpan later = paired;
    later.beginNs = 30;
    later.endNs = 40;
    measured.append(0, std::span(&later, 1));
    QVERIFY(measured.row(0).overlapped(2));
}

void TestTimelineData::sessionLoader()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = dir.filePath(QStringLiteral("t.meshbench")).toStdString();
    {
        store::SessionHeader header;
        header.name = "timeline";
        header.ranks = {{0, 0, 0, 0, 0, 0, 0, "", 0}, {1, 0, 1, 0, 0, 0, 1, "", 0}};
        store::SessionWriter writer(path, header);
        for (std::uint32_t rank = 0; rank < 2; ++rank) {
            wire::Batch batch;
            batch.rank = rank;
            for (int k = 0; k < 50; ++k) {
                wire::SpanRecord s;
                s.stage = std::int16_t(rank);
                s.step = k / 10;
                s.kind = k % 2 ? wire::SpanKind::Backward : wire::SpanKind::Forward;
                s.beginNs = 1'000'000 + k * 1000 + rank * 300;
                s.endNs = s.beginNs + 900;
                batch.records.push_back(s);
            }
            writer.append(batch);
        }
        writer.flush();
    }
    const store::SessionReader reader(path);
    TimelineData data;
    QSignalSpy reset(&data, &TimelineData::reset);
    data.loadSession(reader);
    QCOMPARE(reset.count(), 1);
    const TimelineStore& all = data.store();
    QCOMPARE(all.spanCount(), std::size_t(100));
    QCOMPARE(all.rowCount(), std::size_t(2));
    QCOMPARE(all.row(1).info().label, std::string("rank 1 · dp0 pp1 tp0"));
    QCOMPARE(all.row(1).info().stage, 1);
    QCOMPARE(all.row(1).size(), std::size_t(50));
    QCOMPARE(all.beginTime(), std::int64_t(1'000'000));
    QCOMPARE(all.endTime(), std::int64_t(1'000'000 + 49 * 1000 + 300 + 900));
    QCOMPARE(all.stepBegin(2), std::optional<std::int64_t>(1'020'000));

    // A window: the spans that overlap [1 010 000, 1 019 999].
    const TimelineStore window =
        loadSessionTimeline(reader, std::pair<std::int64_t, std::int64_t>(1'010'000, 1'019'999));
    QCOMPARE(window.rowCount(), std::size_t(2));
    QCOMPARE(window.row(0).size(), std::size_t(10));
    QCOMPARE(window.row(1).size(), std::size_t(11));  // rank 1's span from 1 009 300 reaches in
}

QTEST_GUILESS_MAIN(TestTimelineData)
#include "tst_timeline_data.moc"
