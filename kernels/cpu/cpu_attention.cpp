// Causal multi-head attention with grouped query heads on the CPU, FlashAttention style
// (Dao et al. 2022, "FlashAttention", Alg. 1 forward, Alg. 2/4 backward): query rows go in blocks of
// kRowBlock, keys in tiles of kColBlock, and an online softmax keeps a running row maximum and sum, so
// only one kRowBlock x kColBlock tile of scores exists at any time (memory O(block^2), never O(S^2)).
// The backward recomputes P = exp(s - lse) tile by tile from q, k and the saved lse and uses
// Di = rowsum(dO o O). Tile products go through cblas_sgemm directly on the strided rows of q, k, v
// (row stride H·D for q/out, Hkv·D for k/v), so nothing is packed.

#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace meshbench::kernels {
namespace {

constexpr int kRowBlock = 64;  // Br: query rows per block
constexpr int kColBlock = 64;  // Bc: keys per tile

void checkShape(const AttentionShape& s)
{
    if (s.batch < 1 || s.seq < 1 || s.heads < 1 || s.kvHeads < 1 || s.headDim < 1)
        throw KernelError("attention: batch, seq, heads, kvHeads and headDim must all be positive");
    if (s.heads % s.kvHeads != 0)
        throw KernelError("attention: heads (" + std::to_string(s.heads) + ") must be a multiple of kvHeads (" +
                          std::to_string(s.kvHeads) + ")");
}

// Pointers to the rows of one (batch, head) pair; row s of a head is at base + s * stride.
struct HeadView {
    std::size_t qOffset;    // into q, out, dOut, dq
    std::size_t kvOffset;   // into k, v, dk, dv
    std::size_t lseOffset;  // into lse
};

HeadView headView(const AttentionShape& s, int b, int h)
{
    const int g = h / (s.heads / s.kvHeads);
    const std::size_t S = s.seq;
    return {(static_cast<std::size_t>(b) * S * s.heads + h) * s.headDim,
            (static_cast<std::size_t>(b) * S * s.kvHeads + g) * s.headDim,
            (static_cast<std::size_t>(b) * s.heads + h) * S};
}

// scores[rows, cols] = scale · Q[i0 : i0+rows] K[j0 : j0+cols]^T (ld kColBlock).
void tileScores(const float* qh, int qStride, const float* kh, int kvStride, int i0, int rows, int j0, int cols, int D,
                float scale, float* scores)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, scale,
                qh + static_cast<std::size_t>(i0) * qStride, qStride, kh + static_cast<std::size_t>(j0) * kvStride,
                kvStride, 0.0f, scores, kColBlock);
}

}  // namespace

