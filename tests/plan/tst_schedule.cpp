#include "plan/op_span_kind.h"
#include "plan/schedule.h"

#include <QtTest>

using namespace meshbench::plan;

namespace {

ScheduleShape shapeOf(ScheduleKind kind, int p, int m, int v = 1, int group = 0)
{
    ScheduleShape shape;
    shape.kind = kind;
    shape.stages = p;
    shape.microbatches = m;
    shape.virtualStages = v;
    shape.groupSize = group;
    return shape;
}

// Compute ops only, "F3" or, with chunks, "F3.1".
QString computeOrder(const std::vector<Op>& ops, bool withChunk)
{
    QStringList out;
    for (const Op& op : ops) {
        if (!isCompute(op.kind))
            continue;
        QString token = QString::fromLatin1(opKindName(op.kind).data()) + QString::number(op.microbatch);
        if (withChunk)
            token += QLatin1Char('.') + QString::number(op.chunk);
        out << token;
    }
    return out.join(QLatin1Char(' '));
}

// Every op: "F(mb,chunk)", sends "send-act(mb,chunk)->peer", recvs "recv-act(mb,chunk)<-peer".
QString fullOrder(const std::vector<Op>& ops)
{
    QStringList out;
    for (const Op& op : ops) {
        QString token = QString::fromLatin1(opKindName(op.kind).data()) +
                        QStringLiteral("(%1,%2)").arg(op.microbatch).arg(op.chunk);
        if (op.kind == OpKind::SendActivation || op.kind == OpKind::SendGradient)
            token += QStringLiteral("->") + QString::number(op.peerStage);
        else if (op.kind == OpKind::RecvActivation || op.kind == OpKind::RecvGradient)
            token += QStringLiteral("<-") + QString::number(op.peerStage);
        out << token;
    }
    return out.join(QLatin1Char(' '));
}

// Compute ops with their chunk, an overlapped F&B pair's ops bracketed: "[F3.0 B1.1 W1.1]".
QString pairedOrder(const std::vector<Op>& ops)
{
    QStringList out;
    bool open = false;
    for (const Op& op : ops) {
        if (!isCompute(op.kind))
            continue;
        QString token = QString::fromLatin1(opKindName(op.kind).data()) + QString::number(op.chunk) + QLatin1Char('.') +
                        QString::number(op.microbatch);
        if (op.overlapped && op.kind == OpKind::Forward) {
            token.prepend(QLatin1Char('['));
            open = true;
        } else if (open && op.kind == OpKind::WeightGrad) {
            token += QLatin1Char(']');
            open = false;
        }
        out << token;
    }
    return out.join(QLatin1Char(' '));
}

QList<int> forwardField(const std::vector<Op>& ops, OpKind kind, bool chunk)
{
    QList<int> out;
    for (const Op& op : ops)
        if (op.kind == kind)
            out << (chunk ? op.chunk : op.microbatch);
    return out;
}

ScheduleKind kindFromName(const QString& name)
{
    ScheduleKind kind = ScheduleKind::GPipe;
    if (!parseScheduleName(name.toStdString(), kind))
        qFatal("unknown schedule name in test data: %s", qPrintable(name));
    return kind;
}

}  // namespace

class TestSchedule : public QObject {
    Q_OBJECT

private slots:
    void names_data();
    void names();
    void parseRejectsUnknown();
    void opKinds();
    void validate_data();
    void validate();
    void admittedMicrobatches_data();
    void admittedMicrobatches();
    void warmup1F1B_data();
    void warmup1F1B();
    void warmupInterleaved_data();
    void warmupInterleaved();
    void gpipeOrder();
    void oneFOneBOrder_data();
    void oneFOneBOrder();
    void oneFOneBTransfers();
    void interleavedOrder_data();
    void interleavedOrder();
    void interleavedSteadyState();
    void interleavedTransfers();
    void zeroBubbleOrder_data();
    void zeroBubbleOrder();
    void zeroBubbleTransfers();
    void opCounts_data();
    void opCounts();
    void vPlacement();
    void zeroBubbleVOrder();
    void zeroBubbleVTransfers();
    void dualPipeVOrder();
    void vOpCounts_data();
    void vOpCounts();
};

