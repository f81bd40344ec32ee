#pragma once
// Where the trainer's tokens come from: a synthetic Markov chain with a known entropy rate
// (the loss floor a perfect model reaches), or a flat token file as nanoGPT's prepare.py and
// Megatron's preprocessors write. Both are random access: sample g can be produced alone,
// from any thread, so every data-parallel rank draws its own samples without coordination.

#include "plan/job_spec.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace meshbench::agent {

// A bad token file, or data settings that did not pass the job spec's checks. The message names the
// file or the job-spec field (train.data.<key>) and says what to change.
class DataError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class TokenSource {
public:
    virtual ~TokenSource() = default;

    // Token ids lie in [0, vocab()).
    virtual int vocab() const = 0;
    // Writes `length` tokens of global sample `index` to out. The trainer asks for
    // seq_len + 1 tokens: inputs are out[0, seq_len), targets out[1, seq_len].
    // Deterministic, and thread-safe: const, no shared mutable state.
    virtual void sample(std::int64_t index, int length, std::int32_t* out) const = 0;
    // One line for logs, e.g. "markov chain (vocab 256, order 1, branching 4, ...)".
    virtual std::string describe() const = 0;

protected:
    TokenSource() = default;
    TokenSource(const TokenSource&) = default;
    TokenSource(TokenSource&&) = default;
    TokenSource& operator=(const TokenSource&) = default;
    TokenSource& operator=(TokenSource&&) = default;
};

// Builds the source the job spec's train.data asks for (plan::DataSpec, checked by the job spec).
// `seed` (train.seed) seeds the Markov chain.
std::unique_ptr<TokenSource> makeTokenSource(const plan::DataSpec& data, int vocab, int seqLen, std::uint64_t seed);

}  // namespace meshbench::agent
