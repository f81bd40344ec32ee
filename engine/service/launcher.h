#pragma once
// Starts a job's processes and takes them down again. The command is an argument vector run with
// execvp (never a shell string). The launched process leads a process group of its own and
// receives SIGTERM if the engine dies (PR_SET_PDEATHSIG), so a killed engine takes its job with it.
// Teardown signals the whole tree, found through /proc, because mpirun may put the ranks it starts
// in process groups of their own.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace meshbench::service {

// How a process ended, in the words of waitpid.
struct ExitStatus {
    int code = 0;       // exit code when it exited
    int signal = 0;     // the signal that killed it, else 0
    bool ok() const { return code == 0 && signal == 0; }
    std::string describe() const;
};

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

class LaunchedProcess {
public:
    // Throws std::runtime_error when the program cannot be started (naming it and why).
    LaunchedProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env);
    ~LaunchedProcess();   // terminates the tree if it still runs
    LaunchedProcess(const LaunchedProcess&) = delete;
    LaunchedProcess& operator=(const LaunchedProcess&) = delete;

    pid_t pid() const { return m_pid; }
    int stdoutFd() const { return m_out; }   // non-blocking, -1 once closed
    int stderrFd() const { return m_err; }
    // Reads what is there on one of the two pipes; closes it at end of file.
    std::vector<std::string> readLines(int fd);
    // Non-blocking; set once the process has ended.
    std::optional<ExitStatus> poll();
    // SIGTERM to the process and all its descendants, SIGKILL to whatever is left after `grace`;
    // returns once the process itself has been reaped.
    void terminate(std::chrono::milliseconds grace);

private:
    pid_t m_pid = -1;
    int m_out = -1;
    int m_err = -1;
    LineBuffer m_outLines;
    LineBuffer m_errLines;
    std::optional<ExitStatus> m_exit;
};

// Every live descendant of `pid`, from /proc (Linux).
std::vector<pid_t> descendantsOf(pid_t pid);
// Whether a process with this pid still exists (and is not a zombie).
bool processAlive(pid_t pid);

}  // namespace meshbench::service
