#pragma once
// Reproducible random inputs for the tests: n draws of N(0, scale^2) from a seeded Mersenne twister.

#include <cstdint>
#include <random>
#include <vector>

namespace meshbench::testing {

inline std::vector<float> randomValues(std::size_t n, std::uint32_t seed, float scale = 1.0f)
{
    std::mt19937 engine(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> values(n);
    for (float& v : values)
        v = normal(engine);
    return values;
}

}  // namespace meshbench::testing
