#include "plan_commands.h"

#include "command_line.h"

#include "plan/planner.h"
#include "plan/report.h"
#include "plan/search.h"
#include "wire/text.h"

#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

namespace meshbench::service {

using namespace meshbench::plan;

namespace {

constexpr std::streamoff kMaxSpecBytes = 16 << 20;

}  // namespace

std::optional<SpecFile> loadSpecFile(const std::string& path, bool json, bool layoutMustHold)
{
    std::ifstream file(path, std::ios::binary);
    std::vector<SpecError> errors;
    LoadResult loaded;
    std::string text;
    if (!file) {
        errors.push_back({"", "cannot open job spec '" + path + "': check the path"});
    } else {
        file.seekg(0, std::ios::end);
        const std::streamoff size = file.tellg();
        file.seekg(0);
        if (size > kMaxSpecBytes) {
            errors.push_back({"", "'" + path + "' is " + std::to_string(size) +
                                      " bytes; a job spec is a small JSON document (at most 16 MiB)"});
        } else {
            std::ostringstream contents;
            contents << file.rdbuf();
            text = contents.str();
            loaded = parseJobSpec(text);
            errors = loaded.errors;
        }
    }
    // Layout errors don't stop a search: it picks its own layout.
    const bool usable = loaded.spec && (errors.empty() || !layoutMustHold);
    if (usable)
        return SpecFile{std::move(*loaded.spec), std::move(text)};
    if (json)
        std::cout << wire::jsonText(nlohmann::json{{"valid", false}, {"errors", errorsToJson(errors)}}, 2) << "\n";
    else
        std::cerr << path << ": the job spec has " << errors.size() << " problem" << (errors.size() == 1 ? "" : "s")
                  << ":\n" << errorsToText(errors);
    return std::nullopt;
}

bool applyProfileFile(const std::string& path, JobSpec& spec)
{
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        std::cerr << "cannot open calibration profile '" << path << "': check the path\n";
        return false;
    }
    std::ostringstream contents;
    contents << file.rdbuf();
    const nlohmann::json profile = nlohmann::json::parse(contents.str(), nullptr, false);
    std::vector<SpecError> errors;
    if (profile.is_discarded())
        errors.push_back({"", "not JSON; give the file `meshbench-engine calibrate --out` wrote"});
    std::optional<CalibrationSpec> calibration;
    if (errors.empty())
        calibration = readCalibrationProfile(profile, errors);
    if (!calibration) {
        std::cerr << path << ": the calibration profile cannot be used:\n" << errorsToText(errors);
        return false;
    }
    spec.cluster.calibration = *calibration;
    return true;
}

int runPlanCommand(const std::vector<std::string>& args)
{
    const char* usage = "meshbench-engine plan JOB.json [--json] [--unit-costs F,B,W] [--profile PROFILE.json]";
    std::string path;
    std::string profile;
    bool json = false;
    std::optional<UnitCosts> unitCosts;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--json") {
            json = true;
        } else if (a == "--profile") {
            if (i + 1 >= args.size())
                return usageError("--profile needs the file `meshbench-engine calibrate --out` wrote", usage);
            profile = args[++i];
        } else if (a == "--unit-costs") {
            if (i + 1 >= args.size())
                return usageError("--unit-costs needs three numbers, e.g. --unit-costs 1,2,1", usage);
            std::istringstream list(args[++i]);
            std::string item;
            std::vector<double> values;
            double v = 0;
            while (std::getline(list, item, ','))
                if (parsePositive(item, v))
                    values.push_back(v);
                else
                    return usageError("--unit-costs: '" + item + "' is not a non-negative number", usage);
            if (values.size() != 3 || values[0] + values[1] + values[2] <= 0)
                return usageError("--unit-costs needs three non-negative numbers F,B,W, not all zero, e.g. 1,1,1", usage);
            unitCosts = UnitCosts{values[0], values[1], values[2]};
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option '" + a + "'", usage);
        } else if (path.empty()) {
            path = a;
        } else {
            return usageError("one job spec at a time ('" + path + "' and '" + a + "')", usage);
        }
    }
    if (path.empty())
        return usageError("plan needs a job spec", usage);
    std::optional<SpecFile> file = loadSpecFile(path, json, true);
    if (!file || (!profile.empty() && !applyProfileFile(profile, file->spec)))
        return 1;
    const Plan plan = makePlan(file->spec, unitCosts);
    if (!plan.simulation.completed) {
        // The schedules are built to be deadlock-free; reaching this is a bug in the planner.
        const std::string error = "internal error: the schedule did not complete: " + plan.simulation.error;
        std::cerr << "meshbench-engine: " << error << "\n";
        if (json)
            std::cout << wire::jsonText(nlohmann::json{{"valid", false}, {"internal_error", error}}, 2) << "\n";
        return 3;
    }
    std::cout << (json ? wire::jsonText(planToJson(plan), 2) + "\n" : planToText(plan));
    return 0;
}

int runSearchCommand(const std::vector<std::string>& args)
{
    const char* usage =
        "meshbench-engine search JOB.json [--top N] [--global-batch SEQUENCES] [--json] [--profile PROFILE.json]";
    std::string path;
    std::string profile;
    bool json = false;
    SearchOptions options;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--json") {
            json = true;
        } else if (a == "--profile") {
            if (i + 1 >= args.size())
                return usageError("--profile needs the file `meshbench-engine calibrate --out` wrote", usage);
            profile = args[++i];
        } else if (a == "--top" || a == "--global-batch") {
            const double limit = a == "--top" ? 1000 : 1e9;
            double v = 0;
            if (i + 1 >= args.size() || !parsePositive(args[i + 1], v) || v < 1 || v > limit || std::floor(v) != v)
                return usageError(a + " needs a whole number from 1 to " + (a == "--top" ? "1,000" : "1,000,000,000"),
                                  usage);
            ++i;
            if (a == "--top")
                options.top = int(v);
            else
                options.globalBatch = std::int64_t(v);
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option '" + a + "'", usage);
        } else if (path.empty()) {
            path = a;
        } else {
            return usageError("one job spec at a time ('" + path + "' and '" + a + "')", usage);
        }
    }
    if (path.empty())
        return usageError("search needs a job spec", usage);
    std::optional<SpecFile> file = loadSpecFile(path, json, false);
    if (!file || (!profile.empty() && !applyProfileFile(profile, file->spec)))
        return 1;
    const SearchResult result = searchLayouts(file->spec, options);
    if (!result.errors.empty()) {
        if (json)
            std::cout << wire::jsonText(searchToJson(result), 2) << "\n";
        else
            std::cerr << errorsToText(result.errors);
        return 1;
    }
    std::cout << (json ? wire::jsonText(searchToJson(result), 2) + "\n" : searchToText(result, file->spec));
    return 0;
}

}  // namespace meshbench::service
