#pragma once
// OpenBLAS picks its GEMM kernels from the CPU model when the library loads. Virtual machines
// often report a generic model ("Intel Xeon Processor"), and OpenBLAS then falls back to its
// Prescott (SSE3) kernels: half the speed or less on a CPU with AVX2 and FMA. The choice can
// only be overridden through OPENBLAS_CORETYPE before the library loads, so a program that
// wants full speed re-executes itself with it set.

#include <string>

namespace meshbench::kernels {

// The core type OpenBLAS should use on this CPU when it has fallen back to a generic one and the
// user has not chosen: "SkylakeX" with AVX-512, "Haswell" with AVX2 and FMA; empty otherwise.
std::string betterOpenblasCore();

// When betterOpenblasCore() has an answer, sets OPENBLAS_CORETYPE and re-executes this program
// with the same arguments (never returns then); otherwise returns and nothing changes.
void reexecWithBetterOpenblasCore(char** argv);

}  // namespace meshbench::kernels
