#include "session_commands.h"

#include "job_runner.h"

#include "store/session_export.h"
#include "store/session_store.h"
#include "wire/text.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

namespace meshbench::service {

namespace {

std::string localTime(std::int64_t wallNs)
{
    const std::time_t seconds = std::time_t(wallNs / 1'000'000'000);
    std::tm local{};
    localtime_r(&seconds, &local);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M", &local);
    return text;
}

}  // namespace

nlohmann::json sessionListingJson(const store::SessionListing& listing)
{
    nlohmann::json sessions = nlohmann::json::array();
    for (const store::SessionSummary& s : listing.sessions)
        sessions.push_back({{"path", s.path},
                            {"name", s.name},
                            {"created_ns", s.createdNs},
                            {"layout", s.layout},
                            {"outcome", store::outcomeName(s.outcome.outcome)},
                            {"cause", s.outcome.cause},
                            {"steps", s.steps},
                            {"final_loss", s.finalLoss ? nlohmann::json(*s.finalLoss) : nlohmann::json()}});
    nlohmann::json unreadable = nlohmann::json::array();
    for (const auto& [path, why] : listing.unreadable)
        unreadable.push_back({{"path", path}, {"error", why}});
    return {{"sessions", sessions}, {"unreadable", unreadable}};
}

namespace {

int runSessions(std::string dir, bool json)
{
    store::SessionListing listing;
    // The default folder appears with the first run; until then there is simply nothing to list.
    if (dir.empty()) {
        dir = defaultSessionDir();
        if (!std::filesystem::exists(dir)) {
            nlohmann::json empty = sessionListingJson({});
            empty["directory"] = dir;
            std::cout << (json ? wire::jsonText(empty, 2) : "no sessions in " + dir) << "\n";
            return 0;
        }
    }
    try {
        listing = store::listSessions(dir);
    } catch (const store::StoreError& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        if (json)
            std::cout << wire::jsonText(nlohmann::json{{"directory", dir}, {"error", e.what()}}, 2) << "\n";
        return 1;
    }
    if (json) {
        nlohmann::json out = sessionListingJson(listing);
        out["directory"] = dir;
        std::cout << wire::jsonText(out, 2) << "\n";
        return listing.unreadable.empty() ? 0 : 1;
    }
    if (listing.sessions.empty() && listing.unreadable.empty()) {
        std::cout << "no sessions in " << dir << "\n";
        return 0;
    }
    std::printf("%-16s  %-10s  %6s  %10s  %-28s  %s\n", "date", "outcome", "steps", "final loss", "layout",
                "name / file");
    for (const store::SessionSummary& s : listing.sessions) {
        char loss[32] = "-";
        if (s.finalLoss)
            std::snprintf(loss, sizeof loss, "%.4f", *s.finalLoss);
        std::printf("%-16s  %-10s  %6d  %10s  %-28s  %s\n  %s\n", localTime(s.createdNs).c_str(),
                    std::string(store::outcomeName(s.outcome.outcome)).c_str(), s.steps, loss, s.layout.c_str(),
                    s.name.c_str(), s.path.c_str());
    }
    for (const auto& [path, why] : listing.unreadable)
        std::fprintf(stderr, "cannot read %s: %s\n", path.c_str(), why.c_str());
    return listing.unreadable.empty() ? 0 : 1;
}

struct ExportArguments {
    std::string session;
    std::string chrome;
    std::string csv;
};

int runExport(const ExportArguments& args)
{
    std::unique_ptr<store::SessionReader> reader;
    try {
        reader = std::make_unique<store::SessionReader>(args.session);
        reader->checkStructure();
        reader->checkRecordTimes();
    } catch (const store::StoreError& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 1;
    }
    try {
        if (!args.chrome.empty()) {
            store::exportChromeTrace(*reader, args.chrome);
            std::cout << "chrome trace " << args.chrome
                      << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
        }
        if (!args.csv.empty()) {
            store::exportCsv(*reader, args.csv);
            std::cout << "csv tables in " << args.csv << "\n";
        }
    } catch (const store::ExportError& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 5;
    } catch (const store::StoreError& e) {
        // Damage found part-way is a session that cannot be read, as when it fails to open.
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 1;
    }
    return 0;
}

}  // namespace

Command addSessionsCommand(CLI::App& engine)
{
    struct Arguments {
        std::string dir;
        bool json = false;
    };
    auto args = std::make_shared<Arguments>();
    CLI::App* sessions = engine.add_subcommand("sessions", "the stored sessions of a folder, newest first");
    sessions->add_option("DIR", args->dir, "the folder (default: ~/.local/share/meshbench/sessions)")->type_name("");
    sessions->add_flag("--json", args->json, "print one JSON document instead of a table");
    sessions->footer("exit status: 0 done, 1 a session cannot be read (listed on stderr), 2 the command line is wrong");
    return {sessions, [args] { return runSessions(args->dir, args->json); }};
}

Command addExportCommand(CLI::App& engine)
{
    auto args = std::make_shared<ExportArguments>();
    CLI::App* exporter = engine.add_subcommand("export", "a session as a Chrome/Perfetto trace, or as CSV tables");
    exporter->add_option("SESSION", args->session, "the session file")->required()->type_name("");
    CLI::Option_group* outputs = exporter->add_option_group("Outputs", "what to write: one or both");
    outputs
        ->add_option("--chrome-trace", args->chrome, "write the Trace Event Format (ui.perfetto.dev, chrome://tracing)")
        ->type_name("OUT.json");
    outputs->add_option("--csv", args->csv, "write one CSV file per table into DIR")->type_name("DIR");
    outputs->require_option(1, 0);
    exporter->footer("exit status: 0 done, 1 the session cannot be read, 2 the command line is wrong, 5 an output "
                     "cannot be written");
    return {exporter, [args] { return runExport(*args); }};
}

}  // namespace meshbench::service