void CpuBackend::attentionForward(const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, DevPtr out,
                                  DevPtr lse)
{
    checkShape(shape);
    const float* qp = asF32(q);
    const float* kp = asF32(k);
    const float* vp = asF32(v);
    float* op = asF32(out);
    float* lp = asF32(lse);

    const int S = shape.seq;
    const int D = shape.headDim;
    const int qStride = shape.heads * D;
    const int kvStride = shape.kvHeads * D;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const float negInf = -std::numeric_limits<float>::infinity();

    // The only scratch: one score tile, one output accumulator block, the running max and sum.
    std::vector<float> scores(static_cast<std::size_t>(kRowBlock) * kColBlock);
    std::vector<float> acc(static_cast<std::size_t>(kRowBlock) * D);
    std::vector<float> rowMax(kRowBlock);
    std::vector<float> rowSum(kRowBlock);

    for (int b = 0; b < shape.batch; ++b) {
        for (int h = 0; h < shape.heads; ++h) {  // consecutive h share a kv head: k, v stay in cache
            const HeadView view = headView(shape, b, h);
            const float* qh = qp + view.qOffset;
            const float* kh = kp + view.kvOffset;
            const float* vh = vp + view.kvOffset;
            float* oh = op + view.qOffset;
            float* lseh = lp + view.lseOffset;

            for (int i0 = 0; i0 < S; i0 += kRowBlock) {
                const int rows = std::min(kRowBlock, S - i0);
                const int keyEnd = i0 + rows;  // causal: this block sees keys [0, i0 + rows)
                std::fill(rowMax.begin(), rowMax.end(), negInf);
                std::fill(rowSum.begin(), rowSum.end(), 0.0f);
                std::fill(acc.begin(), acc.begin() + static_cast<std::ptrdiff_t>(rows) * D, 0.0f);

                for (int j0 = 0; j0 < keyEnd; j0 += kColBlock) {
                    const int cols = std::min(kColBlock, keyEnd - j0);
                    tileScores(qh, qStride, kh, kvStride, i0, rows, j0, cols, D, scale, scores.data());

                    // Online softmax (Dao et al. 2022, Alg. 1 lines 9-12): rescale what was
                    // accumulated by exp(m_old - m_new), turn the tile into exp(s - m_new).
                    for (int r = 0; r < rows; ++r) {
                        float* sr = scores.data() + static_cast<std::size_t>(r) * kColBlock;
                        const int valid = std::clamp(i0 + r - j0 + 1, 0, cols);  // keys j <= i
                        if (valid == 0) {
                            std::fill(sr, sr + cols, 0.0f);
                            continue;
                        }
                        float m = rowMax[r];
                        for (int c = 0; c < valid; ++c)
                            m = std::max(m, sr[c]);
                        float sum = 0.0f;
                        for (int c = 0; c < valid; ++c) {
                            sr[c] = std::exp(sr[c] - m);
                            sum += sr[c];
                        }
                        std::fill(sr + valid, sr + cols, 0.0f);
                        const float correction = std::exp(rowMax[r] - m);  // 0 on the first tile
                        rowSum[r] = rowSum[r] * correction + sum;
                        rowMax[r] = m;
                        if (correction != 1.0f) {
                            float* ar = acc.data() + static_cast<std::size_t>(r) * D;
                            for (int d = 0; d < D; ++d)
                                ar[d] *= correction;
                        }
                    }
                    // acc += P V[j0 : j0+cols]
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, cols, 1.0f, scores.data(),
                                kColBlock, vh + static_cast<std::size_t>(j0) * kvStride, kvStride, 1.0f, acc.data(), D);
                }

                for (int r = 0; r < rows; ++r) {
                    const float inv = 1.0f / rowSum[r];
                    const float* ar = acc.data() + static_cast<std::size_t>(r) * D;
                    float* orow = oh + static_cast<std::size_t>(i0 + r) * qStride;
                    for (int d = 0; d < D; ++d)
                        orow[d] = ar[d] * inv;
                    lseh[i0 + r] = rowMax[r] + std::log(rowSum[r]);
                }
            }
        }
    }
}

