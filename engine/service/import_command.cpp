#include "import_command.h"

#include "import/import_error.h"
#include "import/trace_import.h"
#include "live/session_findings.h"
#include "store/session_store.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <memory>

namespace meshbench::service {

namespace {

// What the imported session shows, as `run` ends with its findings. engine/import does not see
// engine/live (the findings' layer), so they are read back from the written session here. The import
// itself succeeded: a session whose findings cannot be computed says why and still exits 0.
void printFindings(const std::string& sessionPath)
{
    try {
        const store::SessionReader reader(sessionPath);
        const std::vector<live::Finding> findings = live::sessionFindings(reader, sessionPath);
        if (findings.empty()) {
            std::cout << "findings: nothing stands out\n";
            return;
        }
        std::cout << "findings:\n";
        constexpr std::size_t kMaxFindings = 8;  // the worst, as `run` prints them; the GUI lists them all
        for (std::size_t i = 0; i < std::min(findings.size(), kMaxFindings); ++i)
            std::cout << "  " << live::describe(findings[i]) << "\n";
    } catch (const std::exception& e) {
        std::cout << "findings unavailable: " << e.what() << "\n";
    }
}

int runImport(import::ImportRequest request)
{
    request.read.cancel = &stopOnSignals();
    try {
        const import::ImportResult result = import::importTraces(request);
        for (const std::string& line : result.summary)
            std::cout << line << "\n";
        printFindings(result.sessionPath);
        return 0;
    } catch (const import::ImportError& e) {
        std::cerr << "meshbench-engine import: " << e.what() << "\n";
        return request.read.cancelled() ? 4 : 1;
    }
}

}  // namespace

Command addImportCommand(CLI::App& engine)
{
    auto request = std::make_shared<import::ImportRequest>();
    auto stepMarker = std::make_shared<std::string>();
    CLI::App* command = engine.add_subcommand(
        "import", "read other stacks' per-rank traces (torch.profiler JSON, nsys SQLite exports, Megatron's "
                  "tokens_per_expert) into a session");
    command->add_option("TRACE", request->paths, "trace files, or folders of them")->required()->type_name("");
    command->add_option("--session", request->sessionPath, "the session file to write (must not exist)")
        ->required()
        ->type_name("OUT");
    command->add_option("--job", request->jobPath, "the traced run's job spec: its mesh, schedule and model")
        ->type_name("JOB.json");
    command
        ->add_option("--rank-from", request->rankFrom,
                     "a regular expression over a file's name whose first group is its rank, for files that "
                     "do not say it")
        ->type_name("REGEX");
    command->add_option("--step-marker", *stepMarker, "the name of the range that marks a step (default ProfilerStep#)")
        ->type_name("NAME");
    command->footer("exit status: 0 done, 1 an input is wrong (nothing is written), 2 the command line is wrong, "
                    "4 stopped");
    return {command, [request, stepMarker] {
                request->read.steps = import::StepMarker(*stepMarker);
                return runImport(*request);
            }};
}

}  // namespace meshbench::service
