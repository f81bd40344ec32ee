#include "agent/checkpoint/safetensors.h"

#include <QtTest>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace meshbench::agent;

namespace {

// The message of the CheckpointError that f throws, or "<no error>". Any other exception
// escapes and fails the test.
template <typename F>
std::string checkpointError(F&& f)
{
    try {
        f();
    } catch (const CheckpointError& e) {
        return e.what();
    }
    return "<no error>";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

QByteArray readAll(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", qPrintable(path));
    return file.readAll();
}

void writeAll(const QString& path, const QByteArray& bytes)
{
    // Remove and create rather than truncate: ext4 flushes a truncated file's old data
    // (auto_da_alloc), which made a thousand rewrites take seconds.
    QFile::remove(path);
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(bytes) != bytes.size())
        qFatal("cannot write %s", qPrintable(path));
}

QByteArray u64Le(std::uint64_t value)
{
    QByteArray bytes;
    for (int i = 0; i < 8; ++i)
        bytes.append(static_cast<char>((value >> (8 * i)) & 0xFF));
    return bytes;
}

// A file made by hand: length, header text as given (no padding), then `dataBytes` bytes.
QByteArray handMade(const QByteArray& header, int dataBytes)
{
    return u64Le(static_cast<std::uint64_t>(header.size())) + header + QByteArray(dataBytes, '\x01');
}

std::vector<std::uint32_t> bitsOf(const std::vector<float>& values)
{
    std::vector<std::uint32_t> bits(values.size());
    if (!values.empty())
        std::memcpy(bits.data(), values.data(), values.size() * 4);
    return bits;
}

}  // namespace

class TestSafetensors : public QObject {
    Q_OBJECT

private slots:
    void roundTrip();
    void headerLayout();
    void atomicWrite();
    void writeRejectsBadRecords();
    void truncatedFilesAreRefused();
    void corruptHeadersAreRefused_data();
    void corruptHeadersAreRefused();
    void lenientButValidFilesOpen();
    void readF32Errors();
    void fromBytesMatchesOpen();
    void randomCorruptionNeverCrashes();
};

void TestSafetensors::roundTrip()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    std::vector<float> w(12),
        bias = {-0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                std::numeric_limits<float>::denorm_min(), 3.5f};
    for (std::size_t i = 0; i < w.size(); ++i)
        w[i] = 0.25f * static_cast<float>(i) - 1.0f;
    std::vector<float> big(64 * 33);
    for (std::size_t i = 0; i < big.size(); ++i)
        big[i] = std::sin(static_cast<float>(i));
    const float scalar = 42.0f;
    const std::vector<TensorRecord> tensors = {
        {"layers.0.w", {3, 4}, w.data()}, {"bias", {5}, bias.data()},    {"scalar", {}, &scalar},
        {"empty", {0, 3}, nullptr},       {"big", {64, 33}, big.data()},
    };
    const std::map<std::string, std::string> metadata = {{"step", "100"}, {"format", "pt"}, {"note", "ünïcødé"}};
    const std::string path = dir.filePath("model.safetensors").toStdString();
    writeSafetensors(path, tensors, metadata);

    const SafetensorsFile file = SafetensorsFile::open(path);
    QCOMPARE(file.metadata(), metadata);
    QCOMPARE(file.names(), (std::vector<std::string>{"layers.0.w", "bias", "scalar", "empty", "big"}));
    QVERIFY(file.contains("bias") && !file.contains("nothing"));
    QCOMPARE(file.shape("layers.0.w"), (std::vector<std::int64_t>{3, 4}));
    QCOMPARE(file.shape("scalar"), std::vector<std::int64_t>{});
    QCOMPARE(file.dtype("big"), std::string("F32"));

    std::vector<float> out(12);
    file.readF32("layers.0.w", {3, 4}, out.data());
    QCOMPARE(bitsOf(out), bitsOf(w));
    out.assign(5, 0.0f);
    file.readF32("bias", {5}, out.data());
    QCOMPARE(bitsOf(out), bitsOf(bias));  // bit-exact: -0, inf, NaN, denormal
    float s = 0.0f;
    file.readF32("scalar", {}, &s);
    QCOMPARE(s, 42.0f);
    file.readF32("empty", {0, 3}, nullptr);
    out.assign(big.size(), 0.0f);
    file.readF32("big", {64, 33}, out.data());
    QCOMPARE(bitsOf(out), bitsOf(big));

    // Contiguous, in order: 12 + 5 + 1 + 0 + 2112 floats after the header.
    const QByteArray bytes = readAll(QString::fromStdString(path));
    std::uint64_t headerBytes = 0;
    std::memcpy(&headerBytes, bytes.constData(), 8);
    QCOMPARE(static_cast<std::uint64_t>(bytes.size()), 8 + headerBytes + 4 * (12 + 5 + 1 + 64 * 33));

    // A moved file still reads.
    SafetensorsFile moved = SafetensorsFile::open(path);
    SafetensorsFile target = std::move(moved);
    target.readF32("scalar", {}, &s);
    QCOMPARE(s, 42.0f);
}