void CpuBackend::attentionBackward(const AttentionShape& shape, ConstDevPtr dOut, ConstDevPtr q, ConstDevPtr k,
                                   ConstDevPtr v, ConstDevPtr out, ConstDevPtr lse, DevPtr dq, DevPtr dk, DevPtr dv)
{
    checkShape(shape);
    const float* dop = asF32(dOut);
    const float* qp = asF32(q);
    const float* kp = asF32(k);
    const float* vp = asF32(v);
    const float* op = asF32(out);
    const float* lp = asF32(lse);
    float* dqp = asF32(dq);
    float* dkp = asF32(dk);
    float* dvp = asF32(dv);

    const int S = shape.seq;
    const int D = shape.headDim;
    const int qStride = shape.heads * D;
    const int kvStride = shape.kvHeads * D;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));

    const std::size_t tokens = static_cast<std::size_t>(shape.batch) * S;
    std::fill(dqp, dqp + tokens * qStride, 0.0f);
    std::fill(dkp, dkp + tokens * kvStride, 0.0f);
    std::fill(dvp, dvp + tokens * kvStride, 0.0f);

    std::vector<float> probs(static_cast<std::size_t>(kRowBlock) * kColBlock);
    std::vector<float> dScores(static_cast<std::size_t>(kRowBlock) * kColBlock);
    std::vector<float> rowDot(kRowBlock);

    for (int b = 0; b < shape.batch; ++b) {
        for (int h = 0; h < shape.heads; ++h) {
            const HeadView view = headView(shape, b, h);
            const float* qh = qp + view.qOffset;
            const float* kh = kp + view.kvOffset;
            const float* vh = vp + view.kvOffset;
            const float* oh = op + view.qOffset;
            const float* doh = dop + view.qOffset;
            const float* lseh = lp + view.lseOffset;
            float* dqh = dqp + view.qOffset;
            float* dkh = dkp + view.kvOffset;  // the group's query heads all add into their kv head
            float* dvh = dvp + view.kvOffset;

            for (int i0 = 0; i0 < S; i0 += kRowBlock) {
                const int rows = std::min(kRowBlock, S - i0);
                const int keyEnd = i0 + rows;
                const float* qBlock = qh + static_cast<std::size_t>(i0) * qStride;
                const float* doBlock = doh + static_cast<std::size_t>(i0) * qStride;
                float* dqBlock = dqh + static_cast<std::size_t>(i0) * qStride;

                // Di = rowsum(dO o O) (Dao et al. 2022, Alg. 4 line 19; FlashAttention-2 precomputes it).
                for (int r = 0; r < rows; ++r) {
                    const float* orow = oh + static_cast<std::size_t>(i0 + r) * qStride;
                    const float* drow = doBlock + static_cast<std::size_t>(r) * qStride;
                    float dot = 0.0f;
                    for (int d = 0; d < D; ++d)
                        dot += orow[d] * drow[d];
                    rowDot[r] = dot;
                }

                for (int j0 = 0; j0 < keyEnd; j0 += kColBlock) {
                    const int cols = std::min(kColBlock, keyEnd - j0);
                    const float* kTile = kh + static_cast<std::size_t>(j0) * kvStride;
                    const float* vTile = vh + static_cast<std::size_t>(j0) * kvStride;

                    // P = exp(scale · Q K^T - lse), zero above the diagonal.
                    tileScores(qh, qStride, kh, kvStride, i0, rows, j0, cols, D, scale, probs.data());
                    for (int r = 0; r < rows; ++r) {
                        float* pr = probs.data() + static_cast<std::size_t>(r) * kColBlock;
                        const int valid = std::clamp(i0 + r - j0 + 1, 0, cols);
                        const float rowLse = lseh[i0 + r];
                        for (int c = 0; c < valid; ++c)
                            pr[c] = std::exp(pr[c] - rowLse);
                        std::fill(pr + valid, pr + cols, 0.0f);
                    }

                    // dV_j += P^T dO_i
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, rows, 1.0f, probs.data(), kColBlock,
                                doBlock, qStride, 1.0f, dvh + static_cast<std::size_t>(j0) * kvStride, kvStride);
                    // dP = dO_i V_j^T
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, D, 1.0f, doBlock, qStride, vTile,
                                kvStride, 0.0f, dScores.data(), kColBlock);
                    // dS = P o (dP - Di); masked entries have P = 0 and so dS = 0.
                    for (int r = 0; r < rows; ++r) {
                        const float* pr = probs.data() + static_cast<std::size_t>(r) * kColBlock;
                        float* dsr = dScores.data() + static_cast<std::size_t>(r) * kColBlock;
                        const float di = rowDot[r];
                        for (int c = 0; c < cols; ++c)
                            dsr[c] = pr[c] * (dsr[c] - di);
                    }
                    // dQ_i += scale · dS K_j;  dK_j += scale · dS^T Q_i
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, D, cols, scale, dScores.data(),
                                kColBlock, kTile, kvStride, 1.0f, dqBlock, qStride);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, D, rows, scale, dScores.data(),
                                kColBlock, qBlock, qStride, 1.0f, dkh + static_cast<std::size_t>(j0) * kvStride,
                                kvStride);
                }
            }
        }
    }
}

}  // namespace meshbench::kernels
