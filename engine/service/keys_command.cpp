#include "keys_command.h"

#include "curve_guard.h"

#include "wire/curve_keys.h"
#include "wire/error_text.h"

#include <CLI/CLI.hpp>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace meshbench::service {

namespace {

namespace fs = std::filesystem;

// A file write that failed: the command's exit status 5.
struct WriteError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string systemError(const fs::path& file, const char* what)
{
    return std::string("cannot ") + what + " " + file.string() + ": " + wire::errorText(errno);
}

// Writes `text` as the whole of `file` with exactly `mode`; `fresh` refuses a file that exists.
void writeFile(const fs::path& file, const std::string& text, mode_t mode, bool fresh)
{
    const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (fresh ? O_EXCL : O_TRUNC), mode);
    if (fd < 0)
        throw WriteError(systemError(file, "create"));
    // The umask may have taken bits away, and an existing file keeps its own: the mode is what we mean.
    bool ok = fchmod(fd, mode) == 0;
    for (std::size_t done = 0; ok && done < text.size();) {
        const ssize_t n = write(fd, text.data() + done, text.size() - done);
        ok = n > 0 || (n < 0 && errno == EINTR);
        done += n > 0 ? std::size_t(n) : 0;
    }
    ok = ok && fsync(fd) == 0;
    const std::string why = ok ? std::string() : systemError(file, "write");
    if (close(fd) != 0 && ok)
        throw WriteError(systemError(file, "write"));
    if (!ok) {
        unlink(file.c_str());
        throw WriteError(why);
    }
}

// The folder, made readable by its owner alone when this command creates it.
void makeKeyDirectory(const fs::path& dir)
{
    std::error_code error;
    if (fs::is_directory(dir, error))
        return;
    fs::create_directories(dir, error);
    if (error)
        throw WriteError("cannot create the key folder " + dir.string() + ": " + error.message());
    fs::permissions(dir, fs::perms::owner_all, error);
}

struct Pair {
    wire::KeyPair keys;
    bool created = false;
};

// The pair NAME: read when its secret file exists (its public file written again if it went), else made.
Pair keyPair(const fs::path& dir, const std::string& name)
{
    const fs::path secretFile = wire::secretKeyPath(dir, name), publicFile = wire::publicKeyPath(dir, name);
    std::error_code error;
    if (fs::exists(secretFile, error)) {
        Pair pair{wire::readKeyPair(secretFile), false};
        if (!fs::exists(publicFile, error))
            writeFile(publicFile, wire::publicKeyText(name, pair.keys.publicKey), 0644, false);
        return pair;
    }
    char publicKey[wire::kZ85KeyLength + 1], secretKey[wire::kZ85KeyLength + 1];
    if (zmq_curve_keypair(publicKey, secretKey) != 0)
        throw WriteError(std::string("this libzmq cannot make CURVE keys (") + zmq_strerror(zmq_errno()) +
                         "); it needs to be built with libsodium");
    Pair pair{{publicKey, secretKey}, true};
    writeFile(secretFile, wire::keyPairText(name, pair.keys), 0600, true);
    // A public file without its secret one is left from an old pair: this one replaces it.
    writeFile(publicFile, wire::publicKeyText(name, pair.keys.publicKey), 0644, false);
    return pair;
}

struct Allowed {
    std::string key;
    std::string from;  // the file it was read from; empty when given as a key
};

// Appends the keys the allow-list lacks (creating it with its header); returns how many it holds.
std::size_t allowKeys(const fs::path& file, const std::vector<Allowed>& keys, std::vector<std::string>& added)
{
    std::error_code error;
    const bool exists = fs::exists(file, error);
    const std::vector<std::string> present = exists ? wire::readAllowList(file) : std::vector<std::string>();
    std::set<std::string> known(present.begin(), present.end());
    std::string text;
    if (!exists) {
        text = wire::allowListHeader();
    } else {
        // A last line without its newline must not run into the first key added.
        std::ifstream in(file, std::ios::binary);
        in.seekg(0, std::ios::end);
        if (in.tellg() > 0) {
            in.seekg(-1, std::ios::end);
            if (in.get() != '\n')
                text = "\n";
        }
    }
    for (const Allowed& a : keys)
        if (known.insert(a.key).second) {
            text += a.key + (a.from.empty() ? "" : "  # " + a.from) + "\n";
            added.push_back(a.key);
        }
    if (!added.empty()) {
        const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
            throw WriteError(systemError(file, "open"));
        const bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
        if (close(fd) != 0 || !ok)
            throw WriteError(systemError(file, "write"));
    }
    return known.size();
}

