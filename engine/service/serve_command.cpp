#include "serve_command.h"

#include "command_line.h"
#include "server.h"

#include "store/session_store.h"

#include <atomic>
#include <iostream>
#include <optional>


namespace meshbench::service {

namespace {

// --bind/--live/--sessions, shared by serve and replay; returns false (after reporting) on a bad one.
bool parseEndpointOption(const std::vector<std::string>& args, std::size_t& i, ServeOptions& options, const char* usage,
                         int& status)
{
    const std::string& a = args[i];
    if (i + 1 >= args.size()) {
        status = usageError(a + " needs a value", usage);
        return false;
    }
    const std::string& value = args[++i];
    if (a == "--bind")
        options.control = value;
    else if (a == "--live")
        options.live = value;
    else
        options.sessionsDir = value;
    return true;
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

}  // namespace

int runServeCommand(const std::vector<std::string>& args)
{
    const char* usage =
        "meshbench-engine serve [--bind ENDPOINT] [--live ENDPOINT] [--sessions DIR] [--curve] [--allow-run-as-root]";
    ServeOptions options;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        int status = 0;
        if (a == "--bind" || a == "--live" || a == "--sessions") {
            if (!parseEndpointOption(args, i, options, usage, status))
                return status;
        } else if (a == "--curve") {
            options.curve = true;
        } else if (a == "--allow-run-as-root") {
            options.allowRunAsRoot = true;
        } else {
            return usageError("unknown argument '" + a + "'", usage);
        }
    }
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

int runReplayCommand(const std::vector<std::string>& args)
{
    const char* usage = "meshbench-engine replay SESSION [--speed X] [--bind ENDPOINT] [--live ENDPOINT] [--curve]";
    ServeOptions options;
    options.exitWhenIdle = true;
    std::string session;
    double speed = 1;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        int status = 0;
        if (a == "--bind" || a == "--live") {
            if (!parseEndpointOption(args, i, options, usage, status))
                return status;
        } else if (a == "--speed") {
            if (i + 1 >= args.size() || !parsePositive(args[i + 1], speed) || speed <= 0 || speed > 1e6)
                return usageError("--speed needs a number above 0 (1 = real time) and at most 1,000,000", usage);
            ++i;
        } else if (a == "--curve") {
            options.curve = true;
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option '" + a + "'", usage);
        } else if (session.empty()) {
            session = a;
        } else {
            return usageError("one session at a time", usage);
        }
    }
    if (session.empty())
        return usageError("replay needs a session file", usage);
    const std::atomic<bool>& stop = stopOnSignals();
    std::optional<Server> server = startServer(options);
    if (!server)
        return 5;
    std::string source;
    try {
        source = server->openReplay(session, speed);
        std::cout << "replaying " << session << " as " << source << " at " << speed << "x: control "
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

}  // namespace meshbench::service
