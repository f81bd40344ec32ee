// meshbench-engine: the headless engine. It plans and searches layouts, runs jobs into session
// files, lists, replays and exports sessions, and serves the GUI.

#include "calibrate_command.h"
#include "import_command.h"
#include "keys_command.h"
#include "plan_commands.h"
#include "run_command.h"
#include "serve_command.h"
#include "session_commands.h"
#include "wire/text.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kExitStatus =
    "exit status: 0 done, 1 the job spec is wrong or a session cannot be read, 2 the command line is wrong;\n"
    "run: 3 the job failed, 4 it was stopped, 5 it could not be started;\n"
    "import: 1 an input is wrong, 4 stopped; export: 5 an output cannot be written; serve, replay: 5 an endpoint "
    "cannot be bound or its keys cannot be read;\n"
    "keys: 1 a key or key file is malformed, 5 a key file cannot be written\n\n"
    "'meshbench-engine COMMAND --help' describes a command's arguments";

// A wrong command line: what is wrong (an argument no command takes first: it is the likely typo),
// then the usage of the command meant, or the whole help when no command was recognised.
std::string failureMessage(const CLI::Formatter& formatter, const CLI::App* engine, const CLI::Error& error)
{
    const std::vector<CLI::App*> chosen = engine->get_subcommands();
    const CLI::App* command = chosen.empty() ? engine : chosen.front();
    std::string what = error.what();
    if (const std::vector<std::string> left = command->remaining(); !left.empty()) {
        const std::string& first = left.front();
        what = (first.size() > 1 && first[0] == '-' ? "unknown option '"
                : command == engine                 ? "unknown command '"
                                                    : "unexpected argument '") +
               first + "'";
    }
    std::string message = engine->get_name() + ": " + what + "\n";
    if (command == engine)
        return message + engine->help();
    const std::string name = engine->get_name() + " " + command->get_name();
    return message + formatter.make_usage(command, name) + "Run '" + name + " --help' for its arguments.\n";
}

int engineMain(int argc, char** argv)
{
    using namespace meshbench::service;
    CLI::App engine("the headless engine: plans layouts, runs jobs into session files, replays and exports them, "
                    "and serves the GUI",
                    "meshbench-engine");
    // Set before the commands are added, which take the formatter and the failure message from it.
    auto formatter = std::make_shared<CLI::Formatter>();
    formatter->column_width(34);
    engine.formatter(formatter);
    engine.failure_message(
        [formatter](const CLI::App* app, const CLI::Error& error) { return failureMessage(*formatter, app, error); });
    engine.set_version_flag("--version", "meshbench-engine " MESHBENCH_VERSION);
    engine.require_subcommand(1);
    const std::vector<Command> commands{
        addPlanCommand(engine),     addSearchCommand(engine), addRunCommand(engine),   addCalibrateCommand(engine),
        addSessionsCommand(engine), addExportCommand(engine), addServeCommand(engine), addReplayCommand(engine),
        addKeysCommand(engine),     addImportCommand(engine)};
    engine.footer(kExitStatus);
    try {
        engine.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version end here too, with status 0; anything else is a wrong command line.
        if (engine.exit(e) == 0)
            return 0;
        // A command whose --json promises one document keeps the promise for a wrong command line.
        const std::vector<CLI::App*> chosen = engine.get_subcommands();
        if (!chosen.empty() && chosen.front()->get_option_no_throw("--json") &&
            std::find(argv + 1, argv + argc, std::string_view("--json")) != argv + argc)
            std::cout << meshbench::wire::jsonText(
                             {{"valid", false}, {"errors", {{{"path", ""}, {"message", std::string(e.what())}}}}}, 2)
                      << "\n";
        return 2;
    }
    const CLI::App* chosen = engine.get_subcommands().front();
    const auto command =
        std::find_if(commands.begin(), commands.end(), [chosen](const Command& c) { return c.app == chosen; });
    return command->run();
}

}  // namespace

int main(int argc, char** argv)
{
    // Input errors are reported by the commands; anything reaching here is a bug or an exhausted
    // machine, and still deserves a message rather than an abort.
    try {
        return engineMain(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
    } catch (...) {
        std::cerr << "meshbench-engine: an unknown error ended the command\n";
    }
    return 3;
}
