#pragma once
// Runs part of a test as another, unprivileged local user. Tests that are about permissions (a
// read-only folder, a client of another user's engine) prove nothing as root, which ignores file
// modes, and CI runs as root. As root, otherTestUser() creates a dedicated system user
// "meshbench-other" (no home, no login shell) once per machine, and runAsOtherUser() runs a function
// in a forked child that has dropped to it.
//
//     MESHBENCH_OTHER_TEST_USER(user);   // QSKIP unless root; QFAIL as root if it cannot be made
//     // Everything the child touches must be reachable by user->uid (QTemporaryDir is 0700 root).
//     std::string message;
//     const int status = runAsOtherUser(*user, [&](std::string& out) { ...; return 0; }, message);
//     QVERIFY2(status == 0, message.c_str());
//
// The function runs in a fork of a multi-threaded test process: keep it to plain calls on this
// thread's objects, no Qt Test macros (they would record in the child), no event loop, and return a
// status instead of throwing (an exception is caught and reported as kOtherUserThrew).

#include "wire/error_text.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

struct OtherUser {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
};

inline constexpr const char* kOtherTestUserName = "meshbench-other";

// Statuses runAsOtherUser() returns for its own failures; a function should use other values.
inline constexpr int kOtherUserForkFailed = -1;   // fork() or pipe() failed in the parent
inline constexpr int kOtherUserDropFailed = 125;  // the child could not become the user
inline constexpr int kOtherUserThrew = 126;       // the function threw
inline constexpr int kOtherUserSignalBase = 128;  // 128 + n: the child died of signal n