void TestSchedule::names_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("kind");
    QTest::newRow("gpipe") << "gpipe" << int(ScheduleKind::GPipe);
    QTest::newRow("1f1b") << "1f1b" << int(ScheduleKind::OneFOneB);
    QTest::newRow("interleaved") << "interleaved" << int(ScheduleKind::Interleaved);
    QTest::newRow("zb-h1") << "zb-h1" << int(ScheduleKind::ZeroBubbleH1);
    QTest::newRow("zb-v") << "zb-v" << int(ScheduleKind::ZeroBubbleV);
    QTest::newRow("dualpipev") << "dualpipev" << int(ScheduleKind::DualPipeV);
}

void TestSchedule::names()
{
    QFETCH(QString, name);
    QFETCH(int, kind);
    const auto expected = static_cast<ScheduleKind>(kind);
    QCOMPARE(QString::fromLatin1(scheduleName(expected).data(), qsizetype(scheduleName(expected).size())), name);
    ScheduleKind parsed = ScheduleKind::GPipe;
    QVERIFY(parseScheduleName(name.toStdString(), parsed));
    QCOMPARE(int(parsed), kind);
}

void TestSchedule::parseRejectsUnknown()
{
    ScheduleKind parsed = ScheduleKind::Interleaved;
    for (const char* name : {"", "1F1B", "zb", "zb-h2", "gpipe "}) {
        QVERIFY2(!parseScheduleName(name, parsed), name);
        QCOMPARE(parsed, ScheduleKind::Interleaved);
    }
}

void TestSchedule::opKinds()
{
    const std::pair<OpKind, const char*> expected[] = {
        {OpKind::Forward, "F"},
        {OpKind::Backward, "B"},
        {OpKind::WeightGrad, "W"},
        {OpKind::SendActivation, "send-act"},
        {OpKind::RecvActivation, "recv-act"},
        {OpKind::SendGradient, "send-grad"},
        {OpKind::RecvGradient, "recv-grad"},
    };
    for (const auto& [kind, name] : expected) {
        QCOMPARE(std::string(opKindName(kind)), std::string(name));
        const bool compute = kind == OpKind::Forward || kind == OpKind::Backward || kind == OpKind::WeightGrad;
        QCOMPARE(isCompute(kind), compute);
        // The span the agent measures for the op bears the op's name, and the bubble counts it as
        // busy exactly when the planner does.
        QCOMPARE(std::string(meshbench::wire::spanKindName(spanKindOf(kind))), std::string(name));
        QCOMPARE(meshbench::wire::isComputeKind(spanKindOf(kind)), compute);
    }
}

