#include "agent/data/markov_source.h"
#include "agent/data/token_file_source.h"
#include "agent/data/token_source.h"

#include <QtTest>

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <thread>
#include <vector>

using namespace meshbench::agent;
namespace plan = meshbench::plan;

namespace {

// The message of the DataError that f throws, or "<no error>".
template <typename F>
std::string dataError(F&& f)
{
    try {
        f();
    } catch (const DataError& e) {
        return e.what();
    }
    return "<no error>";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// p[i] = (i + 1)^-0.7 normalised, as markov_source.h documents it.
std::vector<double> documentedP(int b)
{
    std::vector<double> p;
    double sum = 0.0;
    for (int i = 1; i <= b; ++i) {
        p.push_back(1.0 / std::pow(i, 0.7));
        sum += p.back();
    }
    for (double& x : p)
        x /= sum;
    return p;
}

std::vector<std::int32_t> draw(const TokenSource& source, std::int64_t index, int length)
{
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(length), -1);
    source.sample(index, length, tokens.data());
    return tokens;
}

// Writes ids little-endian, 2 or 4 bytes each, to a file in dir.
QString writeTokens(const QTemporaryDir& dir, const QString& name, const std::vector<std::uint32_t>& ids, int width)
{
    QByteArray bytes;
    for (const std::uint32_t id : ids)
        for (int b = 0; b < width; ++b)
            bytes.append(static_cast<char>((id >> (8 * b)) & 0xFF));
    QString path = dir.filePath(name);
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size())
        qFatal("cannot write %s", qPrintable(path));
    return path;
}

QString writeBytes(const QTemporaryDir& dir, const QString& name, qsizetype count)
{
    QString path = dir.filePath(name);
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(QByteArray(count, '\0')) != count)
        qFatal("cannot write %s", qPrintable(path));
    return path;
}

}  // namespace

class TestData : public QObject {
    Q_OBJECT

private slots:
    void markovEntropyRateIsHOfP();
    void markovEveryContextHasBSuccessors();
    void markovEmpiricalConditionalEntropy();
    void markovOrderTwoFollowsItsContexts();
    void markovLossFloor();
    void markovDeterministic();
    void markovRandomAccessAndThreads();
    void markovRejectsBadParameters();
    void fileWindowsUint16();
    void fileWindowsUint32();
    void fileRefusesBadFiles();
    void fileIsMovable();
    void factoryBuildsSources();
};

void TestData::markovEntropyRateIsHOfP()
{
    for (const auto& [vocab, branching] : std::vector<std::pair<int, int>>{{16, 4}, {2, 2}, {1000, 37}, {50, 50}}) {
        const MarkovSource source(vocab, 1, branching, 7);
        const std::vector<double> p = documentedP(branching);
        double h = 0.0;
        for (const double x : p)
            h -= x * std::log(x);
        QCOMPARE(source.probabilities().size(), p.size());
        for (std::size_t i = 0; i < p.size(); ++i)
            QVERIFY(std::abs(source.probabilities()[i] - p[i]) < 1e-15);
        QVERIFY2(std::abs(source.entropyRate() - h) < 1e-12, qPrintable(QString::number(source.entropyRate())));
    }
    // Hand value for b = 2: p = (1, 2^-0.7) / (1 + 2^-0.7) = (0.61904..., 0.38095...).
    const MarkovSource two(2, 1, 2, 1);
    const double a = 1.0 / (1.0 + std::pow(2.0, -0.7));
    QVERIFY(std::abs(two.probabilities()[0] - 0.6190) < 1e-4);
    QVERIFY(std::abs(two.entropyRate() - (-a * std::log(a) - (1 - a) * std::log(1 - a))) < 1e-12);
}

