#pragma once
// This machine's name, as node samples and heartbeats carry it and the engine names hosts.

#include <string>

namespace meshbench::wire {

// The host name; "localhost" when the system will not say.
std::string localHostName();

}  // namespace meshbench::wire