void TestSchedule::validate_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("group");
    QTest::addColumn<QStringList>("fragments");  // empty: the shape is valid

    QTest::newRow("1f1b ok") << "1f1b" << 4 << 8 << 1 << 0 << QStringList();
    QTest::newRow("1f1b m<p ok") << "1f1b" << 8 << 2 << 1 << 0 << QStringList();
    QTest::newRow("gpipe single stage ok") << "gpipe" << 1 << 1 << 1 << 0 << QStringList();
    QTest::newRow("zb-h1 ok") << "zb-h1" << 4 << 3 << 1 << 0 << QStringList();
    QTest::newRow("interleaved ok") << "interleaved" << 2 << 4 << 2 << 0 << QStringList();
    QTest::newRow("interleaved m=p ok") << "interleaved" << 4 << 4 << 3 << 0 << QStringList();
    QTest::newRow("interleaved reference G=3") << "interleaved" << 2 << 5 << 2 << 3 << QStringList();
    QTest::newRow("interleaved remainder >= p") << "interleaved" << 4 << 10 << 2 << 6 << QStringList();
    QTest::newRow("zb-v ok") << "zb-v" << 4 << 8 << 2 << 0 << QStringList();
    QTest::newRow("zb-v few micro-batches ok") << "zb-v" << 4 << 1 << 2 << 0 << QStringList();
    QTest::newRow("dualpipev ok") << "dualpipev" << 4 << 8 << 2 << 0 << QStringList();
    QTest::newRow("zb-v one chunk") << "zb-v" << 4 << 8 << 1 << 0
                                    << QStringList{"two model chunks", "set virtual stages to 2", "got 1"};
    QTest::newRow("dualpipev three chunks")
        << "dualpipev" << 2 << 8 << 3 << 0 << QStringList{"set virtual stages to 2", "got 3"};
    QTest::newRow("zb-v one stage") << "zb-v" << 1 << 8 << 2 << 0
                                    << QStringList{"at least 2 pipeline stages", "\"1f1b\""};
    QTest::newRow("dualpipev m<2p") << "dualpipev" << 4 << 7 << 2 << 0
                                    << QStringList{"2 x pipeline stages = 8", "got 7", "use 8 or more", "\"zb-v\""};

    QTest::newRow("no stages") << "1f1b" << 0 << 4 << 1 << 0 << QStringList{"pipeline stages", "got 0"};
    QTest::newRow("no micro-batches") << "gpipe" << 2 << 0 << 1 << 0 << QStringList{"micro-batches", "got 0"};
    QTest::newRow("no virtual stages") << "interleaved" << 2 << 2 << 0 << 0 << QStringList{"virtual stages", "got 0"};
    QTest::newRow("1f1b with chunks") << "1f1b" << 4 << 8 << 2 << 0
                                      << QStringList{"virtual stages = 2", "interleaved", "\"1f1b\""};
    QTest::newRow("zb-h1 with chunks") << "zb-h1" << 4 << 8 << 3 << 0 << QStringList{"virtual stages = 3"};
    QTest::newRow("interleaved p=1") << "interleaved" << 1 << 4 << 2 << 0
                                     << QStringList{"at least 2 pipeline stages", "got 1"};
    QTest::newRow("interleaved v=1") << "interleaved" << 4 << 8 << 1 << 0
                                     << QStringList{"at least 2 virtual stages", "got 1"};
    QTest::newRow("interleaved m not multiple of p")
        << "interleaved" << 4 << 6 << 2 << 0
        << QStringList{"micro-batches (6)", "pipeline stages (4)", "use 4 or 8 micro-batches"};
    QTest::newRow("interleaved m<p") << "interleaved" << 4 << 3 << 2 << 0
                                     << QStringList{"micro-batches (3)", "pipeline stages (4)", "use 4"};
    QTest::newRow("interleaved group below p")
        << "interleaved" << 4 << 8 << 2 << 3 << QStringList{"group size 3", "pipeline stages (4)", "micro-batches (8)"};
    QTest::newRow("interleaved group above m") << "interleaved" << 4 << 8 << 2 << 9 << QStringList{"group size 9"};
    QTest::newRow("interleaved short last group")
        << "interleaved" << 4 << 10 << 2 << 4 << QStringList{"last group of 2", "group size 4", "pipeline stages (4)"};
    QTest::newRow("interleaved negative group") << "interleaved" << 2 << 4 << 2 << -1 << QStringList{"got -1"};
}

void TestSchedule::validate()
{
    QFETCH(QString, kind);
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, v);
    QFETCH(int, group);
    QFETCH(QStringList, fragments);
    const QString message = QString::fromStdString(validateScheduleShape(shapeOf(kindFromName(kind), p, m, v, group)));
    if (fragments.isEmpty()) {
        QVERIFY2(message.isEmpty(), qPrintable(message));
        return;
    }
    QVERIFY(!message.isEmpty());
    for (const QString& fragment : fragments)
        QVERIFY2(message.contains(fragment), qPrintable(message + " lacks " + fragment));
}

void TestSchedule::admittedMicrobatches_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("group");
    QTest::addColumn<int>("admitted");  // worked from the rules by hand; 0: no count is admitted

    QTest::newRow("1f1b keeps any count") << "1f1b" << 4 << 3 << 1 << 0 << 3;
    QTest::newRow("zb-h1 keeps any count") << "zb-h1" << 8 << 1 << 1 << 0 << 1;
    QTest::newRow("interleaved rounds up to a multiple of p") << "interleaved" << 4 << 6 << 2 << 0 << 8;
    QTest::newRow("interleaved below p goes to p") << "interleaved" << 4 << 3 << 2 << 0 << 4;
    QTest::newRow("interleaved multiple of p kept") << "interleaved" << 2 << 10 << 3 << 0 << 10;
    // G = 4, p = 4: 10 leaves 2 (< p), 11 leaves 3, 12 leaves 0.
    QTest::newRow("interleaved short last group") << "interleaved" << 4 << 10 << 2 << 4 << 12;
    // G = 6, p = 4: m must reach G, then 6 is a whole group.
    QTest::newRow("interleaved up to the group size") << "interleaved" << 4 << 2 << 2 << 6 << 6;
    QTest::newRow("interleaved one stage never") << "interleaved" << 1 << 4 << 2 << 0 << 0;
    QTest::newRow("dualpipev up to 2p") << "dualpipev" << 4 << 5 << 2 << 0 << 8;
    QTest::newRow("dualpipev at 2p kept") << "dualpipev" << 3 << 6 << 2 << 0 << 6;
    QTest::newRow("zb-v any count") << "zb-v" << 4 << 1 << 2 << 0 << 1;
    QTest::newRow("zb-v with three chunks never") << "zb-v" << 4 << 8 << 3 << 0 << 0;
}