void TestData::markovEveryContextHasBSuccessors()
{
    // Order 1: all 16 contexts; order 2 with V = 50: all 2500 contexts; V = 3000, b = 3000.
    const MarkovSource one(16, 1, 4, 3);
    std::set<std::set<std::int32_t>> distinctSets;
    for (std::int32_t c = 0; c < 16; ++c) {
        const auto successors = one.successors(&c);
        QCOMPARE(successors.size(), std::size_t{4});
        std::set<std::int32_t> tokens;
        for (std::size_t i = 0; i < successors.size(); ++i) {
            QVERIFY(successors[i].first >= 0 && successors[i].first < 16);
            QCOMPARE(successors[i].second, one.probabilities()[i]);
            tokens.insert(successors[i].first);
        }
        QCOMPARE(tokens.size(), std::size_t{4});
        distinctSets.insert(tokens);
    }
    QVERIFY(distinctSets.size() > 8);  // successor sets depend on the context

    const MarkovSource two(50, 2, 7, 11);
    for (std::int32_t a = 0; a < 50; ++a)
        for (std::int32_t b = 0; b < 50; ++b) {
            const std::int32_t context[2] = {a, b};
            std::set<std::int32_t> tokens;
            for (const auto& [token, prob] : two.successors(context)) {
                QVERIFY(token >= 0 && token < 50);
                tokens.insert(token);
            }
            QCOMPARE(tokens.size(), std::size_t{7});
        }

    const MarkovSource full(3000, 1, 3000, 5);  // b = V: the successors are a permutation of the vocabulary
    const std::int32_t c = 1234;
    std::set<std::int32_t> all;
    for (const auto& [token, prob] : full.successors(&c))
        all.insert(token);
    QCOMPARE(all.size(), std::size_t{3000});
    QCOMPARE(*all.begin(), 0);
    QCOMPARE(*all.rbegin(), 2999);
}

void TestData::markovEmpiricalConditionalEntropy()
{
    // V = 16, order 1, b = 4; 1000 samples of 1001 tokens = 10^6 transitions.
    // Tolerance: token j given its past has log-loss -ln p(X_j | X_j-1) with conditional mean
    // exactly H(p), so the sum over n transitions minus n H(p) is a martingale and its variance
    // is n Var_p(-ln p) (< 0.1 nats^2 here) whatever the chain's mixing: the standard error of
    // the mean is below 3.2e-4 nats. The plug-in estimate below is biased low by about
    // (cells - contexts) / (2n) = 16 * 3 / 2e6 = 2.4e-5 nats (Miller-Madow). A 1% tolerance
    // (about 0.012 nats) is thus over 30 standard errors, yet a wrong p (e.g. uniform over the
    // b successors: ln 4 = 1.386 vs H(p) = 1.238) misses it by a factor of 10.
    const int vocab = 16;
    const MarkovSource source(vocab, 1, 4, 2024);
    std::vector<std::int64_t> counts(vocab * vocab, 0);
    std::vector<std::int64_t> contextCounts(vocab, 0);
    std::int64_t n = 0;
    std::vector<std::int32_t> tokens(1001);
    for (std::int64_t s = 0; s < 1000; ++s) {
        source.sample(s, 1001, tokens.data());
        for (std::size_t j = 1; j < tokens.size(); ++j) {
            QVERIFY(tokens[j] >= 0 && tokens[j] < vocab);
            ++counts[static_cast<std::size_t>(tokens[j - 1]) * static_cast<std::size_t>(vocab) +
                     static_cast<std::size_t>(tokens[j])];
            ++contextCounts[static_cast<std::size_t>(tokens[j - 1])];
            ++n;
        }
    }
    double estimate = 0.0;
    for (int c = 0; c < vocab; ++c) {
        const auto successors = source.successors(&c);
        int observed = 0;
        for (int next = 0; next < vocab; ++next) {
            const auto count =
                counts[static_cast<std::size_t>(c) * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(next)];
            if (count == 0)
                continue;
            ++observed;
            const auto it =
                std::find_if(successors.begin(), successors.end(), [&](const auto& s) { return s.first == next; });
            QVERIFY2(it != successors.end(), "a transition the chain does not have");
            const double conditional = double(count) / double(contextCounts[static_cast<std::size_t>(c)]);
            estimate -= double(count) / double(n) * std::log(conditional);
            // Per-cell frequency: binomial standard error sqrt(p(1-p)/N_c) <= 0.5/sqrt(N_c).
            if (contextCounts[static_cast<std::size_t>(c)] >= 10000)
                QVERIFY2(std::abs(conditional - it->second) < 0.025, qPrintable(QString::number(conditional)));
        }
        QVERIFY(observed <= 4);
        if (contextCounts[static_cast<std::size_t>(c)] >= 1000)
            QCOMPARE(observed, 4);  // the least likely successor (p = 0.16) is then certain to appear
    }
    const double relative = std::abs(estimate - source.entropyRate()) / source.entropyRate();
    qInfo("empirical conditional entropy %.5f nats vs entropy rate %.5f (relative error %.2e)", estimate,
          source.entropyRate(), relative);
    QVERIFY(relative < 0.01);
}

