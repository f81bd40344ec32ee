#include "curve_keys.h"

#include "text.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

namespace meshbench::wire {

namespace {

constexpr std::string_view kZ85Alphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
constexpr std::string_view kPublicLabel = "public-key";
constexpr std::string_view kSecretLabel = "secret-key";

enum class KeyKind { Public, Secret };

struct KeyLine {
    KeyKind kind;
    std::string key;
    int line;
};

bool isBlank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trimmed(std::string_view text)
{
    while (!text.empty() && isBlank(text.front()))
        text.remove_prefix(1);
    while (!text.empty() && isBlank(text.back()))
        text.remove_suffix(1);
    return text;
}

std::string_view firstWord(std::string_view text)
{
    std::size_t end = 0;
    while (end < text.size() && !isBlank(text[end]))
        ++end;
    return text.substr(0, end);
}

// User text quoted in a message: printable, and short enough to read.
std::string shown(std::string_view text)
{
    const bool cut = text.size() > 48;
    return "'" + printableText(text.substr(0, 48)) + (cut ? "...'" : "'");
}

std::string fileText(const std::filesystem::path& file)
{
    std::error_code error;
    if (!std::filesystem::exists(file, error))
        throw KeyError(file.string() + " does not exist (`meshbench-engine keys` writes the key files)");
    std::ifstream in(file, std::ios::binary);
    if (!in.is_open())
        throw KeyError("cannot read " + file.string() + " (is it yours?)");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// Every key in a file's text, with its line; throws on a line that is neither a key nor a comment.
std::vector<KeyLine> parseKeys(std::string_view text, const std::string& file)
{
    std::vector<KeyLine> keys;
    int number = 0;
    while (!text.empty()) {
        const std::size_t newline = text.find('\n');
        const std::string_view line = trimmed(text.substr(0, newline));
        text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
        ++number;
        const std::string where = file + ", line " + std::to_string(number) + ": ";
        auto expectEnd = [&](std::string_view rest) {
            rest = trimmed(rest);
            if (!rest.empty() && rest.front() != '#')
                throw KeyError(where + shown(rest) + " follows the key; one key a line (a comment begins with #)");
        };
        const std::string_view word = firstWord(line);
        if (word.empty() || word.front() == '#')
            continue;
        if (z85KeyProblem(word).empty()) {
            expectEnd(line.substr(word.size()));
            keys.push_back({KeyKind::Public, std::string(word), number});
            continue;
        }
        const std::string_view label = line.rfind(kPublicLabel, 0) == 0   ? kPublicLabel
                                       : line.rfind(kSecretLabel, 0) == 0 ? kSecretLabel
                                                                          : std::string_view();
        if (label.empty())
            throw KeyError(where + shown(line) +
                           " is neither a key (40 characters of Z85) nor public-key = \"KEY\" "
                           "or secret-key = \"KEY\"; a comment begins with #");
        std::string_view rest = trimmed(line.substr(label.size()));
        if (rest.empty() || rest.front() != '=')
            throw KeyError(where + "write " + std::string(label) + " = \"KEY\"");
        rest = trimmed(rest.substr(1));
        std::string_view key = firstWord(rest);
        if (!rest.empty() && rest.front() == '"') {
            const std::size_t close = rest.find('"', 1);
            if (close == std::string_view::npos)
                throw KeyError(where + "the key's closing quote is missing");
            key = rest.substr(1, close - 1);
            rest.remove_prefix(close + 1);
        } else {
            rest.remove_prefix(key.size());
        }
        if (const std::string problem = z85KeyProblem(key); !problem.empty())
            throw KeyError(where + std::string(label) + " " + shown(key) + " is not a key: " + problem);
        expectEnd(rest);
        keys.push_back({label == kPublicLabel ? KeyKind::Public : KeyKind::Secret, std::string(key), number});
    }
    return keys;
}

std::optional<KeyLine> firstOf(const std::vector<KeyLine>& keys, KeyKind kind)
{
    for (const KeyLine& k : keys)
        if (k.kind == kind)
            return k;
    return std::nullopt;
}

int countOf(const std::vector<KeyLine>& keys, KeyKind kind)
{
    int n = 0;
    for (const KeyLine& k : keys)
        n += k.kind == kind;
    return n;
}

// The public file beside a secret one, for the message that refuses the secret one.
std::string publicFileFor(const std::filesystem::path& secretFile)
{
    const std::string name = secretFile.filename().string();
    const std::string suffix = "_secret";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return (secretFile.parent_path() / name.substr(0, name.size() - suffix.size())).string();
    return "the public key file (NAME.key)";
}

void refuseSecrets(const std::vector<KeyLine>& keys, const std::filesystem::path& file)
{
    if (const std::optional<KeyLine> secret = firstOf(keys, KeyKind::Secret))
        throw KeyError(file.string() + " holds a secret key (line " + std::to_string(secret->line) + "): give " +
                       publicFileFor(file) + " instead; a secret key stays on its host");
}

}  // namespace

std::string z85KeyProblem(std::string_view text)
{
    if (text.size() != kZ85KeyLength)
        return "it has " + std::to_string(text.size()) + " characters; a key has " + std::to_string(kZ85KeyLength) +
               " (Z85, ZeroMQ RFC 32)";
    for (std::size_t group = 0; group < text.size(); group += 5) {
        std::uint64_t value = 0;
        for (std::size_t i = group; i < group + 5; ++i) {
            const std::size_t digit = kZ85Alphabet.find(text[i]);
            if (digit == std::string_view::npos)
                return "character " + std::to_string(i + 1) + " (" + shown(text.substr(i, 1)) + ") is not one of Z85's";
            value = value * 85 + digit;
        }
        if (value > UINT32_MAX)
            return "characters " + std::to_string(group + 1) + "-" + std::to_string(group + 5) +
                   " encode more than 32 bits, which no Z85 encoder writes";
    }
    return {};
}

std::filesystem::path keyDirectory()
{
    if (const char* config = std::getenv("XDG_CONFIG_HOME"); config && *config == '/')
        return std::filesystem::path(config) / "meshbench";
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home && *home ? home : ".") / ".config" / "meshbench";
}

std::filesystem::path publicKeyPath(const std::filesystem::path& dir, std::string_view name)
{
    return dir / (std::string(name) + ".key");
}

std::filesystem::path secretKeyPath(const std::filesystem::path& dir, std::string_view name)
{
    return dir / (std::string(name) + ".key_secret");
}

std::filesystem::path allowListPath(const std::filesystem::path& dir) { return dir / "allowed_clients"; }

std::string readPublicKey(const std::filesystem::path& file)
{
    const std::vector<KeyLine> keys = parseKeys(fileText(file), file.string());
    refuseSecrets(keys, file);
    if (keys.empty())
        throw KeyError(file.string() + " holds no key: it should hold public-key = \"KEY\" (40 characters of Z85), "
                                       "as `meshbench-engine keys` writes it");
    if (keys.size() > 1)
        throw KeyError(file.string() + " holds more than one key (lines " + std::to_string(keys[0].line) + " and " +
                       std::to_string(keys[1].line) + "); a public key file holds one");
    return keys.front().key;
}

KeyPair readKeyPair(const std::filesystem::path& file)
{
    const std::vector<KeyLine> keys = parseKeys(fileText(file), file.string());
    const std::optional<KeyLine> publicKey = firstOf(keys, KeyKind::Public);
    const std::optional<KeyLine> secretKey = firstOf(keys, KeyKind::Secret);
    if (!secretKey)
        throw KeyError(file.string() + " holds no secret-key line: give the secret file of a key pair "
                                       "(NAME.key_secret, written by `meshbench-engine keys`)");
    using std::filesystem::perms;
    const perms mode = std::filesystem::status(file).permissions();
    if ((mode & (perms::group_all | perms::others_all)) != perms::none) {
        char octal[8];
        std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode & perms::mask));
        throw KeyError(file.string() + " holds a secret key, yet other users may read it (mode " + octal +
                       "); make it yours alone: chmod 600 " + file.string());
    }
    if (!publicKey)
        throw KeyError(file.string() + " holds a secret key without its public-key line; the file is damaged: "
                                       "remove it and its .key file, and run `meshbench-engine keys` again");
    if (countOf(keys, KeyKind::Public) > 1 || countOf(keys, KeyKind::Secret) > 1)
        throw KeyError(file.string() + " holds more than one key pair; a secret file holds one public-key and one "
                                       "secret-key line");
    return {publicKey->key, secretKey->key};
}