void TestSchedule::admittedMicrobatches()
{
    QFETCH(QString, kind);
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, v);
    QFETCH(int, group);
    QFETCH(int, admitted);
    QCOMPARE(meshbench::plan::admittedMicrobatches(shapeOf(kindFromName(kind), p, m, v, group)), admitted);
}

void TestSchedule::warmup1F1B_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<QList<int>>("expected");  // per stage, min(p - r - 1, m)
    QTest::newRow("p4 m8") << 4 << 8 << QList<int>{3, 2, 1, 0};
    QTest::newRow("p4 m2") << 4 << 2 << QList<int>{2, 2, 1, 0};
    QTest::newRow("p3 m1") << 3 << 1 << QList<int>{1, 1, 0};
    QTest::newRow("p1 m5") << 1 << 5 << QList<int>{0};
    QTest::newRow("p8 m8") << 8 << 8 << QList<int>{7, 6, 5, 4, 3, 2, 1, 0};
}

void TestSchedule::warmup1F1B()
{
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(QList<int>, expected);
    for (ScheduleKind kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
        QList<int> counts;
        for (int r = 0; r < p; ++r)
            counts << warmupCount(shapeOf(kind, p, m), r);
        QCOMPARE(counts, expected);
    }
    for (int r = 0; r < p; ++r)
        QCOMPARE(warmupCount(shapeOf(ScheduleKind::GPipe, p, m), r), m);
}

void TestSchedule::warmupInterleaved_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("group");
    QTest::addColumn<QList<int>>("expected");
    // 2(p - r - 1) + (v - 1)G: stage 0 = 2*3 + 1*4 = 10.
    QTest::newRow("p4 m8 v2") << 4 << 8 << 2 << 0 << QList<int>{10, 8, 6, 4};
    QTest::newRow("p2 m4 v2") << 2 << 4 << 2 << 0 << QList<int>{4, 2};
    // m == p: every virtual micro-batch is warm-up (m*v = 12).
    QTest::newRow("p4 m4 v3") << 4 << 4 << 3 << 0 << QList<int>{12, 12, 12, 12};
    // 2(1 - r) + 3: 5 and 3.
    QTest::newRow("reference G3") << 2 << 5 << 2 << 3 << QList<int>{5, 3};
    // Stage 0: 6 + 2*5 = 16, capped at m*v = 15.
    QTest::newRow("capped") << 4 << 5 << 3 << 5 << QList<int>{15, 14, 12, 10};
}

void TestSchedule::warmupInterleaved()
{
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, v);
    QFETCH(int, group);
    QFETCH(QList<int>, expected);
    const ScheduleShape shape = shapeOf(ScheduleKind::Interleaved, p, m, v, group);
    QVERIFY(validateScheduleShape(shape).empty());
    QList<int> counts;
    for (int r = 0; r < p; ++r)
        counts << warmupCount(shape, r);
    QCOMPARE(counts, expected);
}

void TestSchedule::gpipeOrder()
{
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::GPipe, 2, 3));
    QCOMPARE(schedule.stages.size(), std::size_t(2));
    QVERIFY(!schedule.splitBackward());
    QCOMPARE(computeOrder(schedule.stages[0], false), QStringLiteral("F0 F1 F2 B0 B1 B2"));
    QCOMPARE(fullOrder(schedule.stages[1]),
             QStringLiteral("recv-act(0,0)<-0 F(0,0) recv-act(1,0)<-0 F(1,0) recv-act(2,0)<-0 F(2,0) "
                            "B(0,0) send-grad(0,0)->0 B(1,0) send-grad(1,0)->0 B(2,0) send-grad(2,0)->0"));
}

void TestSchedule::oneFOneBOrder_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("stage");
    QTest::addColumn<QString>("expected");
    QTest::newRow("p4 m8 first") << 4 << 8 << 0 << "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7";
    QTest::newRow("p4 m8 second") << 4 << 8 << 1 << "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7";
    QTest::newRow("p4 m8 last") << 4 << 8 << 3 << "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7";
    // Warm-up capped at m: all forwards first, like GPipe.
    QTest::newRow("p4 m2 first") << 4 << 2 << 0 << "F0 F1 B0 B1";
    QTest::newRow("p4 m2 third") << 4 << 2 << 2 << "F0 F1 B0 B1";
    QTest::newRow("p4 m2 last") << 4 << 2 << 3 << "F0 B0 F1 B1";
}

