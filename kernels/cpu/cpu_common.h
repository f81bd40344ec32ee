#pragma once
// What the CPU backend's kernel files share: dimension checks and row offsets.

#include "kernels/backend.h"

#include <cstddef>
#include <string>

namespace meshbench::kernels {

inline void requireDim(const char* kernel, const char* name, int value, int minimum)
{
    if (value < minimum)
        throw KernelError(std::string(kernel) + ": " + name + " must be at least " + std::to_string(minimum) +
                          ", got " + std::to_string(value));
}

inline std::size_t elements(int rows, int cols) { return std::size_t(rows) * std::size_t(cols); }

}  // namespace meshbench::kernels