void TestData::markovOrderTwoFollowsItsContexts()
{
    const MarkovSource source(8, 2, 3, 99);
    std::vector<std::int32_t> tokens(200);
    for (std::int64_t s = 0; s < 200; ++s) {
        source.sample(s, 200, tokens.data());
        for (std::size_t j = 2; j < tokens.size(); ++j) {
            const auto successors = source.successors(&tokens[j - 2]);
            const bool found =
                std::any_of(successors.begin(), successors.end(), [&](const auto& x) { return x.first == tokens[j]; });
            QVERIFY2(found, "token j is not a successor of tokens j-2, j-1");
        }
    }
}

void TestData::markovLossFloor()
{
    const MarkovSource one(16, 1, 4, 1);
    QVERIFY(std::abs(one.lossFloor(128) - one.entropyRate()) < 1e-12);
    // Order 3, seq 10: targets 1, 2 are uniform (ln 16), targets 3 .. 10 carry H(p).
    const MarkovSource three(16, 3, 4, 1);
    const double expected = (2 * std::log(16.0) + 8 * three.entropyRate()) / 10;
    QVERIFY(std::abs(three.lossFloor(10) - expected) < 1e-12);
}

void TestData::markovDeterministic()
{
    const MarkovSource a(256, 2, 5, 42);
    const MarkovSource b(256, 2, 5, 42);
    const MarkovSource c(256, 2, 5, 43);
    QCOMPARE(draw(a, 17, 300), draw(b, 17, 300));
    QCOMPARE(draw(a, 17, 300), draw(a, 17, 300));
    QVERIFY(draw(a, 17, 300) != draw(c, 17, 300));
    QVERIFY(draw(a, 17, 300) != draw(a, 18, 300));
    // A shorter request is a prefix of a longer one: token j depends on (seed, index, j) only.
    const auto longer = draw(a, 17, 300);
    const auto shorter = draw(a, 17, 100);
    QVERIFY(std::equal(shorter.begin(), shorter.end(), longer.begin()));
    // Negative and huge indices are samples like any other.
    QCOMPARE(draw(a, -1, 50), draw(b, -1, 50));
    QCOMPARE(draw(a, INT64_MAX, 50), draw(b, INT64_MAX, 50));
}

void TestData::markovRandomAccessAndThreads()
{
    const MarkovSource fresh(512, 1, 8, 5);
    const auto alone = draw(fresh, 5, 257);
    const MarkovSource busy(512, 1, 8, 5);
    for (std::int64_t i = 0; i < 20; ++i)
        draw(busy, i, 257);
    QCOMPARE(draw(busy, 5, 257), alone);

    // Eight threads drawing interleaved samples from one source agree with a serial pass.
    std::vector<std::vector<std::int32_t>> serial;
    for (std::int64_t i = 0; i < 256; ++i)
        serial.push_back(draw(fresh, i, 257));
    std::vector<std::vector<std::int32_t>> parallel(256);
    std::vector<std::thread> threads;
    threads.reserve(8);
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (std::size_t i = static_cast<std::size_t>(t); i < 256; i += 8)
                parallel[i] = draw(fresh, static_cast<std::int64_t>(i), 257);
        });
    for (auto& thread : threads)
        thread.join();
    QCOMPARE(parallel, serial);
}

void TestData::markovRejectsBadParameters()
{
    QVERIFY(has(dataError([] { MarkovSource(16, 1, 1, 0); }), "branching 1"));
    QVERIFY(has(dataError([] { MarkovSource(16, 1, 17, 0); }), "branching 17"));
    QVERIFY(has(dataError([] { MarkovSource(16, 0, 4, 0); }), "order 0"));
    QVERIFY(has(dataError([] { MarkovSource(1, 1, 2, 0); }), "vocab 1"));
}

