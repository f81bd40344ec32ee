#include "launcher_report.h"

#include "launcher.h"

#include <regex>

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

}  // namespace

void readLauncherLine(const std::string& line, LauncherReport& report)
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
    if (report.rank >= 0)
        return;  // the first report names the cause; the rest are consequences
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
