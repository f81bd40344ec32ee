#pragma once
// The compute-kernel interface the training stack is written against. A backend owns device
// memory and runs every kernel the model needs; the CPU backend (kernels/cpu) runs fp32 over
// OpenBLAS, the CUDA backend (kernels/cuda) fp32 and bf16 behind the same calls.
//
// Conventions: row-major, contiguous; T = tokens (batch x sequence, batch-major), h = hidden.
// Tensors are passed as typed device pointers (DevPtr) so that a backend can refuse a dtype it
// does not implement instead of misreading memory. "Accumulate" means the kernel adds into its
// output (gradients of shared weights); everything else overwrites.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace meshbench::kernels {

enum class DType : std::uint8_t { F32, BF16 };
std::size_t dtypeSize(DType dtype);
std::string_view dtypeName(DType dtype);

// A device pointer with its element type.
struct DevPtr {
    void* data = nullptr;
    DType dtype = DType::F32;
};
struct ConstDevPtr {
    const void* data = nullptr;
    DType dtype = DType::F32;
    ConstDevPtr() = default;
    ConstDevPtr(const void* d, DType t) : data(d), dtype(t) {}
    ConstDevPtr(DevPtr p) : data(p.data), dtype(p.dtype) {}  // NOLINT: a mutable pointer reads as well
};

inline DevPtr f32(float* p) { return {p, DType::F32}; }
inline ConstDevPtr f32(const float* p) { return {p, DType::F32}; }

// The same buffer `elements` elements further on.
inline DevPtr offset(DevPtr p, std::size_t elements)
{
    return {static_cast<char*>(p.data) + elements * dtypeSize(p.dtype), p.dtype};
}
inline ConstDevPtr offset(ConstDevPtr p, std::size_t elements)
{
    return {static_cast<const char*>(p.data) + elements * dtypeSize(p.dtype), p.dtype};
}

// Thrown when a backend is handed a dtype or shape it does not support.
class KernelError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Causal multi-head attention with grouped query heads: q [B, S, H, D], k and v [B, S, Hkv, D],
// out [B, S, H, D]; query head i reads kv head i / (H / Hkv). Scale 1/sqrt(D).
struct AttentionShape {
    int batch = 1;
    int seq = 1;
    int heads = 1;
    int kvHeads = 1;
    int headDim = 1;
};

// MoE routing of T tokens over E experts, k experts per token (Switch / GShard with top-k).
struct RouterShape {
    int tokens = 1;
    int experts = 1;
    int topK = 1;
    int capacity = 1;  // per expert: ceil(T k / E x capacity_factor), see routerCapacity
};

// Output of routing: where every (token, slot) assignment went.
// Arrays (caller-allocated, host memory on every backend since routing metadata is small):
//   probs      [T, E]   softmax of the router logits
//   expertOf   [T, k]   chosen experts, highest probability first
//   weightOf   [T, k]   their probabilities (the combine weights)
//   rowOf      [T, k]   row in the permuted buffer, or -1 when the token was dropped
//   tokenOfRow [E x capacity]  inverse map, -1 for unused rows
//   countOf    [E]      tokens kept per expert (rows used in its block)
//   routedOf   [E]      tokens routed to each expert before dropping
struct Routing {
    float* probs = nullptr;
    int* expertOf = nullptr;
    float* weightOf = nullptr;
    int* rowOf = nullptr;
    int* tokenOfRow = nullptr;
    int* countOf = nullptr;
    int* routedOf = nullptr;
};

using TimeMark = std::uint32_t;

struct DeviceMemory {
    std::int64_t inUseBytes = -1;     // in blocks handed out, as the allocator rounds them
    std::int64_t reservedBytes = -1;  // held from the device: in use plus cached
    std::int64_t peakReservedBytes = -1;
    std::int64_t deviceUsedBytes = -1;  // by every process on the device (cudaMemGetInfo)
    std::int64_t deviceTotalBytes = -1;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string_view name() const = 0;

