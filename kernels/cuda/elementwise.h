#pragma once
// The CUDA backend's elementwise launchers (kernels/cuda/elementwise.cu). Each queues its kernel on
// the stream and checks the launch under the operation's name; n == 0 queues nothing.

#include "kernels/backend.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

// dst = src in dst's dtype, for n > 0; the caller checks the launch under its operation's name.
void launchConvert(cudaStream_t stream, ConstDevPtr src, DevPtr dst, std::size_t n);
void launchFill(cudaStream_t stream, DevPtr dst, float value, std::size_t n);
void launchAdd(cudaStream_t stream, ConstDevPtr x, DevPtr y, std::size_t n);
void launchScale(cudaStream_t stream, DevPtr x, float alpha, std::size_t n);
void launchGeluForward(cudaStream_t stream, ConstDevPtr x, DevPtr out, std::size_t n);
void launchGeluBackward(cudaStream_t stream, ConstDevPtr dOut, ConstDevPtr x, DevPtr dx, std::size_t n);
void launchSwigluForward(cudaStream_t stream, ConstDevPtr x, int T, int f, DevPtr out);
void launchSwigluBackward(cudaStream_t stream, ConstDevPtr dOut, ConstDevPtr x, int T, int f, DevPtr dx);

}  // namespace meshbench::kernels::cuda