void TestSafetensors::headerLayout()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const float one = 1.0f;
    const std::vector<float> pair = {2.0f, -2.0f, 0.5f};
    const QString path = dir.filePath("tiny.safetensors");
    writeSafetensors(path.toStdString(), {{"x", {1}, &one}, {"y", {3}, pair.data()}}, {{"format", "pt"}});

    const QByteArray bytes = readAll(path);
    QVERIFY(bytes.size() >= 8);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
        n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    QCOMPARE(n % 8, std::uint64_t{0});
    QCOMPARE(static_cast<std::uint64_t>(bytes.size()), 8 + n + 16);
    const QByteArray header = bytes.mid(8, static_cast<qsizetype>(n));
    QCOMPARE(header.front(), '{');
    const qsizetype close = header.lastIndexOf('}');
    QVERIFY(close > 0);
    QVERIFY(close >= header.size() - 8);
    for (qsizetype i = close + 1; i < header.size(); ++i)
        QCOMPARE(header[i], ' ');  // padding is spaces

    QJsonParseError error{};
    const QJsonDocument doc = QJsonDocument::fromJson(header, &error);
    QCOMPARE(error.error, QJsonParseError::NoError);
    const QJsonObject root = doc.object();
    QCOMPARE(root.size(), 3);
    QCOMPARE(root["__metadata__"].toObject(), (QJsonObject{{"format", "pt"}}));
    QCOMPARE(root["x"].toObject()["dtype"].toString(), QString("F32"));
    QCOMPARE(root["x"].toObject()["shape"].toArray(), (QJsonArray{1}));
    QCOMPARE(root["x"].toObject()["data_offsets"].toArray(), (QJsonArray{0, 4}));
    QCOMPARE(root["y"].toObject()["shape"].toArray(), (QJsonArray{3}));
    QCOMPARE(root["y"].toObject()["data_offsets"].toArray(), (QJsonArray{4, 16}));
    // The data section: 1.0f is 0x3F800000, little-endian 00 00 80 3F; then 2.0f = 00 00 00 40.
    QCOMPARE(bytes.mid(static_cast<qsizetype>(8 + n), 8), QByteArray::fromHex("0000803f00000040"));
    QCOMPARE(bytes.right(4), QByteArray::fromHex("0000003f"));  // 0.5f
}

void TestSafetensors::atomicWrite()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath("ckpt.safetensors");
    const float a = 1.0f, b = 2.0f;
    writeSafetensors(path.toStdString(), {{"w", {1}, &a}}, {});
    QVERIFY(QFile::exists(path));
    QVERIFY(!QFile::exists(path + ".tmp"));
    writeSafetensors(path.toStdString(), {{"w", {1}, &b}}, {});  // replaces the old one
    QVERIFY(!QFile::exists(path + ".tmp"));
    float out = 0.0f;
    SafetensorsFile::open(path.toStdString()).readF32("w", {1}, &out);
    QCOMPARE(out, 2.0f);
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList{"ckpt.safetensors"});
    QVERIFY(SafetensorsFile::open(path.toStdString()).metadata().empty());

    const std::string missingDir = dir.filePath("no/such/dir/c.safetensors").toStdString();
    const std::string message = checkpointError([&] { writeSafetensors(missingDir, {{"w", {1}, &a}}, {}); });
    QVERIFY2(has(message, "no/such/dir/c.safetensors.tmp"), message.c_str());
}