    // Memory. Allocations are zero-filled and 64-byte aligned.
    virtual DevPtr allocate(std::size_t elements, DType dtype) = 0;
    virtual void release(DevPtr p) = 0;
    virtual void upload(DevPtr dst, const float* src, std::size_t elements) = 0;
    virtual void download(float* dst, ConstDevPtr src, std::size_t elements) = 0;
    virtual void fill(DevPtr dst, float value, std::size_t elements) = 0;
    virtual void copy(DevPtr dst, ConstDevPtr src, std::size_t elements) = 0;
    // Whether the host may read and write this backend's memory directly (the CPU's), or must
    // stage it with the byte copies below (a GPU's), as the MPI communicator does.
    virtual bool hostAddressable() const = 0;
    // Elements in the buffer's own dtype, unconverted, after the work queued before.
    virtual void copyToHost(void* dst, ConstDevPtr src, std::size_t elements) = 0;
    virtual void copyFromHost(DevPtr dst, const void* src, std::size_t elements) = 0;
    // Waits until the work queued so far has run.
    virtual void synchronize() = 0;

    // Time marks taken in the order of the queued work (CUDA events on a GPU, the host clock on
    // the CPU), so that a span's ends are marked where its work is launched and read once it has
    // run: never host clocks around asynchronous launches. Marks live until forgetTimeMarks().
    virtual TimeMark markTime() = 0;
    // Seconds from one mark to a later one; waits until the device has passed `to`.
    virtual double secondsBetween(TimeMark from, TimeMark to) = 0;
    virtual void forgetTimeMarks() = 0;

    // What the backend holds from the device beyond the buffers handed out (a caching allocator's
    // reserve) and what the device itself reports; -1 where it cannot say (the CPU).
    virtual DeviceMemory deviceMemory() = 0;

    // C[M, N] = alpha * op(A) op(B) + beta * C, op = transpose when the flag is set; A is [M, K]
    // (or [K, M] transposed), B is [K, N] (or [N, K]).
    virtual void gemm(bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A, int lda, ConstDevPtr B,
                      int ldb, float beta, DevPtr C, int ldc) = 0;

    // y = x + y (residual add), n elements.
    virtual void add(ConstDevPtr x, DevPtr y, std::size_t n) = 0;
    // x *= alpha.
    virtual void scale(DevPtr x, float alpha, std::size_t n) = 0;

    // out[t] = table[ids[t]]; ids are host ints in [0, V). Backward accumulates into dTable.
    virtual void embeddingForward(const int* ids, int T, ConstDevPtr table, int h, DevPtr out) = 0;
    virtual void embeddingBackward(const int* ids, int T, ConstDevPtr dOut, int h, DevPtr dTable) = 0;