void TestSchedule::oneFOneBOrder()
{
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, stage);
    QFETCH(QString, expected);
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, p, m));
    QCOMPARE(computeOrder(schedule.stages[stage], false), expected);
}

void TestSchedule::oneFOneBTransfers()
{
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::OneFOneB, 2, 2));
    // Stage 0 is virtual stage 0: no recv before F, no send after B.
    QCOMPARE(fullOrder(schedule.stages[0]), QStringLiteral("F(0,0) send-act(0,0)->1 F(1,0) send-act(1,0)->1 "
                                                           "recv-grad(0,0)<-1 B(0,0) recv-grad(1,0)<-1 B(1,0)"));
    // Stage 1 is the last virtual stage: no send after F, no recv before B.
    QCOMPARE(fullOrder(schedule.stages[1]), QStringLiteral("recv-act(0,0)<-0 F(0,0) B(0,0) send-grad(0,0)->0 "
                                                           "recv-act(1,0)<-0 F(1,0) B(1,0) send-grad(1,0)->0"));
    for (const auto& ops : schedule.stages)
        for (const Op& op : ops)
            if (isCompute(op.kind))
                QCOMPARE(op.peerStage, -1);
}

void TestSchedule::interleavedOrder_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("v");
    QTest::addColumn<int>("group");
    QTest::addColumn<int>("stage");
    QTest::addColumn<QList<int>>("forwardMicrobatches");
    QTest::addColumn<QList<int>>("forwardChunks");
    // REFERENCES: p = 2, G = 3, m = 5, v = 2. Every stage walks the same table.
    const QList<int> referenceMbs{0, 1, 2, 0, 1, 2, 3, 4, 3, 4};
    const QList<int> referenceChunks{0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
    QTest::newRow("reference stage 0") << 2 << 5 << 2 << 3 << 0 << referenceMbs << referenceChunks;
    QTest::newRow("reference stage 1") << 2 << 5 << 2 << 3 << 1 << referenceMbs << referenceChunks;
    QTest::newRow("p2 m4 v2") << 2 << 4 << 2 << 0 << 0 << QList<int>{0, 1, 0, 1, 2, 3, 2, 3}
                              << QList<int>{0, 0, 1, 1, 0, 0, 1, 1};
    QTest::newRow("p2 m4 v3") << 2 << 4 << 3 << 0 << 1 << QList<int>{0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3}
                              << QList<int>{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2};
}

void TestSchedule::interleavedOrder()
{
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, v);
    QFETCH(int, group);
    QFETCH(int, stage);
    QFETCH(QList<int>, forwardMicrobatches);
    QFETCH(QList<int>, forwardChunks);
    const ScheduleShape shape = shapeOf(ScheduleKind::Interleaved, p, m, v, group);
    QVERIFY(validateScheduleShape(shape).empty());
    const Schedule schedule = buildSchedule(shape);
    const auto& ops = schedule.stages[stage];
    QCOMPARE(forwardField(ops, OpKind::Forward, false), forwardMicrobatches);
    QCOMPARE(forwardField(ops, OpKind::Forward, true), forwardChunks);
    // Backward walks the same table with chunks reversed.
    QList<int> backwardChunks;
    for (int chunk : forwardChunks)
        backwardChunks << v - 1 - chunk;
    QCOMPARE(forwardField(ops, OpKind::Backward, false), forwardMicrobatches);
    QCOMPARE(forwardField(ops, OpKind::Backward, true), backwardChunks);
}

void TestSchedule::interleavedSteadyState()
{
    // p = 2, m = 4, v = 2, stage 0: warm-up 4 virtual micro-batches, then pairs (F(4 + i), B(i)),
    // then the last 4 backwards. Table: (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1) (3,1).
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::Interleaved, 2, 4, 2));
    QCOMPARE(computeOrder(schedule.stages[0], true),
             QStringLiteral("F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0"));
    // Stage 1: warm-up 2.
    QCOMPARE(computeOrder(schedule.stages[1], true),
             QStringLiteral("F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0"));
}

