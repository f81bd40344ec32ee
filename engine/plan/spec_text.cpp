#include "spec_text.h"

#include <algorithm>
#include <numeric>

namespace meshbench::plan {

namespace {

std::size_t editDistance(std::string_view a, std::string_view b)
{
    std::vector<std::size_t> row(b.size() + 1);
    std::iota(row.begin(), row.end(), 0);
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diagonal = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

}  // namespace

std::string joinOr(const std::vector<std::string>& items)
{
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0)
            out += i + 1 == items.size() ? " or " : ", ";
        out += items[i];
    }
    return out;
}

std::string suggestion(std::string_view given, const std::vector<std::string>& candidates)
{
    // A name the user typed the start of ("h100" for "h100-sxm") beats a closer edit distance.
    for (const std::string& candidate : candidates)
        if (!given.empty() && candidate.size() > given.size() && candidate.compare(0, given.size(), given) == 0)
            return "did you mean '" + candidate + "'? ";
    std::string best;
    std::size_t bestDistance = std::max<std::size_t>(3, given.size() / 2) + 1;
    for (const std::string& candidate : candidates) {
        const std::size_t d = editDistance(given, candidate);
        if (d < bestDistance) {
            bestDistance = d;
            best = candidate;
        }
    }
    return best.empty() ? std::string() : "did you mean '" + best + "'? ";
}

std::string describe(const nlohmann::json& value)
{
    if (value.is_structured())
        return std::string(value.type_name()) + " of " + std::to_string(value.size()) + " entries";
    std::string text = value.dump();
    if (text.size() > 40)
        text = text.substr(0, 37) + "...";
    return std::string(value.type_name()) + " " + text;
}

}  // namespace meshbench::plan
