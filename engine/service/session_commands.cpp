#include "session_commands.h"

#include "command_line.h"
#include "job_runner.h"

#include "store/session_export.h"
#include "store/session_store.h"
#include "wire/text.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>

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
        sessions.push_back({{"path", s.path}, {"name", s.name}, {"created_ns", s.createdNs}, {"layout", s.layout},
                            {"outcome", store::outcomeName(s.outcome.outcome)}, {"cause", s.outcome.cause},
                            {"steps", s.steps},
                            {"final_loss", s.finalLoss ? nlohmann::json(*s.finalLoss) : nlohmann::json()}});
    nlohmann::json unreadable = nlohmann::json::array();
    for (const auto& [path, why] : listing.unreadable)
        unreadable.push_back({{"path", path}, {"error", why}});
    return {{"sessions", sessions}, {"unreadable", unreadable}};
}

int runSessionsCommand(const std::vector<std::string>& args)
{
    const char* usage = "meshbench-engine sessions [DIR] [--json]";
    std::string dir;
    bool json = false;
    for (const std::string& a : args) {
        if (a == "--json")
            json = true;
        else if (!a.empty() && a[0] == '-')
            return usageError("unknown option '" + a + "'", usage);
        else if (dir.empty())
            dir = a;
        else
            return usageError("one directory at a time", usage);
    }
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
    std::printf("%-16s  %-10s  %6s  %10s  %-28s  %s\n", "date", "outcome", "steps", "final loss", "layout", "name / file");
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

int runExportCommand(const std::vector<std::string>& args)
{
    const char* usage = "meshbench-engine export SESSION [--chrome-trace OUT.json] [--csv DIR]";
    std::string session, chrome, csv;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--chrome-trace" || a == "--csv") {
            if (i + 1 >= args.size())
                return usageError(a + " needs a value", usage);
            (a == "--csv" ? csv : chrome) = args[++i];
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option '" + a + "'", usage);
        } else if (session.empty()) {
            session = a;
        } else {
            return usageError("one session at a time ('" + session + "' and '" + a + "')", usage);
        }
    }
    if (session.empty())
        return usageError("export needs a session file", usage);
    if (chrome.empty() && csv.empty())
        return usageError("say what to export: --chrome-trace OUT.json and/or --csv DIR", usage);
    std::unique_ptr<store::SessionReader> reader;
    try {
        reader = std::make_unique<store::SessionReader>(session);
        reader->checkStructure();
    } catch (const store::StoreError& e) {
        std::cerr << "meshbench-engine: " << e.what() << "\n";
        return 1;
    }
    try {
        if (!chrome.empty()) {
            store::exportChromeTrace(*reader, chrome);
            std::cout << "chrome trace " << chrome << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
        }
        if (!csv.empty()) {
            store::exportCsv(*reader, csv);
            std::cout << "csv tables in " << csv << "\n";
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

}  // namespace meshbench::service
