// wire/text: UTF-8 checked, repaired and quoted; JSON parsed strictly (duplicate keys, depth, syntax,
// overflow, each with its path) and written without failing on bad bytes. The control protocol's
// requests go through the same strict parse.

#include "wire/control.h"
#include "wire/text.h"

#include <QtTest>

using namespace meshbench;

namespace {

// The problems a text gets, as "path: message" lines; empty when it parses.
std::vector<std::string> problemsOf(std::string_view text)
{
    std::vector<wire::JsonProblem> problems;
    const std::optional<nlohmann::json> parsed = wire::parseStrictJson(text, problems);
    if (parsed && !problems.empty())
        qFatal("parsed, yet with problems");
    std::vector<std::string> lines;
    lines.reserve(problems.size());
    for (const wire::JsonProblem& p : problems)
        lines.push_back(p.path + ": " + p.message);
    return lines;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

class TestText : public QObject {
    Q_OBJECT

private slots:
    void repairsEachIllFormedByte()
    {
        const std::string fffd = "\xEF\xBF\xBD";
        QCOMPARE(wire::validUtf8("plain"), std::string("plain"));
        QCOMPARE(wire::validUtf8("caf\xC3\xA9 \xF0\x9F\x98\x80"), std::string("caf\xC3\xA9 \xF0\x9F\x98\x80"));
        QCOMPARE(wire::validUtf8("a\xFF"
                                 "b"),
                 "a" + fffd + "b");
        // An overlong '/', a surrogate and a truncated sequence: every byte that starts no character.
        QCOMPARE(wire::validUtf8("\xC0\xAF"), fffd + fffd);
        QCOMPARE(wire::validUtf8("\xED\xA0\x80"), fffd + fffd + fffd);
        QCOMPARE(wire::validUtf8("x\xE2\x82"), "x" + fffd + fffd);
        const std::string bad = "ok\xFF";
        QCOMPARE(wire::firstInvalidUtf8({reinterpret_cast<const std::uint8_t*>(bad.data()), bad.size()}), 2u);
    }

    void quotesBadBytesPrintably()
    {
        QCOMPARE(wire::printableText("a\x01\xFF\xC3\xA9"), std::string("a\\x01\\xFF\xC3\xA9"));
        QCOMPARE(wire::printableText("tab\there"), std::string("tab\\x09here"));
    }

    void writesJsonWhateverTheBytes()
    {
        // nlohmann-json's own dump throws type_error 316 on this.
        const nlohmann::json value = {{"error", std::string("bad \xFF byte")}};
        QVERIFY_THROWS_EXCEPTION(nlohmann::json::type_error, (void)value.dump());
        const std::string text = wire::jsonText(value);
        QCOMPARE(nlohmann::json::parse(text)["error"].get<std::string>(), std::string("bad \xEF\xBF\xBD byte"));
    }

    void parsesStrictlyWithPaths()
    {
        QVERIFY(problemsOf(R"({"a": {"b": [1, {"c": 2}]}})").empty());
        // Duplicated keys, each named by its path, inside arrays too.
        QCOMPARE(problemsOf(R"({"a": 1, "b": 2, "a": 3})"),
                 std::vector<std::string>{"a: this key appears more than once in the same object; keep one"});
        const std::vector<std::string> nested = problemsOf(R"({"x": [0, {"k": 1}, {"k": 1, "k": 2}]})");
        QCOMPARE(nested.size(), 1u);
        QVERIFY2(nested[0].rfind("x[2].k: ", 0) == 0, nested[0].c_str());
        // Syntax: line and column, and where the parser was.
        const std::vector<std::string> syntax = problemsOf("{\n  \"a\": [1,\n   2,,]}");
        QCOMPARE(syntax.size(), 1u);
        QVERIFY2(syntax[0].rfind("a[2]: line 3, column 6: not valid JSON: syntax error", 0) == 0, syntax[0].c_str());
        // Overflow, with the path of the number.
        const std::vector<std::string> overflow = problemsOf(R"({"m": {"n": 1e400}})");
        QVERIFY2(overflow.size() == 1 && overflow[0].rfind("m.n: not valid JSON: number overflow", 0) == 0,
                 overflow.empty() ? "" : overflow[0].c_str());
        // Depth: the document is level 1, so level 65 is the 64th array.
        const std::string deep = std::string(64, '[') + std::string(64, ']');
        QVERIFY(problemsOf(std::string(63, '[') + std::string(63, ']')).empty());
        const std::vector<std::string> tooDeep = problemsOf("[" + deep + "]");
        QCOMPARE(tooDeep.size(), 1u);
        QVERIFY2(contains(tooDeep[0], "nested deeper than 64 levels"), tooDeep[0].c_str());
        // A byte that is not UTF-8 is quoted, not copied.
        const std::vector<std::string> utf8 = problemsOf("{\"k\": \"\xFF\"}");
        QVERIFY2(utf8.size() == 1 && contains(utf8[0], "ill-formed UTF-8") && contains(utf8[0], "\\xFF"),
                 utf8.empty() ? "" : utf8[0].c_str());
    }

    void controlRequestsAreParsedStrictly()
    {
        const wire::ParsedControl duplicate = wire::parseControlRequest(R"({"v": 1, "op": "hello", "op": "stop"})");
        QVERIFY(!duplicate.request);
        QVERIFY2(contains(duplicate.error, "op: this key appears more than once"), duplicate.error.c_str());
        const wire::ParsedControl inJob =
            wire::parseControlRequest(R"({"v": 1, "op": "plan", "job": {"model": {"layers": 2, "layers": 4}}})");
        QVERIFY(!inJob.request);
        QVERIFY2(contains(inJob.error, "job.model.layers: this key appears more than once"), inJob.error.c_str());
        QVERIFY(wire::parseControlRequest(R"({"v": 1, "op": "hello"})").request);
    }

    // Issue 27, finding 16: the whole frame is the request. nlohmann-json stops at a NUL byte, so
    // "\0junk" after a valid object was accepted; a NUL inside a string is refused the same way.
    void bytesAfterANulAreRefused()
    {
        using namespace std::string_literals;
        const wire::ParsedControl trailing = wire::parseControlRequest("{\"v\":1,\"id\":7,\"op\":\"hello\"}\0junk"s);
        QVERIFY(!trailing.request);
        QVERIFY2(contains(trailing.error, "line 1, column 28: a NUL byte"), trailing.error.c_str());
        QCOMPARE(problemsOf("{\"a\": 1}\0"s),
                 std::vector<std::string>{": line 1, column 9: a NUL byte, which JSON text cannot hold (write \\u0000 "
                                          "inside a string)"});
        const std::vector<std::string> inString = problemsOf("{\"a\": \"x\0y\"}"s);
        QCOMPARE(inString.size(), 1u);
        QVERIFY2(contains(inString[0], "column 9: a NUL byte"), inString[0].c_str());
    }
};

QTEST_APPLESS_MAIN(TestText)
#include "tst_text.moc"
