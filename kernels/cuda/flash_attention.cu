// Causal attention forward on the tensor cores, FlashAttention-2's scheme (Dao 2023): a CTA of four
// warps takes 64 query rows of one head, each warp 16 of them; keys and values stream through
// shared memory 64 at a time; S = Q K^T and O += P V are mma.sync m16n8k16 bf16 products with fp32
// accumulation, and the softmax runs online on the accumulator fragments, so no score leaves the
// registers. P's accumulator fragments are laid out as the A operand of the next product, so they
// feed P V without a trip through shared memory. Tiles above the diagonal are skipped.
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4: A (16 x 16, row) holds rows g and g + 8, columns 2t, 2t + 1 and
// 2t + 8, 2t + 9; B (16 x 8, col) holds rows 2t, 2t + 1, 2t + 8, 2t + 9 of column g; C (16 x 8)
// holds rows g and g + 8, columns 2t and 2t + 1.

#include "kernels/cuda/flash_attention.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <string>

namespace meshbench::kernels::cuda {
namespace {

constexpr int kRows = 64;  // query rows per CTA
constexpr int kKeys = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kPad = 8;  // bf16 of padding per shared row: conflict-free fragment loads

__device__ std::uint32_t pack(float lo, float hi)
{
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&pair);
}

__device__ std::uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi)
{
    return std::uint32_t(*reinterpret_cast<const std::uint16_t*>(&lo)) |
           (std::uint32_t(*reinterpret_cast<const std::uint16_t*>(&hi)) << 16);
}

// c += a b for one m16n8k16 tile.
__device__ void mma(float c[4], const std::uint32_t a[4], std::uint32_t b0, std::uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    flashForwardKernel(AttentionShape s, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                       __nv_bfloat16* out, float* lse)
{
    __shared__ __align__(16) __nv_bfloat16 ks[kKeys][D + kPad];
    __shared__ __align__(16) __nv_bfloat16 vs[kKeys][D + kPad];
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32, g = lane / 4, t = lane % 4;
    const int head = int(blockIdx.x) % s.heads, b = int(blockIdx.x) / s.heads;
    const int kvHead = head / (s.heads / s.kvHeads);
    const int rowBase = int(blockIdx.y) * kRows + warp * 16;  // this warp's first query row
    const std::size_t qStride = std::size_t(s.heads) * D, kvStride = std::size_t(s.kvHeads) * D;
    const __nv_bfloat16* qHead = q + std::size_t(b) * s.seq * qStride + std::size_t(head) * D;
    const __nv_bfloat16* kHead = k + std::size_t(b) * s.seq * kvStride + std::size_t(kvHead) * D;
    const __nv_bfloat16* vHead = v + std::size_t(b) * s.seq * kvStride + std::size_t(kvHead) * D;

    // The warp's Q rows as A fragments, one per 16 dimensions; rows past the sequence are zero.
    std::uint32_t qa[D / 16][4];
    const int rows[2] = {rowBase + g, rowBase + g + 8};
#pragma unroll
    for (int c = 0; c < D / 16; ++c)
        for (int half = 0; half < 2; ++half)
            for (int r = 0; r < 2; ++r) {
                const int d = c * 16 + 2 * t + 8 * half;
                qa[c][half * 2 + r] =
                    rows[r] < s.seq
                        ? *reinterpret_cast<const std::uint32_t*>(qHead + std::size_t(rows[r]) * qStride + d)
                        : 0u;
            }

    // log2 domain: exp(x scale) = exp2(x scale log2 e).
    const float scale = rsqrtf(float(D)) * 1.4426950408889634f;
    float best[2] = {-INFINITY, -INFINITY}, sum[2] = {0, 0};
    float o[D / 8][4] = {};
    const int lastRow = min(int(blockIdx.y) * kRows + kRows, s.seq) - 1;
    for (int keyBase = 0; keyBase <= lastRow; keyBase += kKeys) {
        __syncthreads();  // the previous tile is no longer read
        // 16-byte vectors of the K and V tiles, keys past the sequence zero.
        constexpr int kVectors = kKeys * D / 8;
        for (int i = int(threadIdx.x); i < kVectors; i += kWarps * 32) {
            const int key = i / (D / 8), d = (i % (D / 8)) * 8;
            uint4 kv = {0, 0, 0, 0}, vv = {0, 0, 0, 0};
            if (keyBase + key < s.seq) {
                kv = *reinterpret_cast<const uint4*>(kHead + std::size_t(keyBase + key) * kvStride + d);
                vv = *reinterpret_cast<const uint4*>(vHead + std::size_t(keyBase + key) * kvStride + d);
            }
            *reinterpret_cast<uint4*>(&ks[key][d]) = kv;
            *reinterpret_cast<uint4*>(&vs[key][d]) = vv;
        }
        __syncthreads();
        if (keyBase > rowBase + 15)
            continue;  // the whole tile is above this warp's diagonal

        // S = Q K^T: eight 8-key column tiles.
        float sc[kKeys / 8][4];
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j) {
            sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0;
#pragma unroll
            for (int c = 0; c < D / 16; ++c) {
                const __nv_bfloat16* row = &ks[j * 8 + g][c * 16 + 2 * t];
                mma(sc[j], qa[c], *reinterpret_cast<const std::uint32_t*>(row),
                    *reinterpret_cast<const std::uint32_t*>(row + 8));
            }
        }
        // Mask (causal, and keys past the sequence), then the online softmax per row.
        float tileBest[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j)
            for (int e = 0; e < 4; ++e) {
                const int key = keyBase + j * 8 + 2 * t + (e & 1), r = e >> 1;
                sc[j][e] = key <= rows[r] && key < s.seq ? sc[j][e] * scale : -INFINITY;
                tileBest[r] = fmaxf(tileBest[r], sc[j][e]);
            }
        float correction[2];
        for (int r = 0; r < 2; ++r) {
            // The row's four threads share their maxima.
            tileBest[r] = fmaxf(tileBest[r], __shfl_xor_sync(0xffffffffu, tileBest[r], 1));
            tileBest[r] = fmaxf(tileBest[r], __shfl_xor_sync(0xffffffffu, tileBest[r], 2));
            const float next = fmaxf(best[r], tileBest[r]);
            // A row with no key yet in this tile keeps its state (next is -inf only before any key).
            correction[r] = next == -INFINITY ? 1.0f : exp2f(best[r] - next);
            best[r] = next;
            sum[r] *= correction[r];
        }
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j)
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1;
                sc[j][e] = best[r] == -INFINITY ? 0.0f : exp2f(sc[j][e] - best[r]);
                sum[r] += sc[j][e];
            }
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            o[n][0] *= correction[0];
            o[n][1] *= correction[0];
            o[n][2] *= correction[1];
            o[n][3] *= correction[1];
        }
