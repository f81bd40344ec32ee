#include "text.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace meshbench::wire {

std::size_t wellFormedUtf8Length(const std::uint8_t* at, std::size_t left)
{
    const std::uint8_t lead = at[0];
    if (lead < 0x80)
        return 1;
    std::size_t length = 0;
    std::uint8_t low = 0x80;
    std::uint8_t high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        low = lead == 0xE0 ? 0xA0 : low;
        high = lead == 0xED ? 0x9F : high;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        low = lead == 0xF0 ? 0x90 : low;
        high = lead == 0xF4 ? 0x8F : high;
    } else {
        return 0;
    }
    if (left < length || at[1] < low || at[1] > high)
        return 0;
    for (std::size_t i = 2; i < length; ++i)
        if ((at[i] & 0xC0) != 0x80)
            return 0;
    return length;
}

std::size_t firstInvalidUtf8(std::span<const std::uint8_t> text)
{
    std::size_t i = 0;
    while (i < text.size()) {
        const std::size_t length = wellFormedUtf8Length(text.data() + i, text.size() - i);
        if (length == 0)
            return i;
        i += length;
    }
    return i;
}

std::string validUtf8(std::string_view text)
{
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(text.data());
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t length = wellFormedUtf8Length(bytes + i, text.size() - i);
        if (length == 0) {
            out += "\xEF\xBF\xBD";
            ++i;
        } else {
            out.append(text.substr(i, length));
            i += length;
        }
    }
    return out;
}

std::string printableText(std::string_view bytes)
{
    const auto* at = reinterpret_cast<const std::uint8_t*>(bytes.data());
    std::string out;
    for (std::size_t i = 0; i < bytes.size();) {
        const bool control = at[i] < 0x20 || at[i] == 0x7F;
        const std::size_t length = control ? 0 : wellFormedUtf8Length(at + i, bytes.size() - i);
        if (length > 0) {
            out.append(bytes.substr(i, length));
            i += length;
        } else {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\x%02X", unsigned(at[i]));
            out += escaped;
            ++i;
        }
    }
    return out;
}

std::string jsonTooDeepMessage()
{
    return "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels; a document here needs only a few";
}

namespace {

// Follows nlohmann-json's parser through its callback, to know the path it is at.
class StrictReader {
public:
    explicit StrictReader(std::string_view text) : m_text(text) {}

    std::optional<nlohmann::json> parse(std::vector<JsonProblem>& problems)
    {
        const auto follow = [this](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
            return visit(depth, event, parsed);
        };
        // nlohmann-json takes a NUL byte for the end of the input and would ignore what follows it.
        if (const std::size_t nul = m_text.find('\0'); nul != std::string_view::npos) {
            problems.push_back(
                {"", position(nul + 1) + ": a NUL byte, which JSON text cannot hold (write \\u0000 inside a string)"});
            return std::nullopt;
        }
        try {
            nlohmann::json document = nlohmann::json::parse(m_text.begin(), m_text.end(), follow);
            if (!m_duplicates.empty()) {
                problems.insert(problems.end(), m_duplicates.begin(), m_duplicates.end());
                return std::nullopt;
            }
            return document;
        } catch (const TooDeep&) {
            problems.push_back({path(), jsonTooDeepMessage()});
        } catch (const nlohmann::json::parse_error& e) {
            problems.push_back({path(), position(e.byte) + ": not valid JSON: " + reason(e)});
        } catch (const nlohmann::json::exception& e) {
            // Numbers beyond double's range (1e400) surface as out_of_range, without a position.
            problems.push_back({path(), "not valid JSON: " + reason(e) +
                                            " (a number must lie within +-1.8e308, and an integer within 64 bits)"});
        }
        return std::nullopt;
    }

private:
    struct TooDeep {};
    struct Frame {
        bool object = true;
        std::set<std::string> keys;  // objects: seen so far
        std::string key;             // objects: the member being read
        std::size_t index = 0;       // arrays: the element being read
    };

    bool visit(int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed)
    {
        using Event = nlohmann::json::parse_event_t;
        switch (event) {
        case Event::object_start:
        case Event::array_start:
            if (depth >= kMaxJsonDepth)
                throw TooDeep{};
            m_frames.push_back({event == Event::object_start, {}, {}, 0});
            break;
        case Event::key: {
            Frame& frame = m_frames.back();
            frame.key = parsed.get<std::string>();
            if (!frame.keys.insert(frame.key).second)
                m_duplicates.push_back({path(), "this key appears more than once in the same object; keep one"});
            break;
        }
        case Event::object_end:
        case Event::array_end:
            m_frames.pop_back();
            elementDone();
            break;
        case Event::value:
            elementDone();
            break;
        }
        return true;
    }

    void elementDone()
    {
        if (!m_frames.empty() && !m_frames.back().object)
            ++m_frames.back().index;
    }

    // "parallel.dp", "a.b[2].c": where the parser is.
    std::string path() const
    {
        std::string out;
        for (const Frame& frame : m_frames) {
            if (!frame.object)
                out += "[" + std::to_string(frame.index) + "]";
            else if (!frame.keys.empty())
                out += (out.empty() ? "" : ".") + printableText(frame.key);
        }
        return out;
    }

    // Line and column of a byte offset, which editors understand.
    std::string position(std::size_t byte) const
    {
        const std::size_t offset = std::min<std::size_t>(byte == 0 ? 0 : byte - 1, m_text.size());
        const auto begin = m_text.begin();
        const std::size_t line = std::size_t(std::count(begin, begin + std::ptrdiff_t(offset), '\n')) + 1;
        const std::size_t lineStart = m_text.rfind('\n', offset == 0 ? 0 : offset - 1);
        const std::size_t column = offset - (lineStart == std::string_view::npos ? 0 : lineStart + 1) + 1;
        return "line " + std::to_string(line) + ", column " + std::to_string(column);
    }

    // nlohmann-json's message without its "[json.exception.x.N] " prefix (and a parse error's own
    // "parse error at line L, column C: ", which position() gives), quoting the input printably.
    static std::string reason(const nlohmann::json::exception& e)
    {
        std::string what = e.what();
        if (const std::size_t bracket = what.find("] "); bracket != std::string::npos)
            what = what.substr(bracket + 2);
        if (const std::size_t colon = what.find(": "); e.id >= 100 && e.id < 200 && colon != std::string::npos)
            what = what.substr(colon + 2);
        return printableText(what);
    }

    std::string_view m_text;
    std::vector<Frame> m_frames;
    std::vector<JsonProblem> m_duplicates;
};

}  // namespace

std::optional<nlohmann::json> parseStrictJson(std::string_view text, std::vector<JsonProblem>& problems)
{
    return StrictReader(text).parse(problems);
}

std::string jsonText(const nlohmann::json& value, int indent)
{
    return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace meshbench::wire
