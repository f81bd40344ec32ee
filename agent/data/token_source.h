#pragma once
// Where the trainer's tokens come from: a synthetic Markov chain with a known entropy rate
// (the loss floor a perfect model reaches), or a flat token file as nanoGPT's prepare.py and
// Megatron's preprocessors write. Both are random access: sample g can be produced alone,
// from any thread, so every data-parallel rank draws its own samples without coordination.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace meshbench::agent {

// Bad data settings or a bad token file. The message names the file or the job-spec field
// (train.data.<key>) and says what to change.
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

// Builds the source the job spec's train.data object asks for:
//   absent or null                                  markov, order 1, branching min(4, vocab)
//   {"source": "markov", "order": k, "branching": b}  order defaults to 1, branching to min(4, vocab)
//   {"source": "file", "path": P, "dtype": "uint16" | "uint32"}
// "source" defaults to "markov". Unknown sources or keys, wrong types and out-of-range values
// throw DataError naming train.data.<key>. `seed` (train.seed) seeds the Markov chain.
std::unique_ptr<TokenSource> makeTokenSource(const nlohmann::json& data, int vocab, int seqLen,
                                             std::uint64_t seed);

} // namespace meshbench::agent
