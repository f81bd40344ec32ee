#pragma once
// CURVE keys (ZeroMQ RFC 26) as meshbench keeps them: Z85 text (RFC 32) in small files under
// keyDirectory(), written by `meshbench-engine keys`. The engine and the workbench both read them
// through here, so what one writes the other reads.
//
//   NAME.key          the public key:   public-key = "KEY"   (a bare KEY line is read the same)
//   NAME.key_secret   the pair (0600):  public-key = "KEY" and secret-key = "KEY"
//   allowed_clients   client public keys the engine lets in, one per line
//
// In every file, blank lines are skipped, a line that begins with '#' is a comment (no key begins
// with '#', though '#' is one of Z85's characters: a group of five led by it exceeds 32 bits), and
// after a key '#' starts a comment too. Readers throw KeyError with the file, the line and what to do.

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace meshbench::wire {

constexpr std::size_t kZ85KeyLength = 40;  // 32 bytes
constexpr const char* kServerKeyName = "server";
constexpr const char* kClientKeyName = "client";

class KeyError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct KeyPair {
    std::string publicKey;  // Z85
    std::string secretKey;
};

// What a client's sockets need: the engine's public key and the client's own pair.
struct ClientKeys {
    std::string serverKey;
    KeyPair client;
};

// Why `text` is not a key: not 40 characters, a character outside Z85's alphabet, or a group of five
// that encodes more than 32 bits. Empty when it is one.
std::string z85KeyProblem(std::string_view text);

// $XDG_CONFIG_HOME/meshbench when XDG_CONFIG_HOME is an absolute path, else ~/.config/meshbench.
std::filesystem::path keyDirectory();
std::filesystem::path publicKeyPath(const std::filesystem::path& dir, std::string_view name);
std::filesystem::path secretKeyPath(const std::filesystem::path& dir, std::string_view name);
std::filesystem::path allowListPath(const std::filesystem::path& dir);

// A public key file's key. A file that holds a secret key is refused: that file stays on its host.
std::string readPublicKey(const std::filesystem::path& file);
// A secret file's pair; refused when other users may read the file.
KeyPair readKeyPair(const std::filesystem::path& file);
// The allow-list's keys, in file order (a file that allows nobody gives none).
std::vector<std::string> readAllowList(const std::filesystem::path& file);
// A public key named on a command line: the key itself, or a public key file.
std::string publicKeyArgument(const std::string& keyOrFile);

// The files' text (their permissions are the writer's to set).
std::string publicKeyText(std::string_view name, std::string_view publicKey);
std::string keyPairText(std::string_view name, const KeyPair& pair);
std::string allowListHeader();

}  // namespace meshbench::wire