void TestSafetensors::writeRejectsBadRecords()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = dir.filePath("bad.safetensors").toStdString();
    const float v[2] = {1.0f, 2.0f};
    QVERIFY(has(checkpointError([&] { writeSafetensors(path, {{"a", {1}, v}, {"a", {1}, v}}, {}); }), "twice"));
    QVERIFY(has(checkpointError([&] { writeSafetensors(path, {{"a", {-1}, v}}, {}); }), "negative"));
    QVERIFY(has(checkpointError([&] { writeSafetensors(path, {{"a", {2}, nullptr}}, {}); }), "no data"));
    QVERIFY(has(checkpointError([&] { writeSafetensors(path, {{"__metadata__", {1}, v}}, {}); }), "name"));
    QVERIFY(has(checkpointError([&] { writeSafetensors(path, {{"", {1}, v}}, {}); }), "name"));
    QVERIFY(has(checkpointError([&] { writeSafetensors(path, {{"a", {INT64_MAX, 4}, v}}, {}); }), "too large"));
    QVERIFY(has(checkpointError([&] { writeSafetensors(path, {{"bad\xff", {1}, v}}, {}); }), "UTF-8"));
    QVERIFY(!QFile::exists(QString::fromStdString(path)));
    QVERIFY(!QFile::exists(QString::fromStdString(path + ".tmp")));
}

void TestSafetensors::truncatedFilesAreRefused()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::vector<float> a = {1, 2, 3}, b = {4, 5};
    const QString path = dir.filePath("full.safetensors");
    writeSafetensors(path.toStdString(), {{"a", {3}, a.data()}, {"b", {2}, b.data()}}, {{"k", "v"}});
    const QByteArray full = readAll(path);
    const QString cut = dir.filePath("cut.safetensors");
    for (qsizetype length = 0; length < full.size(); ++length) {
        writeAll(cut, full.left(length));
        const std::string message = checkpointError([&] { SafetensorsFile::open(cut.toStdString()); });
        QVERIFY2(message != "<no error>", qPrintable(QString("truncated to %1 bytes was accepted").arg(length)));
        QVERIFY2(has(message, "cut.safetensors"), message.c_str());
    }
    QVERIFY(has(checkpointError([&] { SafetensorsFile::open(dir.filePath("absent").toStdString()); }), "absent"));
    QVERIFY(has(checkpointError([&] { SafetensorsFile::open(dir.path().toStdString()); }), "regular file"));
}

