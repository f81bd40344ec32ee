#pragma once
// Tensor parallelism as Megatron-LM splits a transformer (Shoeybi et al. 2019): column-parallel
// layers (qkv, fc1, each expert's fc1, the output layer) hold a block of output rows and need no
// communication forward; row-parallel layers (proj, fc2) hold a block of input columns and their
// partial products are summed over the tensor group (Megatron's g; its backward twin f sums the
// input gradient of a column-parallel region). With sequence parallelism (Korthikanti et al. 2022)
// the residual stream holds T / tp tokens per rank: a region's input is all-gathered and its output
// reduce-scattered instead. The vocabulary is split into tp blocks of rows for the embedding and
// the output layer, with the cross-entropy computed across the blocks (Megatron's
// vocab_parallel_cross_entropy).

#include "agent/runtime/communicator.h"
#include "agent/runtime/device_buffer.h"

#include "kernels/backend.h"

#include <cstdint>
#include <vector>

namespace meshbench::agent {

class TensorParallel {
public:
    // No tensor parallelism: every call is local.
    explicit TensorParallel(kernels::Backend& backend) : m_backend(&backend) {}
    TensorParallel(kernels::Backend& backend, Communicator* group, bool sequenceParallel);

    int size() const { return m_size; }
    int rank() const { return m_rank; }
    bool sequenceParallel() const { return m_sp; }
    // Tokens of the residual stream on this rank out of T, and the first of them.
    int localTokens(int tokens) const { return m_sp ? tokens / m_size : tokens; }
    int firstLocalToken(int tokens) const { return m_sp ? localTokens(tokens) * m_rank : 0; }

    // Sums a partial [T, width] over the group, in place (g forward, f backward).
    void allReduce(kernels::DevPtr x, std::size_t elements);
    // Sequence parallelism's gather: this rank's rows into the whole [T, width].
    void gatherSequence(kernels::ConstDevPtr local, kernels::DevPtr full, std::size_t fullElements);
    // A partial [T, width] completed over the group: all-reduced in place, or with sequence
    // parallelism reduce-scattered into this rank's rows, `local`.
    void completePartial(kernels::DevPtr full, kernels::DevPtr local, std::size_t fullElements);
    // A TP region's input from this rank's stream rows: `local` itself, or with sequence
    // parallelism every rank's rows gathered into `whole` (allocated here), which is returned.
    kernels::ConstDevPtr wholeSequence(kernels::ConstDevPtr local, std::size_t fullElements, DeviceBuffer& whole,
                                       MemoryCategory category = MemoryCategory::Workspace);
    // A region's partial input gradient [T, width] completed for this rank's stream: all-reduced
    // in place and returned, or with sequence parallelism reduce-scattered into this rank's rows,
    // `mine` (allocated here), which is returned.
    kernels::ConstDevPtr completeToStream(kernels::DevPtr full, std::size_t fullElements, DeviceBuffer& mine);
    // This rank's stream rows of a complete [T, width].
    kernels::ConstDevPtr streamRows(kernels::ConstDevPtr full, int tokens, int width) const
    {
        return kernels::offset(full, std::size_t(firstLocalToken(tokens)) * std::size_t(width));
    }

    // Column-parallel linear: y[T, out/tp] = x[T, in] W^T for this rank's rows W [out/tp, in].
    void columnParallelLinear(kernels::ConstDevPtr x, int tokens, kernels::ConstDevPtr weight, int outLocal, int in,
                              kernels::DevPtr y);
    // Row-parallel linear added into dst: dst += sum over ranks of x_r W_r^T, x_r [T, in/tp] and
    // W_r [out, in/tp]; with sequence parallelism dst holds this rank's rows of [T, out].
    void rowParallelLinear(kernels::ConstDevPtr x, int tokens, kernels::ConstDevPtr weight, int out, int inLocal,
                           kernels::DevPtr dst);

    // The vocabulary block of this rank: ids [first, first + size).
    std::int32_t vocabFirst(std::int64_t vocab) const { return std::int32_t(vocab / m_size) * m_rank; }
    // Token ids as rows of this rank's block (0 for ids outside it), and whether each is inside.
    void localIds(const std::vector<std::int32_t>& ids, std::int64_t vocab, std::vector<std::int32_t>& local,
                  std::vector<char>& inside) const;
    // Vocabulary-parallel embedding: each rank looks up the ids in its block of table [V/tp, h],
    // the rest are zero, and the sum over the group is the embedding, written into this rank's
    // stream rows.
    void embeddingForward(const std::vector<std::int32_t>& ids, std::int64_t vocab, kernels::ConstDevPtr table, int h,
                          kernels::DevPtr stream);
    // Its backward: the stream's gradient (this rank's rows) gathered, and added into the rows of
    // this rank's block.
    void embeddingBackward(const std::vector<std::int32_t>& ids, std::int64_t vocab, kernels::ConstDevPtr dStream,
                           int h, kernels::DevPtr tableGrad);
    // Cross-entropy over logits [T, V/tp]: the row maximum, the sum of exponentials and the
    // target's logit are each reduced over the group, so no rank holds all logits. Returns the
    // summed loss and overwrites the logits with its gradient (lossScale x (softmax - onehot)).
    double crossEntropy(kernels::DevPtr logits, const std::vector<std::int32_t>& targets, std::int64_t vocab,
                        float lossScale);

private:
    kernels::Backend* m_backend;
    Communicator* m_group = nullptr;
    int m_size = 1;
    int m_rank = 0;
    bool m_sp = false;
};

}  // namespace meshbench::agent
