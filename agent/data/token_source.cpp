#include "agent/data/token_source.h"

#include "agent/data/markov_source.h"
#include "agent/data/token_file_source.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

namespace meshbench::agent {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& key, const std::string& what)
{
    throw DataError("train.data." + key + ": " + what);
}

std::string typeName(const json& value)
{
    if (value.is_number_integer())
        return "an integer";
    if (value.is_number())
        return "a number";
    return std::string("a ") + value.type_name();
}

// Every key must be one the chosen source knows; the hint points at the other source.
void checkKeys(const json& data, std::initializer_list<std::string_view> known, const std::string& source,
               const std::string& hint)
{
    for (const auto& [key, value] : data.items()) {
        if (std::find(known.begin(), known.end(), key) != known.end())
            continue;
        std::string list;
        for (const auto k : known)
            list += (list.empty() ? "" : ", ") + std::string(k);
        fail(key, "is not a setting of the " + source + " source (its keys: " + list + ")" + hint);
    }
}

int readInt(const json& data, const std::string& key, int fallback, int lo, int hi, const std::string& range)
{
    const auto it = data.find(key);
    if (it == data.end())
        return fallback;
    if (!it->is_number_integer())
        fail(key, "must be an integer, not " + typeName(*it));
    // Unsigned first: a huge value such as 2^63 must not wrap to a negative int64.
    const bool inRange = it->is_number_unsigned() ? it->get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                                                  : it->get<std::int64_t>() <= hi;
    const auto value = inRange ? it->get<std::int64_t>() : std::int64_t{0};
    if (!inRange || value < lo)
        fail(key, it->dump() + " is out of range; it must lie in " + range);
    return static_cast<int>(value);
}

std::string readString(const json& data, const std::string& key)
{
    const auto it = data.find(key);
    if (it == data.end())
        return {};
    if (!it->is_string())
        fail(key, "must be a string, not " + typeName(*it));
    return it->get<std::string>();
}

} // namespace

std::unique_ptr<TokenSource> makeTokenSource(const json& data, int vocab, int seqLen, std::uint64_t seed)
{
    const int defaultBranching = std::min(4, vocab);
    if (data.is_null())
        return std::make_unique<MarkovSource>(vocab, 1, defaultBranching, seed);
    if (!data.is_object())
        throw DataError("train.data must be an object such as {\"source\": \"markov\"} or "
                        "{\"source\": \"file\", \"path\": \"train.bin\", \"dtype\": \"uint16\"}, not " +
                        typeName(data));

    std::string source = "markov";
    if (data.contains("source")) {
        source = readString(data, "source");
        if (source != "markov" && source != "file")
            fail("source", "\"" + source + "\" is not a data source; use \"markov\" or \"file\"");
    }

    if (source == "markov") {
        checkKeys(data, {"source", "order", "branching"}, "markov",
                  "; for a token file set train.data.source to \"file\"");
        if (vocab < 2)
            throw DataError("train.data: the markov source needs model.vocab >= 2, not " + std::to_string(vocab));
        const int order = readInt(data, "order", 1, 1, std::max(seqLen, 1),
                                  "[1, model.seq_len " + std::to_string(seqLen) + "]");
        const int branching = readInt(data, "branching", defaultBranching, 2, vocab,
                                      "[2, model.vocab " + std::to_string(vocab) + "]");
        return std::make_unique<MarkovSource>(vocab, order, branching, seed);
    }

    checkKeys(data, {"source", "path", "dtype"}, "file", "");
    const std::string path = readString(data, "path");
    if (path.empty())
        fail("path", "is required for a token file: the path of a flat uint16/uint32 token file");
    if (!data.contains("dtype"))
        fail("dtype", "is required for a token file: \"uint16\" (nanoGPT's prepare.py) or \"uint32\"");
    const std::string dtype = readString(data, "dtype");
    if (dtype != "uint16" && dtype != "uint32")
        fail("dtype", "\"" + dtype + "\" is not a token dtype; use \"uint16\" or \"uint32\"");
    return std::make_unique<TokenFileSource>(path, dtype, vocab, seqLen);
}

} // namespace meshbench::agent
