#pragma once
// `meshbench-engine keys`: the CURVE keys for serving off loopback (wire/curve_keys.h says where and
// how they are kept). Without --allow it makes, where absent, the engine's key pair and a client
// key pair, allowing the client pair it makes here; with --allow it adds client public keys to the
// allow-list.

#include "command_line.h"

namespace meshbench::service {

// Exit status: 0 done; 1 a key or key file is malformed (reported with the fix); 2 the command line
// is wrong; 5 a key file cannot be written.
Command addKeysCommand(CLI::App& engine);

}  // namespace meshbench::service