// O += P V: P's accumulators for keys 16kc..16kc+15 are the A fragment of that k step.
#pragma unroll
        for (int kc = 0; kc < kKeys / 16; ++kc) {
            const std::uint32_t pa[4] = {pack(sc[2 * kc][0], sc[2 * kc][1]), pack(sc[2 * kc][2], sc[2 * kc][3]),
                                         pack(sc[2 * kc + 1][0], sc[2 * kc + 1][1]),
                                         pack(sc[2 * kc + 1][2], sc[2 * kc + 1][3])};
            const int key = kc * 16 + 2 * t;
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                const int d = n * 8 + g;
                mma(o[n], pa, pack(vs[key][d], vs[key + 1][d]), pack(vs[key + 8][d], vs[key + 9][d]));
            }
        }
    }

    // The row sums are spread over the row's four threads.
    for (int r = 0; r < 2; ++r) {
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    }
    for (int r = 0; r < 2; ++r) {
        if (rows[r] >= s.seq)
            continue;
        __nv_bfloat16* row =
            out + std::size_t(b) * s.seq * qStride + std::size_t(rows[r]) * qStride + std::size_t(head) * D;
        for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<std::uint32_t*>(row + n * 8 + 2 * t) =
                pack(o[n][2 * r] / sum[r], o[n][2 * r + 1] / sum[r]);
        if (t == 0)  // natural log: best is in the log2 domain
            lse[(std::size_t(b) * s.heads + head) * s.seq + rows[r]] = (best[r] + log2f(sum[r])) * 0.6931471805599453f;
    }
}

}  // namespace

bool flashAttentionSupports(const AttentionShape& shape, DType dtype)
{
    return dtype == DType::BF16 && (shape.headDim == 64 || shape.headDim == 128) && shape.kvHeads > 0 &&
           shape.heads % shape.kvHeads == 0;
}

void flashAttentionForward(const AttentionShape& shape, const void* q, const void* k, const void* v, void* out,
                           float* lse, cudaStream_t stream)
{
    // Heads on x (up to 2^31 - 1 of them), row blocks on y (65535 x 64 positions at most).
    const dim3 grid(unsigned(shape.batch * shape.heads), unsigned((shape.seq + kRows - 1) / kRows));
    const auto* qb = static_cast<const __nv_bfloat16*>(q);
    const auto* kb = static_cast<const __nv_bfloat16*>(k);
    const auto* vb = static_cast<const __nv_bfloat16*>(v);
    auto* ob = static_cast<__nv_bfloat16*>(out);
    if (shape.headDim == 64)
        flashForwardKernel<64><<<grid, kWarps * 32, 0, stream>>>(shape, qb, kb, vb, ob, lse);
    else
        flashForwardKernel<128><<<grid, kWarps * 32, 0, stream>>>(shape, qb, kb, vb, ob, lse);
}

}  // namespace meshbench::kernels::cuda
