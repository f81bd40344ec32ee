#include "launcher.h"

#include "wire/error_text.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace meshbench::service {

std::string signalWords(int signal)
{
    const char* words = sigdescr_np(signal);
    return words ? words : "unknown signal";
}

std::string ExitStatus::describe() const
{
    if (signal == SIGKILL)  // nothing but the kernel or another process sends it
        return "killed by signal 9 (Killed): by hand, or by the out-of-memory killer (see dmesg)";
    if (signal != 0)
        return "killed by signal " + std::to_string(signal) + " (" + signalWords(signal) + ")";
    return "exited with status " + std::to_string(code);
}

std::vector<std::string> LineBuffer::add(const char* data, std::size_t size)
{
    std::vector<std::string> lines;
    m_pending.append(data, size);
    std::size_t start = 0;
    for (std::size_t nl; (nl = m_pending.find('\n', start)) != std::string::npos; start = nl + 1)
        lines.push_back(m_pending.substr(start, nl - start));
    m_pending.erase(0, start);
    return lines;
}

std::optional<std::string> LineBuffer::rest()
{
    if (m_pending.empty())
        return std::nullopt;
    std::string rest = std::move(m_pending);
    m_pending.clear();
    return rest;
}

namespace {

// SIGKILL queued and not yet taken: kill(2) marks it pending on every thread at once, and nothing
// blocks or catches it (signal(7)). SigPnd is the thread's set, ShdPnd the process's, as
// hexadecimal masks with signal N at bit N - 1 (proc(5)).
bool killPending(pid_t pid)
{
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) {
            const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
            if (mask & (1ULL << (SIGKILL - 1)))
                return true;
        }
    return false;
}

// A killed process that cannot go on to its exit: asleep uninterruptibly (state D: frozen by a
// cgroup freezer, or waiting on a device) with the SIGKILL still pending and its exit not begun.
bool stuck(pid_t pid);

// Whether the process is still there under its pid (not a zombie, nor a later process reusing it).
bool present(const ProcessId& id) { return processId(id.pid) == id; }

// Whether the process is still there and can still go on to its end. One that is stuck (killed
// while frozen, say) goes once it is let go and not before, whatever it is sent.
bool stillRunning(const ProcessId& id) { return present(id) && !stuck(id.pid); }

// The teardown's wait for killed processes to go. One stuck for kStuckFor is past waiting for:
// waiting would only hold the teardown up. A shorter spell in D state is a page fault or a write
// on a loaded machine, from which a killed process goes on to its exit: it is waited for, so that
// the job is gone when the teardown returns.
class ExitWatch {
public:
    static constexpr std::chrono::milliseconds kStuckFor{1000};

    bool worthWaitingFor(const ProcessId& id)
    {
        if (!present(id) || !stuck(id.pid)) {
            m_stuckSince.erase(id.pid);
            return present(id);
        }
        const auto now = std::chrono::steady_clock::now();
        return now - m_stuckSince.try_emplace(id.pid, now).first->second < kStuckFor;
    }

private:
    std::map<pid_t, std::chrono::steady_clock::time_point> m_stuckSince;
};

ExitStatus fromWaitStatus(int status)
{
    ExitStatus e;
    if (WIFEXITED(status))
        e.code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        e.signal = WTERMSIG(status);
    return e;
}

}  // namespace

