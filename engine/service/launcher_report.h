#pragma once
// What the launcher (mpirun, srun) says of how a job ended, read line by line off its output: the
// first rank it saw end the job, a host it could not reach, Slurm's cancellation, its own crash
// report; and for a launch command, how its ranks ended and what they last wrote to stderr. The
// failure verdicts (failure_verdict.h) weigh it against the ranks' own last words.

#include "launcher.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace meshbench::service {

// How a rank of a launch command ended, as the shell it runs under says it on stderr:
//   "meshbench-launch: rank 3 exited with status 137"
struct RankExit {
    int rank = -1;
    ExitStatus status;       // the shell's status above 128 is the signal 128 less that ended it
    std::string lastStderr;  // the last line the rank wrote to stderr before it ended, if any
};

// mpirun's own account of the first rank that ended the job (Open MPI 4), in one of three forms:
//   "mpirun noticed that process rank 3 with PID 0 on node n1 exited on signal 9 (Killed)."
//   "mpirun detected that one or more processes exited with non-zero status, ... The first process
//    to do so was:" / "Process name: [[39481,1],3]" / "Exit code:    143"
//   "mpirun has exited due to process rank 3 with PID 0 on" / "node n1 exiting improperly." (an
//    exit, with status 0 too, before MPI_Finalize)
// Messages wrap, so each line is read together with the one before. Open MPI 4.1 names the rank of a
// program that never calls MPI_Init only now and then (4.1.4: rank 1 of 2 exiting, but neither rank 0
// of 2 nor rank 1 or 5 of 3 to 8 while the others wait), hence RankExit. srun names each task that
// fails:
//   "srun: error: n1: task 3: Exited with exit code 2" / "srun: error: n1: task 3: Killed"
struct LauncherReport {
    int rank = -1;
    int signal = 0;
    std::optional<int> exitCode;
    bool improper = false;  // exited with status 0 before MPI_Finalize (a non-zero status is the second form)
    // Slurm's account of a cancelled step or job (srun relays slurmstepd's line):
    //   "slurmstepd: error: *** STEP 12.0 ON n1 CANCELLED AT 2026-12-01T21:20:00 ***"
    //   "... *** JOB 12 ON n1 CANCELLED AT 2026-12-01T21:20:00 DUE TO TIME LIMIT ***"
    std::string slurmCancelledAt;
    bool slurmTimeLimit = false;
    std::string previousLine;
    int namedRank = -1;  // "Process name: [[j,1],R]", waiting for its "Exit code"
    // A host the launch could not reach, in one of Open MPI's (4.x) or ssh's words:
    //   "A process or daemon was unable to complete a TCP connection" / "to another process:" /
    //   "  Local host:    n2" / "  Remote host:   login" (n2's daemon cannot connect back to mpirun)
    //   "ssh: connect to host n2 port 22: No route to host" / "ssh: Could not resolve hostname n2: ..."
    //   "ORTE has lost communication with a remote daemon." / ... / "  Remote daemon: [[j,0],1] on node n2"
    // followed, at launch, by "ORTE was unable to reliably start one or more daemons."
    std::string unreachableHost;
    std::string unreachableFrom;     // the other end, when Open MPI names it
    std::string unreachableWhy;      // ssh's reason, or what Open MPI's block says
    bool daemonsNotStarted = false;  // "ORTE was unable to reliably start one or more daemons"
    bool inConnectionBlock = false;  // between "unable to complete a TCP connection" and its hosts
    bool inLostDaemonBlock = false;  // between "lost communication with a remote daemon" and its node
    // A crash report ("[host:pid] *** Process received signal ***", then its signal and a
    // backtrace, as Open MPI's handler prints it): the first process to crash, its signal, and the
    // first named frame after the handler's.
    int crashPid = 0;
    std::string crashSignal;  // "Segmentation fault (11)"
    std::string crashFrame;   // "PMIx_Finalize"
    // A launch command's ranks, which run under launchedUnderShell: the first to fail, by its shell's
    // word, and each rank's last two stderr lines as the launcher tags them (mpirun's --tag-output
    // "[1,3]<stderr>:text", srun's --label "3: text").
    std::optional<RankExit> firstRankExit;
    struct RankLines {
        std::string last, before;
    };
    std::map<int, RankLines> rankStderr;

    // How the rank it names ended, in words: "exited on signal 9 (Killed)".
    std::string describe() const;
    // Its crash report in words: "crashed (Segmentation fault (11) in PMIx_Finalize)".
    std::string crashWords() const;
};

// Reads one line of the launcher's output (its stderr's, or else its stdout's) into the report.
void readLauncherLine(const std::string& line, LauncherReport& report, bool fromStderr = true);

// A launch command as each rank runs it: under /bin/sh, which passes it its arguments untouched and,
// when it fails, says how on stderr as RankExit reads it, the rank taken from `rankVariable`
// (OMPI_COMM_WORLD_RANK, SLURM_PROCID). A program that fails before it reports anything (an import
// error, a program that does not report at all) is so named with its status whatever the launcher
// says. mpirun and srun signal the rank's whole process group: the shell catches the stop signals they
// forward (SIGUSR1, SIGUSR2) and waits on, so that it outlives the program, which gets them as it
// would alone (a caught signal is at its default again in the program it starts).
std::vector<std::string> launchedUnderShell(const std::vector<std::string>& command, const std::string& rankVariable);

}  // namespace meshbench::service
