#include "launcher_report.h"

#include "launcher.h"

#include <optional>
#include <regex>
#include <utility>

namespace meshbench::service {

std::string LauncherReport::describe() const
{
    if (signal != 0)
        return ExitStatus{0, signal}.describe();
    if (improper)
        return "exited with status 0 before the job ended, without its last heartbeat or MPI_Finalize";
    return "exited with status " + std::to_string(exitCode.value_or(0));
}

std::string LauncherReport::crashWords() const
{
    std::string words = "crashed";
    if (!crashSignal.empty())
        words += " (" + crashSignal + (crashFrame.empty() ? "" : " in " + crashFrame) + ")";
    return words;
}

namespace {

void readUnreachableHost(const std::string& line, LauncherReport& report)
{
    static const std::regex connection(R"(unable to complete a TCP connection)");
    static const std::regex localHost(R"(^\s*Local host:\s*(\S+))");
    static const std::regex remoteHost(R"(^\s*Remote host:\s*(\S+))");
    static const std::regex sshConnect(R"(ssh: connect to host (\S+) port \d+: (.+))");
    static const std::regex sshResolve(R"(ssh: Could not resolve hostname ([^:\s]+): (.+))");
    static const std::regex lostDaemon(R"(lost communication with a remote daemon)");
    static const std::regex remoteDaemon(R"(Remote daemon:\s*\S+ on node (\S+))");
    static const std::regex notStarted(R"(ORTE was unable to reliably start one or more daemons)");
    std::smatch m;
    if (std::regex_search(line, notStarted))
        report.daemonsNotStarted = true;
    if (!report.unreachableHost.empty()) {
        if (report.inConnectionBlock && report.unreachableFrom.empty() && std::regex_search(line, m, remoteHost)) {
            report.unreachableFrom = m[1];
            report.inConnectionBlock = false;
        }
        return;  // the first host named is the one reported
    }
    if (std::regex_search(line, connection)) {
        report.inConnectionBlock = true;
    } else if (report.inConnectionBlock && std::regex_search(line, m, localHost)) {
        report.unreachableHost = m[1];
        report.unreachableWhy = "Open MPI's daemon there could not open a TCP connection back to mpirun";
    } else if (std::regex_search(line, m, sshConnect)) {
        report.unreachableHost = m[1];
        report.unreachableWhy = "ssh could not connect to it: " + m[2].str();
    } else if (std::regex_search(line, m, sshResolve)) {
        report.unreachableHost = m[1];
        report.unreachableWhy = "ssh could not resolve its name: " + m[2].str();
    } else if (std::regex_search(line, lostDaemon)) {
        report.inLostDaemonBlock = true;
    } else if (report.inLostDaemonBlock && std::regex_search(line, m, remoteDaemon)) {
        report.unreachableHost = m[1];
        report.unreachableWhy = "mpirun lost its connection to Open MPI's daemon there";
        report.inLostDaemonBlock = false;
    }
}

void readLauncherCrash(const std::string& line, LauncherReport& report)
{
    static const std::regex received(R"(\[[^\]:]*:(\d+)\] \*\*\* Process received signal \*\*\*)");
    static const std::regex signal(R"(:(\d+)\] Signal: (.+))");
    static const std::regex frame(R"(:(\d+)\] \[ *[1-9]\d*\] .*\(([A-Za-z_]\w*)\+0x)");
    std::smatch m;
    if (report.crashPid == 0) {
        if (std::regex_search(line, m, received))
            report.crashPid = std::stoi(m[1]);
        return;
    }
    // Only that process's lines: a rank's crash report may be interleaved.
    if (report.crashSignal.empty() && std::regex_search(line, m, signal) && std::stoi(m[1]) == report.crashPid)
        report.crashSignal = m[2];
    else if (report.crashFrame.empty() && std::regex_search(line, m, frame) && std::stoi(m[1]) == report.crashPid)
        report.crashFrame = m[2];
}

constexpr const char* kRankExitWords = "meshbench-launch: rank ";

// srun's word on a task that ended badly, in Slurm's words: an exit code or strsignal's.
void readSrunTask(const std::string& line, LauncherReport& report)
{
    static const std::regex task(R"(^srun: error: \S+: task (\d{1,9}): (.+?)(?: \(core dumped\))?$)");
    static const std::regex exited(R"(^Exited with exit code (\d{1,3})$)");
    std::smatch m, code;
    if (!std::regex_search(line, m, task))
        return;
    const std::string how = m[2];
    if (std::regex_search(how, code, exited)) {
        report.rank = std::stoi(m[1]);
        report.exitCode = std::stoi(code[1]);
        return;
    }
    for (int signal = 1; signal < 65; ++signal)
        if (signalWords(signal) == how) {
            report.rank = std::stoi(m[1]);
            report.signal = signal;
            return;
        }
}

// A line a launch command's rank wrote to stderr, as the launcher tags it: the rank and the line, or
// nothing for the launcher's own line (and a rank's stdout).
std::optional<std::pair<int, std::string>> rankStderrLine(const std::string& line, bool fromStderr)
{
    static const std::regex mpirunTag(R"(^(\[\d+,(\d{1,9})\]<stderr>:)(.*)$)");
    static const std::regex srunLabel(R"(^ *(\d{1,9}): (.*)$)");
    std::smatch m;
    if (line.empty() || (line.front() != '[' && !fromStderr))
        return std::nullopt;
    if (line.front() != '[')
        return std::regex_search(line, m, srunLabel) ? std::optional(std::pair{std::stoi(m[1]), m[2].str()})
                                                     : std::nullopt;
    if (!std::regex_search(line, m, mpirunTag))
        return std::nullopt;
    // mpirun (Open MPI 4.1) tags every piece the rank wrote, not every line: Python's traceback reads
    // "[1,2]<stderr>:ModuleNotFoundError[1,2]<stderr>:: [1,2]<stderr>:No module named 'x'[1,2]<stderr>:".
    const std::string tag = m[1];
    std::string text = m[3];
    for (std::size_t at; (at = text.find(tag)) != std::string::npos;)
        text.erase(at, tag.size());
    return std::pair{std::stoi(m[2]), std::move(text)};
}

// A launch command's rank's line: its shell's word on how it ended, or a line of its own.
void readRankStderr(const std::string& line, bool fromStderr, LauncherReport& report)
{
    static const std::regex exited(R"(meshbench-launch: rank (\d{1,9}) exited with status (\d{1,3})$)");
    std::smatch m;
    if (line.find(kRankExitWords) != std::string::npos && std::regex_search(line, m, exited)) {
        if (report.firstRankExit)
            return;  // the first rank to fail ended the job; the rest are consequences
        RankExit exit;
        exit.rank = std::stoi(m[1]);
        // A shell's status above 128 is a signal's (dash, bash, BusyBox's ash).
        const int status = std::stoi(m[2]);
        exit.status = status > 128 && status < 128 + 65 ? ExitStatus{0, status - 128} : ExitStatus{status, 0};
        const LauncherReport::RankLines& lines = report.rankStderr[exit.rank];
        // dash says how a program it waited for was killed ("Killed", "Segmentation fault (core
        // dumped)"): its word, not the program's.
        const std::string shellWords = exit.status.signal != 0 ? signalWords(exit.status.signal) : std::string();
        const bool shellSaid =
            !shellWords.empty() && (lines.last == shellWords || lines.last == shellWords + " (core dumped)");
        exit.lastStderr = shellSaid ? lines.before : lines.last;
        report.firstRankExit = std::move(exit);
        return;
    }
    const std::optional<std::pair<int, std::string>> said = rankStderrLine(line, fromStderr);
    if (!said || said->second.find_first_not_of(" \t\r") == std::string::npos)
        return;
    LauncherReport::RankLines& lines = report.rankStderr[said->first];
    lines.before = std::move(lines.last);
    lines.last = said->second;
}

}  // namespace

std::vector<std::string> launchedUnderShell(const std::vector<std::string>& command, const std::string& rankVariable)
{
    // "$@" runs the command as the argument vector it is; the shell's own errors (a program not
    // found) name it as meshbench-launch ($0).
    const std::string script = "trap : USR1 USR2; \"$@\"; s=$?; [ $s -eq 0 ] || echo \"" + std::string(kRankExitWords) +
                               "${" + rankVariable + "} exited with status $s\" >&2; exit $s";
    std::vector<std::string> argv{"/bin/sh", "-c", script, "meshbench-launch"};
    argv.insert(argv.end(), command.begin(), command.end());
    return argv;
}

void readLauncherLine(const std::string& line, LauncherReport& report, bool fromStderr)
{
    static const std::regex signalled(R"(process rank (\d+) with PID \d+ on\s+node \S+ exited on signal (\d+))");
    static const std::regex improper(R"(process rank (\d+) with PID \d+ on\s+node \S+ exiting improperly)");
    static const std::regex processName(R"(Process name:\s*\[\[\d+,\d+\],(\d+)\])");
    static const std::regex exitCode(R"(Exit code:\s*(\d+))");
    static const std::regex cancelled(R"(\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT (\S+)( DUE TO TIME LIMIT)?)");
    const std::string joined = report.previousLine + " " + line;
    report.previousLine = line;
    std::smatch m;
    if (report.slurmCancelledAt.empty() && std::regex_search(line, m, cancelled)) {
        report.slurmCancelledAt = m[1];
        report.slurmTimeLimit = m[2].matched;
    }
    readUnreachableHost(line, report);
    readLauncherCrash(line, report);
    readRankStderr(line, fromStderr, report);
    if (report.rank >= 0)
        return;  // the first report names the cause; the rest are consequences
    readSrunTask(line, report);
    if (report.rank >= 0)
        return;
    if (std::regex_search(joined, m, signalled)) {
        report.rank = std::stoi(m[1]);
        report.signal = std::stoi(m[2]);
    } else if (std::regex_search(joined, m, improper)) {
        report.rank = std::stoi(m[1]);
        report.improper = true;
    } else if (std::regex_search(line, m, processName)) {
        report.namedRank = std::stoi(m[1]);
    } else if (report.namedRank >= 0 && std::regex_search(line, m, exitCode)) {
        report.rank = report.namedRank;
        report.exitCode = std::stoi(m[1]);
    }
}

}  // namespace meshbench::service
