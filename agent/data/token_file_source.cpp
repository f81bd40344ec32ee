#include "agent/data/token_file_source.h"

#include <bit>
#include <sstream>
#include <utility>

namespace meshbench::agent {

namespace {

std::string quoted(const std::string& path) { return "'" + path + "'"; }

// (a * b) mod m without overflow, for 0 <= a, b < m < 2^63 (double-and-add).
std::uint64_t mulMod(std::uint64_t a, std::uint64_t b, std::uint64_t m)
{
    std::uint64_t result = 0;
    a %= m;
    while (b != 0) {
        if (b & 1)
            result = (result + a) % m;
        a = (a + a) % m;
        b >>= 1;
    }
    return result;
}

}  // namespace

TokenFileSource::TokenFileSource(const std::string& path, plan::TokenDtype dtype, int vocab, int seqLen)
    : m_path(path), m_vocab(vocab), m_seqLen(seqLen), m_width(dtype == plan::TokenDtype::Uint32 ? 4 : 2)
{
    if (vocab < 1)
        throw DataError("token file " + quoted(path) + ": vocab " + std::to_string(vocab) + " must be positive");
    if (seqLen < 1)
        throw DataError("token file " + quoted(path) + ": sequence length " + std::to_string(seqLen) +
                        " must be positive");

    m_file = MappedFile(path);
    switch (m_file.failure()) {
    case MappedFile::Failure::None:
        break;
    case MappedFile::Failure::Open:
        throw DataError("cannot open token file " + quoted(path) + ": " + m_file.error() + "; check train.data.path");
    case MappedFile::Failure::Directory:
    case MappedFile::Failure::NotRegular:
        throw DataError(
            "cannot read token file " + quoted(path) + ": " +
            (m_file.failure() == MappedFile::Failure::Directory ? "it is a directory" : "it is not a regular file") +
            "; check train.data.path");
    case MappedFile::Failure::Map:
        throw DataError("cannot map token file " + quoted(path) + ": " + m_file.error());
    }
    const auto bytes = static_cast<std::uint64_t>(m_file.size());
    const std::string dtypeText = std::to_string(m_width) + " (" + std::string(plan::tokenDtypeName(dtype)) + ")";
    if (bytes == 0)
        throw DataError("token file " + quoted(path) + " is empty; check train.data.path");
    if (bytes % static_cast<std::uint64_t>(m_width) != 0)
        throw DataError("token file " + quoted(path) + " is " + std::to_string(bytes) + " bytes, not a multiple of " +
                        dtypeText + "; is the dtype right? (train.data.dtype)");
    m_tokens = static_cast<std::int64_t>(bytes / static_cast<std::uint64_t>(m_width));
    if (m_tokens < static_cast<std::int64_t>(seqLen) + 1)
        throw DataError("token file " + quoted(path) + " holds " + std::to_string(m_tokens) +
                        " tokens, fewer than the " + std::to_string(std::int64_t{seqLen} + 1) +
                        " one sample needs (model.seq_len + 1); use a longer file or a shorter model.seq_len");

    // One pass over every id, so a wrong vocab or dtype is caught now, not as an
    // out-of-range embedding lookup mid-run.
    for (std::int64_t i = 0; i < m_tokens; ++i) {
        const std::uint32_t id = tokenAt(i);
        if (id >= static_cast<std::uint32_t>(vocab)) {
            const std::string message = "token file " + quoted(path) + ": token " + std::to_string(id) +
                                        " at position " + std::to_string(i) + " is not below vocab " +
                                        std::to_string(vocab) +
                                        "; check model.vocab (the tokenizer's vocabulary size) and train.data.dtype";
            throw DataError(message);
        }
    }
}

std::uint32_t TokenFileSource::tokenAt(std::int64_t position) const
{
    const unsigned char* p = m_file.data() + static_cast<std::size_t>(position) * static_cast<std::size_t>(m_width);
    // Little-endian on disk whatever the host.
    if (m_width == 2)
        return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8;
    return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
           static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

void TokenFileSource::sample(std::int64_t index, int length, std::int32_t* out) const
{
    if (m_file.data() == nullptr)
        throw DataError("token file source was moved from");
    if (length < 1 || length > m_tokens)
        throw DataError("token file " + quoted(m_path) + ": a sample of " + std::to_string(length) +
                        " tokens does not fit in its " + std::to_string(m_tokens) + " tokens");
    const auto starts = static_cast<std::uint64_t>(m_tokens - length + 1);
    const auto g =
        static_cast<std::uint64_t>(((index % static_cast<std::int64_t>(starts)) + static_cast<std::int64_t>(starts)) %
                                   static_cast<std::int64_t>(starts));
    const auto offset = static_cast<std::int64_t>(mulMod(g, static_cast<std::uint64_t>(m_seqLen), starts));
    if (m_width == 2 && std::endian::native == std::endian::little) {
        const unsigned char* p = m_file.data() + static_cast<std::size_t>(offset) * 2;
        for (int j = 0; j < length; ++j) {
            std::uint16_t id;
            std::memcpy(&id, p + 2 * static_cast<std::size_t>(j), sizeof id);
            out[j] = static_cast<std::int32_t>(id);
        }
        return;
    }
    for (int j = 0; j < length; ++j)
        out[j] = static_cast<std::int32_t>(tokenAt(offset + j));
}

std::string TokenFileSource::describe() const
{
    std::ostringstream s;
    s << "token file '" << m_path << "' (" << m_tokens << " tokens, " << (m_width == 2 ? "uint16" : "uint32")
      << ", vocab " << m_vocab << ")";
    return s.str();
}

}  // namespace meshbench::agent