void TestData::fileWindowsUint16()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    // N = 23 tokens; token i = 1000 + 37 i (both bytes in use), vocab 2000, seq 4.
    std::vector<std::uint32_t> ids;
    for (std::uint32_t i = 0; i < 23; ++i)
        ids.push_back(1000 + 37 * i);
    const QString path = writeTokens(dir, "train.bin", ids, 2);
    const TokenFileSource source(path.toStdString(), plan::TokenDtype::Uint16, 2000, 4);
    QCOMPARE(source.tokenCount(), std::int64_t{23});
    QCOMPARE(source.vocab(), 2000);
    QVERIFY(has(source.describe(), "train.bin") && has(source.describe(), "23 tokens"));

    const auto window = [&](std::int64_t start, int length) {
        std::vector<std::int32_t> w;
        w.reserve(static_cast<std::size_t>(length));
        for (int j = 0; j < length; ++j)
            w.push_back(static_cast<std::int32_t>(ids[static_cast<std::size_t>(start + j)]));
        return w;
    };
    // Length 5 (seq 4 + 1): 19 window starts; offset = (g * 4) mod 19, worked by hand.
    const std::vector<std::pair<std::int64_t, std::int64_t>> offsets = {
        {0, 0},
        {1, 4},
        {4, 16},
        {5, 1},
        {6, 5},
        {10, 2},
        {19, 0},
        {-1, 15},
        {std::int64_t{1} << 62, 17},  // 2^62 = 9 (mod 19) by Fermat (2^18 = 1); 9 * 4 = 36 = 17
        {INT64_MAX, 11},              // 2^63 - 1 = 17 (mod 19); 17 * 4 = 68 = 11
    };
    for (const auto& [g, offset] : offsets)
        QVERIFY2(draw(source, g, 5) == window(offset, 5), qPrintable(QString("sample %1").arg(g)));
    // Consecutive samples: the last target of one is the first input of the next.
    QCOMPARE(draw(source, 0, 5).back(), draw(source, 1, 5).front());
    // Another length: 21 starts, sample 6 -> 24 mod 21 = 3; the whole file as one window.
    QCOMPARE(draw(source, 6, 3), window(3, 3));
    QCOMPARE(draw(source, 7, 23), window(0, 23));
    QVERIFY(has(dataError([&] { draw(source, 0, 24); }), "24 tokens"));
    QVERIFY(has(dataError([&] { draw(source, 0, 0); }), "0 tokens"));
}

void TestData::fileWindowsUint32()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    // Ids above 2^16 need all four bytes: token i = 70000 + 65537 i, vocab 2^20.
    std::vector<std::uint32_t> ids;
    for (std::uint32_t i = 0; i < 10; ++i)
        ids.push_back(70000 + 65537 * i);
    const QString path = writeTokens(dir, "train32.bin", ids, 4);
    const TokenFileSource source(path.toStdString(), plan::TokenDtype::Uint32, 1 << 20, 3);
    QCOMPARE(source.tokenCount(), std::int64_t{10});
    QCOMPARE(source.bytesPerToken(), 4);
    // Length 4: 7 starts; sample 3 -> 9 mod 7 = 2.
    QCOMPARE(draw(source, 3, 4), (std::vector<std::int32_t>{201074, 266611, 332148, 397685}));
    QCOMPARE(draw(source, 0, 4)[0], 70000);
}