void TestSchedule::interleavedTransfers()
{
    // p = 2, v = 2, m = 2 (= p, all warm-up). Virtual stages: stage 0 holds 0 and 2, stage 1 holds 1 and 3.
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::Interleaved, 2, 2, 2));
    QCOMPARE(fullOrder(schedule.stages[0]),
             QStringLiteral("F(0,0) send-act(0,0)->1 F(1,0) send-act(1,0)->1 "
                            "recv-act(0,1)<-1 F(0,1) send-act(0,1)->1 recv-act(1,1)<-1 F(1,1) send-act(1,1)->1 "
                            "recv-grad(0,1)<-1 B(0,1) send-grad(0,1)->1 recv-grad(1,1)<-1 B(1,1) send-grad(1,1)->1 "
                            "recv-grad(0,0)<-1 B(0,0) recv-grad(1,0)<-1 B(1,0)"));
    QCOMPARE(fullOrder(schedule.stages[1]),
             QStringLiteral("recv-act(0,0)<-0 F(0,0) send-act(0,0)->0 recv-act(1,0)<-0 F(1,0) send-act(1,0)->0 "
                            "recv-act(0,1)<-0 F(0,1) recv-act(1,1)<-0 F(1,1) "
                            "B(0,1) send-grad(0,1)->0 B(1,1) send-grad(1,1)->0 "
                            "recv-grad(0,0)<-0 B(0,0) send-grad(0,0)->0 recv-grad(1,0)<-0 B(1,0) send-grad(1,0)->0"));
}

void TestSchedule::zeroBubbleOrder_data()
{
    QTest::addColumn<int>("p");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("stage");
    QTest::addColumn<QString>("expected");
    // Stage r: 1F1B's F/B order, the first min(r, m) W's deferred, then the oldest W after each B.
    QTest::newRow("p3 m4 stage 0") << 3 << 4 << 0 << "F0 F1 F2 B0 W0 F3 B1 W1 B2 W2 B3 W3";
    QTest::newRow("p3 m4 stage 1") << 3 << 4 << 1 << "F0 F1 B0 F2 B1 W0 F3 B2 W1 B3 W2 W3";
    QTest::newRow("p3 m4 stage 2") << 3 << 4 << 2 << "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3";
    QTest::newRow("p4 m2 stage 0") << 4 << 2 << 0 << "F0 F1 B0 W0 B1 W1";
    QTest::newRow("p4 m2 stage 2") << 4 << 2 << 2 << "F0 F1 B0 B1 W0 W1";
    QTest::newRow("p4 m2 stage 3") << 4 << 2 << 3 << "F0 B0 F1 B1 W0 W1";
    QTest::newRow("p1 m3") << 1 << 3 << 0 << "F0 B0 W0 F1 B1 W1 F2 B2 W2";
}

void TestSchedule::zeroBubbleOrder()
{
    QFETCH(int, p);
    QFETCH(int, m);
    QFETCH(int, stage);
    QFETCH(QString, expected);
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleH1, p, m));
    QVERIFY(schedule.splitBackward());
    QCOMPARE(computeOrder(schedule.stages[stage], false), expected);
}

void TestSchedule::zeroBubbleTransfers()
{
    // W is local: no transfer around it.
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleH1, 2, 2));
    QCOMPARE(fullOrder(schedule.stages[0]),
             QStringLiteral("F(0,0) send-act(0,0)->1 F(1,0) send-act(1,0)->1 "
                            "recv-grad(0,0)<-1 B(0,0) W(0,0) recv-grad(1,0)<-1 B(1,0) W(1,0)"));
    QCOMPARE(fullOrder(schedule.stages[1]),
             QStringLiteral("recv-act(0,0)<-0 F(0,0) B(0,0) send-grad(0,0)->0 "
                            "recv-act(1,0)<-0 F(1,0) B(1,0) send-grad(1,0)->0 W(0,0) W(1,0)"));
}

void TestSchedule::opCounts_data()
{
    QTest::addColumn<QString>("kind");
    QTest::newRow("gpipe") << "gpipe";
    QTest::newRow("1f1b") << "1f1b";
    QTest::newRow("interleaved") << "interleaved";
    QTest::newRow("zb-h1") << "zb-h1";
}