    // LayerNorm over the last dimension: out = (x - mean) * rstd * gamma + beta; saves mean and
    // rstd [T] for the backward, which overwrites dx and accumulates dGamma and dBeta.
    virtual void layerNormForward(ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr beta, int T, int h, float eps,
                                  DevPtr out, DevPtr mean, DevPtr rstd) = 0;
    virtual void layerNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr mean,
                                   ConstDevPtr rstd, int T, int h, DevPtr dx, DevPtr dGamma, DevPtr dBeta) = 0;
    // RMSNorm: out = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps).
    virtual void rmsNormForward(ConstDevPtr x, ConstDevPtr gamma, int T, int h, float eps, DevPtr out, DevPtr rstd) = 0;
    virtual void rmsNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr rstd, int T, int h,
                                 DevPtr dx, DevPtr dGamma) = 0;

    // GELU, exact form x * Phi(x) (PyTorch's default), elementwise over n.
    virtual void geluForward(ConstDevPtr x, DevPtr out, std::size_t n) = 0;
    virtual void geluBackward(ConstDevPtr dOut, ConstDevPtr x, DevPtr dx, std::size_t n) = 0;
    // SwiGLU: x is [T, 2f] with the gate in columns [0, f) and the up projection in [f, 2f);
    // out [T, f] = silu(gate) * up. Backward writes dx [T, 2f].
    virtual void swigluForward(ConstDevPtr x, int T, int f, DevPtr out) = 0;
    virtual void swigluBackward(ConstDevPtr dOut, ConstDevPtr x, int T, int f, DevPtr dx) = 0;

    // Rotary position embeddings in place over x [T, heads, headDim], token t at position t mod seq
    // (half-split pairs (i, i + headDim/2) rotated by position x base^(-2i/headDim)); inverse
    // rotates back, which is the backward.
    virtual void rope(DevPtr x, int tokens, int seq, int heads, int headDim, float base, bool inverse) = 0;

    // Causal attention. Never materialises more than a block of score rows at a time; saves the
    // row log-sum-exp lse [B, H, S] for the backward, which recomputes the scores block by block
    // and overwrites dq, dk, dv.
    virtual void attentionForward(const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, DevPtr out,
                                  DevPtr lse) = 0;
    virtual void attentionBackward(const AttentionShape& shape, ConstDevPtr dOut, ConstDevPtr q, ConstDevPtr k,
                                   ConstDevPtr v, ConstDevPtr out, ConstDevPtr lse, DevPtr dq, DevPtr dk,
                                   DevPtr dv) = 0;

    // Softmax cross-entropy of logits [T, V] against host targets [T]; returns the summed loss
    // and writes dLogits = gradScale * (softmax - onehot). dLogits may alias logits.
    virtual double crossEntropy(ConstDevPtr logits, const int* targets, int T, int V, float gradScale,
                                DevPtr dLogits) = 0;

    // MoE router: softmax over logits [T, E] (host-visible), top-k per token, per-expert capacity
    // with the lowest-probability tokens dropped first (ties: later token first), and the
    // assignment maps in `routing` (see Routing).
    virtual void route(const RouterShape& shape, const float* logits, const Routing& routing) = 0;
    // Switch/GShard load-balancing loss coef * E * sum_i f_i P_i, f_i = share of the T k
    // assignments routed to i (before dropping), P_i = mean router probability of i. Adds its
    // gradient with respect to the logits into dLogits [T, E] and returns the loss.
    virtual double auxLoss(const RouterShape& shape, const Routing& routing, float coef, float* dLogits) = 0;
    // Gathers kept token rows x [T, h] into the permuted buffer [E x capacity, h] (unused rows zero).
    virtual void permute(const RouterShape& shape, const Routing& routing, ConstDevPtr x, int h, DevPtr permuted) = 0;
    // out[t] = sum over kept slots of weight * expertOut[row]; overwrites out [T, h].
    virtual void combine(const RouterShape& shape, const Routing& routing, ConstDevPtr expertOut, int h,
                         DevPtr out) = 0;
    // Backward of combine: dExpertOut[row] = weight * dOut[t]; dWeight [T, k] = dOut[t] . expertOut[row]
    // (0 for dropped slots), host memory.
    virtual void combineBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dOut,
                                 ConstDevPtr expertOut, int h, DevPtr dExpertOut, float* dWeight) = 0;
    // Backward of permute: dx[t] += sum of dPermuted[row] over its kept rows (accumulates).
    virtual void permuteBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dPermuted, int h,
                                 DevPtr dx) = 0;
    // Backward of the router softmax for the combine weights: dLogits [T, E] += J^T dProbs where
    // dProbs[t, expertOf[t, j]] = dWeight[t, j].
    virtual void routerBackward(const RouterShape& shape, const Routing& routing, const float* dWeight,
                                float* dLogits) = 0;

    // Sum of squares of x (for the global gradient norm), in double.
    virtual double sumSquares(ConstDevPtr x, std::size_t n) = 0;
    // One AdamW step (Loshchilov & Hutter 2019) with bias correction, step >= 1:
    // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p).
    // The gradient is multiplied by gradScale first (gradient clipping).
    virtual void adamw(DevPtr param, ConstDevPtr grad, DevPtr m, DevPtr v, std::size_t n, float lr, float beta1,
                       float beta2, float eps, float weightDecay, int step, float gradScale) = 0;
};

// ceil(T k / E x capacity_factor), at least 1.
int routerCapacity(int tokens, int experts, int topK, double capacityFactor);

}  // namespace meshbench::kernels
