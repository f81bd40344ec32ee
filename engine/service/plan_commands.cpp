#include "plan_commands.h"

#include "plan/planner.h"
#include "plan/report.h"
#include "plan/search.h"
#include "wire/text.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

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
                  << ":\n"
                  << errorsToText(errors);
    return std::nullopt;
}

bool applyProfileFile(const std::string& path, JobSpec& spec, bool json)
{
    std::ifstream file(path, std::ios::binary);
    std::vector<SpecError> errors;
    std::optional<CalibrationSpec> calibration;
    if (!file) {
        errors.push_back({"", "cannot open calibration profile '" + path + "': check the path"});
    } else {
        std::ostringstream contents;
        contents << file.rdbuf();
        const nlohmann::json profile = nlohmann::json::parse(contents.str(), nullptr, false);
        if (profile.is_discarded())
            errors.push_back({"", "not JSON; give the file `meshbench-engine calibrate --out` wrote"});
        else
            calibration = readCalibrationProfile(profile, errors);
    }
    if (calibration) {
        spec.cluster.calibration = *calibration;
        return true;
    }
    if (json)
        std::cout << wire::jsonText(
                         nlohmann::json{{"valid", false}, {"profile", path}, {"errors", errorsToJson(errors)}}, 2)
                  << "\n";
    else if (file)
        std::cerr << path << ": the calibration profile cannot be used:\n" << errorsToText(errors);
    else
        std::cerr << errors.front().message << "\n";
    return false;
}

namespace {

// F,B,W of --unit-costs: three finite numbers >= 0, not all zero.
UnitCosts parseUnitCosts(const std::string& text)
{
    std::istringstream list(text);
    std::vector<double> values;
    for (std::string item; std::getline(list, item, ',');) {
        std::size_t used = 0;
        double value = -1;
        try {
            value = std::stod(item, &used);
        } catch (const std::exception&) {
        }
        if (used != item.size() || !std::isfinite(value) || value < 0)
            throw CLI::ValidationError("--unit-costs", "'" + item + "' is not a non-negative number");
        values.push_back(value);
    }
    if (values.size() != 3 || values[0] + values[1] + values[2] <= 0)
        throw CLI::ValidationError(
            "--unit-costs", "needs three non-negative numbers F,B,W, not all zero, e.g. 1,1,1 (not '" + text + "')");
    return {values[0], values[1], values[2]};
}

// What plan and search share: the job spec, --json and --profile.
struct SpecArguments {
    std::string path;
    std::string profile;
    bool json = false;
};

void addSpecArguments(CLI::App& command, SpecArguments& args)
{
    command.add_option("JOB.json", args.path, "the job spec")->required()->type_name("");
    command.add_flag("--json", args.json, "print one JSON document (the errors too) instead of text");
    command
        .add_option("--profile", args.profile, "plan with the device's and links' rates that `calibrate --out` wrote")
        ->type_name("PROFILE.json");
}

// The spec (with its profile) when both can be used; nullopt after reporting why not.
std::optional<SpecFile> loadSpec(const SpecArguments& args, bool layoutMustHold)
{
    std::optional<SpecFile> file = loadSpecFile(args.path, args.json, layoutMustHold);
    if (!file || (!args.profile.empty() && !applyProfileFile(args.profile, file->spec, args.json)))
        return std::nullopt;
    return file;
}

// What reached no answer (a bug in the planner, or an exhausted machine): said on stderr, and as
// the one document --json promises. Exit status 3, as the engine's own last resort.
int internalError(const SpecArguments& args, const std::string& what)
{
    const std::string error = "internal error: " + what;
    std::cerr << "meshbench-engine: " << error << "\n";
    if (args.json)
        std::cout << wire::jsonText(nlohmann::json{{"valid", false}, {"internal_error", error}}, 2) << "\n";
    return 3;
}

struct PlanArguments : SpecArguments {
    std::optional<UnitCosts> unitCosts;
};

int runPlan(const PlanArguments& args)
{
    std::optional<SpecFile> file = loadSpec(args, true);
    if (!file)
        return 1;
    std::string output;
    try {
        const Plan plan = makePlan(file->spec, args.unitCosts);
        // The schedules are built to be deadlock-free; reaching this is a bug in the planner.
        if (!plan.simulation.completed)
            return internalError(args, "the schedule did not complete: " + plan.simulation.error);
        output = args.json ? wire::jsonText(planToJson(plan), 2) + "\n" : planToText(plan);
    } catch (const std::exception& e) {
        return internalError(args, e.what());
    }
    std::cout << output;
    return 0;
}

struct SearchArguments : SpecArguments {
    SearchOptions options;
};

int runSearch(const SearchArguments& args)
{
    std::optional<SpecFile> file = loadSpec(args, false);
    if (!file)
        return 1;
    std::string output;
    try {
        const SearchResult result = searchLayouts(file->spec, args.options);
        if (!result.errors.empty()) {
            if (args.json)
                std::cout << wire::jsonText(searchToJson(result), 2) << "\n";
            else
                std::cerr << errorsToText(result.errors);
            return 1;
        }
        output = args.json ? wire::jsonText(searchToJson(result), 2) + "\n" : searchToText(result, file->spec);
    } catch (const std::exception& e) {
        return internalError(args, e.what());
    }
    std::cout << output;
    return 0;
}

constexpr const char* kSpecExitStatus =
    "exit status: 0 done, 1 the job spec or the profile is wrong, 2 the command line is wrong, 3 an internal "
    "error;\nwith --json, every outcome prints one JSON document on stdout";

}  // namespace

Command addPlanCommand(CLI::App& engine)
{
    auto args = std::make_shared<PlanArguments>();
    CLI::App* plan =
        engine.add_subcommand("plan", "layout, memory per GPU, FLOPs, bubble and step time of the job's layout");
    addSpecArguments(*plan, *args);
    plan->add_option_function<std::string>(
            "--unit-costs", [args](const std::string& text) { args->unitCosts = parseUnitCosts(text); },
            "simulate only the schedule, with these forward, backward and weight-gradient costs")
        ->type_name("F,B,W");
    plan->footer(kSpecExitStatus);
    return {plan, [args] { return runPlan(*args); }};
}

Command addSearchCommand(CLI::App& engine)
{
    auto args = std::make_shared<SearchArguments>();
    CLI::App* search = engine.add_subcommand("search", "the fastest layouts that fit the job's cluster");
    addSpecArguments(*search, *args);
    search
        ->add_option("--top", args->options.top,
                     "how many layouts to list, 1 to 1000 (default " + std::to_string(args->options.top) + ")")
        ->check(CLI::Range(1, 1000).description(""))
        ->type_name("N");
    search
        ->add_option("--global-batch", args->options.globalBatch,
                     "sequences per step, up to 1e9 (default: dp x micro_batch_size x microbatches)")
        ->check(CLI::Range(std::int64_t(1), std::int64_t(1'000'000'000)).description(""))
        ->type_name("SEQUENCES");
    search->add_flag("--planned-only", args->options.plannedOnly,
                     "also rank what only the planner prices: Megatron-LM's overlap_param_gather and tp_comm_overlap, "
                     "and layouts meshbench-agent refuses (implied when the spec turns either overlap on)");
    search->footer(kSpecExitStatus);
    return {search, [args] { return runSearch(*args); }};
}

}  // namespace meshbench::service
