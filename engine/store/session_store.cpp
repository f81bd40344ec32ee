#include "session_store.h"

#include "session_file.h"

#include <algorithm>
#include <array>
#include <filesystem>

namespace meshbench::store {

namespace {

constexpr std::array<std::string_view, 4> kOutcomeNames = {"running", "completed", "failed", "stopped"};

}  // namespace

std::string_view outcomeName(Outcome outcome) { return kOutcomeNames[static_cast<std::size_t>(outcome)]; }

std::optional<Outcome> outcomeFromName(std::string_view name)
{
    for (std::size_t i = 0; i < kOutcomeNames.size(); ++i)
        if (kOutcomeNames[i] == name)
            return static_cast<Outcome>(i);
    return std::nullopt;
}

SessionListing listSessions(const std::string& dir)
{
    namespace fs = std::filesystem;
    std::error_code error;
    if (!fs::is_directory(dir, error))
        throw StoreError("session folder " + detail::quoted(dir) +
                         (fs::exists(dir, error) ? " is not a folder" : " does not exist"));
    SessionListing listing;
    fs::directory_iterator entry(dir, error);
    for (; !error && entry != fs::directory_iterator(); entry.increment(error)) {
        if (entry->path().extension() != ".meshbench")
            continue;
        const std::string path = entry->path().string();
        try {
            listing.sessions.push_back(SessionReader(path).summary());
        } catch (const StoreError& failure) {
            listing.unreadable.emplace_back(path, failure.what());
        }
    }
    if (error)
        throw StoreError("cannot list session folder " + detail::quoted(dir) + ": " + error.message());
    std::sort(listing.sessions.begin(), listing.sessions.end(), [](const SessionSummary& a, const SessionSummary& b) {
        return a.createdNs != b.createdNs ? a.createdNs > b.createdNs : a.path < b.path;
    });
    std::sort(listing.unreadable.begin(), listing.unreadable.end());
    return listing;
}

}  // namespace meshbench::store
