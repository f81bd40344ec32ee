#include "trace_input.h"

#include "import_error.h"

#include "wire/error_text.h"

#include <cerrno>
#include <cstring>

namespace meshbench::import {

namespace {

constexpr std::size_t kRawBuffer = 1 << 20;
constexpr std::size_t kPlainBuffer = 4 << 20;

std::string hex(const unsigned char* bytes, std::size_t size)
{
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string text;
    text.reserve(2 * size);
    for (std::size_t i = 0; i < size; ++i) {
        text += kDigits[bytes[i] >> 4];
        text += kDigits[bytes[i] & 15];
    }
    return text;
}

}  // namespace

TraceInput::TraceInput(const std::string& path) : m_path(path), m_raw(kRawBuffer), m_plain(kPlainBuffer)
{
    if (!m_digest || XXH3_128bits_reset(m_digest.get()) != XXH_OK)
        throw ImportError(path + ": out of memory");
    m_file = std::fopen(path.c_str(), "rb");
    if (!m_file)
        throw ImportError(path + ": cannot be read: " + wire::errorText(errno));
    if (std::fseek(m_file, 0, SEEK_END) == 0) {
        const long size = std::ftell(m_file);
        m_fileSize = size > 0 ? static_cast<std::uint64_t>(size) : 0;
        std::rewind(m_file);
    }
    m_pos = m_end = m_plain.data();
    readRaw();
    m_compressed = m_rawEnd_ - m_rawBegin >= 2 && m_raw[0] == 0x1f && m_raw[1] == 0x8b;
    if (m_compressed) {
        // 15 + 16: a gzip wrapper, the largest window.
        if (inflateInit2(&m_zlib, 15 + 16) != Z_OK) {
            std::fclose(m_file);
            throw ImportError(path + ": cannot start zlib to read it");
        }
        m_zlibOpen = true;
    }
}

TraceInput::~TraceInput()
{
    if (m_zlibOpen)
        inflateEnd(&m_zlib);
    if (m_file)
        std::fclose(m_file);
}

bool TraceInput::readRaw()
{
    if (m_rawEnd)
        return false;
    const std::size_t got = std::fread(m_raw.data(), 1, m_raw.size(), m_file);
    if (got == 0) {
        if (std::ferror(m_file))
            m_error = "reading it failed: " + wire::errorText(errno);
        m_rawEnd = true;
        return false;
    }
    XXH3_128bits_update(m_digest.get(), m_raw.data(), got);
    m_fileRead += got;
    m_rawBegin = 0;
    m_rawEnd_ = got;
    return true;
}

bool TraceInput::fill()
{
    if (!m_error.empty())
        return false;
    m_delivered += static_cast<std::size_t>(m_end - m_plain.data());
    m_pos = m_end = m_plain.data();
    if (!m_compressed) {
        if (m_rawBegin == m_rawEnd_ && !readRaw())
            return false;
        const std::size_t n = m_rawEnd_ - m_rawBegin;
        std::memcpy(m_plain.data(), m_raw.data() + m_rawBegin, n);
        m_rawBegin = m_rawEnd_;
        m_end = m_plain.data() + n;
        return true;
    }
    while (m_end == m_plain.data()) {
        if (m_rawBegin == m_rawEnd_ && !readRaw()) {
            if (!m_streamEnded && m_error.empty())
                m_error = "its gzip stream is truncated after " + std::to_string(m_fileRead) +
                          " bytes (copied while it was written?); copy the whole file, or re-export it";
            return false;
        }
        if (m_streamEnded) {
            // Another gzip member follows (concatenated .gz files are one stream to gzip -d).
            inflateReset(&m_zlib);
            m_streamEnded = false;
        }
        m_zlib.next_in = m_raw.data() + m_rawBegin;
        m_zlib.avail_in = static_cast<uInt>(m_rawEnd_ - m_rawBegin);
        m_zlib.next_out = reinterpret_cast<Bytef*>(m_plain.data());
        m_zlib.avail_out = static_cast<uInt>(m_plain.size());
        const int status = inflate(&m_zlib, Z_NO_FLUSH);
        m_rawBegin = m_rawEnd_ - m_zlib.avail_in;
        m_end = m_plain.data() + (m_plain.size() - m_zlib.avail_out);
        if (status == Z_STREAM_END) {
            m_streamEnded = true;
        } else if (status != Z_OK && status != Z_BUF_ERROR) {
            m_error = std::string("its gzip stream is damaged (") + (m_zlib.msg ? m_zlib.msg : "zlib error") +
                      ") at byte " + std::to_string(m_fileRead - m_zlib.avail_in) + " of the file";
            m_end = m_plain.data();
            return false;
        }
    }
    return true;
}

bool TraceInput::readLine(std::string& out)
{
    out.clear();
    for (;;) {
        if (m_pos == m_end && !fill())
            return !out.empty();
        char* newline = static_cast<char*>(std::memchr(m_pos, '\n', static_cast<std::size_t>(m_end - m_pos)));
        if (newline) {
            out.append(m_pos, newline);
            m_pos = newline + 1;
            return true;
        }
        out.append(m_pos, m_end);
        m_pos = m_end;
    }
}

std::string TraceInput::digest()
{
    while (readRaw()) {
    }
    XXH128_canonical_t bytes;
    XXH128_canonicalFromHash(&bytes, XXH3_128bits_digest(m_digest.get()));
    return "xxh3-128:" + hex(bytes.digest, sizeof bytes.digest);
}

std::string fileDigest(const std::string& path)
{
    TraceInput input(path);
    return input.digest();
}

}  // namespace meshbench::import
