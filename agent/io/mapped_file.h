#pragma once
// A read-only memory map of a whole regular file (checkpoints, token files), unmapped when
// the object goes. Failures are reported, not thrown, so each reader can phrase them its way.

#include <cstddef>
#include <string>

namespace meshbench::agent {

class MappedFile {
public:
    enum class Failure { None, Open, Directory, NotRegular, Map };

    MappedFile() = default;
    // Maps `path`. An empty file maps to no bytes without failing.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    Failure failure() const { return m_failure; }
    const std::string& error() const { return m_error; }  // the system's words for Open and Map
    const unsigned char* data() const { return m_data; }
    std::size_t size() const { return m_size; }

private:
    void release() noexcept;

    Failure m_failure = Failure::None;
    std::string m_error;
    const unsigned char* m_data = nullptr;
    std::size_t m_size = 0;
};

}  // namespace meshbench::agent