void TestSafetensors::corruptHeadersAreRefused_data()
{
    QTest::addColumn<QByteArray>("file");
    QTest::addColumn<QString>("expected");  // a part of the message

    const QByteArray good = R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
    QVERIFY(good.size() > 16);
    // Spaces as data: with the length one too long the header stays valid JSON and the data
    // section is then one byte short.
    const auto withLength = [&](std::uint64_t n) { return u64Le(n) + good + QByteArray(8, ' '); };
    QTest::newRow("length 0") << withLength(0) << "not valid JSON";
    QTest::newRow("length 7") << withLength(7) << "not valid JSON";
    QTest::newRow("length + 1") << withLength(std::uint64_t(good.size()) + 1) << "beyond";
    QTest::newRow("length past the end") << withLength(std::uint64_t(good.size()) + 9) << "exceeds";
    QTest::newRow("length 100 MB + 1") << withLength(100'000'001) << "absurd";
    QTest::newRow("length 2^63") << withLength(std::uint64_t{1} << 63) << "absurd";
    QTest::newRow("length 2^64 - 1") << withLength(~std::uint64_t{0}) << "absurd";

    const auto row = [](const char* name, const QByteArray& header, int dataBytes, const char* expected) {
        QTest::newRow(name) << handMade(header, dataBytes) << expected;
    };
    row("garbage", "{nope", 0, "not valid JSON");
    row("unterminated", R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]})", 4, "not valid JSON");
    row("array", "[1, 2, 3]", 0, "not an object");
    row("string", "\"text\"", 0, "not an object");
    row("null", "null", 0, "not an object");
    row("invalid UTF-8", "{\"a\xff\": 1}", 0, "not valid JSON");
    row("empty header", "", 0, "not valid JSON");
    row("entry not object", R"({"x": 5})", 0, "'x' is not an object");
    row("missing dtype", R"({"x": {"shape": [1], "data_offsets": [0, 4]}})", 4, "no dtype");
    row("dtype not string", R"({"x": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}})", 4, "no dtype");
    row("unknown dtype", R"({"x": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}})", 4, "F33");
    row("missing shape", R"({"x": {"dtype": "F32", "data_offsets": [0, 4]}})", 4, "no shape");
    row("shape not array", R"({"x": {"dtype": "F32", "shape": "1", "data_offsets": [0, 4]}})", 4, "no shape");
    row("negative dim", R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, "invalid dimension");
    row("fractional dim", R"({"x": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4, "not an integer");
    row("string dim", R"({"x": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})", 4, "not an integer");
    row("huge dim", R"({"x": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 4]}})", 4,
        "invalid dimension");
    row("missing offsets", R"({"x": {"dtype": "F32", "shape": [1]}})", 4, "data_offsets");
    row("one offset", R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4, "data_offsets");
    row("three offsets", R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 8, "data_offsets");
    row("negative offset", R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4, "non-negative");
    row("float offsets", R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4.0]}})", 4, "non-negative");
    row("end before begin", R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})", 4, "end before");
    row("past the data", R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4, "beyond");
    row("bytes mismatch", R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4, "does not match");
    row("dtype size mismatch", R"({"x": {"dtype": "F64", "shape": [1], "data_offsets": [0, 4]}})", 4, "does not match");
    // 2^62 * 4 elements * 4 bytes = 2^66 wraps to 0 in 64 bits; so does (2^32)^2 * 4.
    row("overflowing shape", R"({"x": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 0,
        "does not match");
    row("overflowing shape 2", R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
        0, "does not match");
    row("overlap", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
        12, "overlap");
    row("same bytes", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                         "b": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
        4, "overlap");
    // Nesting a million levels deep once overflowed the stack (ordered_json copies recursively).
    const QByteArray deep = QByteArray(1'000'000, '[') + QByteArray(1'000'000, ']');
    row("deep shape", R"({"x": {"dtype": "F32", "shape": )" + deep + R"(, "data_offsets": [0, 0]}})", 0,
        "nests 1000002 levels");
    row("deep offsets", R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [)" + deep + ", 4]}}", 4, "nests");
    row("deep and unterminated", "{\"x\": " + QByteArray(1'000'000, '{'), 0, "nests");
    row("brackets in strings",
        R"({"[[[[": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "x": )" + QByteArray(70, '[') +
            QByteArray(70, ']') + "}",
        4, "nests 71 levels");
    row("metadata not object", R"({"__metadata__": 5})", 0, "__metadata__");
    row("metadata not strings", R"({"__metadata__": {"step": 100}})", 0, "'step' is not a string");
}

void TestSafetensors::corruptHeadersAreRefused()
{
    QFETCH(QByteArray, file);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath("corrupt.safetensors");
    writeAll(path, file);
    const std::string message = checkpointError([&] { SafetensorsFile::open(path.toStdString()); });
    QVERIFY2(has(message, expected.toStdString()) && has(message, "corrupt.safetensors"), message.c_str());
}

void TestSafetensors::lenientButValidFilesOpen()
{
    // Other dtypes are listed (and refused by readF32), holes and trailing bytes are allowed,
    // empty tensors may sit anywhere, header whitespace is JSON whitespace.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QByteArray header = R"({"h": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]},
        "e": {"dtype": "F32", "shape": [0], "data_offsets": [6, 6]},
        "f": {"dtype": "F32", "shape": [1, 1], "data_offsets": [8, 12]}}   )";
    QByteArray bytes = u64Le(static_cast<std::uint64_t>(header.size())) + header + QByteArray(8, '\0') +
                       QByteArray::fromHex("0000c03f") + QByteArray(3, '\0');
    const QString path = dir.filePath("lenient.safetensors");
    writeAll(path, bytes);
    const SafetensorsFile file = SafetensorsFile::open(path.toStdString());
    QCOMPARE(file.names(), (std::vector<std::string>{"h", "e", "f"}));
    QCOMPARE(file.dtype("h"), std::string("BF16"));
    float value = 0.0f;
    file.readF32("f", {1, 1}, &value);
    QCOMPARE(value, 1.5f);
    float two[2];
    const std::string message = checkpointError([&] { file.readF32("h", {2}, two); });
    QVERIFY2(has(message, "BF16") && has(message, "only F32"), message.c_str());
}

void TestSafetensors::readF32Errors()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    std::vector<float> qkv(96 * 32, 0.5f);
    const std::string path = dir.filePath("c.safetensors").toStdString();
    writeSafetensors(path, {{"layers.0.attn.qkv.weight", {96, 32}, qkv.data()}}, {});
    const SafetensorsFile file = SafetensorsFile::open(path);
    std::vector<float> out(192 * 32);
    QCOMPARE(checkpointError([&] {
                 file.readF32("layers.0.attn.qkv.weight", {192, 32}, out.data());
             }),
             std::string("tensor 'layers.0.attn.qkv.weight' has shape [96, 32] in the checkpoint but the job needs "
                         "[192, 32]"));
    QVERIFY(has(checkpointError([&] {
                    file.readF32("layers.0.attn.qkv.weight", {96, 32, 1}, out.data());
                }),
                "needs [96, 32, 1]"));
    const std::string missing = checkpointError([&] { file.readF32("layers.1.mlp.weight", {1}, out.data()); });
    QVERIFY2(has(missing, "no tensor 'layers.1.mlp.weight'") && has(missing, "c.safetensors"), missing.c_str());
    QVERIFY(has(checkpointError([&] { (void)file.shape("nope"); }), "'nope'"));
    file.readF32("layers.0.attn.qkv.weight", {96, 32}, out.data());
    QCOMPARE(out[96 * 32 - 1], 0.5f);
}

