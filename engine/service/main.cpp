// meshbench-engine: the headless engine. This build plans and searches layouts; launching jobs,
// serving the GUI, sessions, replay and export arrive with the engine issue.

#include "plan_commands.h"

#include <iostream>
#include <string>
#include <vector>

namespace {

constexpr const char* kUsage =
    "usage: meshbench-engine COMMAND [ARGS]\n"
    "\n"
    "  plan   JOB.json [--json] [--unit-costs F,B,W]\n"
    "         layout, memory per GPU, FLOPs, bubble and step time of the job's layout\n"
    "  search JOB.json [--top N] [--global-batch SEQUENCES] [--json]\n"
    "         the fastest layouts that fit the job's cluster\n"
    "\n"
    "exit status: 0 done, 1 the job spec is wrong, 2 the command line is wrong\n";

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
    } catch (const std::exception& e) {
        // Input errors are reported by the commands; anything reaching here is a bug or an
        // exhausted machine, and still deserves a message rather than an abort.
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 3;
    }
    std::cerr << "meshbench-engine: unknown command '" << command << "'\n" << kUsage;
    return 2;
}
