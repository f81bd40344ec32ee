#pragma once
// A flat file of token ids, as nanoGPT's data/*/prepare.py writes (np.uint16 .bin) or
// Megatron-style preprocessors write (uint16 or uint32): no header, little-endian ids back to
// back. The file is mapped read-only; samples are windows into it.

#include "agent/data/token_source.h"
#include "agent/io/mapped_file.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace meshbench::agent {

class TokenFileSource final : public TokenSource {
public:
    // Throws DataError, naming the file and the fix, when the file is missing or unreadable,
    // empty, not a whole number of ids, shorter than seqLen + 1 tokens, or holds an id >= vocab
    // (all ids are checked once, here).
    TokenFileSource(const std::string& path, plan::TokenDtype dtype, int vocab, int seqLen);

    int vocab() const override { return m_vocab; }
    // Sample order: sample g is the window of `length` consecutive tokens starting at token
    // offset (g * seqLen) mod (N - length + 1), N = tokens in the file (g taken mod that
    // count first, so negative g wrap too). With length = seqLen + 1 consecutive samples
    // overlap by one token, exactly as their targets continue one another, and sample
    // indices past the end wrap round to the start of the file. 1 <= length <= N, else
    // DataError.
    void sample(std::int64_t index, int length, std::int32_t* out) const override;
    std::string describe() const override;

    const std::string& path() const { return m_path; }
    std::int64_t tokenCount() const { return m_tokens; }
    int bytesPerToken() const { return m_width; }

private:
    std::uint32_t tokenAt(std::int64_t position) const;

    std::string m_path;
    int m_vocab = 0;
    int m_seqLen = 0;
    int m_width = 2;            // bytes per id
    std::int64_t m_tokens = 0;  // N
    MappedFile m_file;
};

}  // namespace meshbench::agent
