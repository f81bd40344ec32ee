#pragma once
// A synthetic token stream with a known entropy rate: an order-k Markov chain in which every
// context has the same next-token distribution up to which tokens carry which probability.
// A model trained on it should drive its loss towards entropyRate(); how close it gets is a
// correctness check of the whole training stack that no real corpus can give.

#include "agent/data/token_source.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace meshbench::agent {

class MarkovSource final : public TokenSource {
public:
    // vocab V >= 2, order k >= 1, branching b in [2, V]; otherwise DataError.
    //
    // The chain. p is one fixed probability vector of length b, independent of the seed:
    //     p[i] = (i + 1)^-0.7 / sum_{j<b} (j + 1)^-0.7,   i = 0 .. b-1   (descending).
    // The successors of a context c (the last k tokens) are s_c(0), ..., s_c(b-1), where s_c
    // is a pseudo-random injection [0, b) -> [0, V) keyed by a hash of (seed, c); s_c(i) has
    // probability p[i]. The successor set and which successor gets which p[i] are thus both
    // chosen by the hash; nothing proportional to V^k is stored.
    //
    // Sample `index` of length L: tokens 0 .. k-1 are uniform on [0, V); token j >= k takes
    // rank i ~ p and becomes s_c(i) for c = tokens j-k .. j-1. Token j's random draw is
    // splitmix64 of (seed, index, j) alone, so any sample is produced without the others.
    MarkovSource(int vocab, int order, int branching, std::uint64_t seed);

    int vocab() const override { return m_vocab; }
    void sample(std::int64_t index, int length, std::int32_t* out) const override;
    std::string describe() const override;

    int order() const { return m_order; }
    int branching() const { return m_branching; }
    std::uint64_t seed() const { return m_seed; }
    // p, as defined above.
    const std::vector<double>& probabilities() const { return m_p; }

    // Entropy rate in nats per token: exactly H(p) = -sum p[i] ln p[i].
    // Argument: for j >= k, token j given all earlier tokens is distributed as p permuted
    // onto the successors of its context, so H(X_j | X_<j) = H(p) whatever the context, the
    // start distribution or the stationary distribution (which need not be unique: the chain
    // may be reducible). Hence lim (1/n) H(X_0 .. X_n-1) = H(p) (Cover & Thomas, ch. 4).
    double entropyRate() const { return m_entropy; }
    // The least mean cross-entropy (nats) a model can reach on seqLen next-token targets of
    // one sample (targets are tokens 1 .. seqLen): targets before position k are uniform
    // (ln V each), the rest carry H(p) each.
    double lossFloor(int seqLen) const;

    // The b successors of a context (its last k tokens, oldest first) with their
    // probabilities, in rank order: element i is (s_c(i), p[i]).
    std::vector<std::pair<std::int32_t, double>> successors(const std::int32_t* context) const;

private:
    std::uint64_t contextKey(const std::int32_t* context) const;
    std::int32_t successor(std::uint64_t key, int rank) const;

    int m_vocab;
    int m_order;
    int m_branching;
    std::uint64_t m_seed;
    std::uint64_t m_drawKey;     // stream of per-(index, position) draws
    std::uint64_t m_contextKey;  // stream of per-context successor maps
    int m_halfBits;              // the Feistel permutation acts on 2 * m_halfBits bits
    std::vector<double> m_p;
    std::vector<double> m_cdf;  // running sums of m_p, last entry exactly 1
    double m_entropy;
};

}  // namespace meshbench::agent