void TestSchedule::opCounts()
{
    QFETCH(QString, kind);
    const ScheduleKind scheduleKind = kindFromName(kind);
    int shapes = 0;
    for (int p = 1; p <= 5; ++p)
        for (int m = 1; m <= 10; ++m)
            for (int v = 1; v <= 3; ++v) {
                const ScheduleShape shape = shapeOf(scheduleKind, p, m, v);
                if (!validateScheduleShape(shape).empty())
                    continue;
                ++shapes;
                const Schedule schedule = buildSchedule(shape);
                QCOMPARE(int(schedule.stages.size()), p);
                for (int r = 0; r < p; ++r) {
                    int counts[7] = {};
                    for (const Op& op : schedule.stages[r])
                        ++counts[int(op.kind)];
                    // Each stage owns v virtual stages; only virtual stage 0 lacks an incoming
                    // activation and only the last one lacks an outgoing one.
                    const int edges = m * v - (r == 0 ? m : 0);
                    const int tails = m * v - (r == p - 1 ? m : 0);
                    QCOMPARE(counts[int(OpKind::Forward)], m * v);
                    QCOMPARE(counts[int(OpKind::Backward)], m * v);
                    QCOMPARE(counts[int(OpKind::WeightGrad)], scheduleKind == ScheduleKind::ZeroBubbleH1 ? m : 0);
                    QCOMPARE(counts[int(OpKind::RecvActivation)], edges);
                    QCOMPARE(counts[int(OpKind::SendGradient)], edges);
                    QCOMPARE(counts[int(OpKind::SendActivation)], tails);
                    QCOMPARE(counts[int(OpKind::RecvGradient)], tails);
                }
            }
    QVERIFY(shapes >= 10);
}

void TestSchedule::vPlacement()
{
    // Qi et al. 2024, Fig. 8: stage s holds virtual stages s and 2p - 1 - s.
    for (ScheduleKind kind : {ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV}) {
        const ScheduleShape shape = shapeOf(kind, 4, 8, 2);
        const int expected[4][2] = {{0, 7}, {1, 6}, {2, 5}, {3, 4}};
        for (int s = 0; s < 4; ++s)
            for (int c = 0; c < 2; ++c) {
                const int vs = shape.virtualStageOf(s, c);
                QCOMPARE(vs, expected[s][c]);
                QCOMPARE(shape.stageOf(vs), s);
                QCOMPARE(shape.chunkOf(vs), c);
            }
    }
    // Interleaved keeps Megatron's c p + s.
    const ScheduleShape interleaved = shapeOf(ScheduleKind::Interleaved, 4, 8, 2);
    QCOMPARE(interleaved.virtualStageOf(1, 1), 5);
    QCOMPARE(interleaved.stageOf(5), 1);
    QCOMPARE(interleaved.chunkOf(5), 1);
}

void TestSchedule::zeroBubbleVOrder()
{
    // buildZeroBubbleV's phases worked by hand for p = 2, m = 3 (n = 2p - 1 = 3).
    // Stage 0: 3 F0; 2 x (F1 B1 W1); 1 x (B0 W0 F1 B1 W1), its F0 left out as the last of
    // p - r - 1 = 1; 2 x (B0 W0).
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleV, 2, 3, 2));
    QCOMPARE(pairedOrder(schedule.stages[0]),
             QStringLiteral("F0.0 F0.1 F0.2 F1.0 B1.0 W1.0 F1.1 B1.1 W1.1 B0.0 W0.0 F1.2 B1.2 W1.2 "
                            "B0.1 W0.1 B0.2 W0.2"));
    // Stage 1: 1 F0; (F1 F0); (F1 B1 W1); (F0 B0 W0 F1 B1 W1); (B0 B1); (B0 W0); W1, then W0.
    QCOMPARE(pairedOrder(schedule.stages[1]),
             QStringLiteral("F0.0 F1.0 F0.1 F1.1 B1.0 W1.0 F0.2 B0.0 W0.0 F1.2 B1.1 W1.1 B0.1 B1.2 "
                            "B0.2 W0.1 W1.2 W0.2"));
}

void TestSchedule::zeroBubbleVTransfers()
{
    // p = 2, m = 1: stage 0 starts (chunk 0) and ends (chunk 1) the model, so neither its first
    // input nor its last output crosses a link; stage 1 turns the V without a transfer.
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::ZeroBubbleV, 2, 1, 2));
    QCOMPARE(fullOrder(schedule.stages[0]),
             QStringLiteral("F(0,0) send-act(0,0)->1 recv-act(0,1)<-1 F(0,1) B(0,1) send-grad(0,1)->1 W(0,1) "
                            "recv-grad(0,0)<-1 B(0,0) W(0,0)"));
    QCOMPARE(fullOrder(schedule.stages[1]),
             QStringLiteral("recv-act(0,0)<-0 F(0,0) F(0,1) send-act(0,1)->0 recv-grad(0,1)<-0 B(0,1) W(0,1) "
                            "B(0,0) send-grad(0,0)->0 W(0,0)"));
}

