#pragma once
// A trace file read as a stream of bytes, whether plain or gzip-compressed (told by its magic
// number, not its name), in bounded memory: a buffer of compressed and one of plain bytes. The
// file's digest is taken from the same reads: XXH3-128 (xxHash), which tells one file from another
// at memory speed (a cryptographic hash took a fifth of the import's time; no one forges a trace
// against its own import). The reading side is RapidJSON's input-stream concept
// (Peek, Take, Tell), so its SAX reader parses straight from the file.
//
// A damaged or truncated gzip stream ends the bytes early and leaves error() saying so; the parser
// then sees an early end, and the caller reports the gzip error, which is the cause.

#include <xxhash.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace meshbench::import {

class TraceInput {
public:
    // Throws ImportError when the file cannot be opened.
    explicit TraceInput(const std::string& path);
    ~TraceInput();
    TraceInput(const TraceInput&) = delete;
    TraceInput& operator=(const TraceInput&) = delete;

    using Ch = char;
    Ch Peek()
    {
        if (m_pos == m_end && !fill())
            return '\0';
        return *m_pos;
    }
    Ch Take()
    {
        if (m_pos == m_end && !fill())
            return '\0';
        return *m_pos++;
    }
    std::size_t Tell() const { return m_delivered + static_cast<std::size_t>(m_pos - m_plain.data()); }
    // Unused: the stream is read-only (RapidJSON's concept asks for them).
    Ch* PutBegin() { return nullptr; }
    void Put(Ch) {}
    void Flush() {}
    std::size_t PutEnd(Ch*) { return 0; }

    // The next line (without its newline) into `out`, or false at the end: for line-by-line formats.
    bool readLine(std::string& out);

    const std::string& path() const { return m_path; }
    bool compressed() const { return m_compressed; }
    std::uint64_t fileBytesRead() const { return m_fileRead; }
    std::uint64_t fileSize() const { return m_fileSize; }
    // Empty unless the bytes ended early because the file is damaged.
    const std::string& error() const { return m_error; }
    // Reads what is left of the file into the digest, then gives it: "xxh3-128:" and hex.
    std::string digest();

private:
    bool fill();
    bool readRaw();

    std::string m_path;
    std::FILE* m_file = nullptr;
    bool m_compressed = false;
    bool m_rawEnd = false;
    bool m_streamEnded = false;  // the current gzip member ended
    std::uint64_t m_fileSize = 0;
    std::uint64_t m_fileRead = 0;
    std::vector<unsigned char> m_raw;
    std::size_t m_rawBegin = 0, m_rawEnd_ = 0;
    std::vector<char> m_plain;
    char* m_pos = nullptr;
    char* m_end = nullptr;
    std::size_t m_delivered = 0;  // plain bytes before the buffer's start
    z_stream m_zlib{};
    bool m_zlibOpen = false;
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> m_digest{XXH3_createState(), XXH3_freeState};
    std::string m_error;
};

// The digest of a whole file, as TraceInput::digest gives it (for the SQLite format). Throws
// ImportError.
std::string fileDigest(const std::string& path);

}  // namespace meshbench::import
