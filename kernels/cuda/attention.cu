// Causal attention of the CUDA backend with grouped query heads, forward and backward: the simple
// kernels, for any shape, and the choice of the tensor-core forward (kernels/cuda/flash_attention) for
// bf16 with head dims 64 and 128.

#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/flash_attention.h"

#include <cstdint>
#include <string>

namespace meshbench::kernels::cuda {
namespace {

// Causal attention with grouped query heads, one warp per query row (b, head, i): an online softmax
// over keys 0..i (Milakov & Gimelshein 2018; FlashAttention's forward without its tiles), each lane
// holding headDim / 32 dimensions of q and of the output, so no score row is ever stored. Saves
// lse = max + log(sum) per row [B, H, S]. The simple form: correct for any shape, far from the
// tensor cores' speed.
constexpr int kWarp = 32;
constexpr int kMaxDimsPerLane = 8;  // head dimensions up to 256

__device__ float warpSum(float value)
{
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

// The dot product of this lane's dimensions (`mine`, lane + 32 d) with the row at `base`, summed over
// the warp: every lane gets it.
__device__ float warpDot(const float (&mine)[kMaxDimsPerLane], const void* row, DType dtype, std::size_t base,
                         int headDim)
{
    const int lane = int(threadIdx.x % kWarp);
    float partial = 0;
    for (int d = 0; d < kMaxDimsPerLane; ++d) {
        const int dim = lane + d * kWarp;
        if (dim < headDim)
            partial += mine[d] * load(row, dtype, base + std::size_t(dim));
    }
    return warpSum(partial);
}

struct AttentionIndex {
    AttentionShape shape;
    __device__ std::size_t q(int b, int i, int head) const
    {
        return ((std::size_t(b) * std::size_t(shape.seq) + std::size_t(i)) * std::size_t(shape.heads) +
                std::size_t(head)) *
               std::size_t(shape.headDim);
    }
    __device__ std::size_t kv(int b, int j, int kvHead) const
    {
        return ((std::size_t(b) * std::size_t(shape.seq) + std::size_t(j)) * std::size_t(shape.kvHeads) +
                std::size_t(kvHead)) *
               std::size_t(shape.headDim);
    }
    __device__ std::size_t lse(int b, int head, int i) const
    {
        return (std::size_t(b) * std::size_t(shape.heads) + std::size_t(head)) * std::size_t(shape.seq) +
               std::size_t(i);
    }
};

// The query row of this thread's warp, and the thread's lane in it.
struct WarpRow {
    int lane, b, i, head, kvHead;
};

__device__ bool warpRow(const AttentionShape& s, WarpRow& row)
{
    const std::size_t index = std::size_t(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    if (index >= std::size_t(s.batch) * std::size_t(s.heads) * std::size_t(s.seq))
        return false;
    row.lane = int(threadIdx.x % kWarp);
    row.i = int(index % std::size_t(s.seq));
    row.head = int(index / std::size_t(s.seq) % std::size_t(s.heads));
    row.b = int(index / (std::size_t(s.seq) * std::size_t(s.heads)));
    row.kvHead = row.head / (s.heads / s.kvHeads);
    return true;
}

__global__ void attentionForwardKernel(AttentionIndex index, const void* q, const void* k, const void* v, DType dtype,
                                       void* out, DType outType, float* lse)
{
    const AttentionShape& s = index.shape;
    WarpRow row{};
    if (!warpRow(s, row))
        return;
    const int lane = row.lane, i = row.i, head = row.head, b = row.b, kvHead = row.kvHead;
    const float scale = 1.0f / sqrtf(float(s.headDim));
    float qd[kMaxDimsPerLane], acc[kMaxDimsPerLane];
    const int dims = (s.headDim + kWarp - 1) / kWarp;
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        qd[d] = dim < s.headDim ? load(q, dtype, index.q(b, i, head) + std::size_t(dim)) : 0.0f;
        acc[d] = 0;
    }
    float best = -INFINITY, sum = 0;
    for (int j = 0; j <= i; ++j) {
        const float score = warpDot(qd, k, dtype, index.kv(b, j, kvHead), s.headDim) * scale;
        const float next = fmaxf(best, score), correction = expf(best - next), p = expf(score - next);
        sum = sum * correction + p;
        for (int d = 0; d < dims; ++d) {
            const int dim = lane + d * kWarp;
            acc[d] = acc[d] * correction +
                     (dim < s.headDim ? p * load(v, dtype, index.kv(b, j, kvHead) + std::size_t(dim)) : 0.0f);
        }
        best = next;
    }
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        if (dim < s.headDim)
            store(out, outType, index.q(b, i, head) + std::size_t(dim), acc[d] / sum);
    }
    if (lane == 0)
        lse[index.lse(b, head, i)] = best + logf(sum);
}

// The backward (FlashAttention's Alg. 2 without tiles), in two passes with no atomics, so that it is
// deterministic: P is recomputed from q, k and lse; with Di = dO_i . O_i, dS_ij = P_ij (dO_i . v_j -
// Di). One warp per query row writes dq_i = scale sum_j dS_ij k_j and Di; then one warp per key row
// (of a kv head) writes dk_j = scale sum dS_ij q_i and dv_j = sum P_ij dO_i over the rows i >= j of
// every query head that reads it.
__global__ void attentionBackwardQueryKernel(AttentionIndex index, const void* dOut, const void* q, const void* k,
                                             const void* v, const void* out, DType dtype, const float* lse, void* dq,
                                             DType dqType, float* rowDots)
{
    const AttentionShape& s = index.shape;
    WarpRow row{};
    if (!warpRow(s, row))
        return;
    const int lane = row.lane, i = row.i, head = row.head, b = row.b, kvHead = row.kvHead;
    const float scale = 1.0f / sqrtf(float(s.headDim));
    const int dims = (s.headDim + kWarp - 1) / kWarp;
    float qd[kMaxDimsPerLane], dod[kMaxDimsPerLane], dqd[kMaxDimsPerLane];
    float di = 0;
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        const bool inside = dim < s.headDim;
        const std::size_t at = index.q(b, i, head) + std::size_t(dim);
        qd[d] = inside ? load(q, dtype, at) : 0.0f;
        dod[d] = inside ? load(dOut, dtype, at) : 0.0f;
        di += inside ? dod[d] * load(out, dtype, at) : 0.0f;
        dqd[d] = 0;
    }
    di = warpSum(di);
    const float rowLse = lse[index.lse(b, head, i)];
    for (int j = 0; j <= i; ++j) {
        const std::size_t base = index.kv(b, j, kvHead);
        const float ds = expf(warpDot(qd, k, dtype, base, s.headDim) * scale - rowLse) *
                         (warpDot(dod, v, dtype, base, s.headDim) - di);
        for (int d = 0; d < dims; ++d) {
            const int dim = lane + d * kWarp;
            if (dim < s.headDim)
                dqd[d] += ds * scale * load(k, dtype, base + std::size_t(dim));
        }
    }
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        if (dim < s.headDim)
            store(dq, dqType, index.q(b, i, head) + std::size_t(dim), dqd[d]);
    }
    if (lane == 0)
        rowDots[index.lse(b, head, i)] = di;
}

