#include "calibrate_command.h"

#include "command_line.h"

#include "live/session_measurements.h"
#include "plan/calibration.h"
#include "plan/planner.h"
#include "plan/report.h"
#include "wire/text.h"

#include <fstream>
#include <iostream>

namespace meshbench::service {

namespace {

constexpr const char* kUsage = "meshbench-engine calibrate SESSION... [--out PROFILE.json]";

}  // namespace

int runCalibrateCommand(const std::vector<std::string>& args)
{
    std::vector<std::string> sessions;
    std::string out;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--out") {
            if (i + 1 >= args.size())
                return usageError("--out needs the profile file to write", kUsage);
            out = args[++i];
        } else if (!a.empty() && a[0] == '-') {
            return usageError("unknown option '" + a + "'", kUsage);
        } else {
            sessions.push_back(a);
        }
    }
    if (sessions.empty())
        return usageError("calibrate needs at least one session file", kUsage);

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
        const auto off = [&](double planned) { return plan::formatNumber("%+.0f%%", 100 * (planned / run.stepSeconds - 1)); };
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

}  // namespace meshbench::service
