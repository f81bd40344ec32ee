#include "session_file.h"

#include "session_store.h"

#include "wire/error_text.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace meshbench::store::detail {

namespace {

using FileId = std::pair<dev_t, ino_t>;

struct Uses {
    int readers = 0;
    bool writer = false;
};

// Guards the registry and every open or probe of a session file's descriptor, so a reader cannot
// open a file between a writer's check and its probe.
std::mutex& registryMutex()
{
    static std::mutex mutex;
    return mutex;
}

std::map<FileId, Uses>& registry()
{
    static std::map<FileId, Uses> uses;
    return uses;
}

bool statFile(const std::string& path, FileId& id)
{
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        return false;
    id = {st.st_dev, st.st_ino};
    return true;
}

std::string anotherEngineMessage(const std::string& path)
{
    return "cannot write session " + quoted(path) +
           ": another engine is writing it (it holds the file's lock); stop that engine or choose another session path";
}

// Why an existing file cannot become a new session. The caller holds registryMutex().
std::string existingFileMessage(const std::string& path)
{
    FileId id;
    if (statFile(path, id)) {
        const auto use = registry().find(id);
        if (use != registry().end() && use->second.writer)
            return anotherEngineMessage(path);
        if (use == registry().end()) {
            // No SQLite connection of this process has the file open, so closing the probe drops no lock.
            const int probe = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            if (probe >= 0) {
                const bool locked = ::flock(probe, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
                ::close(probe);
                if (locked)
                    return anotherEngineMessage(path);
            }
        }
    }
    return "cannot create session " + quoted(path) +
           ": the file already exists and a session is never overwritten; choose another path or remove the file";
}

}  // namespace

std::string quoted(const std::string& path) { return "'" + path + "'"; }

WriterClaim::WriterClaim(const std::string& path) : m_path(path)
{
    std::lock_guard lock(registryMutex());
    // O_EXCL: an existing file is never taken over. O_CLOEXEC: processes the engine launches must not
    // inherit the lock and keep it after the engine is gone.
    m_fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (m_fd < 0) {
        const int error = errno;
        if (error == EEXIST)
            throw StoreError(existingFileMessage(path));
        throw StoreError("cannot create session " + quoted(path) + ": " +
                         (error == ENOENT ? std::string("its folder does not exist") : wire::errorText(error)));
    }
    struct stat st {};
    const bool statted = ::fstat(m_fd, &st) == 0;
    // Another process may have opened the new file and locked it between our open and our flock.
    if (!statted || ::flock(m_fd, LOCK_EX | LOCK_NB) != 0) {
        const int error = errno;
        ::close(m_fd);
        throw StoreError(statted && error == EWOULDBLOCK
                             ? anotherEngineMessage(path)
                             : "cannot lock session " + quoted(path) + ": " + wire::errorText(error));
    }
    m_device = st.st_dev;
    m_inode = st.st_ino;
    registry()[{m_device, m_inode}].writer = true;
}

WriterClaim::~WriterClaim()
{
    std::lock_guard lock(registryMutex());
    if (!m_keep) {
        for (const char* suffix : {"", "-wal", "-shm"})
            ::unlink((m_path + suffix).c_str());
    }
    ::close(m_fd);  // releases the flock
    auto& uses = registry();
    const auto use = uses.find({m_device, m_inode});
    if (use != uses.end()) {
        use->second.writer = false;
        if (use->second.readers == 0)
            uses.erase(use);
    }
}

ReaderUse::ReaderUse(const std::string& path)
{
    std::lock_guard lock(registryMutex());
    FileId id;
    if (!statFile(path, id))
        return;
    m_registered = true;
    m_device = id.first;
    m_inode = id.second;
    ++registry()[id].readers;
}

ReaderUse::~ReaderUse()
{
    if (!m_registered)
        return;
    std::lock_guard lock(registryMutex());
    auto& uses = registry();
    const auto use = uses.find({m_device, m_inode});
    if (use != uses.end() && --use->second.readers == 0 && !use->second.writer)
        uses.erase(use);
}

}  // namespace meshbench::store::detail
