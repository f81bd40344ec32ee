#include "agent/parallel/tensor_parallel.h"

#include "agent/runtime/device_buffer.h"

#include <algorithm>
#include <cmath>

namespace meshbench::agent {

TensorParallel::TensorParallel(kernels::Backend& backend, Communicator* group, bool sequenceParallel)
    : m_backend(&backend), m_group(group), m_size(group ? group->size() : 1), m_rank(group ? group->rank() : 0),
      m_sp(sequenceParallel && m_size > 1)
{
}

void TensorParallel::allReduce(kernels::DevPtr x, std::size_t elements)
{
    if (m_size > 1)
        m_group->allReduceSum(x, elements);
}

void TensorParallel::gatherSequence(kernels::ConstDevPtr local, kernels::DevPtr full, std::size_t fullElements)
{
    if (m_size == 1) {
        // No group (or a group of one): this rank's rows are all the rows.
        if (local.data != full.data)
            m_backend->copy(full, local, fullElements);
        return;
    }
    m_group->allGather(local, full, fullElements / std::size_t(m_size));
}

void TensorParallel::completePartial(kernels::DevPtr full, kernels::DevPtr local, std::size_t fullElements)
{
    if (m_sp)
        m_group->reduceScatterSum(full, local, fullElements / std::size_t(m_size));
    else
        allReduce(full, fullElements);
}

kernels::ConstDevPtr TensorParallel::wholeSequence(kernels::ConstDevPtr local, std::size_t fullElements,
                                                   DeviceBuffer& whole, MemoryCategory category)
{
    if (!m_sp)
        return local;
    whole = DeviceBuffer(*m_backend, fullElements, category);
    gatherSequence(local, whole.ptr(), fullElements);
    return whole.ptr();
}

kernels::ConstDevPtr TensorParallel::completeToStream(kernels::DevPtr full, std::size_t fullElements,
                                                      DeviceBuffer& mine)
{
    if (!m_sp) {
        allReduce(full, fullElements);
        return full;
    }
    mine = DeviceBuffer(*m_backend, fullElements / std::size_t(m_size));
    completePartial(full, mine.ptr(), fullElements);
    return mine.ptr();
}

void TensorParallel::columnParallelLinear(kernels::ConstDevPtr x, int tokens, kernels::ConstDevPtr weight, int outLocal,
                                          int in, kernels::DevPtr y)
{
    m_backend->gemm(false, true, tokens, outLocal, in, 1.0f, x, in, weight, in, 0.0f, y, outLocal);
}

void TensorParallel::rowParallelLinear(kernels::ConstDevPtr x, int tokens, kernels::ConstDevPtr weight, int out,
                                       int inLocal, kernels::DevPtr dst)
{
    if (m_size == 1) {
        m_backend->gemm(false, true, tokens, out, inLocal, 1.0f, x, inLocal, weight, inLocal, 1.0f, dst, out);
        return;
    }
    DeviceBuffer partial(*m_backend, std::size_t(tokens) * std::size_t(out));
    m_backend->gemm(false, true, tokens, out, inLocal, 1.0f, x, inLocal, weight, inLocal, 0.0f, partial.ptr(), out);
    if (m_sp) {
        DeviceBuffer mine(*m_backend, partial.size() / std::size_t(m_size));
        completePartial(partial.ptr(), mine.ptr(), partial.size());
        m_backend->add(mine.ptr(), dst, mine.size());
        return;
    }
    allReduce(partial.ptr(), partial.size());
    m_backend->add(partial.ptr(), dst, partial.size());
}

void TensorParallel::localIds(const std::vector<std::int32_t>& ids, std::int64_t vocab,
                              std::vector<std::int32_t>& local, std::vector<char>& inside) const
{
    const std::int32_t block = std::int32_t(vocab / m_size), first = vocabFirst(vocab);
    local.resize(ids.size());
    inside.resize(ids.size());
    for (std::size_t t = 0; t < ids.size(); ++t) {
        inside[t] = ids[t] >= first && ids[t] < first + block;
        local[t] = inside[t] ? ids[t] - first : 0;
    }
}

std::vector<char> TensorParallel::blockIds(const std::vector<std::int32_t>& ids, std::int64_t vocab,
                                           std::vector<std::int32_t>& local) const
{
    std::vector<char> inside;
    localIds(ids, vocab, local, inside);
    return inside;
}

void TensorParallel::zeroOutside(const std::vector<char>& inside, kernels::DevPtr rows, int width)
{
    for (std::size_t t = 0; t < inside.size(); ++t)
        if (!inside[t])
            m_backend->fill(kernels::offset(rows, t * std::size_t(width)), 0.0f, std::size_t(width));
}

void TensorParallel::embeddingForward(const std::vector<std::int32_t>& ids, std::int64_t vocab,
                                      kernels::ConstDevPtr table, int h, kernels::DevPtr stream)
{
    const int T = int(ids.size());
    if (m_size == 1) {
        m_backend->embeddingForward(ids.data(), T, table, h, stream);
        return;
    }
    std::vector<std::int32_t> local;
    DeviceBuffer full(*m_backend, std::size_t(T) * std::size_t(h));
    const std::vector<char> inside = blockIds(ids, vocab, local);
    m_backend->embeddingForward(local.data(), T, table, h, full.ptr());
    zeroOutside(inside, full.ptr(), h);
    completePartial(full.ptr(), stream, full.size());
    if (!m_sp)
        m_backend->copy(stream, full.ptr(), full.size());
}

void TensorParallel::embeddingBackward(const std::vector<std::int32_t>& ids, std::int64_t vocab,
                                       kernels::ConstDevPtr dStream, int h, kernels::DevPtr tableGrad)
{
    const int T = int(ids.size());
    if (m_size == 1) {
        m_backend->embeddingBackward(ids.data(), T, dStream, h, tableGrad);
        return;
    }
    std::vector<std::int32_t> local;
    DeviceBuffer full(*m_backend, std::size_t(T) * std::size_t(h));
    const std::vector<char> inside = blockIds(ids, vocab, local);
    if (m_sp)
        gatherSequence(dStream, full.ptr(), full.size());
    else
        m_backend->copy(full.ptr(), dStream, full.size());
    zeroOutside(inside, full.ptr(), h);
    m_backend->embeddingBackward(local.data(), T, full.ptr(), h, tableGrad);
}

double TensorParallel::crossEntropy(kernels::DevPtr logits, const std::vector<std::int32_t>& targets,
                                    std::int64_t vocab, float lossScale)
{
    const int T = int(targets.size());
    const int V = int(vocab / m_size);
    if (m_size == 1)
        return m_backend->crossEntropy(logits, targets.data(), T, V, lossScale, logits);
    std::vector<float> host(std::size_t(T) * std::size_t(V));
    m_backend->download(host.data(), logits, host.size());
    std::vector<std::int32_t> local;
    std::vector<char> inside;
    localIds(targets, vocab, local, inside);
    // Per token: the row maximum; then the sum of exponentials and the target logit.
    std::vector<double> maxima(static_cast<std::size_t>(T)), sums(static_cast<std::size_t>(2 * T), 0.0);
    for (int t = 0; t < T; ++t) {
        const float* row = host.data() + std::size_t(t) * std::size_t(V);
        maxima[std::size_t(t)] = *std::max_element(row, row + V);
    }
    m_group->allReduceMax(maxima.data(), maxima.size());
    for (int t = 0; t < T; ++t) {
        const float* row = host.data() + std::size_t(t) * std::size_t(V);
        for (int j = 0; j < V; ++j)
            sums[std::size_t(t)] += std::exp(double(row[j]) - maxima[std::size_t(t)]);
        if (inside[std::size_t(t)])
            sums[std::size_t(T) + std::size_t(t)] = row[local[std::size_t(t)]];
    }
    m_group->allReduceSum(sums.data(), sums.size());
    double loss = 0;
    for (int t = 0; t < T; ++t) {
        const double sum = sums[std::size_t(t)], max = maxima[std::size_t(t)];
        loss += std::log(sum) + max - sums[std::size_t(T) + std::size_t(t)];
        float* row = host.data() + std::size_t(t) * std::size_t(V);
        for (int j = 0; j < V; ++j)
            row[j] = float(lossScale * std::exp(double(row[j]) - max) / sum);
        if (inside[std::size_t(t)])
            row[local[std::size_t(t)]] -= lossScale;
    }
    m_backend->upload(logits, host.data(), host.size());
    return loss;
}

}  // namespace meshbench::agent
