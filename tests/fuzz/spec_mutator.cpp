// Job-spec mutator (issue 11, hardening): a few thousand deterministic mutations of the example
// job specs, each given to meshbench-engine plan or search as a user would, and each answer held to
// the command-line contract: exit status 0 or 1 (the command line is always right, so never 2, and
// never 3 or a signal), an answer within the time limit, with --json one valid UTF-8 JSON document
// whose errors name their field by JSON path (or, for a document that is not JSON at all, give the
// position), without it the file named on stderr. Every failing case is reported and saved.
//
// Usage: spec_mutator ARTIFACT_DIR   (failing specs and what was wrong land there)

#include "common/guarded_main.h"
#include "common/process_run.h"
#include "fuzz_support.h"

#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <regex>
#include <set>
#include <string_view>

using fuzz::Rng;
using nlohmann::ordered_json;
using namespace std::string_view_literals;

namespace {

constexpr int kRandomCases = 3000;
constexpr int kTimeoutMs = 20000;
constexpr int kWorkers = 2;
constexpr int kPrintedFailures = 25;
// A plan report is read by tools and people; tens of megabytes of it is a dump, not a report.
constexpr qsizetype kMaxReportBytes = 64 << 20;

enum class Command { PlanJson, PlanText, SearchJson };

const char* commandName(Command c)
{
    switch (c) {
    case Command::PlanJson:
        return "plan --json";
    case Command::PlanText:
        return "plan";
    case Command::SearchJson:
        return "search --json --top 3";
    }
    return "?";
}

struct Case {
    std::string family;  // the kind of mutation, for the failure classes
    std::string detail;  // what exactly was done
    std::string seed;    // the example spec it started from
    std::string text;    // the spec's bytes
    Command command = Command::PlanJson;
    // The spec is wrong at this JSON path for certain: some error must name it or a field inside it.
    std::string mustName;
    bool mustFail = false;  // certainly not a usable spec: exit status 1
    bool mustPass = false;  // a valid spec: exit status 0
};

// NOLINTNEXTLINE(bugprone-exception-escape): clang-tidy 14 sees an unreachable throw in json's noexcept ctor
struct Seed {
    std::string name;
    std::string text;
    ordered_json doc;
    int weight = 1;  // how often it is drawn: plan --json of GPT-3's 1,536 ranks takes a third of a second
};

struct Field {
    ordered_json::json_pointer pointer;
    std::string path;  // dotted, as the engine reports it
    std::string key;
};

// docs/job-spec.md, the job spec reference: the keys that take whole numbers. Every numeric key has a lower
// bound of at least 0 and an upper bound below 2^62.
const std::set<std::string> kIntegerKeys = {"layers",
                                            "hidden",
                                            "heads",
                                            "kv_heads",
                                            "ffn_hidden",
                                            "vocab",
                                            "seq_len",
                                            "experts",
                                            "top_k",
                                            "moe_ffn_hidden",
                                            "every_n_layers",
                                            "dp",
                                            "pp",
                                            "tp",
                                            "ep",
                                            "zero",
                                            "virtual_stages",
                                            "microbatches",
                                            "micro_batch_size",
                                            "nodes",
                                            "devices_per_node",
                                            "nvlink_domain",
                                            "steps",
                                            "warmup_steps",
                                            "decay_steps",
                                            "seed",
                                            "order",
                                            "branching"};

// Numbers at and beyond the limits of int32, int64, uint64 and double, and fractions where whole
// numbers belong.
const std::vector<std::string> kLimitNumbers = {"0",
                                                "-0",
                                                "0.0",
                                                "-1",
                                                "1",
                                                "3.0",
                                                "1.5",
                                                "-1.5",
                                                "1E2",
                                                "2147483647",
                                                "2147483648",
                                                "-2147483649",
                                                "4294967296",
                                                "9223372036854775807",
                                                "9223372036854775808",
                                                "18446744073709551615",
                                                "18446744073709551616",
                                                "-9223372036854775808",
                                                "-9223372036854775809",
                                                "123456789012345678901234567890",
                                                "1e9",
                                                "1e308",
                                                "1e400",
                                                "-1e400",
                                                "1e-400",
                                                "4.9e-324",
                                                "1048575",
                                                "1048576",
                                                "1048577",
                                                "100000000"};
// Of those, the ones out of range for every numeric key (and fractions for integer keys) that the
// JSON parser still reads as a number (1e400 is a document-level error).
const std::set<std::string> kAlwaysOutOfRange = {"-1",
                                                 "-1.5",
                                                 "9223372036854775807",
                                                 "9223372036854775808",
                                                 "18446744073709551615",
                                                 "18446744073709551616",
                                                 "-9223372036854775808",
                                                 "-9223372036854775809",
                                                 "123456789012345678901234567890",
                                                 "1e308"};

// Ill-formed UTF-8: bad leads, lone continuations, overlong forms, surrogates, beyond U+10FFFF,
// sequences cut short.
const std::vector<std::string> kBadUtf8 = {"\xFF",
                                           "\xFE",
                                           "\x80",
                                           "\xBF",
                                           "\xC0\xAF",
                                           "\xC1\xBF",
                                           "\xE0\x80\xAF",
                                           "\xF0\x80\x80\xAF",
                                           "\xED\xA0\x80",
                                           "\xED\xBF\xBF",
                                           "\xF4\x90\x80\x80",
                                           "\xC3",
                                           "\xE2\x82",
                                           "\xF0\x9F\x98",
                                           "\xF8\x88\x80\x80\x80"};

// train.data settings that are wrong for certain, whatever the seed (seq_len <= 8192 and
// vocab <= 128256 in every example): the agent refuses each of them (agent/data/token_source.cpp),
// so plan must refuse them before anything starts.
const std::vector<std::string> kWrongData = {
    R"({"source": "nope"})",
    R"({"source": "Markov"})",
    R"({"source": 7})",
    R"({"source": null, "order": 0})",
    R"({"source": "markov", "order": 0})",
    R"({"source": "markov", "order": -1})",
    R"({"source": "markov", "order": 1.5})",
    R"({"source": "markov", "order": "1"})",
    R"({"source": "markov", "order": 9223372036854775808})",
    R"({"source": "markov", "order": 100000})",
    R"({"source": "markov", "branching": -3})",
    R"({"source": "markov", "branching": 0})",
    R"({"source": "markov", "branching": 1})",
    R"({"source": "markov", "branching": 2147483648})",
    R"({"source": "markov", "branching": 1000000000})",
    R"({"source": "markov", "branchng": 4})",
    R"({"source": "markov", "seed": 1})",
    R"({"order": 0})",
    R"({"branching": -1})",
    R"({"source": "file"})",
    R"({"source": "file", "path": "tokens.bin"})",
    R"({"source": "file", "path": "tokens.bin", "dtype": "int8"})",
    R"({"source": "file", "path": "", "dtype": "uint16"})",
    R"({"source": "file", "path": 7, "dtype": "uint16"})",
    R"({"source": "file", "path": "tokens.bin", "dtype": "uint16", "order": 1})",
    R"("markov")",
    "42",
    "[]",
    R"([{"source": "markov"}])",
    "true",
    "null"};
// And settings that are right: the fix must not refuse these.
const std::vector<std::string> kRightData = {R"({"source": "markov"})",
                                             R"({"source": "markov", "order": 2, "branching": 8})", "{}"};

const std::vector<std::string> kUnknownKeys = {"frobnicate",       "Layers",  "dp ",
                                               "micro_batches",    "",        "a.b",
                                               "__proto__",        "\\u0000", "\xD0\xBA\xD0\xBB\xD1\x8E\xD1\x87",
                                               "\xF0\x9F\x9A\x80", "source2", "0"};

// Replacements of another JSON type than the value they replace; null too, which no key takes (a
// default is had by leaving the key out).
const std::vector<std::string> kOtherTypes = {R"("text")", R"("")", R"("4")",      "true", "false", "[]",
                                              "[1, 2]",    "{}",    R"({"x": 1})", "0",    "2.5",   "null"};

constexpr std::string_view kRawMarker = "@@mutator-raw@@";
constexpr std::string_view kKeyMarker = "@@mutator-key@@";

std::string quotedJson(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string replaceOnce(std::string text, std::string_view from, const std::string& to)
{
    const std::size_t at = text.find(from);
    if (at == std::string::npos)
        qFatal("spec_mutator: marker %s not found", std::string(from).c_str());
    return text.replace(at, from.size(), to);
}

std::string dump(const ordered_json& doc) { return doc.dump(2) + "\n"; }

// The document with the value at `pointer` replaced by raw bytes: numbers and text that no
// JSON library would write (1e400, -9223372036854775809, ill-formed UTF-8, deep nesting).
std::string withRawValue(ordered_json doc, const ordered_json::json_pointer& pointer, const std::string& raw)
{
    doc[pointer] = kRawMarker;
    return replaceOnce(dump(doc), quotedJson(kRawMarker), raw);
}

// The object at `parent` with the raw key `rawKey` (already quoted) inserted after its
// `afterIndex`-th member (or first), holding raw `value`.
std::string withRawMember(ordered_json doc, const ordered_json::json_pointer& parent, std::size_t afterIndex,
                          const std::string& rawKey, const std::string& rawValue)
{
    ordered_json rebuilt = ordered_json::object();
    const ordered_json& object = doc[parent];
    std::size_t index = 0;
    if (object.empty())
        rebuilt[std::string(kKeyMarker)] = kRawMarker;
    for (const auto& [key, value] : object.items()) {
        rebuilt[key] = value;
        if (index++ == afterIndex % object.size())
            rebuilt[std::string(kKeyMarker)] = kRawMarker;
    }
    doc[parent] = rebuilt;
    std::string text = replaceOnce(dump(doc), quotedJson(kKeyMarker), rawKey);
    return replaceOnce(text, quotedJson(kRawMarker), rawValue);
}

// The document with the member at `field` renamed to the raw (quoted) key, in place.
std::string withRawKey(ordered_json doc, const Field& field, const std::string& rawKey)
{
    const ordered_json::json_pointer parent = field.pointer.parent_pointer();
    ordered_json rebuilt = ordered_json::object();
    for (const auto& [key, value] : doc[parent].items())
        rebuilt[key == field.key ? std::string(kKeyMarker) : key] = value;
    doc[parent] = rebuilt;
    return replaceOnce(dump(doc), quotedJson(kKeyMarker), rawKey);
}

void collectFields(const ordered_json& object, const ordered_json::json_pointer& at, const std::string& path,
                   std::vector<Field>& out)
{
    for (const auto& [key, value] : object.items()) {
        Field field{at / key, path.empty() ? key : path + "." + key, key};
        out.push_back(field);
        if (value.is_object())
            collectFields(value, field.pointer, field.path, out);
    }
}

std::vector<Field> fieldsOf(const ordered_json& doc, bool (*keep)(const ordered_json&))
{
    std::vector<Field> all, kept;
    collectFields(doc, ordered_json::json_pointer(), "", all);
    for (const Field& f : all)
        if (keep(doc[f.pointer]))
            kept.push_back(f);
    return kept;
}

bool anyValue(const ordered_json&) { return true; }
bool isNumber(const ordered_json& v) { return v.is_number(); }
bool isString(const ordered_json& v) { return v.is_string(); }
bool isObject(const ordered_json& v) { return v.is_object(); }

// The objects a key can be added to: the sections and the document itself.
std::vector<Field> objectsOf(const ordered_json& doc)
{
    std::vector<Field> objects = fieldsOf(doc, isObject);
    objects.push_back({ordered_json::json_pointer(), "", ""});
    return objects;
}

std::string typeOf(const ordered_json& v) { return v.is_number() ? "number" : v.type_name(); }

std::string nested(std::size_t depth, bool arrays)
{
    std::string text;
    text.reserve(depth * 6 + 2);
    for (std::size_t i = 0; i < depth; ++i)
        text += arrays ? "[" : "{\"a\": ";
    text += "1";
    for (std::size_t i = 0; i < depth; ++i)
        text += arrays ? "]" : "}";
    return text;
}

// docs/job-spec.md: required keys (a cluster without a preset needs its shape and device).
bool isRequired(const Seed& seed, const std::string& path)
{
    static const std::set<std::string> always = {"model",       "cluster",     "model.layers",  "model.hidden",
                                                 "model.heads", "model.vocab", "model.seq_len", "model.moe.experts"};
    static const std::set<std::string> withoutPreset = {"cluster.device", "cluster.nodes", "cluster.devices_per_node"};
    const bool preset = seed.doc.contains("cluster") && seed.doc["cluster"].contains("preset");
    return always.count(path) || (!preset && withoutPreset.count(path));
}

// The document with train.data set to raw text (a "train" section is added where there is none).
std::string withData(const Seed& seed, const std::string& raw)
{
    ordered_json doc = seed.doc;
    if (!doc.contains("train"))
        doc["train"] = ordered_json::object();
    return withRawValue(doc, ordered_json::json_pointer("/train/data"), raw);
}

class Generator {
public:
    explicit Generator(std::vector<Seed> seeds) : m_seeds(std::move(seeds))
    {
        for (std::size_t s = 0; s < m_seeds.size(); ++s)
            m_draw.insert(m_draw.end(), static_cast<std::size_t>(m_seeds[s].weight), s);
    }

    std::vector<Case> make()
    {
        std::vector<Case> cases;
        // The slow ones first, so that the other worker goes through the rest meanwhile.
        addHugeValues(cases);
        addDataSettings(cases);
        addWholeDocuments(cases);
        addDeepNesting(cases);
        using Mutation = void (Generator::*)(const Seed&, Case&);
        const std::vector<std::pair<Mutation, int>> mutations = {
            {&Generator::bitFlips, 3},     {&Generator::byteInsertion, 2}, {&Generator::byteDeletion, 2},
            {&Generator::truncation, 2},   {&Generator::chunkCopy, 1},     {&Generator::limitNumber, 4},
            {&Generator::typeSwap, 3},     {&Generator::removedKey, 2},    {&Generator::unknownKey, 2},
            {&Generator::duplicateKey, 2}, {&Generator::badUtf8Value, 2},  {&Generator::badUtf8Key, 2},
            {&Generator::badEscape, 1},    {&Generator::wrongData, 2}};
        std::vector<Mutation> draw;
        for (const auto& [mutation, weight] : mutations)
            draw.insert(draw.end(), static_cast<std::size_t>(weight), mutation);
        for (int i = 0; i < kRandomCases; ++i) {
            const Seed& seed = m_seeds[m_rng.pick(m_draw)];
            Case c;
            c.seed = seed.name;
            (this->*m_rng.pick(draw))(seed, c);
            c.command = randomCommand();
            cases.push_back(std::move(c));
        }
        return cases;
    }

private:
    Command randomCommand()
    {
        const std::size_t r = m_rng.below(100);
        return r < 70 ? Command::PlanJson : r < 85 ? Command::PlanText : Command::SearchJson;
    }

    void push(std::vector<Case>& cases, const Seed& seed, std::string family, std::string detail, std::string text,
              Command command)
    {
        Case c;
        c.family = std::move(family);
        c.detail = std::move(detail);
        c.seed = seed.name;
        c.text = std::move(text);
        c.command = command;
        cases.push_back(std::move(c));
    }

    const Seed& seedNamed(const std::string& name) const
    {
        for (const Seed& s : m_seeds)
            if (s.name == name)
                return s;
        qFatal("spec_mutator: no seed %s", name.c_str());
    }

    // Values a spec may hold (or just beyond): the planner must answer in time and in proportion.
    void addHugeValues(std::vector<Case>& cases)
    {
        for (const Seed& seed : m_seeds) {
            const ordered_json p = seed.doc.value("parallel", ordered_json::object());
            const int pp = p.value("pp", 1), virtualStages = p.value("virtual_stages", 1);
            const bool interleaved = p.value("schedule", "1f1b") == "interleaved";
            // The most micro-batches the planner's million pipeline slots allow.
            int most = 1'000'000 / (pp * virtualStages);
            if (interleaved)
                most -= most % pp;
            const std::vector<std::pair<std::string, std::string>> values = {
                {"parallel.microbatches", std::to_string(most)},
                {"parallel.microbatches", "1048576"},
                {"parallel.micro_batch_size", "65536"},
                {"train.steps", "1000000000"},
                {"model.layers", "10000"},
                {"model.seq_len", "100000000"},
                {"model.vocab", "100000000"},
                {"cluster.nodes", "1048576"}};
            for (const auto& [path, value] : values) {
                const std::string section = path.substr(0, path.find('.'));
                if (!seed.doc.contains(section))
                    continue;
                const ordered_json::json_pointer pointer("/" + section + "/" + path.substr(section.size() + 1));
                const std::string text = withRawValue(seed.doc, pointer, value);
                const std::string detail = path + " = " + value;
                // One plan --json per heavy case: the others must hold too, and are cheap as text.
                const bool heavy = path == "parallel.microbatches" && value == std::to_string(most);
                const bool jsonToo = !heavy || seed.name == "demo.json" || seed.name == "deepseek-moe.json";
                if (jsonToo)
                    push(cases, seed, "huge allowed value", detail, text, Command::PlanJson);
                push(cases, seed, "huge allowed value", detail, text, Command::PlanText);
                push(cases, seed, "huge allowed value", detail, text, Command::SearchJson);
            }
        }
    }

    void addDataSettings(std::vector<Case>& cases)
    {
        for (const Seed& seed : m_seeds) {
            for (const std::string& data : kWrongData) {
                push(cases, seed, "wrong train.data", "train.data = " + data, withData(seed, data), randomCommand());
                cases.back().mustFail = true;
                cases.back().mustName = "train.data";
            }
            for (const std::string& data : kRightData) {
                push(cases, seed, "valid train.data", "train.data = " + data, withData(seed, data), Command::PlanJson);
                cases.back().mustPass = true;
            }
        }
    }

    void addWholeDocuments(std::vector<Case>& cases)
    {
        const Seed& demo = seedNamed("demo.json");
        std::string utf16;
        for (const char c : demo.text) {
            utf16 += c;
            utf16 += '\0';
        }
        std::string withNul = demo.text;
        withNul.insert(withNul.find("\"model\""), std::string(1, '\0'));
        const std::vector<std::pair<std::string, std::string>> documents = {
            {"empty file", ""},
            {"only spaces", "   \n"},
            {"null", "null"},
            {"an array", "[]"},
            {"a number", "42"},
            {"a string", R"("demo")"},
            {"an empty object", "{}"},
            {"unclosed object", R"({"model":)"},
            {"the spec twice", demo.text + demo.text},
            {"trailing garbage", demo.text + "x"},
            {"a NUL byte before model", withNul},
            {"UTF-16LE", utf16},
            {"a byte order mark", "\xEF\xBB\xBF" + demo.text},
            {"100,000 open brackets", std::string(100000, '[')},
            {"an array of the spec", "[" + demo.text + "]"}};
        for (const auto& [what, text] : documents)
            for (const Command command : {Command::PlanJson, Command::PlanText, Command::SearchJson}) {
                push(cases, demo, "whole document", what, text, command);
                // A spec is one JSON object: all but the byte order mark (which RFC 8259 lets a parser ignore) fail.
                cases.back().mustFail = what != "a byte order mark";
            }
    }

    void addDeepNesting(std::vector<Case>& cases)
    {
        for (const std::size_t depth : {65, 100, 128, 1000, 10000, 200000})
            for (const bool arrays : {true, false}) {
                const Seed& seed = m_seeds[m_rng.pick(m_draw)];
                const std::string deep = nested(depth, arrays);
                const std::string shape = std::to_string(depth) + (arrays ? " arrays" : " objects");
                push(cases, seed, "deep nesting", "the document: " + shape, deep, randomCommand());
                cases.back().mustFail = true;
                const std::vector<Field> fields = fieldsOf(seed.doc, anyValue);
                const Field field = m_rng.pick(fields);
                push(cases, seed, "deep nesting", field.path + " = " + shape,
                     withRawValue(seed.doc, field.pointer, deep), randomCommand());
                cases.back().mustFail = true;
                cases.back().mustName = field.path;
                push(cases, seed, "deep nesting", "train.data = " + shape, withData(seed, deep), randomCommand());
                cases.back().mustFail = true;
                cases.back().mustName = "train.data";
                push(cases, seed, "deep nesting", "unknown key \"deep\" = " + shape,
                     withRawMember(seed.doc, ordered_json::json_pointer(), m_rng.below(8), quotedJson("deep"), deep),
                     randomCommand());
                cases.back().mustFail = true;
                cases.back().mustName = "deep";
            }
    }

    // Byte-level mutations of the file as written.
    void bitFlips(const Seed& seed, Case& c)
    {
        c.family = "bit flips";
        c.text = seed.text;
        const std::size_t flips = 1 + m_rng.below(4);
        for (std::size_t i = 0; i < flips; ++i) {
            const std::size_t at = m_rng.below(c.text.size());
            const int bit = static_cast<int>(m_rng.below(8));
            c.text[at] = static_cast<char>(c.text[at] ^ (1 << bit));
            c.detail += (i ? ", " : "") + std::string("bit ") + std::to_string(bit) + " of byte " + std::to_string(at);
        }
    }

    void byteInsertion(const Seed& seed, Case& c)
    {
        static const std::string syntax{"{}[]\":,\\0-e.+ \n\t\0\xFF\x80"sv};
        c.family = "byte insertion";
        c.text = seed.text;
        const std::size_t at = m_rng.below(c.text.size() + 1), count = 1 + m_rng.below(8);
        std::string bytes;
        for (std::size_t i = 0; i < count; ++i)
            bytes += m_rng.chance(50) ? syntax[m_rng.below(syntax.size())] : static_cast<char>(m_rng.below(256));
        c.text.insert(at, bytes);
        c.detail = std::to_string(count) + " bytes at " + std::to_string(at) + ": " + fuzz::excerpt(bytes);
    }

    void byteDeletion(const Seed& seed, Case& c)
    {
        c.family = "byte deletion";
        c.text = seed.text;
        const std::size_t at = m_rng.below(c.text.size()), count = 1 + m_rng.below(16);
        c.text.erase(at, count);
        c.detail = std::to_string(count) + " bytes at " + std::to_string(at);
    }

    void truncation(const Seed& seed, Case& c)
    {
        c.family = "truncation";
        const std::size_t end = seed.text.find_last_not_of(" \n\r\t");
        const std::size_t at = m_rng.below(end + 1);
        c.text = seed.text.substr(0, at);
        c.detail = "cut at byte " + std::to_string(at) + " of " + std::to_string(seed.text.size());
        c.mustFail = true;  // the object's closing brace is gone
    }

    void chunkCopy(const Seed& seed, Case& c)
    {
        c.family = "chunk copy";
        c.text = seed.text;
        const std::size_t from = m_rng.below(c.text.size()), length = 1 + m_rng.below(64);
        const std::string chunk = c.text.substr(from, length);
        const std::size_t to = m_rng.below(c.text.size() + 1);
        c.text.insert(to, chunk);
        c.detail =
            "bytes " + std::to_string(from) + "+" + std::to_string(chunk.size()) + " copied to " + std::to_string(to);
    }

    // JSON-level mutations: one field changed, so that the error it causes has a known path.
    void limitNumber(const Seed& seed, Case& c)
    {
        c.family = "number at a limit";
        const Field field = m_rng.pick(fieldsOf(seed.doc, isNumber));
        const std::string number = m_rng.pick(kLimitNumbers);
        c.text = withRawValue(seed.doc, field.pointer, number);
        c.detail = field.path + " = " + number;
        const bool fraction = number == "1.5" && kIntegerKeys.count(field.key);
        if (kAlwaysOutOfRange.count(number) || fraction) {
            c.mustName = field.path;
            c.mustFail = true;
        }
        if (number == "1e400" || number == "-1e400")
            c.mustFail = true;  // beyond double: not a number JSON can carry
    }

    void typeSwap(const Seed& seed, Case& c)
    {
        c.family = "type swap";
        const Field field = m_rng.pick(fieldsOf(seed.doc, anyValue));
        const ordered_json& original = seed.doc[field.pointer];
        std::string replacement;
        do
            replacement = m_rng.pick(kOtherTypes);
        while (typeOf(ordered_json::parse(replacement)) == typeOf(original));
        c.text = withRawValue(seed.doc, field.pointer, replacement);
        c.detail = field.path + " (" + typeOf(original) + ") = " + replacement;
        c.mustName = field.path;
        c.mustFail = true;
    }

    void removedKey(const Seed& seed, Case& c)
    {
        c.family = "removed key";
        const Field field = m_rng.pick(fieldsOf(seed.doc, anyValue));
        ordered_json doc = seed.doc;
        doc[field.pointer.parent_pointer()].erase(field.key);
        c.text = dump(doc);
        c.detail = field.path + " removed";
        if (isRequired(seed, field.path)) {
            c.mustName = field.path;
            c.mustFail = true;
        }
    }

    void unknownKey(const Seed& seed, Case& c)
    {
        c.family = "unknown key";
        const Field parent = m_rng.pick(objectsOf(seed.doc));
        std::string key = m_rng.pick(kUnknownKeys);
        if (key.empty() && parent.path.empty())
            key = "frobnicate";  // an empty key at the top has no path of its own
        const std::string value = m_rng.pick(std::vector<std::string>{"1", R"("x")", "true", "{}", "[0]"});
        c.text = withRawMember(seed.doc, parent.pointer, m_rng.below(16), quotedJson(key), value);
        // The path names the key as it reads once parsed ("\u0000" is one NUL character).
        const std::string parsedKey = ordered_json::parse(quotedJson(key)).get<std::string>();
        c.detail = (parent.path.empty() ? "" : parent.path + ".") + key + " = " + value;
        c.mustName = parent.path.empty() ? parsedKey : parent.path + "." + parsedKey;
        c.mustFail = true;
    }

    // Duplicate keys are legal JSON with undefined meaning (RFC 8259 4): only the contract holds.
    void duplicateKey(const Seed& seed, Case& c)
    {
        c.family = "duplicated key";
        const Field field = m_rng.pick(fieldsOf(seed.doc, anyValue));
        const ordered_json& original = seed.doc[field.pointer];
        const std::string again = m_rng.pick(std::vector<std::string>{original.dump(), "0", "-1", R"("other")", "{}"});
        const ordered_json& parent = seed.doc[field.pointer.parent_pointer()];
        std::size_t index = 0;
        for (const auto& [key, value] : parent.items()) {
            if (key == field.key)
                break;
            ++index;
        }
        c.text = withRawMember(seed.doc, field.pointer.parent_pointer(), index, quotedJson(field.key), again);
        c.detail = field.path + " given twice, again as " + again;
    }

    void badUtf8Value(const Seed& seed, Case& c)
    {
        c.family = "invalid UTF-8 in a string";
        const Field field = m_rng.pick(fieldsOf(seed.doc, isString));
        std::string value = seed.doc[field.pointer].get<std::string>();
        const std::string bad = m_rng.pick(kBadUtf8);
        value.insert(m_rng.below(value.size() + 1), bad);
        c.text = withRawValue(seed.doc, field.pointer, quotedJson(value));
        c.detail = field.path + " holds " + fuzz::excerpt(bad);
        c.mustFail = true;
    }

    void badUtf8Key(const Seed& seed, Case& c)
    {
        c.family = "invalid UTF-8 in a key";
        const std::string bad = m_rng.pick(kBadUtf8);
        if (m_rng.chance(50)) {
            const Field field = m_rng.pick(fieldsOf(seed.doc, anyValue));
            std::string key = field.key;
            key.insert(m_rng.below(key.size() + 1), bad);
            c.text = withRawKey(seed.doc, field, quotedJson(key));
            c.detail = "key " + field.path + " renamed with " + fuzz::excerpt(bad);
        } else {
            const Field parent = m_rng.pick(objectsOf(seed.doc));
            c.text = withRawMember(seed.doc, parent.pointer, m_rng.below(16), quotedJson(bad), "1");
            c.detail = "new key " + fuzz::excerpt(bad) + " in " + (parent.path.empty() ? "the document" : parent.path);
        }
        c.mustFail = true;
    }

    void badEscape(const Seed& seed, Case& c)
    {
        c.family = "bad escape in a string";
        const Field field = m_rng.pick(fieldsOf(seed.doc, isString));
        const std::string escape = m_rng.pick(
            std::vector<std::string>{"\\ud800", "\\udc00x", "\\ud83d\\u0041", "\\uZZZZ", "\\x41", "\\", "\\u12"});
        c.text = withRawValue(seed.doc, field.pointer, "\"a" + escape + "\"");
        c.detail = field.path + " holds " + escape;
        c.mustFail = true;
    }

    void wrongData(const Seed& seed, Case& c)
    {
        c.family = "wrong train.data";
        const std::string data = m_rng.pick(kWrongData);
        c.text = withData(seed, data);
        c.detail = "train.data = " + data;
        c.mustName = "train.data";
        c.mustFail = true;
    }

    std::vector<Seed> m_seeds;
    std::vector<std::size_t> m_draw;    // seed indexes, each as often as its weight
    Rng m_rng{0x6D657368'62656E63ull};  // "meshbenc": fixed, so every run tries the same cases
};

// A position in the message: line and column, or a byte offset.
bool givesPosition(const std::string& message)
{
    static const std::regex position(R"((line \d+, column \d+)|((byte|offset|position) \d+))");
    return std::regex_search(message, position);
}

bool namesPath(const std::string& errorPath, const std::string& path)
{
    return errorPath == path || (errorPath.size() > path.size() && errorPath.compare(0, path.size(), path) == 0 &&
                                 (errorPath[path.size()] == '.' || errorPath[path.size()] == '['));
}

using fuzz::Verdict;

void judgeJson(const Case& c, const ProcessBytes& run, Verdict& verdict)
{
    const std::string out = run.out.toStdString();
    std::optional<nlohmann::json> document = fuzz::jsonOutput(run.out, "", verdict);
    if (!document)
        return;
    nlohmann::json report = std::move(*document);
    if (!report.is_object() || !report.contains("valid") || !report["valid"].is_boolean() ||
        !report.contains("errors") || !report["errors"].is_array()) {
        verdict.add("report lacks valid/errors", fuzz::excerpt(out));
        return;
    }
    const bool valid = report["valid"].get<bool>();
    const nlohmann::json& errors = report["errors"];
    if ((run.exitCode == 0) != (valid && errors.empty()))
        verdict.add("exit status disagrees with \"valid\"", "exit " + std::to_string(run.exitCode) + ", valid " +
                                                                (valid ? "true" : "false") + ", " +
                                                                std::to_string(errors.size()) + " errors");
    if (run.exitCode == 1 && errors.empty())
        verdict.add("refused without errors", fuzz::excerpt(out));
    // A root that is not an object is the document's own problem: "" is its path.
    bool rootIsObject = true;
    try {
        rootIsObject = nlohmann::json::parse(c.text).is_object();
    } catch (const nlohmann::json::exception&) {
    }
    bool named = false;
    for (const nlohmann::json& e : errors) {
        if (!e.is_object() || !e.contains("path") || !e["path"].is_string() || !e.contains("message") ||
            !e["message"].is_string() || e["message"].get<std::string>().empty()) {
            verdict.add("malformed errors entry", e.dump());
            continue;
        }
        const std::string path = e["path"].get<std::string>(), message = e["message"].get<std::string>();
        if (path.empty() && rootIsObject && !givesPosition(message))
            verdict.add("error with neither a path nor a position", message);
        named = named || (!c.mustName.empty() && namesPath(path, c.mustName));
    }
    if (!c.mustName.empty() && run.exitCode == 1 && !named)
        verdict.add("no error names " + c.family + " field", "expected " + c.mustName + "; errors: " + errors.dump());
}

void judgeText(const Case& c, const ProcessBytes& run, const QString& specPath, Verdict& verdict)
{
    if (run.exitCode == 1 && !run.err.contains(specPath.toUtf8()))
        verdict.add("stderr does not name the file", fuzz::excerpt(run.err));
    if (run.exitCode == 1 && !c.mustName.empty() &&
        !run.err.contains(QByteArray::fromStdString("error: " + c.mustName)))
        verdict.add("no error names " + c.family + " field",
                    "expected " + c.mustName + "; stderr: " + fuzz::excerpt(run.err));
    if (run.exitCode == 0 && run.out.isEmpty())
        verdict.add("exit 0 with nothing on stdout", fuzz::excerpt(run.err));
}

Verdict judge(const Case& c, const ProcessBytes& run, const QString& specPath)
{
    Verdict verdict;
    if (run.timedOut) {
        verdict.add("timed out", "no answer within " + std::to_string(kTimeoutMs / 1000) + " s");
        return verdict;
    }
    if (run.exitCode == -100) {
        verdict.add("killed by a signal", fuzz::excerpt(run.err));
        return verdict;
    }
    if (run.exitCode != 0 && run.exitCode != 1) {
        verdict.add("exit status " + std::to_string(run.exitCode), fuzz::excerpt(run.err));
        return verdict;
    }
    if (run.out.size() > kMaxReportBytes)
        verdict.add("report over 64 MiB", std::to_string(run.out.size()) + " bytes on stdout");
    if (c.mustFail && run.exitCode != 1)
        verdict.add("accepted a wrong spec",
                    "exit " + std::to_string(run.exitCode) + "; the spec is wrong for certain");
    if (c.mustPass && run.exitCode != 0)
        verdict.add("refused a valid spec", fuzz::excerpt(run.out.isEmpty() ? run.err : run.out));
    if (c.command == Command::PlanText)
        judgeText(c, run, specPath, verdict);
    else if (run.out.size() <= kMaxReportBytes)
        judgeJson(c, run, verdict);
    return verdict;
}

QStringList argumentsFor(Command command, const QString& path)
{
    switch (command) {
    case Command::PlanJson:
        return {"plan", path, "--json"};
    case Command::PlanText:
        return {"plan", path};
    case Command::SearchJson:
        return {"search", path, "--json", "--top", "3"};
    }
    return {};
}

bool writeFile(const QString& path, const std::string& bytes)
{
    QFile file(path);
    return file.open(QIODevice::WriteOnly | QIODevice::Truncate) &&
           file.write(bytes.data(), static_cast<qint64>(bytes.size())) == static_cast<qint64>(bytes.size());
}

std::vector<Seed> loadSeeds()
{
    // GPT-3's plan --json is a 10 MB report: drawn a fifth as often as the rest.
    const QDir dir(QStringLiteral(MESHBENCH_SOURCE_DIR "/resources/jobs"));
    std::vector<Seed> seeds;
    for (const QString& name : dir.entryList({"*.json"}, QDir::Files, QDir::Name)) {
        QFile file(dir.filePath(name));
        if (!file.open(QIODevice::ReadOnly))
            qFatal("spec_mutator: cannot read seed %s", qPrintable(file.fileName()));
        Seed seed;
        seed.name = name.toStdString();
        seed.text = file.readAll().toStdString();
        seed.doc = ordered_json::parse(seed.text);
        seed.weight = name == "gpt3-175b.json" ? 1 : name == "demo.json" ? 6 : 4;
        seeds.push_back(std::move(seed));
    }
    if (seeds.size() < 2)
        qFatal("spec_mutator: expected the example specs in %s", qPrintable(dir.path()));
    return seeds;
}

int runSpecMutator(int argc, char** argv)
{
    QCoreApplication app(argc, argv);
    const std::optional<QDir> artifactDir = fuzz::artifactFolder(argc, argv, "spec_mutator");
    if (!artifactDir)
        return 2;
    const QDir& artifacts = *artifactDir;
    QTemporaryDir work;
    if (!work.isValid()) {
        std::fprintf(stderr, "spec_mutator: no temporary folder\n");
        return 2;
    }

    const std::vector<Case> cases = Generator(loadSeeds()).make();
    std::vector<ProcessBytes> runs(cases.size());
    QElapsedTimer clock;
    clock.start();
    fuzz::forEachConcurrently(static_cast<int>(cases.size()), kWorkers, [&](int i) {
        const QString path = work.filePath(QStringLiteral("case-%1.json").arg(i, 4, 10, QLatin1Char('0')));
        if (!writeFile(path, cases[std::size_t(i)].text))
            qFatal("spec_mutator: cannot write %s", qPrintable(path));
        ProcessBytes run = runProcessBytes(QStringLiteral(MESHBENCH_ENGINE),
                                           argumentsFor(cases[std::size_t(i)].command, path), kTimeoutMs);
        // Keep what the judge needs: a 700 MB report is judged by its size and its first bytes.
        if (run.out.size() > kMaxReportBytes)
            run.out.truncate(kMaxReportBytes + 1);
        runs[std::size_t(i)] = std::move(run);
    });
    const double seconds = double(clock.elapsed()) / 1000;

    std::map<std::string, int> byExit, byCommand;
    fuzz::FailureTally tally;
    int failed = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const Case& c = cases[i];
        const ProcessBytes& run = runs[i];
        ++byCommand[commandName(c.command)];
        ++byExit[run.timedOut ? "timed out" : run.exitCode == -100 ? "signal" : "exit " + std::to_string(run.exitCode)];
        const QString path = work.filePath(QStringLiteral("case-%1.json").arg(int(i), 4, 10, QLatin1Char('0')));
        const Verdict verdict = judge(c, run, path);
        if (verdict.problems.empty())
            continue;
        const QString saved = artifacts.filePath(QStringLiteral("case-%1.json").arg(int(i), 4, 10, QLatin1Char('0')));
        writeFile(saved, c.text);
        std::string report = "case " + std::to_string(i) + ": " + c.family + " of " + c.seed + " (" + c.detail +
                             ")\n  meshbench-engine " + commandName(c.command) + " on " + saved.toStdString() +
                             "\n  exit " + std::to_string(run.exitCode) + (run.timedOut ? " (timed out)" : "") +
                             " after " + std::to_string(run.elapsedMs) + " ms\n";
        for (const auto& [failureClass, detail] : verdict.problems) {
            tally.add(std::string(commandName(c.command)) + ": " + failureClass + " [" + c.family + "]", int(i));
            report += "  - " + failureClass + ": " + detail + "\n";
        }
        report += "  stdout: " + fuzz::excerpt(run.out, 300) + "\n  stderr: " + fuzz::excerpt(run.err, 300) + "\n";
        writeFile(saved.chopped(5) + ".txt", report);
        if (failed++ < kPrintedFailures)
            std::fputs(report.c_str(), stdout);
    }

    std::printf("\nspec_mutator: %zu cases in %.1f s (%d at a time)\n  by command:", cases.size(), seconds, kWorkers);
    for (const auto& [name, count] : byCommand)
        std::printf("  %s %d", name.c_str(), count);
    std::printf("\n  by outcome:");
    for (const auto& [name, count] : byExit)
        std::printf("  %s %d", name.c_str(), count);
    std::printf("\n");
    if (failed == 0) {
        std::printf("  every case kept the contract\n");
        return 0;
    }
    std::printf("  %d cases failed (%d printed above); each is saved with what went wrong in %s\n", failed,
                std::min(failed, kPrintedFailures), qPrintable(artifacts.path()));
    tally.print(stdout);
    return 1;
}

}  // namespace

int main(int argc, char** argv)
{
    return meshbench::testing::guardedMain("spec_mutator", 2, [&] { return runSpecMutator(argc, argv); });
}
