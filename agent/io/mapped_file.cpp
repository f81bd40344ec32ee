#include "mapped_file.h"

#include "wire/error_text.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace meshbench::agent {

MappedFile::MappedFile(const std::string& path)
{
    // Only a regular file is opened: opening a FIFO blocks until a writer comes, and a device may act
    // on being opened. O_NONBLOCK keeps a file swapped in after the check from blocking the open.
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
        m_failure = S_ISDIR(info.st_mode) ? Failure::Directory : Failure::NotRegular;
        return;
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        m_failure = Failure::Open;
        m_error = wire::errorText(errno);
        return;
    }
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        m_failure = S_ISDIR(info.st_mode) ? Failure::Directory : Failure::NotRegular;
        ::close(fd);
        return;
    }
    const auto size = static_cast<std::size_t>(info.st_size);
    if (size > 0) {
        void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (mapped == MAP_FAILED) {
            m_failure = Failure::Map;
            m_error = wire::errorText(errno);
        } else {
            m_data = static_cast<const unsigned char*>(mapped);
            m_size = size;
        }
    }
    ::close(fd);  // the mapping keeps the file alive
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : m_failure(other.m_failure), m_error(std::move(other.m_error)), m_data(std::exchange(other.m_data, nullptr)),
      m_size(std::exchange(other.m_size, 0))
{
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept
{
    if (this != &other) {
        release();
        m_failure = other.m_failure;
        m_error = std::move(other.m_error);
        m_data = std::exchange(other.m_data, nullptr);
        m_size = std::exchange(other.m_size, 0);
    }
    return *this;
}

void MappedFile::release() noexcept
{
    if (m_data)
        ::munmap(const_cast<unsigned char*>(m_data), m_size);
    m_data = nullptr;
    m_size = 0;
}

}  // namespace meshbench::agent
