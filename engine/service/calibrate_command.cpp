#include "calibrate_command.h"

#include "live/session_measurements.h"
#include "plan/calibration.h"
#include "plan/planner.h"
#include "plan/units.h"
#include "wire/text.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace meshbench::service {

namespace {

// Every session is checked before anything is fitted (measureSession: its structure, its steps
// and its spans), and the fit before anything is written (plan::calibrate: the device's bounds).
int runCalibrate(const std::vector<std::string>& sessions, const std::string& out)
{
    std::vector<plan::MeasuredRun> runs;
    plan::CalibrationResult result;
    try {
        for (const std::string& path : sessions)
            runs.push_back(live::measureSession(path));
        result = plan::calibrate(runs);
    } catch (const std::exception& e) {
        std::cerr << "meshbench-engine calibrate: " << e.what() << "\n";
        return 1;
    }
    for (const std::string& line : result.report)
        std::cout << line << "\n";
    // Each session's step as planned from the table and from the fitted rates, beside what it measured.
    for (const plan::MeasuredRun& run : runs) {
        plan::JobSpec datasheet = run.spec, fitted = run.spec;
        datasheet.cluster.calibration = {};
        fitted.cluster.calibration = result.calibration;
        const double before = plan::makePlan(datasheet).step.total, after = plan::makePlan(fitted).step.total;
        const auto ms = [](double seconds) { return plan::formatNumber("%.2f ms", seconds * 1e3); };
        const auto off = [&](double planned) {
            return plan::formatNumber("%+.0f%%", 100 * (planned / run.stepSeconds - 1));
        };
        std::cout << run.source << ": measured step " << ms(run.stepSeconds) << "; planned " << ms(before)
                  << " from the table (" << off(before) << "), " << ms(after) << " calibrated (" << off(after) << ")\n";
    }
    const std::string profile = wire::jsonText(plan::toJson(result.calibration), 2) + "\n";
    if (out.empty()) {
        std::cout << profile;
        return 0;
    }
    std::ofstream file(out, std::ios::binary | std::ios::trunc);
    if (!(file << profile) || !file.flush()) {
        std::cerr << "meshbench-engine calibrate: cannot write '" << out << "': check the folder and its permissions\n";
        return 5;
    }
    std::cout << "profile " << out << " (use it with --profile)\n";
    return 0;
}

}  // namespace

Command addCalibrateCommand(CLI::App& engine)
{
    struct Arguments {
        std::vector<std::string> sessions;
        std::string out;
    };
    auto args = std::make_shared<Arguments>();
    CLI::App* calibrate = engine.add_subcommand(
        "calibrate", "fit the device's and links' rates to sessions' measured spans, for --profile");
    calibrate->add_option("SESSION", args->sessions, "the session files to fit to")->required()->type_name("");
    calibrate->add_option("--out", args->out, "write the profile here (default: print it)")->type_name("PROFILE.json");
    calibrate->footer(
        "exit status: 0 done, 1 a session cannot be read, is damaged, contradicts itself or holds nothing "
        "to fit,\nor the fitted rates are outside what the device can do (nothing is written), 2 the "
        "command line is wrong,\n5 the profile cannot be written");
    return {calibrate, [args] { return runCalibrate(args->sessions, args->out); }};
}

}  // namespace meshbench::service
