#pragma once
// Where the engine listens and who can reach it. By default the control socket is an ipc socket in
// a folder that only the engine's user can enter (runtimeDirectory), so that user's workbench and
// CLI find it without configuration and no other user of the machine can connect to it at all.
// Anything a TCP port reaches, loopback included, is open to every local user, so the engine serves
// it with CURVE only (server.h).

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace meshbench::wire {

class EndpointError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The host of tcp://HOST:PORT ("[::1]" keeps its brackets); empty for other transports.
std::string tcpHost(std::string_view endpoint);
// Whether only this machine can reach a ZeroMQ endpoint: ipc://, inproc://, or tcp:// on 127.0.0.1,
// localhost, [::1] or the interface lo.
bool isLocalEndpoint(std::string_view endpoint);

// This user's folder for the engine's sockets: $XDG_RUNTIME_DIR/meshbench when XDG_RUNTIME_DIR is
// an absolute path, else /tmp/meshbench-UID. Made mode 0700 when missing; throws EndpointError
// when it is not a folder that this user owns and nobody else may enter.
std::filesystem::path runtimeDirectory();
// ipc://RUNTIME/control: where serve binds and the workbench looks unless told otherwise.
std::string defaultControlEndpoint();
// Whether only this user (and root) can connect: inproc://, or an ipc:// path inside a folder that
// this user owns and that grants nothing to group or others, reached through folders of this
// user's only. The abstract namespace (ipc://@NAME) is open to everyone.
bool isPrivateEndpoint(std::string_view endpoint);

// What a failed bind's errno means for `endpoint`, and the fix, e.g. "port 80 is below 1024, which
// only root may bind: choose a port of 1024 or more".
std::string bindFailure(int error, std::string_view endpoint);

}  // namespace meshbench::wire
