#pragma once
// What every meshbench-engine command shares: its place in the engine's CLI11 app, the number checks
// its options use, and a clean end on Ctrl-C.

#include <atomic>
#include <functional>
#include <string>

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace meshbench::service {

// A command: its subcommand of the engine's app, and what runs it once the command line has parsed
// (returning the process exit status).
struct Command {
    CLI::App* app = nullptr;
    std::function<int()> run;
};

// A finite number for which `fits` holds, else the message "needs <needs>, not '<text>'". For real
// numbers: CLI::Range prints its bounds as 0.500000 and lets NaN through.
CLI::Validator numberThat(std::function<bool(double)> fits, const std::string& needs);
// A flag that SIGINT, SIGTERM or SIGHUP raises, for a command to end cleanly: a thread takes the
// signals. Call it before any other thread starts, so that every thread inherits the blocked mask.
const std::atomic<bool>& stopOnSignals();

}  // namespace meshbench::service