void TestSafetensors::fromBytesMatchesOpen()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::vector<float> a = {1, -2, 3.5f, 0}, b = {7};
    const QString path = dir.filePath("m.safetensors");
    writeSafetensors(path.toStdString(), {{"a", {2, 2}, a.data()}, {"b", {}, b.data()}}, {{"step", "3"}});
    const QByteArray bytes = readAll(path);
    const SafetensorsFile mapped = SafetensorsFile::open(path.toStdString());
    SafetensorsFile held = SafetensorsFile::fromBytes({bytes.begin(), bytes.end()}, "in memory");
    QCOMPARE(held.path(), std::string("in memory"));
    QCOMPARE(held.names(), mapped.names());
    QCOMPARE(held.metadata(), mapped.metadata());
    QCOMPARE(held.shape("a"), mapped.shape("a"));
    std::vector<float> out(4);
    held.readF32("a", {2, 2}, out.data());
    QCOMPARE(bitsOf(out), bitsOf(a));
    // A moved file keeps its bytes.
    const SafetensorsFile moved = std::move(held);
    float scalar = 0;
    moved.readF32("b", {}, &scalar);
    QCOMPARE(scalar, 7.0f);
    // The same checks, with the given name in the message.
    const std::string message = checkpointError([&] {
        SafetensorsFile::fromBytes({bytes.begin(), bytes.begin() + 12}, "in memory");
    });
    QVERIFY2(has(message, "checkpoint 'in memory'") && has(message, "exceeds"), message.c_str());
}

void TestSafetensors::randomCorruptionNeverCrashes()
{
    // Flip random bytes of a valid file: every result opens or is refused with a
    // CheckpointError (any other exception fails the test, a crash kills it).
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
    const QString path = dir.filePath("valid.safetensors");
    writeSafetensors(path.toStdString(), {{"a", {2, 2}, a.data()}, {"b", {2}, b.data()}}, {{"step", "7"}});
    const QByteArray valid = readAll(path);
    const QString fuzz = dir.filePath("fuzz.safetensors");
    std::mt19937 rng(12345);
    int refused = 0, opened = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        QByteArray bytes = valid;
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) {
            // Mostly the length and the header, where the structure is.
            const auto limit = static_cast<std::uint32_t>(trial % 3 == 0 ? 8 : bytes.size());
            bytes[static_cast<qsizetype>(rng() % limit)] = static_cast<char>(rng() & 0xFF);
        }
        writeAll(fuzz, bytes);
        try {
            const SafetensorsFile file = SafetensorsFile::open(fuzz.toStdString());
            for (const std::string& name : file.names()) {
                double count = 1;  // double: a flipped dim must not overflow the test itself
                for (const std::int64_t d : file.shape(name))
                    count *= static_cast<double>(d);
                if (file.dtype(name) == "F32" && count <= 16) {
                    std::vector<float> out(static_cast<std::size_t>(count));
                    file.readF32(name, file.shape(name), out.data());
                }
            }
            ++opened;
        } catch (const CheckpointError&) {
            ++refused;
        }
    }
    qInfo("random corruption: %d refused, %d still valid", refused, opened);
    QVERIFY(refused > 1000);
}

QTEST_APPLESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