LaunchedProcess::LaunchedProcess(const std::vector<std::string>& argv,
                                 const std::vector<std::pair<std::string, std::string>>& env)
{
    if (argv.empty())
        throw std::runtime_error("nothing to launch");
    int out[2], err[2], exec[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(exec, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("cannot create pipes: ") + wire::errorText(errno));
    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    // The child's environment: ours, with `env` set over it (setenv in the child could deadlock on a
    // lock another of our threads held at fork).
    std::vector<std::string> environment;
    for (char** entry = environ; *entry; ++entry) {
        const std::string_view name = std::string_view(*entry).substr(0, std::string_view(*entry).find('='));
        if (std::none_of(env.begin(), env.end(), [&](const auto& set) { return set.first == name; }))
            environment.emplace_back(*entry);
    }
    for (const auto& [key, value] : env)
        environment.push_back(key + "=" + value);
    std::vector<char*> envp;
    envp.reserve(environment.size() + 1);
    for (std::string& entry : environment)
        envp.push_back(entry.data());
    envp.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child < 0)
        throw std::runtime_error(std::string("cannot fork: ") + wire::errorText(errno));
    if (child == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)  // the engine died before prctl took effect
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        pthread_sigmask(SIG_SETMASK, &none, nullptr);  // the engine blocks stop signals; the job must not
        dup2(out[1], STDOUT_FILENO);
        dup2(err[1], STDERR_FILENO);
        execvpe(args[0], args.data(), envp.data());
        const int code = errno;
        [[maybe_unused]] ssize_t n = write(exec[1], &code, sizeof code);
        _exit(127);
    }
    close(out[1]);
    close(err[1]);
    close(exec[1]);
    m_pid = child;
    m_out = out[0];
    m_err = err[0];
    fcntl(m_out, F_SETFL, O_NONBLOCK);
    fcntl(m_err, F_SETFL, O_NONBLOCK);
    // The exec pipe closes on a successful exec; an errno arrives through it when exec failed.
    int code = 0;
    const ssize_t n = read(exec[0], &code, sizeof code);
    close(exec[0]);
    if (n == sizeof code) {
        waitpid(m_pid, nullptr, 0);
        m_pid = -1;
        close(m_out);
        close(m_err);
        throw std::runtime_error("cannot start '" + argv.front() + "': " + wire::errorText(code));
    }
}

LaunchedProcess::~LaunchedProcess()
{
    if (m_pid > 0 && !m_exit)
        terminate(std::chrono::seconds(3));
    if (m_out >= 0)
        close(m_out);
    if (m_err >= 0)
        close(m_err);
}