__global__ void attentionBackwardKeyKernel(AttentionIndex index, const void* dOut, const void* q, const void* k,
                                           const void* v, DType dtype, const float* lse, const float* rowDots, void* dk,
                                           void* dv, DType gradType)
{
    const AttentionShape& s = index.shape;
    const std::size_t warp = std::size_t(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    if (warp >= std::size_t(s.batch) * std::size_t(s.kvHeads) * std::size_t(s.seq))
        return;
    const int lane = int(threadIdx.x % kWarp), j = int(warp % std::size_t(s.seq));
    const int kvHead = int(warp / std::size_t(s.seq) % std::size_t(s.kvHeads));
    const int b = int(warp / (std::size_t(s.seq) * std::size_t(s.kvHeads)));
    const float scale = 1.0f / sqrtf(float(s.headDim));
    const int dims = (s.headDim + kWarp - 1) / kWarp, group = s.heads / s.kvHeads;
    const std::size_t base = index.kv(b, j, kvHead);
    float kd[kMaxDimsPerLane], vd[kMaxDimsPerLane], dkd[kMaxDimsPerLane], dvd[kMaxDimsPerLane];
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        const bool inside = dim < s.headDim;
        kd[d] = inside ? load(k, dtype, base + std::size_t(dim)) : 0.0f;
        vd[d] = inside ? load(v, dtype, base + std::size_t(dim)) : 0.0f;
        dkd[d] = dvd[d] = 0;
    }
    for (int head = kvHead * group; head < (kvHead + 1) * group; ++head)
        for (int i = j; i < s.seq; ++i) {
            const std::size_t at = index.q(b, i, head);
            const float p = expf(warpDot(kd, q, dtype, at, s.headDim) * scale - lse[index.lse(b, head, i)]);
            const float ds = p * (warpDot(vd, dOut, dtype, at, s.headDim) - rowDots[index.lse(b, head, i)]);
            for (int d = 0; d < dims; ++d) {
                const int dim = lane + d * kWarp;
                if (dim < s.headDim) {
                    dkd[d] += ds * scale * load(q, dtype, at + std::size_t(dim));
                    dvd[d] += p * load(dOut, dtype, at + std::size_t(dim));
                }
            }
        }
    for (int d = 0; d < dims; ++d) {
        const int dim = lane + d * kWarp;
        if (dim < s.headDim) {
            store(dk, gradType, base + std::size_t(dim), dkd[d]);
            store(dv, gradType, base + std::size_t(dim), dvd[d]);
        }
    }
}

