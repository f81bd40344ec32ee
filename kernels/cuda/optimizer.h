#pragma once
// The CUDA backend's optimiser launchers (kernels/cuda/optimizer.cu): AdamW, and the sum of squares
// that gradient clipping's global norm is made of.

#include "kernels/backend.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

// The sum of x's squares in double; total is one device double to sum into. Returns once the
// stream has finished.
double launchSumSquares(cudaStream_t stream, double* total, ConstDevPtr x, std::size_t n);
// One AdamW step (kernels/elementwise_math.h) over n fp32 parameters and moments.
void launchAdamW(cudaStream_t stream, DevPtr param, ConstDevPtr grad, DevPtr m, DevPtr v, std::size_t n, float lr,
                 float beta1, float beta2, float eps, float weightDecay, int step, float gradScale);

}  // namespace meshbench::kernels::cuda