std::vector<std::string> LaunchedProcess::readLines(int fd)
{
    LineBuffer& buffer = fd == m_out ? m_outLines : m_errLines;
    std::vector<std::string> lines;
    char chunk[65536];
    for (;;) {
        const ssize_t n = read(fd, chunk, sizeof chunk);
        if (n > 0) {
            for (std::string& line : buffer.add(chunk, std::size_t(n)))
                lines.push_back(std::move(line));
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        // End of file (or a broken pipe): the process closed it.
        if (std::optional<std::string> rest = buffer.rest())
            lines.push_back(std::move(*rest));
        close(fd);
        (fd == m_out ? m_out : m_err) = -1;
        break;
    }
    return lines;
}

std::optional<ExitStatus> LaunchedProcess::poll()
{
    if (!m_exit && m_pid > 0) {
        noteTree();
        int status = 0;
        if (waitpid(m_pid, &status, WNOHANG) == m_pid)
            m_exit = fromWaitStatus(status);
    }
    return m_exit;
}

void LaunchedProcess::noteTree()
{
    // Once a second (a scan of /proc where the kernel lists no children); noteTreeNow covers the
    // ranks forked in between, as they are first heard.
    if (std::chrono::steady_clock::now() - m_treeNoted >= std::chrono::seconds(1))
        noteTreeNow();
}

void LaunchedProcess::noteTreeNow()
{
    m_treeNoted = std::chrono::steady_clock::now();
    if (m_exit || m_pid <= 0)
        return;
    for (pid_t pid : descendantsOf(m_pid))
        if (const std::optional<ProcessId> id = processId(pid);
            id && std::find(m_tree.begin(), m_tree.end(), *id) == m_tree.end())
            m_tree.push_back(*id);
}

std::vector<ProcessId> LaunchedProcess::liveTree()
{
    std::vector<ProcessId> tree;
    if (!m_exit)
        for (pid_t pid : descendantsOf(m_pid))
            if (const std::optional<ProcessId> id = processId(pid))
                tree.push_back(*id);
    for (const ProcessId& id : m_tree)
        if (present(id) && std::find(tree.begin(), tree.end(), id) == tree.end())
            tree.push_back(id);
    return tree;
}

bool LaunchedProcess::descendantsAlive() const { return std::any_of(m_tree.begin(), m_tree.end(), stillRunning); }

bool LaunchedProcess::launched(pid_t pid) const
{
    return std::any_of(m_tree.begin(), m_tree.end(), [pid](const ProcessId& id) { return id.pid == pid; });
}

void LaunchedProcess::stop(int signal, std::chrono::milliseconds settleLimit, const std::function<bool()>& settled,
                           std::chrono::milliseconds grace)
{
    if (m_pid <= 0 || poll())
        return terminate(grace);
    kill(m_pid, signal);
    const auto deadline = std::chrono::steady_clock::now() + settleLimit;
    while (!poll() && !settled() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    terminate(grace);
}

void LaunchedProcess::terminate(std::chrono::milliseconds grace)
{
    if (m_pid <= 0)
        return;
    poll();
    // The launcher is asked first, alone: mpirun ends its job in order when it gets SIGTERM (SIGTERM
    // to every rank, then SIGKILL to those left; Open MPI's mpirun(1), "Signal Propagation"), and
    // srun forwards it to its tasks. Signalling its whole tree at once would also end the ssh (or
    // other plm_rsh agent) sessions that carry its daemons before it has ordered them to stop, which
    // ORTE takes for daemons that failed to start ("ORTE was unable to reliably start one or more
    // daemons", plm_rsh's rsh_wait_daemon) on every stop. What the launcher does not end within half
    // the grace (a host it cannot reach, a launcher that hangs) is signalled directly, then killed.
    // The tree is taken before signalling: once mpirun is gone its children are reparented. Each
    // process is signalled only while its pid still names it (a pid is reused once reaped).
    const std::vector<ProcessId> children = liveTree();
    if (m_exit && children.empty())
        return;
    const auto signalTree = [&children](int signal) {
        for (const ProcessId& id : children)
            if (present(id))
                kill(id.pid, signal);
    };
    ExitWatch watch;
    const auto going = [&] {
        return std::any_of(children.begin(), children.end(),
                           [&watch](const ProcessId& id) { return watch.worthWaitingFor(id); });
    };
    auto waitUntilGone = [&](std::chrono::milliseconds limit) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        auto anyAlive = [&] {
            poll();
            return !m_exit || going();
        };
        while (anyAlive() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return !anyAlive();
    };
    std::chrono::milliseconds left = grace;
    if (!poll()) {
        kill(m_pid, SIGTERM);
        if (waitUntilGone(grace / 2))
            return;
        left = grace - grace / 2;
    }
    // Whatever the launcher left, or did not end in time: every process of its tree (not the
    // launcher again: a second SIGTERM makes mpirun abandon its orderly teardown).
    signalTree(SIGTERM);
    if (!waitUntilGone(left)) {
        // The process group outlives its leader while members are left; its id cannot be reused until
        // they are gone, so it is safe to signal even after the launcher was reaped.
        killpg(m_pid, SIGKILL);
        if (!m_exit)
            kill(m_pid, SIGKILL);
        signalTree(SIGKILL);
        // Killed processes still take a moment to go (a loaded machine's exit of a large process,
        // more): the job is gone when this returns, but for those that cannot go (stuck).
        const auto deadline = std::chrono::steady_clock::now() + grace;
        while (going() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!m_exit) {
        int status = 0;
        if (waitpid(m_pid, &status, 0) == m_pid)
            m_exit = fromWaitStatus(status);
    }
}

namespace {

// Parent pid, state, flags and start time of /proc/PID/stat (proc(5)); the command name in
// parentheses may hold spaces.
struct Stat {
    pid_t parent = 0;
    char state = 0;
    unsigned long flags = 0;  // the kernel's PF_* flags of the task
    unsigned long long startTime = 0;
};

std::optional<Stat> readStat(pid_t pid)
{
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    if (!std::getline(stat, text))
        return std::nullopt;
    const std::size_t close = text.rfind(')');
    if (close == std::string::npos)
        return std::nullopt;
    // After the name: state (field 3), ppid (4), fields 5-8, flags (9), fields 10-21, starttime (22).
    std::istringstream fields(text.substr(close + 1));
    Stat out;
    long ppid = 0;
    fields >> out.state >> ppid;
    std::string skipped;
    for (int field = 5; field <= 8; ++field)
        fields >> skipped;
    fields >> out.flags;
    for (int field = 10; field <= 21; ++field)
        fields >> skipped;
    fields >> out.startTime;
    out.parent = pid_t(ppid);
    return fields ? std::optional<Stat>(out) : std::nullopt;
}

// The children of one process, from /proc/PID/task/TID/children (Linux 3.5+ with CONFIG_PROC_CHILDREN).
std::vector<pid_t> childrenListed(pid_t pid)
{
    std::vector<pid_t> children;
    const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    if (DIR* dir = opendir(tasks.c_str())) {
        while (dirent* entry = readdir(dir)) {
            std::ifstream list(tasks + "/" + entry->d_name + "/children");
            for (long child = 0; entry->d_name[0] != '.' && list >> child;)
                children.push_back(pid_t(child));
        }
        closedir(dir);
    }
    return children;
}

// Every process's parent, from a scan of all of /proc: where the kernel has no children lists.
std::multimap<pid_t, pid_t> childrenByParent()
{
    std::multimap<pid_t, pid_t> children;
    if (DIR* proc = opendir("/proc")) {
        while (dirent* entry = readdir(proc)) {
            char* end = nullptr;
            const long pid = std::strtol(entry->d_name, &end, 10);
            if (*end != '\0' || pid <= 0)
                continue;
            if (const std::optional<Stat> stat = readStat(pid_t(pid)))
                children.emplace(stat->parent, pid_t(pid));
        }
        closedir(proc);
    }
    return children;
}

}  // namespace

std::vector<pid_t> descendantsOf(pid_t root)
{
    // The children lists cost the job's own tree; without them, one scan of the host's processes.
    static const bool listed = std::ifstream("/proc/self/task/" + std::to_string(gettid()) + "/children").good();
    std::multimap<pid_t, pid_t> byParent;
    if (!listed)
        byParent = childrenByParent();
    std::vector<pid_t> found;
    std::vector<pid_t> frontier{root};
    while (!frontier.empty()) {
        const pid_t p = frontier.back();
        frontier.pop_back();
        std::vector<pid_t> children;
        if (listed) {
            children = childrenListed(p);
        } else {
            auto [begin, end] = byParent.equal_range(p);
            for (auto it = begin; it != end; ++it)
                children.push_back(it->second);
        }
        for (pid_t child : children)
            if (child > 0 && std::find(found.begin(), found.end(), child) == found.end()) {
                found.push_back(child);
                frontier.push_back(child);
            }
    }
    return found;
}

std::optional<char> processState(pid_t pid)
{
    const std::optional<Stat> stat = readStat(pid);
    return stat ? std::optional<char>(stat->state) : std::nullopt;
}

namespace {

bool stuck(pid_t pid)
{
    constexpr unsigned long kExiting = 0x4;  // PF_EXITING, as in processEnding
    const std::optional<Stat> stat = readStat(pid);
    return stat && stat->state == 'D' && !(stat->flags & kExiting) && killPending(pid);
}

}  // namespace

bool processEnding(pid_t pid)
{
    // PF_EXITING (include/linux/sched.h): set as the task enters do_exit, before it lets go of its
    // memory and files, which on a loaded machine can take a while.
    constexpr unsigned long kExiting = 0x4;
    const std::optional<Stat> stat = readStat(pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X' || (stat->flags & kExiting))
        return true;
    return killPending(pid) || !processId(pid);  // (gone since the first read)
}

std::optional<ProcessId> processId(pid_t pid)
{
    const std::optional<Stat> stat = readStat(pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X')
        return std::nullopt;
    return ProcessId{pid, stat->startTime};
}

}  // namespace meshbench::service