void TestData::fileRefusesBadFiles()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string odd = writeBytes(dir, "odd.bin", 1001).toStdString();
    std::string message = dataError([&] { TokenFileSource(odd, plan::TokenDtype::Uint16, 100, 4); });
    QVERIFY2(has(message, "odd.bin") && has(message, "1001 bytes, not a multiple of 2 (uint16); is the dtype right?"),
             message.c_str());
    const std::string six = writeBytes(dir, "six.bin", 6).toStdString();
    message = dataError([&] { TokenFileSource(six, plan::TokenDtype::Uint32, 100, 1); });
    QVERIFY2(has(message, "6 bytes, not a multiple of 4 (uint32)"), message.c_str());

    const std::string empty = writeBytes(dir, "empty.bin", 0).toStdString();
    message = dataError([&] { TokenFileSource(empty, plan::TokenDtype::Uint16, 100, 4); });
    QVERIFY2(has(message, "empty.bin") && has(message, "empty"), message.c_str());

    const std::string shortFile = writeTokens(dir, "short.bin", {1, 2, 3, 4}, 2).toStdString();
    message = dataError([&] { TokenFileSource(shortFile, plan::TokenDtype::Uint16, 100, 4); });
    QVERIFY2(has(message, "holds 4 tokens") && has(message, "5 one sample needs"), message.c_str());
    const TokenFileSource enough(shortFile, plan::TokenDtype::Uint16, 100, 3);  // exactly seq + 1 tokens is enough

    std::vector<std::uint32_t> ids(20, 7);
    ids[13] = 300;
    const std::string big = writeTokens(dir, "big.bin", ids, 2).toStdString();
    message = dataError([&] { TokenFileSource(big, plan::TokenDtype::Uint16, 300, 4); });
    QVERIFY2(has(message, "token 300 at position 13") && has(message, "vocab 300") && has(message, "model.vocab"),
             message.c_str());
    const TokenFileSource inVocab(big, plan::TokenDtype::Uint16, 301, 4);

    const std::string missing = dir.filePath("nowhere.bin").toStdString();
    message = dataError([&] { TokenFileSource(missing, plan::TokenDtype::Uint16, 100, 4); });
    QVERIFY2(has(message, "nowhere.bin") && has(message, "No such file"), message.c_str());
    message = dataError([&] { TokenFileSource(dir.path().toStdString(), plan::TokenDtype::Uint16, 100, 4); });
    QVERIFY2(has(message, "directory"), message.c_str());

    // Issue 27, finding 10: a FIFO (or a device) is refused before it is opened; opening a FIFO for
    // reading blocks until a writer comes, which hung the run for ever.
    const std::string fifo = dir.filePath("tokens.fifo").toStdString();
    QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
    message = dataError([&] { TokenFileSource(fifo, plan::TokenDtype::Uint16, 100, 4); });
    QVERIFY2(has(message, "tokens.fifo") && has(message, "it is not a regular file"), message.c_str());
    message = dataError([&] { TokenFileSource("/dev/zero", plan::TokenDtype::Uint16, 100, 4); });
    QVERIFY2(has(message, "it is not a regular file"), message.c_str());
}

void TestData::fileIsMovable()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = writeTokens(dir, "m.bin", {5, 6, 7, 8, 9, 10}, 2).toStdString();
    TokenFileSource first(path, plan::TokenDtype::Uint16, 16, 2);
    TokenFileSource second(std::move(first));
    QCOMPARE(draw(second, 1, 3), (std::vector<std::int32_t>{7, 8, 9}));
    TokenFileSource third(path, plan::TokenDtype::Uint16, 16, 1);
    third = std::move(second);
    QCOMPARE(draw(third, 1, 3), (std::vector<std::int32_t>{7, 8, 9}));
}

void TestData::factoryBuildsSources()
{
    auto source = makeTokenSource(plan::DataSpec{}, 64, 32, 9);
    const auto* markov = dynamic_cast<const MarkovSource*>(source.get());
    QVERIFY(markov != nullptr);
    QCOMPARE(markov->order(), 1);
    QCOMPARE(markov->branching(), 4);
    QCOMPARE(markov->seed(), std::uint64_t{9});
    QCOMPARE(markov->vocab(), 64);

    source = makeTokenSource(plan::DataSpec{plan::DataSource::Markov, 2, 6, "", plan::TokenDtype::Uint16}, 64, 32, 9);
    markov = dynamic_cast<const MarkovSource*>(source.get());
    QVERIFY(markov != nullptr);
    QCOMPARE(markov->order(), 2);
    QCOMPARE(markov->branching(), 6);
    QVERIFY(has(source->describe(), "markov"));

    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string path = writeTokens(dir, "t.bin", {1, 2, 3, 4, 5, 6, 7, 8}, 4).toStdString();
    source = makeTokenSource(plan::DataSpec{plan::DataSource::File, 1, {}, path, plan::TokenDtype::Uint32}, 64, 4, 9);
    QVERIFY(dynamic_cast<const TokenFileSource*>(source.get()) != nullptr);
    QCOMPARE(draw(*source, 0, 5), (std::vector<std::int32_t>{1, 2, 3, 4, 5}));

    // What only the agent can see: the token file itself.
    const std::string message = dataError([] {
        makeTokenSource(plan::DataSpec{plan::DataSource::File, 1, {}, "/nonexistent/x.bin", plan::TokenDtype::Uint16},
                        64, 32, 1);
    });
    QVERIFY2(has(message, "/nonexistent/x.bin") && has(message, "train.data.path"), message.c_str());
}

QTEST_APPLESS_MAIN(TestData)
#include "tst_data.moc"