void printPair(const fs::path& dir, const std::string& name, const Pair& pair, const char* publicUse,
               const char* secretUse)
{
    std::cout << (name == wire::kServerKeyName ? std::string("server key pair") : "client key pair \"" + name + "\"")
              << (pair.created ? " (created)" : " (kept)") << ": public key " << pair.keys.publicKey << "\n"
              << "  " << wire::publicKeyPath(dir, name).string() << "  public: " << publicUse << "\n"
              << "  " << wire::secretKeyPath(dir, name).string() << "  secret (mode 0600): " << secretUse << "\n";
}

bool validName(const std::string& name)
{
    if (name.empty() || name.size() > 64 || name.front() == '.' || name == wire::kServerKeyName)
        return false;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.'))
            return false;
    return true;
}

int makeKeys(const fs::path& dir, const std::string& client)
{
    makeKeyDirectory(dir);
    const Pair server = keyPair(dir, wire::kServerKeyName);
    const Pair workbench = keyPair(dir, client);
    std::vector<std::string> added;
    // The client pair made here is for a workbench of this host: this engine lets it in.
    const fs::path allowList = wire::allowListPath(dir);
    const std::size_t allowed = allowKeys(
        allowList,
        workbench.created ? std::vector<Allowed>{{workbench.keys.publicKey, client + ".key"}} : std::vector<Allowed>{},
        added);
    std::cout << "key folder " << dir.string() << "\n";
    printPair(dir, wire::kServerKeyName, server, "give it to each workbench (--server-key FILE)",
              "this engine's, it stays here");
    printPair(dir, client, workbench, "allow it on an engine (meshbench-engine keys --allow FILE)",
              "the workbench's --client-key");
    std::cout << "allow-list " << allowList.string() << ": " << clientKeys(allowed)
              << (added.empty() ? "" : ", " + client + ".key allowed now") << "\n";
    return 0;
}

int allow(const fs::path& dir, const std::vector<std::string>& arguments)
{
    std::vector<Allowed> keys;
    for (const std::string& a : arguments) {
        const std::string key = wire::publicKeyArgument(a);
        keys.push_back({key, key == a ? std::string() : fs::absolute(a).string()});
    }
    makeKeyDirectory(dir);
    std::vector<std::string> added;
    const fs::path allowList = wire::allowListPath(dir);
    const std::size_t allowed = allowKeys(allowList, keys, added);
    for (const Allowed& a : keys) {
        const bool isNew = std::find(added.begin(), added.end(), a.key) != added.end();
        std::cout << (isNew ? "allowed " : "already allowed ") << a.key << (a.from.empty() ? "" : " (" + a.from + ")")
                  << "\n";
    }
    std::cout << "allow-list " << allowList.string() << ": " << clientKeys(allowed)
              << "; a running engine reads it again for its next client\n";
    return 0;
}

struct KeysArguments {
    std::string client = wire::kClientKeyName;
    std::vector<std::string> allow;
};

int runKeys(const KeysArguments& args)
{
    const fs::path dir = wire::keyDirectory();
    try {
        return args.allow.empty() ? makeKeys(dir, args.client) : allow(dir, args.allow);
    } catch (const wire::KeyError& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 1;
    } catch (const WriteError& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 5;
    }
}

}  // namespace

Command addKeysCommand(CLI::App& engine)
{
    auto args = std::make_shared<KeysArguments>();
    CLI::App* keys =
        engine.add_subcommand("keys", "make CURVE key pairs for serving off loopback, or allow clients' public keys");
    // option_text: the left column without CLI11's "Excludes:" list.
    CLI::Option* client =
        keys->add_option("--client", args->client,
                         "name the client key pair to make and allow (default " + args->client + "; not with --allow)")
            ->check(CLI::Validator(
                [](std::string& name) {
                    return validName(name) ? std::string()
                                           : "'" + name +
                                                 "': a name is letters, digits, '-', '_' and '.' (not "
                                                 "first), at most 64, and not \"server\"";
                },
                ""))
            ->type_name("NAME")
            ->option_text("NAME");
    keys->add_option("--allow", args->allow,
                     "allow a client's public key (Z85 text or its .key file); repeatable, not with --client")
        ->type_name("PUBLIC_KEY_OR_FILE")
        ->excludes(client)
        ->option_text("PUBLIC_KEY_OR_FILE ...");
    keys->footer("keys live in $XDG_CONFIG_HOME/meshbench or ~/.config/meshbench\n"
                 "exit status: 0 done, 1 a key or key file is malformed, 2 the command line is wrong, 5 a key file "
                 "cannot be written");
    return {keys, [args] { return runKeys(*args); }};
}

}  // namespace meshbench::service
