// bench_import: `meshbench-engine import` of a generated multi-rank torch.profiler trace of about
// 2 GB (tests/import/make_gpu_traces.py --big-gb), on one core, beside Python's json.load of the
// same files in the same run. Prints MB/s of JSON, events/s and peak RSS of both.
// Issue 29's goals: >= 150 MB/s on one core, >= 5x Python's load, < 1 GB RSS, judged on wall time.
// The CPU time each took is printed too: on a machine busy with other work, it is what the program
// itself costs.
// Usage: bench_import [GB] (default 2); the files are written under $TMPDIR and removed after.

#include "common/guarded_main.h"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;

struct Run {
    double seconds = 0;
    double cpuSeconds = 0;  // user + system: what the run itself took of its core, whatever else ran
    double peakRssMb = 0;
    std::string out;
};

// Runs argv on one CPU, its output to a file, and measures its wall time and peak resident memory.
Run measure(const std::vector<std::string>& argv, const fs::path& outFile)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0)
        throw std::runtime_error("cannot read this process's CPUs");
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &mine)) {
            CPU_SET(cpu, &one);
            break;
        }
    std::vector<std::string> pinned{"taskset", "-c", ""};
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &one))
            pinned[2] = std::to_string(cpu);
    pinned.insert(pinned.end(), argv.begin(), argv.end());
    std::vector<char*> args;
    args.reserve(pinned.size() + 1);
    for (std::string& a : pinned)
        args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, outFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const auto start = std::chrono::steady_clock::now();
    pid_t pid = 0;
    const int spawned = posix_spawnp(&pid, "taskset", &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0)
        throw std::runtime_error("cannot start " + argv.front());
    int status = 0;
    rusage usage{};
    if (wait4(pid, &status, 0, &usage) != pid)
        throw std::runtime_error("lost " + argv.front());
    Run run;
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run.peakRssMb = double(usage.ru_maxrss) / 1024.0;
    const auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
    run.cpuSeconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    std::ifstream out(outFile);
    run.out.assign(std::istreambuf_iterator<char>(out), {});
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error(argv.front() + " failed (status " + std::to_string(status) + "): " + run.out);
    return run;
}

int benchMain(int argc, char** argv)
{
    const double gigabytes = argc > 1 ? std::atof(argv[1]) : 2.0;
    if (!(gigabytes > 0))
        throw std::runtime_error("the size must be a positive number of GB");
    const fs::path dir = fs::temp_directory_path() / ("bench_import." + std::to_string(getpid()));
    fs::create_directories(dir);
    struct Remove {
        fs::path dir;
        ~Remove()
        {
            std::error_code ignored;
            fs::remove_all(dir, ignored);
        }
    } remove{dir};

    std::printf("writing a %.1f GB trace of 8 ranks (make_gpu_traces.py --big-gb) ...\n", gigabytes);
    std::fflush(stdout);
    const std::string generator = std::string(MESHBENCH_SOURCE_DIR) + "/tests/import/make_gpu_traces.py";
    measure({"python3", generator, (dir / "traces").string(), "--case", "1f1b", "--big-gb", std::to_string(gigabytes),
             "--no-verify"},
            dir / "generate.out");
    std::vector<std::string> files;
    std::uintmax_t bytes = 0;
    for (const auto& entry : fs::directory_iterator(dir / "traces"))
        if (entry.path().extension() == ".json" && entry.path().filename().string().starts_with("rank")) {
            files.push_back(entry.path().string());
            bytes += entry.file_size();
        }
    if (files.empty())
        throw std::runtime_error("the generator wrote no trace");
    std::sort(files.begin(), files.end());

    std::vector<std::string> import{MESHBENCH_ENGINE, "import",
                                    "--job",          (dir / "traces" / "job.json").string(),
                                    "--session",      (dir / "bench.meshbench").string()};
    import.insert(import.end(), files.begin(), files.end());
    const Run ours = measure(import, dir / "import.out");
    std::smatch counted;
    if (!std::regex_search(ours.out, counted, std::regex(R"(read \d+ files \((\d+) bytes, (\d+) events\))")))
        throw std::runtime_error("the import did not say what it read: " + ours.out);
    const double events = std::stod(counted[2].str());

    std::string load = "import json, sys\nfor f in sys.argv[1:]:\n    with open(f) as h:\n        json.load(h)\n";
    std::vector<std::string> python{"python3", "-c", load};
    python.insert(python.end(), files.begin(), files.end());
    const Run reference = measure(python, dir / "python.out");

    const double mb = double(bytes) / 1e6;
    std::printf("trace: %zu files, %.0f MB of JSON, %.0f events\n", files.size(), mb, events);
    const auto line = [&](const char* who, const Run& run) {
        std::printf("%s %6.1f s  %6.1f MB/s  %9.0f events/s  peak RSS %6.0f MB  (CPU %5.1f s: %6.1f MB/s)\n", who,
                    run.seconds, mb / run.seconds, events / run.seconds, run.peakRssMb, run.cpuSeconds,
                    mb / run.cpuSeconds);
    };
    line("meshbench-engine import (one core):", ours);
    line("python3 json.load     (reference): ", reference);
    const double speedup = reference.seconds / ours.seconds;
    std::printf("speed-up over json.load: %.1fx\n", speedup);
    const bool fast = mb / ours.seconds >= 150, faster = speedup >= 5, small = ours.peakRssMb < 1024;
    std::printf("goals: >= 150 MB/s %s, >= 5x Python %s, < 1 GB RSS %s\n", fast ? "met" : "MISSED",
                faster ? "met" : "MISSED", small ? "met" : "MISSED");
    return fast && faster && small ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv)
{
    return meshbench::testing::guardedMain("bench_import", 2, [&] { return benchMain(argc, argv); });
}