namespace other_user_detail {

inline std::optional<OtherUser> lookUp(const std::string& name)
{
    std::vector<char> buffer(16384);
    passwd entry{};
    passwd* found = nullptr;
    if (getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr)
        return std::nullopt;
    return OtherUser{name, found->pw_uid, found->pw_gid};
}

// Runs `argv` (no shell) and returns its exit status, or -1 when it could not run.
inline int runCommand(const std::vector<std::string>& argv)
{
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& arg : argv)
        args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child < 0)
        return -1;
    if (child == 0) {
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDOUT_FILENO);  // useradd's chatter; its errors on stderr stay visible
        execvp(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Creates the user unless it exists. Two test processes may get here at once: an exclusive flock
// on a root-owned file serialises them (useradd's own lock makes the loser fail, not wait), and
// the user is looked up again under the lock before creating it.
inline std::optional<OtherUser> create(std::string& why)
{
    const char* lockPath =
        access("/run/lock", W_OK) == 0 ? "/run/lock/meshbench-other-user.lock" : "/tmp/meshbench-other-user.lock";
    const int lock = open(lockPath, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lock < 0) {
        why = std::string("cannot open ") + lockPath + ": " + meshbench::wire::errorText(errno);
        return std::nullopt;
    }
    while (flock(lock, LOCK_EX) != 0)
        if (errno != EINTR) {
            why = std::string("cannot lock ") + lockPath + ": " + meshbench::wire::errorText(errno);
            close(lock);
            return std::nullopt;
        }
    std::optional<OtherUser> user = lookUp(kOtherTestUserName);
    if (!user) {
        const int status = runCommand({"useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                                       "--shell", "/usr/sbin/nologin", "--user-group", kOtherTestUserName});
        user = lookUp(kOtherTestUserName);
        // 9: it exists (made by something that does not take our lock); the lookup decides.
        if (!user)
            why = "useradd " + std::string(kOtherTestUserName) + " failed (exit status " + std::to_string(status) +
                  "; is the shadow-utils useradd installed?)";
    }
    close(lock);  // releases the flock
    if (user && (user->uid == 0 || user->gid == 0)) {
        why = std::string("user ") + kOtherTestUserName + " exists but has uid or gid 0: not unprivileged";
        return std::nullopt;
    }
    return user;
}

}  // namespace other_user_detail

// The unprivileged test user, created on first use when running as root. std::nullopt when not
// root (nothing to create it with, and the test already runs unprivileged) or when creating it
// failed; `why` then says which, in words fit for QSKIP or QFAIL.
inline std::optional<OtherUser> otherTestUser(std::string* why = nullptr)
{
    static std::mutex mutex;
    static std::optional<OtherUser> cached;
    static std::string cachedWhy;
    static bool done = false;
    const std::lock_guard<std::mutex> guard(mutex);
    if (!done) {
        if (geteuid() != 0)
            cachedWhy = "needs root to create the test user " + std::string(kOtherTestUserName) +
                        " (not root: the test's user is already unprivileged, run it as root for this case)";
        else
            cached = other_user_detail::create(cachedWhy);
        done = true;
    }
    if (why != nullptr)
        *why = cachedWhy;
    return cached;
}

// Forks; the child drops every group, its gid and its uid to `user`'s, checks that it cannot get
// root back, runs `function` and exits with its return value (0-255). The parent waits and
// returns the child's exit status, kOtherUserSignalBase + n if signal n killed it, or the k*
// statuses above. Whatever the child writes into `message` (a reason for a failure, say) comes
// back through a pipe, up to 64 KiB.
inline int runAsOtherUser(const OtherUser& user, const std::function<int(std::string& message)>& function,
                          std::string& message)
{
    message.clear();
    int pipeFds[2];
    if (pipe2(pipeFds, O_CLOEXEC) != 0) {
        message = std::string("pipe: ") + meshbench::wire::errorText(errno);
        return kOtherUserForkFailed;
    }
    std::fflush(nullptr);  // or the child's exit would print the parent's buffered output again
    const pid_t child = fork();
    if (child < 0) {
        message = std::string("fork: ") + meshbench::wire::errorText(errno);
        close(pipeFds[0]);
        close(pipeFds[1]);
        return kOtherUserForkFailed;
    }
    if (child == 0) {
        close(pipeFds[0]);
        std::string said;
        int status = kOtherUserDropFailed;
        // Order matters: groups and gid need the privilege that setuid gives up.
        if (setgroups(0, nullptr) != 0)
            said = std::string("setgroups: ") + meshbench::wire::errorText(errno);
        else if (setgid(user.gid) != 0)
            said = std::string("setgid: ") + meshbench::wire::errorText(errno);
        else if (setuid(user.uid) != 0)
            said = std::string("setuid: ") + meshbench::wire::errorText(errno);
        else if (getuid() != user.uid || geteuid() != user.uid || getgid() != user.gid || getegid() != user.gid ||
                 getgroups(0, nullptr) != 0)
            said = "the child's ids are not the user's after dropping to it";
        else if (setuid(0) == 0)
            said = "the child could become root again after dropping to " + user.name;
        else {
            try {
                status = function(said) & 0xff;
            } catch (const std::exception& error) {
                said = std::string("threw: ") + error.what();
                status = kOtherUserThrew;
            } catch (...) {
                said = "threw something other than std::exception";
                status = kOtherUserThrew;
            }
        }
        said.resize(std::min<std::size_t>(said.size(), 65536));
        for (std::size_t at = 0; at < said.size();) {
            const ssize_t wrote = write(pipeFds[1], said.data() + at, said.size() - at);
            if (wrote <= 0 && errno != EINTR)
                break;
            at += wrote > 0 ? std::size_t(wrote) : 0;
        }
        close(pipeFds[1]);
        std::fflush(nullptr);
        _exit(status);
    }
    close(pipeFds[1]);
    char buffer[4096];
    for (;;) {
        const ssize_t got = read(pipeFds[0], buffer, sizeof buffer);
        if (got > 0)
            message.append(buffer, std::size_t(got));
        else if (got == 0 || errno != EINTR)
            break;
    }
    close(pipeFds[0]);
    int status = 0;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR)
            return kOtherUserForkFailed;
    if (WIFSIGNALED(status))
        return kOtherUserSignalBase + WTERMSIG(status);
    return WEXITSTATUS(status);
}

// In a Qt test function: declares `user`, the test user, or ends the test: QSKIP when not root (no
// user can be made), QFAIL as root (the user should exist: a broken machine, not a reason to skip).
// NOLINTBEGIN(bugprone-macro-parentheses): `user` is the name the macro declares, not an expression
#define MESHBENCH_OTHER_TEST_USER(user)                                                                                \
    std::string user##Why;                                                                                             \
    const std::optional<OtherUser> user = otherTestUser(&user##Why);                                                   \
    if (!user) {                                                                                                       \
        if (geteuid() == 0)                                                                                            \
            QFAIL(user##Why.c_str());                                                                                  \
        QSKIP(user##Why.c_str());                                                                                      \
    }
// NOLINTEND(bugprone-macro-parentheses)

// The same for a function with nothing to say beyond its status.
inline int runAsOtherUser(const OtherUser& user, const std::function<int()>& function)
{
    std::string ignored;
    return runAsOtherUser(
        user, [&](std::string&) { return function(); }, ignored);
}
