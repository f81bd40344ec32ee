#pragma once
// The tensor-core attention forward for bf16 (kernels/cuda/flash_attention.cu), used by the CUDA
// backend where it applies; elsewhere the backend keeps its simple kernel.

#include "kernels/backend.h"

#include <cuda_runtime.h>

namespace meshbench::kernels::cuda {

// Head dimensions the tensor-core kernel is built for.
bool flashAttentionSupports(const AttentionShape& shape, DType dtype);
// Causal attention of bf16 q [B, S, H, D], k and v [B, S, Hkv, D] into bf16 out and fp32 lse
// [B, H, S] (natural log-sum-exp of the scaled scores, as the backward expects).
void flashAttentionForward(const AttentionShape& shape, const void* q, const void* k, const void* v, void* out,
                           float* lse, cudaStream_t stream);

}  // namespace meshbench::kernels::cuda
