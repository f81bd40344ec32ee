// The telemetry wire format: round trips with extreme values, a golden frame written by hand from
// the layout in telemetry.h, every malformed input the decoder must refuse (with the words its
// message must carry), forward compatibility (appended fields, unknown record types) and names.

#include "wire/record_fields.h"
#include "wire/telemetry.h"
#include "wire/wall_clock.h"

#include <QtTest>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <vector>

using namespace meshbench::wire;

namespace {

template <class T>
using Limits = std::numeric_limits<T>;

// Builds frames byte by byte, little-endian, independently of the encoder.
class Bytes {
public:
    Bytes& u8(std::uint64_t v) { return le(v, 1); }
    Bytes& u16(std::uint64_t v) { return le(v, 2); }
    Bytes& u32(std::uint64_t v) { return le(v, 4); }
    Bytes& u64(std::uint64_t v) { return le(v, 8); }
    Bytes& i16(std::int64_t v) { return le(std::uint64_t(v), 2); }
    Bytes& i32(std::int64_t v) { return le(std::uint64_t(v), 4); }
    Bytes& i64(std::int64_t v) { return le(std::uint64_t(v), 8); }
    Bytes& f32(float v) { return le(std::bit_cast<std::uint32_t>(v), 4); }
    Bytes& f64(double v) { return le(std::bit_cast<std::uint64_t>(v), 8); }
    Bytes& raw(std::string_view s)
    {
        bytes.insert(bytes.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& text(std::string_view s) { return u32(s.size()).raw(s); }
    Bytes& append(const Bytes& other)
    {
        bytes.insert(bytes.end(), other.bytes.begin(), other.bytes.end());
        return *this;
    }
    std::size_t size() const { return bytes.size(); }

    std::vector<std::uint8_t> bytes;

private:
    Bytes& le(std::uint64_t v, int n)
    {
        for (int i = 0; i < n; ++i)
            bytes.push_back(std::uint8_t(v >> (8 * i)));
        return *this;
    }
};

Bytes header(std::uint64_t count, std::uint64_t version = 1, std::uint64_t flags = 0)
{
    return Bytes().raw("MBTW").u16(version).u16(flags).u32(9).u64(100).u32(count);
}

Bytes record(std::uint8_t type, const Bytes& body)
{
    return Bytes().u8(type).u8(0).u16(0).u32(body.size()).append(body);
}

Bytes spanBody(std::uint8_t kind = 0)
{
    return Bytes().i32(1).i16(0).i16(0).i32(2).u8(kind).i32(-1).i64(10).i64(20).u64(0);
}

Bytes memoryBody(std::uint8_t category = 0) { return Bytes().i32(1).i64(5).u8(category).i64(100).i64(200); }

Bytes logBody(std::string_view text, std::uint8_t level = 1) { return Bytes().i64(7).u8(level).text(text); }

Bytes heartbeatBody(std::string_view host, std::uint8_t state = 1)
{
    return Bytes().i64(8).u8(state).i32(3).i32(4242).i32(0).u64(0).text(host);
}

Bytes nodeBody(std::string_view host)
{
    return Bytes().i64(6).text(host).i64(1000).i64(500).i32(-1).i64(-1).i64(-1).f32(-1.0f);
}

Bytes expertBody(std::uint32_t routed, std::uint32_t dropped)
{
    Bytes b;
    b.i32(1).i32(0).u32(routed);
    for (std::uint32_t i = 0; i < routed; ++i)
        b.u32(i);
    b.u32(dropped);
    for (std::uint32_t i = 0; i < dropped; ++i)
        b.u32(0);
    return b;
}

Bytes stepBody()
{
    Bytes b;
    b.i32(1).i64(0).i64(1);
    for (int i = 0; i < 6; ++i)
        b.f64(0.5);
    return b.i64(4096);
}

// A frame of one valid log record (index 0 at offset 24) and then `second` (index 1 at offset 45).
std::vector<std::uint8_t> afterOneLog(const Bytes& second)
{
    return header(2).append(record(6, logBody(""))).append(second).bytes;
}

// `body` with its last `cut` bytes gone, still framed with its own (shorter) length.
Bytes shortened(Bytes body, std::size_t cut)
{
    body.bytes.resize(body.bytes.size() - cut);
    return body;
}

QByteArray qbytes(const std::vector<std::uint8_t>& v)
{
    return QByteArray(reinterpret_cast<const char*>(v.data()), qsizetype(v.size()));
}

std::span<const std::uint8_t> spanOf(const QByteArray& a)
{
    return {reinterpret_cast<const std::uint8_t*>(a.constData()), std::size_t(a.size())};
}

bool sameBits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

bool sameBits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

// Equality with floating-point fields compared bit for bit, so NaN payloads and -0 count.
bool sameRecord(const Record& a, const Record& b)
{
    if (a.index() != b.index())
        return false;
    if (const auto* x = std::get_if<StepMetricsRecord>(&a)) {
        const auto& y = std::get<StepMetricsRecord>(b);
        return x->step == y.step && x->beginNs == y.beginNs && x->endNs == y.endNs && sameBits(x->loss, y.loss) &&
               sameBits(x->auxLoss, y.auxLoss) && sameBits(x->gradNorm, y.gradNorm) &&
               sameBits(x->learningRate, y.learningRate) && sameBits(x->tokensPerSecond, y.tokensPerSecond) &&
               sameBits(x->bubbleRatio, y.bubbleRatio) && x->tokens == y.tokens;
    }
    if (const auto* x = std::get_if<NodeSampleRecord>(&a)) {
        auto xs = *x;
        auto ys = std::get<NodeSampleRecord>(b);
        if (!sameBits(xs.deviceUtilization, ys.deviceUtilization))
            return false;
        xs.deviceUtilization = ys.deviceUtilization = 0;
        return xs == ys;
    }
    return a == b;
}

QString differenceBetween(const Batch& a, const Batch& b)
{
    if (a.rank != b.rank || a.sequence != b.sequence)
        return QStringLiteral("header differs");
    if (a.records.size() != b.records.size())
        return QStringLiteral("%1 records instead of %2").arg(b.records.size()).arg(a.records.size());
    for (std::size_t i = 0; i < a.records.size(); ++i)
        if (!sameRecord(a.records[i], b.records[i]))
            return QStringLiteral("record %1 differs").arg(i);
    return {};
}

std::string repeated(std::string_view piece, std::size_t times)
{
    std::string s;
    for (std::size_t i = 0; i < times; ++i)
        s += piece;
    return s;
}

// One of every record type, with the extremes of every field.
Batch extremeBatch()
{
    constexpr double kQuietNanWithPayload = std::bit_cast<double>(std::uint64_t(0x7FF8000000000123));
    constexpr double kSignalingNan = std::bit_cast<double>(std::uint64_t(0x7FF0000000000001));
    constexpr double kNegativeNan = std::bit_cast<double>(std::uint64_t(0xFFF8000000000000));
    Batch batch{Limits<std::uint32_t>::max(), Limits<std::uint64_t>::max(), {}};
    auto& r = batch.records;
    r.push_back(SpanRecord{Limits<std::int32_t>::min(), Limits<std::int16_t>::max(), Limits<std::int16_t>::min(),
                           Limits<std::int32_t>::max(), SpanKind::Idle, Limits<std::int32_t>::min(),
                           Limits<std::int64_t>::min(), Limits<std::int64_t>::max(), Limits<std::uint64_t>::max()});
    r.push_back(SpanRecord{});
    for (int k = 0; k < kSpanKinds; ++k)
        r.push_back(SpanRecord{k, std::int16_t(k), std::int16_t(-k), -1, SpanKind(k), k - 1, -k, k, std::uint64_t(k)});
    r.push_back(ExpertLoadRecord{Limits<std::int32_t>::max(), Limits<std::int32_t>::min(), {}, {}});
    ExpertLoadRecord many{7, 3, {}, {}};
    for (std::uint32_t e = 0; e < kMaxExpertsPerLayer; ++e) {
        many.routed.push_back(e * 2654435761u);
        many.dropped.push_back(Limits<std::uint32_t>::max() - e);
    }
    r.push_back(many);
    for (int c = 0; c < kMemoryCategories; ++c)
        r.push_back(MemorySampleRecord{c, Limits<std::int64_t>::max() - c, MemoryCategory(c),
                                       Limits<std::int64_t>::min(), Limits<std::int64_t>::max()});
    r.push_back(StepMetricsRecord{Limits<std::int32_t>::min(), Limits<std::int64_t>::min(), Limits<std::int64_t>::max(),
                                  kQuietNanWithPayload, kSignalingNan, std::numeric_limits<double>::infinity(),
                                  -std::numeric_limits<double>::infinity(), -0.0,
                                  std::numeric_limits<double>::denorm_min(), Limits<std::int64_t>::min()});
    r.push_back(StepMetricsRecord{1, 2, 3, kNegativeNan, std::numeric_limits<double>::max(),
                                  std::numeric_limits<double>::lowest(), 1e-300, 12345.678, 0.25, 0});
    r.push_back(NodeSampleRecord{});
    r.push_back(NodeSampleRecord{Limits<std::int64_t>::max(), repeated("\xC3\xA9", kMaxTextBytes / 2),
                                 Limits<std::int64_t>::max(), Limits<std::int64_t>::min(), Limits<std::int32_t>::max(),
                                 0, Limits<std::int64_t>::max(), std::numeric_limits<float>::quiet_NaN()});
    r.push_back(NodeSampleRecord{0, "gpu-node-07", 1, 2, 3, 4, 5, std::numeric_limits<float>::denorm_min()});
    for (int level = 0; level < 4; ++level)
        r.push_back(LogRecord{-level, LogLevel(level), {}});
    r.push_back(LogRecord{Limits<std::int64_t>::min(), LogLevel::Error, std::string(kMaxTextBytes, 'x')});
    constexpr char kMixed[] = "nul \0 inside, \xF0\x9F\x9A\x80 and \xF4\x8F\xBF\xBF";
    r.push_back(LogRecord{1, LogLevel::Info, std::string(kMixed, sizeof kMixed - 1)});
    for (int state = 0; state < 5; ++state)
        r.push_back(HeartbeatRecord{state, RankState(state), state, 100 + state, -state, std::uint64_t(state), "h"});
    r.push_back(HeartbeatRecord{Limits<std::int64_t>::max(), RankState::Terminated, Limits<std::int32_t>::min(),
                                Limits<std::int32_t>::max(), Limits<std::int32_t>::min(), Limits<std::uint64_t>::max(),
                                std::string(kMaxTextBytes, 'h')});
    r.push_back(ClockOffsetRecord{Limits<std::int64_t>::min(), Limits<std::int64_t>::max(), 0});
    r.push_back(ClockOffsetRecord{1, -3'000'000'000, 85'000});
    return batch;
}

}  // namespace

class TestWire : public QObject {
    Q_OBJECT
private slots:
    void roundTripsEveryRecordTypeAtItsExtremes();
    void encodedSizeFollowsTheLayout();
    void emptyBatchRoundTrips();
    void manySpansRoundTrip();
    void goldenFrame();
    void malformed_data();
    void malformed();
    void oversizedFrameIsRefusedUnread();
    void everyTruncationIsAnError();
    void corruptBytesNeverCrash();
    void appendedFieldsAreIgnored();
    void unknownRecordTypesAreSkipped();
    void wellFormedUtf8IsAccepted_data();
    void wellFormedUtf8IsAccepted();
    void encoderAppendsToWhatIsThere();
    void encoderRepairsText();
    void encoderRefusesWhatTheDecoderWould_data();
    void encoderRefusesWhatTheDecoderWould();
    void encoderRefusesAnOversizedFrame();
    void names();
    void recordTypes();
    void fieldLists();
    void wallAlignedClock();
};

void TestWire::roundTripsEveryRecordTypeAtItsExtremes()
{
    const Batch batch = extremeBatch();
    const DecodeResult decoded = decodeBatch(encodeBatch(batch));
    QVERIFY2(decoded.batch, decoded.error.c_str());
    QCOMPARE(decoded.version, kFormatVersion);
    QCOMPARE(decoded.skippedRecords, 0u);
    const QString difference = differenceBetween(batch, *decoded.batch);
    QVERIFY2(difference.isEmpty(), qPrintable(difference));
}

void TestWire::encodedSizeFollowsTheLayout()
{
    // Body sizes from the table in telemetry.h: every record adds its 8-byte header.
    const Batch batch = extremeBatch();
    std::size_t expected = 24;
    for (const Record& r : batch.records) {
        expected += 8;
        if (std::holds_alternative<SpanRecord>(r))
            expected += 41;
        else if (const auto* e = std::get_if<ExpertLoadRecord>(&r))
            expected += 16 + 8 * e->routed.size();
        else if (std::holds_alternative<MemorySampleRecord>(r))
            expected += 29;
        else if (std::holds_alternative<StepMetricsRecord>(r))
            expected += 76;
        else if (const auto* n = std::get_if<NodeSampleRecord>(&r))
            expected += 52 + n->host.size();
        else if (const auto* l = std::get_if<LogRecord>(&r))
            expected += 13 + l->text.size();
        else if (std::holds_alternative<ClockOffsetRecord>(r))
            expected += 24;
        else
            expected += 33 + std::get<HeartbeatRecord>(r).host.size();
    }
    QCOMPARE(encodeBatch(batch).size(), expected);
}

void TestWire::emptyBatchRoundTrips()
{
    const Batch batch{3, 77, {}};
    const std::vector<std::uint8_t> frame = encodeBatch(batch);
    QCOMPARE(frame, Bytes().raw("MBTW").u16(1).u16(0).u32(3).u64(77).u32(0).bytes);
    const DecodeResult decoded = decodeBatch(frame);
    QVERIFY2(decoded.batch, decoded.error.c_str());
    QVERIFY(*decoded.batch == batch);
}

void TestWire::manySpansRoundTrip()
{
    std::mt19937_64 random(42);
    std::vector<SpanRecord> spans;
    for (int i = 0; i < 200000; ++i) {
        const std::uint64_t bits = random();
        spans.push_back(SpanRecord{std::int32_t(bits), std::int16_t(bits >> 32), std::int16_t(bits >> 48),
                                   std::int32_t(bits >> 16), SpanKind(bits % kSpanKinds), std::int32_t(bits >> 24),
                                   std::int64_t(random()), std::int64_t(random()), random()});
    }
    const Batch batch{5, 123456789, {spans.begin(), spans.end()}};
    const std::vector<std::uint8_t> frame = encodeBatch(batch);
    QCOMPARE(frame.size(), 24 + 200000 * std::size_t(49));
    const DecodeResult decoded = decodeBatch(frame);
    QVERIFY2(decoded.batch, decoded.error.c_str());
    QVERIFY(*decoded.batch == batch);
}

void TestWire::goldenFrame()
{
    const Batch batch{7,
                      0x0102030405060708,
                      {SpanRecord{2, 1, 0, 3, SpanKind::SendActivation, 5, 1000, 1500, 4096},
                       ExpertLoadRecord{2, 1, {10, 20}, {0, 1}},
                       MemorySampleRecord{2, 256, MemoryCategory::Activations, 1 << 20, 1 << 21},
                       StepMetricsRecord{2, 0, 1000000000, 1.0, 0.5, 2.0, 0.25, 1024.0, 0.125, 65536},
                       NodeSampleRecord{9, "n1", 1000, 500, -1, -1, -1, 0.5f},
                       LogRecord{10, LogLevel::Warning, "h\xC3\xA9"},
                       HeartbeatRecord{11, RankState::Failed, 4, 1234, 137, 2, "n1"}}};
    // Written by hand from the layout in telemetry.h.
    const std::uint8_t golden[] = {
        // header: magic "MBTW", version 1, flags 0, rank 7, sequence 0x0102030405060708, count 7
        0x4D, 0x42, 0x54, 0x57, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03,
        0x02, 0x01, 0x07, 0x00, 0x00, 0x00,
        // span: type 1, reserved, length 41
        0x01, 0x00, 0x00, 0x00, 0x29, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,  // step 2
        0x01, 0x00, 0x00, 0x00,                                                  // stage 1, chunk 0
        0x03, 0x00, 0x00, 0x00,                                                  // microbatch 3
        0x03,                                                                    // kind send-act
        0x05, 0x00, 0x00, 0x00,                                                  // peer rank 5
        0xE8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                          // begin 1000
        0xDC, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                          // end 1500
        0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                          // bytes 4096
        // expert load: type 2, length 32
        0x02, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
        0x00,                                                                    // step 2, layer 1
        0x02, 0x00, 0x00, 0x00, 0x0A, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,  // routed [10, 20]
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,  // dropped [0, 1]
        // memory sample: type 3, length 29
        0x03, 0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,  // step 2
        0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                          // time 256
        0x03,                                                                    // activations
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00,                          // current 1 MiB
        0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00,                          // peak 2 MiB
        // step metrics: type 4, length 76
        0x04, 0x00, 0x00, 0x00, 0x4C, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,  // step 2
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                          // begin 0
        0x00, 0xCA, 0x9A, 0x3B, 0x00, 0x00, 0x00, 0x00,                          // end 1e9
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F,                          // loss 1.0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xE0, 0x3F,                          // aux loss 0.5
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40,                          // grad norm 2.0
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xD0, 0x3F,                          // learning rate 0.25
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x90, 0x40,                          // tokens/s 1024
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xC0, 0x3F,                          // bubble ratio 0.125
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,                          // tokens 65536
        // node sample: type 5, length 54
        0x05, 0x00, 0x00, 0x00, 0x36, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // time 9
        0x02, 0x00, 0x00, 0x00, 0x6E, 0x31,                                                              // host "n1"
        0xE8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // host memory total 1000
        0xF4, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // host memory used 500
        0xFF, 0xFF, 0xFF, 0xFF,                          // device -1
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,  // device memory total -1
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,  // device memory used -1
        0x00, 0x00, 0x00, 0x3F,                          // utilization 0.5f
        // log: type 6, length 16
        0x06, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x0A, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // time 10
        0x02,                                                                                            // warning
        0x03, 0x00, 0x00, 0x00, 0x68, 0xC3, 0xA9,                                                        // "hé"
        // heartbeat: type 7, length 35
        0x07, 0x00, 0x00, 0x00, 0x23, 0x00, 0x00, 0x00, 0x0B, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // time 11
        0x03,                                                                                            // failed
        0x04, 0x00, 0x00, 0x00,                                                                          // step 4
        0xD2, 0x04, 0x00, 0x00,                                                                          // pid 1234
        0x89, 0x00, 0x00, 0x00,                                                                          // detail 137
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                                                  // dropped 2
        0x02, 0x00, 0x00, 0x00, 0x6E, 0x31,                                                              // host "n1"
    };
    const std::vector<std::uint8_t> encoded = encodeBatch(batch);
    QCOMPARE(encoded.size(), sizeof golden);
    for (std::size_t i = 0; i < sizeof golden; ++i)
        QVERIFY2(encoded[i] == golden[i], qPrintable(QStringLiteral("byte %1: 0x%2, expected 0x%3")
                                                         .arg(i)
                                                         .arg(encoded[i], 2, 16, QLatin1Char('0'))
                                                         .arg(golden[i], 2, 16, QLatin1Char('0'))));
    const DecodeResult decoded = decodeBatch(golden);
    QVERIFY2(decoded.batch, decoded.error.c_str());
    QVERIFY(*decoded.batch == batch);
}

void TestWire::malformed_data()
{
    QTest::addColumn<QByteArray>("frame");
    QTest::addColumn<QStringList>("words");
    const auto row = [](const char* name, const std::vector<std::uint8_t>& frame, const QStringList& words) {
        QTest::newRow(name) << qbytes(frame) << words;
    };
    const Bytes oneSpan = header(1).append(record(1, spanBody()));

    // Header.
    row("empty", {}, {"0 bytes", "shorter", "24-byte batch header"});
    row("short header", std::vector<std::uint8_t>(oneSpan.bytes.begin(), oneSpan.bytes.begin() + 23),
        {"23 bytes", "shorter"});
    Bytes badMagic = oneSpan;
    badMagic.bytes[3] = 'X';
    row("bad magic", badMagic.bytes, {"bad magic", "MBTW", "not a Meshbench telemetry batch"});
    row("version 0", header(1, 0).append(record(1, spanBody())).bytes, {"format version 0", "corrupt"});
    row("version 2", header(1, 2).append(record(1, spanBody())).bytes,
        {"format version 2", "newer", "upgrade the engine"});
    row("version 65535", header(1, 65535).append(record(1, spanBody())).bytes,
        {"format version 65535", "upgrade the engine"});
    row("flags", header(1, 1, 4).append(record(1, spanBody())).bytes, {"flags are 4", "must be 0"});
    row("count over the limit", header(kMaxRecordsPerBatch + 1).append(record(1, spanBody())).bytes,
        {"4194305 records", "limit of 4194304"});
    row("count beyond the bytes", header(8).append(record(1, spanBody())).bytes,
        {"8 records", "49 bytes", "at most 6", "truncated"});
    row("count beyond the bytes of empty records", header(3).append(record(99, {})).append(record(99, {})).bytes,
        {"3 records", "16 bytes", "at most 2"});
    row("trailing bytes", Bytes(oneSpan).u8(0).bytes, {"1 trailing bytes", "byte offset 73", "1 records"});
    row("count short of the records", header(1).append(record(1, spanBody())).append(record(1, spanBody())).bytes,
        {"49 trailing bytes", "byte offset 73"});

    // Record headers.
    row("record reserved byte", afterOneLog(Bytes().u8(1).u8(1).u16(0).u32(41).append(spanBody())),
        {"record 1 (span) at byte offset 45", "reserved"});
    row("record reserved word", afterOneLog(Bytes().u8(6).u8(0).u16(256).u32(13).append(logBody(""))),
        {"record 1 (log) at byte offset 45", "reserved"});
    row("body beyond the frame", afterOneLog(Bytes().u8(1).u8(0).u16(0).u32(42).append(spanBody())),
        {"record 1 (span) at byte offset 45", "body length 42", "41 bytes left"});
    row("unknown type beyond the frame", afterOneLog(Bytes().u8(200).u8(0).u16(0).u32(9).raw("12345678")),
        {"record 1 (type 200) at byte offset 45", "body length 9", "8 bytes left"});
    row("record header cut", header(2).append(record(1, spanBody())).raw(std::string_view("\x01\0\0\0\0\0\0", 7)).bytes,
        {"record 1 at byte offset 73", "only 7 bytes left", "8-byte record header"});

    // Bodies shorter than their fields.
    row("short span", afterOneLog(record(1, shortened(spanBody(), 1))),
        {"record 1 (span) at byte offset 45", "body of 40 bytes", "41 bytes a span needs"});
    row("short expert load", afterOneLog(record(2, shortened(expertBody(0, 0), 1))),
        {"record 1 (expert load) at byte offset 45", "15 bytes", "16 bytes"});
    row("short expert arrays", afterOneLog(record(2, shortened(expertBody(2, 2), 4))),
        {"record 1 (expert load)", "28 bytes", "32 bytes an expert load of 2 experts needs"});
    row("short memory sample", afterOneLog(record(3, shortened(memoryBody(), 1))),
        {"record 1 (memory sample) at byte offset 45", "28 bytes", "29 bytes"});
    row("short step metrics", afterOneLog(record(4, shortened(stepBody(), 1))),
        {"record 1 (step metrics) at byte offset 45", "75 bytes", "76 bytes"});
    row("short node sample", afterOneLog(record(5, shortened(nodeBody(""), 1))),
        {"record 1 (node sample) at byte offset 45", "51 bytes", "52 bytes"});
    row("short node sample host", afterOneLog(record(5, shortened(nodeBody("abcdef"), 3))),
        {"record 1 (node sample)", "55 bytes", "58 bytes", "6-byte host name"});
    row("short log", afterOneLog(record(6, shortened(logBody(""), 1))),
        {"record 1 (log) at byte offset 45", "12 bytes", "13 bytes a log needs"});
    row("short log text", afterOneLog(record(6, shortened(logBody("hello"), 1))),
        {"record 1 (log)", "17 bytes", "18 bytes", "5-byte text"});
    row("short heartbeat", afterOneLog(record(7, shortened(heartbeatBody(""), 1))),
        {"record 1 (heartbeat) at byte offset 45", "32 bytes", "33 bytes"});
    row("short heartbeat host", afterOneLog(record(7, shortened(heartbeatBody("n1"), 1))),
        {"record 1 (heartbeat)", "34 bytes", "35 bytes", "2-byte host name"});
    row("first record short", header(1).append(record(1, shortened(spanBody(), 41))).bytes,
        {"record 0 (span) at byte offset 24", "body of 0 bytes"});

    // Enumerations out of range.
    row("span kind 10", afterOneLog(record(1, spanBody(10))), {"record 1 (span)", "span kind 10", "out of range"});
    row("span kind 255", afterOneLog(record(1, spanBody(255))), {"span kind 255", "out of range (0..9)"});
    row("memory category 5", afterOneLog(record(3, memoryBody(5))),
        {"record 1 (memory sample)", "memory category 5", "out of range (0..4)"});
    row("log level 4", afterOneLog(record(6, logBody("x", 4))),
        {"record 1 (log)", "log level 4", "out of range (0..3)"});
    row("rank state 5", afterOneLog(record(7, heartbeatBody("h", 5))),
        {"record 1 (heartbeat)", "rank state 5", "out of range (0..4)"});

    // Expert arrays.
    row("unequal expert arrays", afterOneLog(record(2, expertBody(3, 2).u32(0))),
        {"record 1 (expert load)", "3 routed counts but 2 dropped counts"});
    row("unequal expert arrays, short", afterOneLog(record(2, expertBody(3, 2))),
        {"record 1 (expert load)", "3 routed counts but 2 dropped counts"});
    row("more dropped than routed", afterOneLog(record(2, expertBody(1, 2))), {"1 routed counts but 2 dropped"});
    row("too many experts", afterOneLog(record(2, Bytes().i32(0).i32(0).u32(kMaxExpertsPerLayer + 1).u32(0))),
        {"record 1 (expert load)", "65537 experts", "limit of 65536"});
    row("expert count beyond the body", afterOneLog(record(2, Bytes().i32(0).i32(0).u32(1000).u32(0))),
        {"record 1 (expert load)", "16 bytes", "an expert load of 1000 experts"});

    // Strings.
    row("text over the limit", afterOneLog(record(6, Bytes().i64(0).u8(1).u32(kMaxTextBytes + 1))),
        {"record 1 (log)", "text of 65537 bytes", "limit of 65536"});
    row("host over the limit", afterOneLog(record(7, shortened(heartbeatBody(""), 4).u32(0xFFFFFFFF))),
        {"record 1 (heartbeat)", "host name of 4294967295 bytes", "limit"});
    // RFC 3629 section 4: sequences outside the well-formed table; `bad` is where the first starts.
    struct Invalid {
        const char* name;
        std::string_view text;
        int bad;
    };
    const Invalid invalidUtf8[] = {
        {"lone continuation byte", "ab\x80", 2},
        {"overlong slash", "\xC0\xAF", 0},
        {"overlong 3-byte", "\xE0\x80\xAF", 0},
        {"overlong 4-byte", "\xF0\x80\x80\xAF", 0},
        {"surrogate", "\xED\xA0\x80", 0},
        {"above U+10FFFF", "\xF4\x90\x80\x80", 0},
        {"cut sequence", "ab\xE2\x82", 2},
        {"byte 0xFF", "x\xFF", 1},
        {"missing continuation", "\xE2\x28\xA1", 0},
        {"5-byte form", "\xF8\x88\x80\x80\x80", 0},
        {"after valid text", "\xC3\xA9\xF0\x9F\x9A\x80\xC3", 6},
    };
    for (const Invalid& invalid : invalidUtf8) {
        const QString where = QStringLiteral("byte %1 of %2").arg(invalid.bad).arg(invalid.text.size());
        QTest::newRow(invalid.name) << qbytes(afterOneLog(record(6, logBody(invalid.text))))
                                    << QStringList{"record 1 (log)", "text is not valid UTF-8", where};
    }
    row("invalid host", afterOneLog(record(5, nodeBody("n\xC3"))), {"record 1 (node sample)", "host name", "UTF-8"});
}

void TestWire::malformed()
{
    QFETCH(QByteArray, frame);
    QFETCH(QStringList, words);
    const DecodeResult decoded = decodeBatch(spanOf(frame));
    QVERIFY(!decoded.batch);
    QCOMPARE(decoded.skippedRecords, 0u);
    for (const QString& word : words)
        QVERIFY2(QString::fromStdString(decoded.error).contains(word),
                 qPrintable(QStringLiteral("\"%1\" lacks \"%2\"").arg(QString::fromStdString(decoded.error), word)));
}

void TestWire::oversizedFrameIsRefusedUnread()
{
    // A valid header, so only the size can be what is refused.
    std::vector<std::uint8_t> frame = header(0).bytes;
    frame.resize(kMaxBatchBytes + 1);
    const DecodeResult decoded = decodeBatch(frame);
    QVERIFY(!decoded.batch);
    QCOMPARE(decoded.version, std::uint16_t(0));  // not even the header was read
    QCOMPARE(decoded.error, std::string("frame of 67108865 bytes exceeds the limit of 67108864 bytes; "
                                        "the agent must send smaller batches"));
}

void TestWire::everyTruncationIsAnError()
{
    Batch batch = extremeBatch();
    // Short strings and arrays keep the loop quick; every record type and field is still cut.
    std::erase_if(batch.records, [](const Record& r) {
        const auto* e = std::get_if<ExpertLoadRecord>(&r);
        return (e && e->routed.size() > 1) || encodeBatch(Batch{0, 0, {r}}).size() > 200;
    });
    batch.records.push_back(ExpertLoadRecord{1, 2, {3, 4, 5}, {0, 1, 2}});
    QCOMPARE(batch.records.size(), std::size_t(35));
    const std::vector<std::uint8_t> frame = encodeBatch(batch);
    for (std::size_t n = 0; n < frame.size(); ++n) {
        const DecodeResult decoded = decodeBatch(std::span(frame.data(), n));
        QVERIFY2(!decoded.batch && !decoded.error.empty(), qPrintable(QStringLiteral("cut at %1 decoded").arg(n)));
    }
    QVERIFY(decodeBatch(frame).batch);
}

void TestWire::corruptBytesNeverCrash()
{
    // Every byte of a frame with every record type set to values that break lengths and enums:
    // each result is a batch or an error, never both or neither (and, under ASan, never a bad read).
    Batch batch{1, 2, {}};
    batch.records.push_back(SpanRecord{});
    batch.records.push_back(ExpertLoadRecord{1, 2, {3, 4}, {0, 1}});
    batch.records.push_back(MemorySampleRecord{});
    batch.records.push_back(StepMetricsRecord{});
    batch.records.push_back(NodeSampleRecord{1, "host", 1, 2, 3, 4, 5, 0.5f});
    batch.records.push_back(LogRecord{1, LogLevel::Info, "text"});
    batch.records.push_back(HeartbeatRecord{1, RankState::Running, 1, 2, 3, 4, "host"});
    const std::vector<std::uint8_t> frame = encodeBatch(batch);
    for (std::size_t i = 0; i < frame.size(); ++i) {
        for (std::uint8_t value :
             {std::uint8_t(0x00), std::uint8_t(0xFF), std::uint8_t(frame[i] ^ 0x80), std::uint8_t(frame[i] + 1)}) {
            std::vector<std::uint8_t> corrupt = frame;
            corrupt[i] = value;
            const DecodeResult decoded = decodeBatch(corrupt);
            QVERIFY2(decoded.batch.has_value() != !decoded.error.empty(), qPrintable(QString::number(i)));
        }
    }
}

void TestWire::appendedFieldsAreIgnored()
{
    // A newer agent appends fields to known records: an older engine reads what it knows.
    const std::vector<std::uint8_t> frame = header(4)
                                                .append(record(1, spanBody(3).raw("newer")))
                                                .append(record(6, logBody("hello", 2).u64(99)))
                                                .append(record(2, expertBody(2, 2).u32(7)))
                                                .append(record(7, heartbeatBody("n1", 2).raw("x")))
                                                .bytes;
    const DecodeResult decoded = decodeBatch(frame);
    QVERIFY2(decoded.batch, decoded.error.c_str());
    QCOMPARE(decoded.skippedRecords, 0u);
    QCOMPARE(decoded.batch->rank, 9u);
    QCOMPARE(decoded.batch->sequence, std::uint64_t(100));
    const Batch expected{9,
                         100,
                         {SpanRecord{1, 0, 0, 2, SpanKind::SendActivation, -1, 10, 20, 0},
                          LogRecord{7, LogLevel::Warning, "hello"}, ExpertLoadRecord{1, 0, {0, 1}, {0, 0}},
                          HeartbeatRecord{8, RankState::Finished, 3, 4242, 0, 0, "n1"}}};
    QVERIFY(*decoded.batch == expected);
}

void TestWire::unknownRecordTypesAreSkipped()
{
    const std::vector<std::uint8_t> frame = header(5)
                                                .append(record(200, Bytes().raw("future record")))
                                                .append(record(1, spanBody(9)))
                                                .append(record(0, {}))
                                                .append(record(9, Bytes().u64(1)))
                                                .append(record(6, logBody("after")))
                                                .bytes;
    const DecodeResult decoded = decodeBatch(frame);
    QVERIFY2(decoded.batch, decoded.error.c_str());
    QCOMPARE(decoded.skippedRecords, 3u);
    QCOMPARE(decoded.batch->records.size(), std::size_t(2));
    QCOMPARE(std::get<SpanRecord>(decoded.batch->records[0]).kind, SpanKind::Idle);
    QCOMPARE(std::get<LogRecord>(decoded.batch->records[1]).text, std::string("after"));
}

void TestWire::wellFormedUtf8IsAccepted_data()
{
    QTest::addColumn<QByteArray>("text");
    // RFC 3629 section 4: the edges of each row of the well-formed table.
    QTest::newRow("ascii and nul") << QByteArray("a\0z", 3);
    QTest::newRow("U+0080 and U+07FF") << QByteArray("\xC2\x80\xDF\xBF");
    QTest::newRow("U+0800 and U+D7FF") << QByteArray("\xE0\xA0\x80\xED\x9F\xBF");
    QTest::newRow("U+E000 and U+FFFD") << QByteArray("\xEE\x80\x80\xEF\xBF\xBD");
    QTest::newRow("U+10000 and U+10FFFF") << QByteArray("\xF0\x90\x80\x80\xF4\x8F\xBF\xBF");
    QTest::newRow("U+40000") << QByteArray("\xF1\x80\x80\x80");
}

void TestWire::wellFormedUtf8IsAccepted()
{
    QFETCH(QByteArray, text);
    const std::string_view view(text.constData(), std::size_t(text.size()));
    const DecodeResult decoded = decodeBatch(header(1).append(record(6, logBody(view))).bytes);
    QVERIFY2(decoded.batch, decoded.error.c_str());
    QCOMPARE(std::get<LogRecord>(decoded.batch->records[0]).text, std::string(view));
    // The encoder leaves well-formed text as it is.
    const Batch batch{0, 0, {LogRecord{0, LogLevel::Info, std::string(view)}}};
    QVERIFY(*decodeBatch(encodeBatch(batch)).batch == batch);
}

void TestWire::encoderAppendsToWhatIsThere()
{
    const Batch batch{1, 2, {SpanRecord{}, LogRecord{}}};
    std::vector<std::uint8_t> out{0xAA, 0xBB};
    encodeBatch(batch, out);
    const std::vector<std::uint8_t> alone = encodeBatch(batch);
    QCOMPARE(out.size(), 2 + alone.size());
    QCOMPARE(out[0], std::uint8_t(0xAA));
    QCOMPARE(out[1], std::uint8_t(0xBB));
    QVERIFY(std::equal(alone.begin(), alone.end(), out.begin() + 2));
}

void TestWire::encoderRepairsText()
{
    const auto sent = [](std::string text) {
        const Batch batch{0, 0, {LogRecord{0, LogLevel::Info, std::move(text)}}};
        return std::get<LogRecord>(decodeBatch(encodeBatch(batch)).batch->records[0]).text;
    };
    QCOMPARE(sent("a\xFF"
                  "b"),
             std::string("a\xEF\xBF\xBD"
                         "b"));
    QCOMPARE(sent("\xC0\xAF"), std::string("\xEF\xBF\xBD\xEF\xBF\xBD"));  // each byte of an overlong form
    QCOMPARE(sent("cut \xE2\x82"), std::string("cut \xEF\xBF\xBD\xEF\xBF\xBD"));
    QCOMPARE(sent(std::string(kMaxTextBytes + 5000, 'x')), std::string(kMaxTextBytes, 'x'));
    // The character that would cross the limit is left out whole.
    QCOMPARE(sent(std::string(kMaxTextBytes - 1, 'x') + "\xC3\xA9"), std::string(kMaxTextBytes - 1, 'x'));
    QCOMPARE(sent(std::string(kMaxTextBytes - 2, 'x') + "\xC3\xA9"), std::string(kMaxTextBytes - 2, 'x') + "\xC3\xA9");
    QCOMPARE(sent(std::string(kMaxTextBytes - 2, 'x') + "\xFF"), std::string(kMaxTextBytes - 2, 'x'));
    const Batch node{0, 0, {NodeSampleRecord{0, "bad\x80host", 1, 1, 1, 1, 1, 1}}};
    QCOMPARE(std::get<NodeSampleRecord>(decodeBatch(encodeBatch(node)).batch->records[0]).host,
             std::string("bad\xEF\xBF\xBDhost"));
}

void TestWire::encoderRefusesWhatTheDecoderWould_data()
{
    QTest::addColumn<int>("index");
    QTest::addColumn<QStringList>("words");
    QTest::newRow("span kind") << 0 << QStringList{"record 1 (span)", "span kind 10", "out of range"};
    QTest::newRow("unequal experts") << 1 << QStringList{"record 1 (expert load)", "2 routed counts but 1 dropped"};
    QTest::newRow("too many experts") << 2 << QStringList{"record 1 (expert load)", "65537 experts", "limit"};
    QTest::newRow("memory category") << 3 << QStringList{"record 1 (memory sample)", "memory category 5"};
    QTest::newRow("log level") << 4 << QStringList{"record 1 (log)", "log level 4"};
    QTest::newRow("rank state") << 5 << QStringList{"record 1 (heartbeat)", "rank state 200"};
}

void TestWire::encoderRefusesWhatTheDecoderWould()
{
    QFETCH(int, index);
    QFETCH(QStringList, words);
    const Record bad[] = {
        SpanRecord{0, 0, 0, 0, SpanKind(10), 0, 0, 0, 0},
        ExpertLoadRecord{0, 0, {1, 2}, {0}},
        ExpertLoadRecord{0, 0, std::vector<std::uint32_t>(kMaxExpertsPerLayer + 1),
                         std::vector<std::uint32_t>(kMaxExpertsPerLayer + 1)},
        MemorySampleRecord{0, 0, MemoryCategory(5), 0, 0},
        LogRecord{0, LogLevel(4), "x"},
        HeartbeatRecord{0, RankState(200), 0, 0, 0, 0, "h"},
    };
    const Batch batch{0, 0, {SpanRecord{}, bad[index]}};
    std::vector<std::uint8_t> out{1, 2, 3};
    try {
        encodeBatch(batch, out);
        QFAIL("encodeBatch accepted a record the decoder refuses");
    } catch (const std::invalid_argument& e) {
        for (const QString& word : words)
            QVERIFY2(QString::fromUtf8(e.what()).contains(word), e.what());
    }
    QCOMPARE(out, (std::vector<std::uint8_t>{1, 2, 3}));
}

void TestWire::encoderRefusesAnOversizedFrame()
{
    // 1025 logs of 64 KiB: 24 + 1025 x (8 + 13 + 65536) bytes > 64 MiB.
    Batch batch{0, 0, {}};
    batch.records.assign(1025, LogRecord{0, LogLevel::Info, std::string(kMaxTextBytes, 'x')});
    std::vector<std::uint8_t> out;
    try {
        encodeBatch(batch, out);
        QFAIL("encodeBatch wrote a frame the decoder refuses");
    } catch (const std::invalid_argument& e) {
        QCOMPARE(std::string(e.what()), "telemetry batch of " + std::to_string(24 + 1025 * (8 + 13 + 65536)) +
                                            " bytes exceeds the limit of 67108864; split it");
    }
    QVERIFY(out.empty());
    batch.records.resize(1024);  // 67,130,392 bytes: still too many
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, encodeBatch(batch));
    batch.records.resize(1023);  // 67,064,835 bytes: fits
    const DecodeResult decoded = decodeBatch(encodeBatch(batch));
    QVERIFY2(decoded.batch, decoded.error.c_str());
    QCOMPARE(decoded.batch->records.size(), std::size_t(1023));
}

void TestWire::names()
{
    const char* spanNames[] = {"F",         "B",         "W",         "send-act",  "recv-act",
                               "send-grad", "recv-grad", "optimizer", "dp-reduce", "idle"};
    QCOMPARE(int(std::size(spanNames)), kSpanKinds);
    for (int k = 0; k < kSpanKinds; ++k) {
        QCOMPARE(spanKindName(SpanKind(k)), std::string_view(spanNames[k]));
        QCOMPARE(spanKindFromName(spanNames[k]), std::optional(SpanKind(k)));
        const bool compute = k <= 2;
        const bool communication = (k >= 3 && k <= 6) || k == 8;
        QCOMPARE(isComputeKind(SpanKind(k)), compute);
        QCOMPARE(isCommunicationKind(SpanKind(k)), communication);
    }
    QCOMPARE(spanKindName(SpanKind(10)), std::string_view("unknown"));
    for (const char* wrong : {"", "f", "Forward", "send", "F ", "unknown"})
        QVERIFY(!spanKindFromName(wrong));

    const char* categoryNames[] = {"params", "grads", "optimizer", "activations", "workspace"};
    QCOMPARE(int(std::size(categoryNames)), kMemoryCategories);
    for (int c = 0; c < kMemoryCategories; ++c) {
        QCOMPARE(memoryCategoryName(MemoryCategory(c)), std::string_view(categoryNames[c]));
        QCOMPARE(memoryCategoryFromName(categoryNames[c]), std::optional(MemoryCategory(c)));
    }
    QVERIFY(!memoryCategoryFromName("Params"));
    QCOMPARE(memoryCategoryName(MemoryCategory(5)), std::string_view("unknown"));

    const char* levelNames[] = {"debug", "info", "warning", "error"};
    for (int l = 0; l < 4; ++l)
        QCOMPARE(logLevelName(LogLevel(l)), std::string_view(levelNames[l]));
    QCOMPARE(logLevelName(LogLevel(4)), std::string_view("unknown"));

    const char* stateNames[] = {"starting", "running", "finished", "failed", "terminated"};
    for (int s = 0; s < 5; ++s)
        QCOMPARE(rankStateName(RankState(s)), std::string_view(stateNames[s]));
    QCOMPARE(rankStateName(RankState(255)), std::string_view("unknown"));
}

void TestWire::recordTypes()
{
    QCOMPARE(recordType(SpanRecord{}), RecordType::Span);
    QCOMPARE(recordType(ExpertLoadRecord{}), RecordType::ExpertLoad);
    QCOMPARE(recordType(MemorySampleRecord{}), RecordType::MemorySample);
    QCOMPARE(recordType(StepMetricsRecord{}), RecordType::StepMetrics);
    QCOMPARE(recordType(NodeSampleRecord{}), RecordType::NodeSample);
    QCOMPARE(recordType(LogRecord{}), RecordType::Log);
    QCOMPARE(recordType(HeartbeatRecord{}), RecordType::Heartbeat);
    QCOMPARE(recordType(ClockOffsetRecord{}), RecordType::ClockOffset);
    QCOMPARE(int(RecordType::Heartbeat), 7);
    QCOMPARE(int(RecordType::ClockOffset), 8);
}

// record_fields.h: each record's names are distinct, a column order puts the fields where it names
// them and the rest in wire order, and a walk stops at a visit's first false.
void TestWire::fieldLists()
{
    int types = 0;
    forEachRecordType([&](auto type) {
        using R = typename decltype(type)::type;
        std::set<std::string_view> names;
        R record{};
        forEachField(record, [&](const auto& field, auto&) {
            QVERIFY(!field.name.empty());
            QVERIFY2(names.insert(field.name).second, field.name.data());
        });
        QCOMPARE(names.size(), kFieldCount<R>);
        ++types;
    });
    QCOMPARE(types, int(std::variant_size_v<Record>));

    static constexpr std::string_view order[] = {"seq", "end_ns", kOtherFields, "rank"};
    using Order = Columns<SpanRecord, order>;
    const std::vector<std::string_view> names(Order::names.begin(), Order::names.end());
    QCOMPARE(names, (std::vector<std::string_view>{"seq", "end_ns", "step", "stage", "chunk", "microbatch", "kind",
                                                   "peer", "begin_ns", "bytes", "rank"}));
    QCOMPARE(std::vector<int>(Order::fields.begin(), Order::fields.end()),
             (std::vector<int>{-1, 7, 0, 1, 2, 3, 4, 5, 6, 8, -1}));
    static_assert(Order::of("rank") == 10 && Order::of("peer") == 7 && Order::of("peerRank") == -1);
    static constexpr std::string_view selection[] = {"bytes", "step"};
    const SpanRecord span{3, 0, 0, 0, SpanKind::Idle, -1, 0, 0, 77};
    std::vector<std::int64_t> values;
    Columns<SpanRecord, selection>::forEachFieldColumn(
        span, [&](auto, const auto&, const auto& value) { values.push_back(static_cast<std::int64_t>(value)); });
    QCOMPARE(values, (std::vector<std::int64_t>{77, 3}));

    int visited = 0;
    QVERIFY(!forEachField(span, [&](const auto& field, const auto&) {
        ++visited;
        return field.name != "chunk";
    }));
    QCOMPARE(visited, 3);
}

void TestWire::wallAlignedClock()
{
    using namespace std::chrono;
    const std::int64_t wall = duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
    const std::int64_t aligned = wallAlignedNowNs();
    QVERIFY2(std::abs(aligned - wall) < 50'000'000, qPrintable(QString::number(aligned - wall)));
    // A fixed offset: monotonic differences survive exactly.
    const std::int64_t mono = duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
    QCOMPARE(toWallAligned(mono + 123456789) - toWallAligned(mono), std::int64_t(123456789));
    std::int64_t previous = wallAlignedNowNs();
    for (int i = 0; i < 1000; ++i) {
        const std::int64_t now = wallAlignedNowNs();
        QVERIFY(now >= previous);
        previous = now;
    }
}

QTEST_APPLESS_MAIN(TestWire)
#include "tst_wire.moc"