void checkAttention(const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, const char* what)
{
    if (shape.headDim > kWarp * kMaxDimsPerLane || shape.kvHeads <= 0 || shape.heads % shape.kvHeads != 0)
        throw KernelError(std::string("cuda backend: ") + what + ": head dimension " + std::to_string(shape.headDim) +
                          " (at most " + std::to_string(kWarp * kMaxDimsPerLane) + ") or heads " +
                          std::to_string(shape.heads) + " over kv heads " + std::to_string(shape.kvHeads) +
                          " not supported");
    if (k.dtype != q.dtype || v.dtype != q.dtype)
        throw KernelError(std::string("cuda backend: ") + what + ": q, k and v must share a dtype");
}

}  // namespace

void launchAttentionForward(cudaStream_t stream, const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k,
                            ConstDevPtr v, DevPtr out, DevPtr lse)
{
    checkAttention(shape, q, k, v, "attentionForward");
    requireF32(lse, "attentionForward's lse");
    if (std::size_t(shape.batch) * std::size_t(shape.heads) * std::size_t(shape.seq) == 0)
        return;
    // The tensor cores where the kernel is built for the shape and its 16-byte loads line up.
    const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
    if (flashAttentionSupports(shape, q.dtype) && out.dtype == DType::BF16 && aligned(q.data) && aligned(k.data) &&
        aligned(v.data) && aligned(out.data)) {
        flashAttentionForward(shape, q.data, k.data, v.data, out.data, static_cast<float*>(lse.data), stream);
        launched("attentionForward (tensor cores)");
        return;
    }
    const std::size_t rows = std::size_t(shape.batch) * std::size_t(shape.heads) * std::size_t(shape.seq);
    const unsigned warpsPerBlock = kThreads / kWarp;
    attentionForwardKernel<<<unsigned((rows + warpsPerBlock - 1) / warpsPerBlock), kThreads, 0, stream>>>(
        AttentionIndex{shape}, q.data, k.data, v.data, q.dtype, out.data, out.dtype, static_cast<float*>(lse.data));
    launched("attentionForward");
}

void launchAttentionBackward(cudaStream_t stream, CachingAllocator& allocator, const AttentionShape& shape,
                             ConstDevPtr dOut, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, ConstDevPtr out,
                             ConstDevPtr lse, DevPtr dq, DevPtr dk, DevPtr dv)
{
    checkAttention(shape, q, k, v, "attentionBackward");
    if (dOut.dtype != q.dtype || out.dtype != q.dtype)
        throw KernelError("cuda backend: attentionBackward: dOut and out must have q's dtype");
    requireF32(lse, "attentionBackward's lse");
    if (std::size_t(shape.batch) * std::size_t(shape.heads) * std::size_t(shape.seq) == 0)
        return;
    if (dk.dtype != dv.dtype)
        throw KernelError("cuda backend: attentionBackward: dk and dv must share a dtype");
    const std::size_t rows = std::size_t(shape.batch) * std::size_t(shape.heads) * std::size_t(shape.seq);
    const std::size_t keyRows = rows / std::size_t(shape.heads) * std::size_t(shape.kvHeads);
    float* rowDots = static_cast<float*>(allocateZeroed(allocator, stream, rows * sizeof(float)));
    const unsigned warpsPerBlock = kThreads / kWarp;
    attentionBackwardQueryKernel<<<unsigned((rows + warpsPerBlock - 1) / warpsPerBlock), kThreads, 0, stream>>>(
        AttentionIndex{shape}, dOut.data, q.data, k.data, v.data, out.data, q.dtype,
        static_cast<const float*>(lse.data), dq.data, dq.dtype, rowDots);
    launched("attentionBackward (queries)");
    attentionBackwardKeyKernel<<<unsigned((keyRows + warpsPerBlock - 1) / warpsPerBlock), kThreads, 0, stream>>>(
        AttentionIndex{shape}, dOut.data, q.data, k.data, v.data, q.dtype, static_cast<const float*>(lse.data), rowDots,
        dk.data, dv.data, dk.dtype);
    launched("attentionBackward (keys)");
    allocator.release(rowDots);
}

}  // namespace meshbench::kernels::cuda
