#include "agent/data/markov_source.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace meshbench::agent {

namespace {

// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014; constants as in Vigna's reference splitmix64.c).
std::uint64_t splitmix64(std::uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// Domain separators, so draws and context maps never share a hash stream.
constexpr std::uint64_t kDrawDomain = 0x6D61726B6F762D64ULL;     // "markov-d"
constexpr std::uint64_t kContextDomain = 0x6D61726B6F762D63ULL;  // "markov-c"
constexpr int kFeistelRounds = 4;                                // Luby & Rackoff: 4 rounds suffice

// Uniform on [0, n) by multiply-shift of the top 32 bits (Lemire 2019); n < 2^31.
std::int32_t uniformBelow(std::uint64_t bits, std::uint32_t n)
{
    return static_cast<std::int32_t>(((bits >> 32) * n) >> 32);
}

// Uniform on [0, 1) from the top 53 bits.
double uniformUnit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1p-53; }

}  // namespace

MarkovSource::MarkovSource(int vocab, int order, int branching, std::uint64_t seed)
    : m_vocab(vocab), m_order(order), m_branching(branching), m_seed(seed), m_drawKey(splitmix64(seed ^ kDrawDomain)),
      m_contextKey(splitmix64(seed ^ kContextDomain)), m_halfBits(1), m_entropy(0.0)
{
    if (vocab < 2)
        throw DataError("Markov source: vocab " + std::to_string(vocab) + " is too small; it needs at least 2 tokens");
    if (order < 1)
        throw DataError("Markov source: order " + std::to_string(order) + " must be at least 1");
    if (branching < 2 || branching > vocab)
        throw DataError("Markov source: branching " + std::to_string(branching) + " must lie in [2, vocab " +
                        std::to_string(vocab) + "]");

    // Smallest even bit width 2h with 2^(2h) >= V; cycle walking then needs < 4 rounds on average.
    while ((std::uint64_t{1} << (2 * m_halfBits)) < static_cast<std::uint64_t>(vocab))
        ++m_halfBits;

    m_p.resize(static_cast<std::size_t>(branching));
    double sum = 0.0;
    for (int i = 0; i < branching; ++i) {
        m_p[static_cast<std::size_t>(i)] = std::pow(static_cast<double>(i + 1), -0.7);
        sum += m_p[static_cast<std::size_t>(i)];
    }
    m_cdf.resize(m_p.size());
    double running = 0.0;
    for (std::size_t i = 0; i < m_p.size(); ++i) {
        m_p[i] /= sum;
        m_entropy -= m_p[i] * std::log(m_p[i]);
        running += m_p[i];
        m_cdf[i] = running;
    }
    m_cdf.back() = 1.0;
}

std::uint64_t MarkovSource::contextKey(const std::int32_t* context) const
{
    std::uint64_t h = m_contextKey;
    for (int i = 0; i < m_order; ++i)
        h = splitmix64(h ^ static_cast<std::uint32_t>(context[i]));
    return h;
}

// s_c(rank): a keyed Feistel permutation of [0, 2^(2h)) restricted to [0, V) by cycle
// walking (Black & Rogaway, "Ciphers with arbitrary finite domains", CT-RSA 2002). A
// permutation restricted this way is still a permutation of [0, V), so ranks 0 .. b-1 map to
// b distinct tokens. rank < V, so the walk stays on rank's cycle and terminates.
std::int32_t MarkovSource::successor(std::uint64_t key, int rank) const
{
    const std::uint64_t mask = (std::uint64_t{1} << m_halfBits) - 1;
    std::uint64_t x = static_cast<std::uint64_t>(rank);
    do {
        std::uint64_t left = x >> m_halfBits;
        std::uint64_t right = x & mask;
        for (int round = 0; round < kFeistelRounds; ++round) {
            const std::uint64_t f = splitmix64(key + static_cast<std::uint64_t>(round) * 0xD1B54A32D192ED03ULL + right);
            const std::uint64_t next = left ^ (f & mask);
            left = right;
            right = next;
        }
        x = (left << m_halfBits) | right;
    } while (x >= static_cast<std::uint64_t>(m_vocab));
    return static_cast<std::int32_t>(x);
}

void MarkovSource::sample(std::int64_t index, int length, std::int32_t* out) const
{
    if (length < 0)
        throw std::invalid_argument("MarkovSource::sample: negative length");
    const std::uint64_t sampleKey = splitmix64(m_drawKey ^ static_cast<std::uint64_t>(index));
    for (int j = 0; j < length; ++j) {
        const std::uint64_t bits = splitmix64(sampleKey ^ splitmix64(static_cast<std::uint64_t>(j)));
        if (j < m_order) {
            out[j] = uniformBelow(bits, static_cast<std::uint32_t>(m_vocab));
            continue;
        }
        const double u = uniformUnit(bits);
        const auto rank = static_cast<int>(std::upper_bound(m_cdf.begin(), m_cdf.end(), u) - m_cdf.begin());
        out[j] = successor(contextKey(out + (j - m_order)), std::min(rank, m_branching - 1));
    }
}

double MarkovSource::lossFloor(int seqLen) const
{
    if (seqLen <= 0)
        return 0.0;
    const int uniformTargets = std::min(m_order - 1, seqLen);
    return (uniformTargets * std::log(static_cast<double>(m_vocab)) + (seqLen - uniformTargets) * m_entropy) / seqLen;
}

std::vector<std::pair<std::int32_t, double>> MarkovSource::successors(const std::int32_t* context) const
{
    const std::uint64_t key = contextKey(context);
    std::vector<std::pair<std::int32_t, double>> result;
    result.reserve(m_p.size());
    for (int i = 0; i < m_branching; ++i)
        result.emplace_back(successor(key, i), m_p[static_cast<std::size_t>(i)]);
    return result;
}

std::string MarkovSource::describe() const
{
    std::ostringstream s;
    s << "markov chain (vocab " << m_vocab << ", order " << m_order << ", branching " << m_branching << ", seed "
      << m_seed << ", entropy rate " << m_entropy << " nats/token)";
    return s.str();
}

}  // namespace meshbench::agent
