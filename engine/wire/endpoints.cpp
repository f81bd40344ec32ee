#include "endpoints.h"

#include "error_text.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

namespace meshbench::wire {

namespace {

// The port of tcp://HOST:PORT as a number; -1 when it is not one (a wildcard, a name, absent).
long tcpPort(std::string_view endpoint)
{
    const std::size_t colon = endpoint.rfind(':');
    if (tcpHost(endpoint).empty() || colon == std::string_view::npos)
        return -1;
    const std::string port(endpoint.substr(colon + 1));
    if (port.empty() || port.size() > 6 || port.find_first_not_of("0123456789") != std::string::npos)
        return -1;
    return std::stol(port);
}

// An ipc endpoint's path; empty for other transports.
std::string ipcPath(std::string_view endpoint)
{
    return endpoint.rfind("ipc://", 0) == 0 ? std::string(endpoint.substr(6)) : std::string();
}

// Why `dir` is not private to this user; empty when it is.
std::string privacyProblem(const std::filesystem::path& dir)
{
    struct stat info {};
    if (::lstat(dir.c_str(), &info) != 0)
        return std::string(errorText(errno));
    if (!S_ISDIR(info.st_mode))
        return "it is not a folder";
    if (info.st_uid != ::geteuid())
        return "it belongs to user " + std::to_string(info.st_uid) + ", not to this user (" +
               std::to_string(::geteuid()) + ")";
    if ((info.st_mode & 077) != 0)
        return "its mode lets other users in";
    return {};
}

}  // namespace

std::string tcpHost(std::string_view endpoint)
{
    if (endpoint.rfind("tcp://", 0) != 0)
        return {};
    const std::string_view hostPort = endpoint.substr(6);
    return std::string(hostPort.substr(0, hostPort.rfind(':')));
}

bool isLocalEndpoint(std::string_view endpoint)
{
    if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0)
        return true;
    const std::string host = tcpHost(endpoint);
    return host == "127.0.0.1" || host == "localhost" || host == "[::1]" || host == "lo";
}

std::filesystem::path runtimeDirectory()
{
    const char* runtime = std::getenv("XDG_RUNTIME_DIR");
    std::filesystem::path dir = runtime && runtime[0] == '/'
                                    ? std::filesystem::path(runtime) / "meshbench"
                                    : std::filesystem::path("/tmp/meshbench-" + std::to_string(::geteuid()));
    // mkdir refuses to follow a link or replace anything another user put there first; the check
    // after it decides whether what is there can be trusted.
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        throw EndpointError("cannot make the engine's socket folder " + dir.string() + ": " + errorText(errno) +
                            "; set XDG_RUNTIME_DIR to a folder of yours, or give --bind ENDPOINT");
    if (const std::string problem = privacyProblem(dir); !problem.empty())
        throw EndpointError("the engine's socket folder " + dir.string() + " cannot be trusted: " + problem +
                            "; remove it (it is made again, mode 0700), or set XDG_RUNTIME_DIR to a folder of yours");
    return dir;
}

std::string defaultControlEndpoint() { return "ipc://" + (runtimeDirectory() / "control").string(); }

bool isPrivateEndpoint(std::string_view endpoint)
{
    if (endpoint.rfind("inproc://", 0) == 0)
        return true;
    const std::string path = ipcPath(endpoint);
    if (path.empty() || path.front() == '@')
        return false;
    std::error_code error;
    const std::filesystem::path absolute = std::filesystem::absolute(path, error);
    if (error)
        return false;
    // Private when, going up from the socket's folder through folders of this user's only (which
    // nobody else can rename or fill), one lets nobody else in: a QTemporaryDir's subfolder, say.
    for (std::filesystem::path dir = absolute.parent_path();; dir = dir.parent_path()) {
        struct stat info {};
        if (::lstat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != ::geteuid())
            return false;
        if ((info.st_mode & 077) == 0)
            return true;
        if (dir == dir.root_path())
            return false;
    }
}

std::string bindFailure(int error, std::string_view endpoint)
{
    std::string meaning = errorText(error);
    const long port = tcpPort(endpoint);
    if (port > 65535)
        return "port " + std::to_string(port) + " is past the last port, 65535; choose a port from 1024 to 65535";
    switch (error) {
    case EADDRINUSE:
        return meaning + ": another program (another engine?) serves there; stop it, or choose another " +
               (port >= 0 ? "port" : "path");
    case EACCES:
        if (port >= 0 && port < 1024)
            return meaning + ": port " + std::to_string(port) +
                   " is below 1024, which only root may bind; choose a port of 1024 or more";
        if (!ipcPath(endpoint).empty())
            return meaning + ": this user may not make a socket in that folder; choose a folder of yours";
        return meaning + ": this user may not bind there";
    case EADDRNOTAVAIL:
        return meaning + ": no interface of this machine has that address; use one of its addresses, or 0.0.0.0 "
                         "for all";
    case ENAMETOOLONG:
        return meaning + ": an ipc path holds at most " + std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
               " bytes; choose a shorter path";
    case ENODEV:
        return meaning + ": no network interface has that name";
    default:
        return meaning;
    }
}

}  // namespace meshbench::wire
