#pragma once
// Who holds a session file. The writer claims a new file exclusively with flock(); readers and the
// writer record here which files this process has open through SQLite.
//
// SQLite locks with POSIX record locks, which belong to the process and the file: closing *any*
// descriptor of a file drops every such lock the process holds on it, SQLite's included. So the
// only descriptor we open on a session file ourselves is the writer's lock descriptor, kept open
// until after SQLite has closed the file, and a writer that meets an existing file only probes its
// lock when no SQLite connection of this process has that file open.

#include <string>
#include <sys/types.h>

namespace meshbench::store::detail {

// The writer's claim on a new session file: created here (never over an existing file) and locked
// with flock(LOCK_EX) for the claim's lifetime. A file that the writer never finished creating is
// removed again when the claim ends, so the same path can be retried.
class WriterClaim {
public:
    explicit WriterClaim(const std::string& path);  // throws StoreError
    ~WriterClaim();
    WriterClaim(const WriterClaim&) = delete;
    WriterClaim& operator=(const WriterClaim&) = delete;
    // The header is committed: keep the file whatever happens next.
    void keep() { m_keep = true; }

private:
    std::string m_path;
    int m_fd = -1;
    dev_t m_device = 0;
    ino_t m_inode = 0;
    bool m_keep = false;
};

// A reader's use of a session file, registered for its lifetime (nothing when the file does not
// exist: SQLite's open then says why).
class ReaderUse {
public:
    explicit ReaderUse(const std::string& path);
    ~ReaderUse();
    ReaderUse(const ReaderUse&) = delete;
    ReaderUse& operator=(const ReaderUse&) = delete;

private:
    bool m_registered = false;
    dev_t m_device = 0;
    ino_t m_inode = 0;
};

// "'path'" for messages.
std::string quoted(const std::string& path);

}  // namespace meshbench::store::detail
