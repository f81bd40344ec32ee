#pragma once
// Starts a job's processes and takes them down again. The command is an argument vector run with
// execvp (never a shell string). The launched process leads a process group of its own and
// receives SIGTERM if the engine dies (PR_SET_PDEATHSIG), so a killed engine takes its job with it.
// Teardown signals the whole tree, found through /proc, because mpirun may put the ranks it starts
// in process groups of their own. The tree is remembered while the launcher lives, so that ranks it
// leaves behind when it dies (killed, say) are still found: a rank orphaned to init is no longer a
// descendant.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace meshbench::service {

// How a process ended, in the words of waitpid.
struct ExitStatus {
    int code = 0;    // exit code when it exited
    int signal = 0;  // the signal that killed it, else 0
    bool ok() const { return code == 0 && signal == 0; }
    std::string describe() const;
};

// A signal's description, "Killed" for 9, from any thread (strsignal may use a static buffer).
std::string signalWords(int signal);

// Splits what a pipe delivers into lines.
class LineBuffer {
public:
    // Appends bytes and returns the lines they completed.
    std::vector<std::string> add(const char* data, std::size_t size);
    // The unterminated rest, once the pipe is closed.
    std::optional<std::string> rest();

private:
    std::string m_pending;
};

// A process as /proc names it: its pid, and its start time (clock ticks after boot), which tells a
// process from a later one that reuses the pid.
struct ProcessId {
    pid_t pid = 0;
    unsigned long long startTime = 0;
    bool operator==(const ProcessId&) const = default;
};

class LaunchedProcess {
public:
    // Throws std::runtime_error when the program cannot be started (naming it and why).
    LaunchedProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env);
    ~LaunchedProcess();  // terminates the tree if it still runs
    LaunchedProcess(const LaunchedProcess&) = delete;
    LaunchedProcess& operator=(const LaunchedProcess&) = delete;

    pid_t pid() const { return m_pid; }
    int stdoutFd() const { return m_out; }  // non-blocking, -1 once closed
    int stderrFd() const { return m_err; }
    // Reads what is there on one of the two pipes; closes it at end of file.
    std::vector<std::string> readLines(int fd);
    // Non-blocking; set once the process has ended. While it runs, also notes its descendants.
    std::optional<ExitStatus> poll();
    // SIGTERM to the process and all its descendants (those it left behind included), SIGKILL to
    // whatever is left after `grace`; returns once the process itself has been reaped.
    void terminate(std::chrono::milliseconds grace);
    // An orderly stop: `signal` to the process (mpirun forwards SIGUSR1/2 to every rank), then up to
    // `settleLimit` for `settled` to say that the job has answered (it is polled, and may do work
    // such as reading sockets), then terminate(grace).
    void stop(int signal, std::chrono::milliseconds settleLimit, const std::function<bool()>& settled,
              std::chrono::milliseconds grace);
    // Whether a descendant seen while the launcher ran is still alive (after the launcher ended).
    bool descendantsAlive() const;
    // Whether `pid` was seen in the launcher's tree: a process this machine started for the job
    // (which a rank on another host is not, whatever its pid).
    bool launched(pid_t pid) const;
    // Notes the launcher's descendants now, not at poll()'s once a second: for a rank just heard
    // from, which may have been forked since, so that launched() knows it whatever becomes of it.
    void noteTreeNow();

private:
    pid_t m_pid = -1;
    int m_out = -1;
    int m_err = -1;
    LineBuffer m_outLines;
    LineBuffer m_errLines;
    std::optional<ExitStatus> m_exit;
    // Descendants seen while the launcher ran; a pid with its start time, so a reused pid is not killed.
    std::vector<ProcessId> m_tree;
    std::chrono::steady_clock::time_point m_treeNoted;
    void noteTree();  // at most once a second
    std::vector<ProcessId> liveTree();
};

// Every live descendant of `pid`, from /proc (Linux).
std::vector<pid_t> descendantsOf(pid_t root);
// The state letter of /proc/PID/stat (R running, S sleeping, D disk wait, T stopped, t traced, Z
// zombie), or nothing when there is no such process.
std::optional<char> processState(pid_t pid);
// Whether the process at `pid` is gone or on its way out: no such process, a zombie, one already
// in its exit, or one with a SIGKILL pending. A process killed a moment ago reads so at once, where
// its state letter may still say running until it has let go of its memory.
bool processEnding(pid_t pid);
// The process now at `pid`, or nothing when there is none (or only a zombie).
std::optional<ProcessId> processId(pid_t pid);

}  // namespace meshbench::service
