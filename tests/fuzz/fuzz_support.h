#pragma once
// What the process-level fuzzers (spec_mutator, session_corruptor) share: a random source that
// gives the same cases on every machine, a strict UTF-8 check, printable excerpts of arbitrary
// bytes, one case's verdict, the check of a --json output, and a tally of failures by class.

#include <QByteArray>
#include <QDir>
#include <QThread>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fuzz {

// splitmix64 (Steele et al. 2014): the standard library's engines are portable but its
// distributions are not, so cases are drawn with plain modular arithmetic on this.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : m_state(seed) {}
    std::uint64_t next()
    {
        std::uint64_t z = (m_state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform enough in [0, n) for n far below 2^64; n must be positive.
    std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
    bool chance(int percent) { return below(100) < static_cast<std::size_t>(percent); }
    template <typename T>
    T pick(const std::vector<T>& items)
    {
        return items[below(items.size())];
    }

private:
    std::uint64_t m_state;
};

// RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
inline bool isValidUtf8(std::string_view text)
{
    std::size_t i = 0;
    while (i < text.size()) {
        const auto lead = static_cast<unsigned char>(text[i]);
        if (lead < 0x80) {
            ++i;
            continue;
        }
        // Sequence length, the lead's payload bits and the least code point that needs it.
        const std::size_t length = (lead & 0xE0) == 0xC0   ? 2
                                   : (lead & 0xF0) == 0xE0 ? 3
                                   : (lead & 0xF8) == 0xF0 ? 4
                                                           : 0;
        if (length == 0)
            return false;
        std::uint32_t code = lead & (0x7Fu >> length);
        const std::uint32_t least = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
        if (i + length > text.size())
            return false;
        for (std::size_t k = 1; k < length; ++k) {
            const auto next = static_cast<unsigned char>(text[i + k]);
            if ((next & 0xC0) != 0x80)
                return false;
            code = code << 6 | (next & 0x3Fu);
        }
        if (code < least || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
            return false;
        i += length;
    }
    return true;
}

// At most `limit` bytes of `bytes` as printable ASCII: other bytes as \xNN, newlines kept.
inline std::string excerpt(std::string_view bytes, std::size_t limit = 600)
{
    std::string out;
    for (std::size_t i = 0; i < std::min(bytes.size(), limit); ++i) {
        const auto c = static_cast<unsigned char>(bytes[i]);
        if (c == '\n' || (c >= 0x20 && c < 0x7F)) {
            out += static_cast<char>(c);
        } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02X", c);
            out += hex;
        }
    }
    if (bytes.size() > limit)
        out += "... (" + std::to_string(bytes.size()) + " bytes in all)";
    return out;
}

inline std::string excerpt(const QByteArray& bytes, std::size_t limit = 600)
{
    return excerpt(std::string_view(bytes.constData(), static_cast<std::size_t>(bytes.size())), limit);
}

// Calls work(i) for every i in [0, count), on `workers` threads that take the next index as they
// come free (a slow case holds up one thread, not a batch). work must be safe to call concurrently.
// QThreads, not std::threads: QProcess needs a thread with an event dispatcher.
template <typename Work>
void forEachConcurrently(int count, int workers, const Work& work)
{
    std::atomic<int> next{0};
    std::vector<std::unique_ptr<QThread>> threads;
    for (int t = 0; t < workers; ++t) {
        threads.emplace_back(QThread::create([&] {
            for (int i = next++; i < count; i = next++)
                work(i);
        }));
        threads.back()->start();
    }
    for (const auto& thread : threads)
        thread->wait();
}

// Failures grouped by class (what went wrong, with which command and kind of input), so that a
// thousand cases with one cause read as one line with a count and the first case.
class FailureTally {
public:
    void add(const std::string& failureClass, int caseIndex)
    {
        ++m_classes.try_emplace(failureClass, Entry{0, caseIndex}).first->second.count;
    }
    bool empty() const { return m_classes.empty(); }
    void print(std::FILE* out) const
    {
        std::vector<std::pair<std::string, Entry>> sorted(m_classes.begin(), m_classes.end());
        std::stable_sort(sorted.begin(), sorted.end(),
                         [](const auto& a, const auto& b) { return a.second.count > b.second.count; });
        std::fprintf(out, "failure classes (%zu):\n", sorted.size());
        for (const auto& [name, entry] : sorted)
            std::fprintf(out, "  %5d x %s (first: case %d)\n", entry.count, name.c_str(), entry.firstCase);
    }

private:
    struct Entry {
        int count = 0;
        int firstCase = 0;
    };
    std::map<std::string, Entry> m_classes;
};

// What was wrong with one case: a failure class (with the command) and the details, per problem.
struct Verdict {
    std::vector<std::pair<std::string, std::string>> problems;
    void add(std::string failureClass, std::string detail)
    {
        problems.emplace_back(std::move(failureClass), std::move(detail));
    }
};

// A --json output: one JSON document in valid UTF-8, or nothing with the problem added to `verdict`
// under `prefix` (e.g. "sessions --json: ").
inline std::optional<nlohmann::json> jsonOutput(const QByteArray& stdoutBytes, const std::string& prefix,
                                                Verdict& verdict)
{
    const std::string out = stdoutBytes.toStdString();
    if (!isValidUtf8(out)) {
        verdict.add(prefix + "stdout is not valid UTF-8", excerpt(stdoutBytes));
        return std::nullopt;
    }
    try {
        return nlohmann::json::parse(out);
    } catch (const nlohmann::json::exception& e) {
        verdict.add(prefix + "stdout is not one JSON document",
                    std::string(e.what()) + "; stdout: " + excerpt(stdoutBytes));
        return std::nullopt;
    }
}

// The folder failing inputs are saved in, from the command line (its only argument), emptied for this
// run; nothing (after saying why) when it is not given or cannot be made.
inline std::optional<QDir> artifactFolder(int argc, char** argv, const char* program)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s ARTIFACT_DIR\n", program);
        return std::nullopt;
    }
    QDir artifacts(QString::fromLocal8Bit(argv[1]));
    if ((artifacts.exists() && !artifacts.removeRecursively()) || !artifacts.mkpath(".")) {
        std::fprintf(stderr, "%s: cannot prepare %s\n", program, argv[1]);
        return std::nullopt;
    }
    return artifacts;
}

}  // namespace fuzz