std::vector<std::string> readAllowList(const std::filesystem::path& file)
{
    const std::vector<KeyLine> lines = parseKeys(fileText(file), file.string());
    refuseSecrets(lines, file);
    std::vector<std::string> keys;
    keys.reserve(lines.size());
    for (const KeyLine& k : lines)
        keys.push_back(k.key);
    return keys;
}

std::string publicKeyArgument(const std::string& keyOrFile)
{
    const std::string problem = z85KeyProblem(keyOrFile);
    if (problem.empty())
        return keyOrFile;
    std::error_code error;
    if (std::filesystem::is_regular_file(keyOrFile, error))
        return readPublicKey(keyOrFile);
    throw KeyError(shown(keyOrFile) + " is neither a public key nor a key file: as a key, " + problem);
}

std::string publicKeyText(std::string_view name, std::string_view publicKey)
{
    return "# meshbench CURVE public key \"" + std::string(name) +
           "\", from meshbench-engine keys. Public: copy it wherever it is asked for.\n" + std::string(kPublicLabel) +
           " = \"" + std::string(publicKey) + "\"\n";
}

std::string keyPairText(std::string_view name, const KeyPair& pair)
{
    return "# meshbench CURVE key pair \"" + std::string(name) +
           "\", from meshbench-engine keys. Secret: it stays on this host, readable by you alone.\n" +
           std::string(kPublicLabel) + " = \"" + pair.publicKey + "\"\n" + std::string(kSecretLabel) + " = \"" +
           pair.secretKey + "\"\n";
}

std::string allowListHeader()
{
    return "# Client public keys that meshbench-engine serve lets in over CURVE, one a line; add one with\n"
           "# meshbench-engine keys --allow KEY_OR_FILE. The engine reads this file again when it changes.\n";
}

}  // namespace meshbench::wire
