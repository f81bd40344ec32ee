// meshbench-engine: the headless engine. It plans and searches layouts, runs jobs into session
// files, lists, replays and exports sessions, and serves the GUI.

#include "calibrate_command.h"
#include "keys_command.h"
#include "plan_commands.h"
#include "run_command.h"
#include "serve_command.h"
#include "session_commands.h"

#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: meshbench-engine COMMAND [ARGS]\n"
    "\n"
    "  plan   JOB.json [--json] [--unit-costs F,B,W] [--profile PROFILE.json]\n"
    "         layout, memory per GPU, FLOPs, bubble and step time of the job's layout\n"
    "  search JOB.json [--top N] [--global-batch SEQUENCES] [--json] [--profile PROFILE.json]\n"
    "         the fastest layouts that fit the job's cluster\n"
    "  run    JOB.json [--session FILE] [--steps N] [--one-device] [--collector ENDPOINT]\n"
    "         [--hostfile FILE] [--mpirun PATH] [--mpi-arg ARG]... [--heartbeat-timeout S]\n"
    "         [--profile PROFILE.json] [--allow-run-as-root] [--verbose]\n"
    "         launch the job, show its progress, store its session, print a summary\n"
    "  calibrate SESSION... [--out PROFILE.json]\n"
    "         fit the device's and links' rates to sessions' measured spans (--profile takes the result)\n"
    "  sessions [DIR] [--json]\n"
    "         stored sessions (default DIR: ~/.local/share/meshbench/sessions)\n"
    "  export SESSION [--chrome-trace OUT.json] [--csv DIR]\n"
    "         a session as a Chrome/Perfetto trace, or as CSV tables\n"
    "  serve  [--bind ENDPOINT] [--live ENDPOINT] [--sessions DIR] [--curve] [--allow-run-as-root]\n"
    "         the daemon the GUI talks to (default tcp://127.0.0.1:5570, live feed on the next port);\n"
    "         off loopback, or with --curve, only CURVE clients that the allow-list names\n"
    "  replay SESSION [--speed X] [--bind ENDPOINT] [--live ENDPOINT] [--curve]\n"
    "         re-publish a stored session on the live feed, as if it were running\n"
    "  keys   [--client NAME] | --allow PUBLIC_KEY_OR_FILE...\n"
    "         make the engine's and a client's CURVE key pairs in ~/.config/meshbench (or\n"
    "         $XDG_CONFIG_HOME/meshbench), or add client public keys to its allow-list\n"
    "\n"
    "exit status: 0 done, 1 the job spec is wrong or a session cannot be read, 2 the command line is wrong;\n"
    "run: 3 the job failed, 4 it was stopped, 5 it could not be started;\n"
    "export: 5 an output cannot be written; serve, replay: 5 an endpoint cannot be bound or its keys cannot be read;\n"
    "keys: 1 a key or key file is malformed, 5 a key file cannot be written\n";

}  // namespace

int main(int argc, char** argv)
{
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        std::cerr << kUsage;
        return 2;
    }
    const std::string command = args.front();
    args.erase(args.begin());
    if (command == "--help" || command == "-h" || command == "help") {
        std::cout << kUsage;
        return 0;
    }
    if (command == "--version") {
        std::cout << "meshbench-engine " MESHBENCH_VERSION "\n";
        return 0;
    }
    try {
        if (command == "plan")
            return meshbench::service::runPlanCommand(args);
        if (command == "search")
            return meshbench::service::runSearchCommand(args);
        if (command == "run")
            return meshbench::service::runRunCommand(args);
        if (command == "sessions")
            return meshbench::service::runSessionsCommand(args);
        if (command == "export")
            return meshbench::service::runExportCommand(args);
        if (command == "serve")
            return meshbench::service::runServeCommand(args);
        if (command == "replay")
            return meshbench::service::runReplayCommand(args);
        if (command == "calibrate")
            return meshbench::service::runCalibrateCommand(args);
        if (command == "keys")
            return meshbench::service::runKeysCommand(args);
    } catch (const std::exception& e) {
        // Input errors are reported by the commands; anything reaching here is a bug or an
        // exhausted machine, and still deserves a message rather than an abort.
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 3;
    }
    std::cerr << "meshbench-engine: unknown command '" << command << "'\n" << kUsage;
    return 2;
}
