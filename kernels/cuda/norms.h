#pragma once
// The CUDA backend's normalisation launchers (kernels/cuda/norms.cu): LayerNorm and RMSNorm, one
// block per row of h. The saved statistics (mean, rstd) and the parameter gradients, which are
// accumulated with atomics, must be f32.

#include "kernels/backend.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

void launchLayerNormForward(cudaStream_t stream, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr beta, int T, int h,
                            float eps, DevPtr out, DevPtr mean, DevPtr rstd);
void launchLayerNormBackward(cudaStream_t stream, ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr mean,
                             ConstDevPtr rstd, int T, int h, DevPtr dx, DevPtr dGamma, DevPtr dBeta);
void launchRmsNormForward(cudaStream_t stream, ConstDevPtr x, ConstDevPtr gamma, int T, int h, float eps, DevPtr out,
                          DevPtr rstd);
void launchRmsNormBackward(cudaStream_t stream, ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr rstd,
                           int T, int h, DevPtr dx, DevPtr dGamma);

}  // namespace meshbench::kernels::cuda