void TestSchedule::dualPipeVOrder()
{
    // DualPipeVBuilder's eight steps worked by hand for p = 2, m = 4; brackets are F&B pairs.
    // Stage 0: 2 F0; (F0 F1); (B1 split, W, F1); 1 x ([F0&B1] [F1&B0]); (B1, [F1&B0]);
    // (B1 whole, B0 split: even stage, split from the middle iteration's B0); (W B0 split); W.
    const Schedule schedule = buildSchedule(shapeOf(ScheduleKind::DualPipeV, 2, 4, 2));
    QCOMPARE(pairedOrder(schedule.stages[0]),
             QStringLiteral("F0.0 F0.1 F0.2 F1.0 B1.0 W1.0 F1.1 [F0.3 B1.1 W1.1] [F1.2 B0.0 W0.0] B1.2 W1.2 "
                            "[F1.3 B0.1 W0.1] B1.3 W1.3 B0.2 W0.2 B0.3 W0.3"));
    // Stage 1 (the last): 2 x (F0 F1); 2 x step 4, the first with F0 and B1 apart; 2 x (B1 B0),
    // odd stage: split from the middle iteration's B1; the two W's owed.
    QCOMPARE(pairedOrder(schedule.stages[1]),
             QStringLiteral("F0.0 F1.0 F0.1 F1.1 F0.2 B1.0 W1.0 [F1.2 B0.0 W0.0] [F0.3 B1.1 W1.1] "
                            "[F1.3 B0.1 W0.1] B1.2 W1.2 B0.2 W0.2 B1.3 B0.3 W1.3 W0.3"));
    // A pair receives both inputs before its compute and sends both outputs after it. On the
    // middle stage of three, the first pair is F0 of micro-batch 4 (after 2 + 2 F0's) with B1 of
    // micro-batch 1 (after step 3's one B1); chunk 0 is virtual stage 1, chunk 1 virtual stage 4.
    const std::vector<Op> ops = buildSchedule(shapeOf(ScheduleKind::DualPipeV, 3, 6, 2)).stages[1];
    const auto pairF = std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.overlapped; });
    QVERIFY(pairF - ops.begin() >= 2 && ops.end() - pairF >= 5);
    QCOMPARE(fullOrder({pairF - 2, pairF + 5}),
             QStringLiteral("recv-act(4,0)<-0 recv-grad(1,1)<-0 F(4,0) B(1,1) W(1,1) send-act(4,0)->2 "
                            "send-grad(1,1)->2"));
}

void TestSchedule::vOpCounts_data()
{
    QTest::addColumn<QString>("kind");
    QTest::newRow("zb-v") << "zb-v";
    QTest::newRow("dualpipev") << "dualpipev";
}

void TestSchedule::vOpCounts()
{
    QFETCH(QString, kind);
    int shapes = 0;
    for (int p = 2; p <= 6; ++p)
        for (int m = 1; m <= 14; ++m) {
            const ScheduleShape shape = shapeOf(kindFromName(kind), p, m, 2);
            if (!validateScheduleShape(shape).empty())
                continue;
            ++shapes;
            const Schedule schedule = buildSchedule(shape);
            for (int r = 0; r < p; ++r) {
                int counts[7] = {};
                for (const Op& op : schedule.stages[r])
                    ++counts[int(op.kind)];
                // Both chunks of every micro-batch: F, B and W each. Each direction crosses a link
                // at every chunk but the model's two ends (stage 0) and the V's turn (stage p - 1).
                const int links = 2 * m - (r == 0 ? m : 0) - (r == p - 1 ? m : 0);
                QCOMPARE(counts[int(OpKind::Forward)], 2 * m);
                QCOMPARE(counts[int(OpKind::Backward)], 2 * m);
                QCOMPARE(counts[int(OpKind::WeightGrad)], 2 * m);
                for (OpKind transfer :
                     {OpKind::RecvActivation, OpKind::SendActivation, OpKind::RecvGradient, OpKind::SendGradient})
                    QCOMPARE(counts[int(transfer)], links);
            }
        }
    QVERIFY(shapes >= 30);
}

QTEST_APPLESS_MAIN(TestSchedule)
#include "tst_schedule.moc"
