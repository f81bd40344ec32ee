#include "serve_command.h"

#include "server.h"

#include "plan/units.h"
#include "store/session_store.h"

#include <CLI/CLI.hpp>

#include <atomic>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

namespace meshbench::service {

namespace {

// --bind, --live and --curve, which serve and replay share.
void addEndpointOptions(CLI::App& command, ServeOptions& options)
{
    command
        .add_option("--bind", options.control,
                    "the control socket, for the GUI (default ipc://RUNTIME/control, RUNTIME being this user's "
                    "private folder $XDG_RUNTIME_DIR/meshbench or /tmp/meshbench-UID); a tcp:// endpoint, loopback "
                    "too, is served with CURVE keys only")
        ->type_name("ENDPOINT");
    command.add_option("--live", options.live, "the live feed (default: the control port + 1, or its path + .live)")
        ->type_name("ENDPOINT");
    command.add_flag("--curve", options.curve, "serve CURVE clients only, on an ipc socket too (tcp:// always does)");
}

// The server bound as asked, or nothing (the reason printed).
std::optional<Server> startServer(const ServeOptions& options)
{
    try {
        return std::optional<Server>(std::in_place, options);
    } catch (const std::exception& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return std::nullopt;
    }
}

int runServe(const ServeOptions& options)
{
    const std::atomic<bool>& stop = stopOnSignals();
    std::optional<Server> server = startServer(options);
    if (!server)
        return 5;
    std::cout << "serving: control " << server->controlEndpoint() << ", live feed " << server->liveEndpoint();
    if (const std::string curve = server->curveSummary(); !curve.empty())
        std::cout << "\n" << curve;
    std::cout << "\n(Ctrl-C to stop)" << std::endl;
    server->run(stop);
    return 0;
}

struct ReplayArguments {
    ServeOptions options;
    std::string session;
    double speed = 1;
};

int runReplay(const ReplayArguments& args)
{
    const std::atomic<bool>& stop = stopOnSignals();
    std::optional<Server> server = startServer(args.options);
    if (!server)
        return 5;
    std::string source;
    try {
        source = server->openReplay(args.session, args.speed);
        std::cout << "replaying " << args.session << " as " << source << " at " << args.speed << "x: control "
                  << server->controlEndpoint() << ", live feed " << server->liveEndpoint() << std::endl;
    } catch (const store::StoreError& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 1;
    }
    server->run(stop);
    // A session found damaged part-way fails as export does: the reason, and status 1.
    if (const std::string failure = server->replayFailure(source); !failure.empty()) {
        std::cerr << "meshbench-engine: " << failure << "\n";
        return 1;
    }
    std::cout << (stop.load() ? "replay stopped" : "replay ended") << std::endl;
    return 0;
}

}  // namespace

Command addServeCommand(CLI::App& engine)
{
    auto options = std::make_shared<ServeOptions>();
    CLI::App* serve = engine.add_subcommand("serve", "the daemon the GUI talks to (this user's alone by default)");
    addEndpointOptions(*serve, *options);
    serve
        ->add_option("--sessions", options->sessionsDir,
                     "store submitted jobs' sessions here (default: ~/.local/share/meshbench/sessions)")
        ->type_name("DIR");
    serve->add_flag("--allow-run-as-root", options->allowRunAsRoot,
                    "pass mpirun --allow-run-as-root for every job, when run as root");
    serve->footer("on tcp://, or with --curve, only CURVE clients that the allow-list names are served (see keys)\n"
                  "exit status: 0 stopped, 2 the command line is wrong, 5 an endpoint cannot be bound or its keys "
                  "cannot be read");
    return {serve, [options] { return runServe(*options); }};
}

Command addReplayCommand(CLI::App& engine)
{
    auto args = std::make_shared<ReplayArguments>();
    args->options.exitWhenIdle = true;
    CLI::App* replay =
        engine.add_subcommand("replay", "re-publish a stored session on the live feed, as if it were running");
    replay->add_option("SESSION", args->session, "the session file")->required()->type_name("");
    replay
        ->add_option("--speed", args->speed,
                     "play at X times real time, up to 1e6 (default " + plan::formatNumber("%g", args->speed) + ")")
        ->check(numberThat([](double x) { return x > 0 && x <= 1e6; },
                           "a number above 0 (1 = real time) and at most 1,000,000"))
        ->type_name("X");
    addEndpointOptions(*replay, args->options);
    replay->footer("exit status: 0 played to the end or stopped, 1 the session cannot be read, 2 the command line is "
                   "wrong,\n5 an endpoint cannot be bound or its keys cannot be read");
    return {replay, [args] { return runReplay(*args); }};
}

}  // namespace meshbench::service
