#include "agent/parallel/expert_dispatcher.h"

namespace meshbench::agent {

ExpertDispatcher::ExpertDispatcher(kernels::Backend& backend, Communicator* group)
    : m_backend(&backend), m_group(group && group->size() > 1 ? group : nullptr), m_size(m_group ? m_group->size() : 1)
{
}

ExpertRoute ExpertDispatcher::dispatch(const kernels::RouterShape& shape, const kernels::Routing& routing,
                                       kernels::ConstDevPtr x, int width, kernels::DevPtr expertIn)
{
    ExpertRoute route;
    route.capacity = shape.capacity;
    route.sent.assign(routing.countOf, routing.countOf + shape.experts);
    // The split sizes: for each peer, the rows of each of its experts.
    route.received = route.sent;
    if (m_group) {
        const int local = localExperts(shape.experts);
        std::vector<std::int64_t> mine(route.sent.begin(), route.sent.end()), theirs(mine.size());
        m_group->exchangeCounts(mine.data(), theirs.data(), std::size_t(local));
        route.received.assign(theirs.begin(), theirs.end());
    }
    DeviceBuffer permuted(*m_backend, std::size_t(shape.experts) * std::size_t(shape.capacity) * std::size_t(width));
    m_backend->permute(shape, routing, x, width, permuted.ptr());
    toOwners(route, permuted.ptr(), expertIn, width);
    return route;
}

void ExpertDispatcher::combine(const kernels::RouterShape& shape, const kernels::Routing& routing,
                               const ExpertRoute& route, kernels::ConstDevPtr expertOut, int width,
                               kernels::DevPtr rows, kernels::DevPtr y)
{
    fromOwners(route, expertOut, rows, width);
    m_backend->combine(shape, routing, rows, width, y);
}

void ExpertDispatcher::combineBackward(const kernels::RouterShape& shape, const kernels::Routing& routing,
                                       const ExpertRoute& route, kernels::ConstDevPtr dy, kernels::ConstDevPtr rows,
                                       int width, kernels::DevPtr dExpertOut, float* dWeight)
{
    DeviceBuffer dRows(*m_backend, std::size_t(shape.experts) * std::size_t(shape.capacity) * std::size_t(width));
    m_backend->combineBackward(shape, routing, dy, rows, width, dRows.ptr(), dWeight);
    toOwners(route, dRows.ptr(), dExpertOut, width);
}

void ExpertDispatcher::dispatchBackward(const kernels::RouterShape& shape, const kernels::Routing& routing,
                                        const ExpertRoute& route, kernels::ConstDevPtr dExpertIn, int width,
                                        kernels::DevPtr dx)
{
    DeviceBuffer dPermuted(*m_backend, std::size_t(shape.experts) * std::size_t(shape.capacity) * std::size_t(width));
    fromOwners(route, dExpertIn, dPermuted.ptr(), width);
    m_backend->fill(dx, 0.0f, std::size_t(shape.tokens) * std::size_t(width));
    m_backend->permuteBackward(shape, routing, dPermuted.ptr(), width, dx);
}

void ExpertDispatcher::toOwners(const ExpertRoute& route, kernels::ConstDevPtr in, kernels::DevPtr out, int width)
{
    exchange(route, route.sent, route.received, in, out, width);
}

void ExpertDispatcher::fromOwners(const ExpertRoute& route, kernels::ConstDevPtr in, kernels::DevPtr out, int width)
{
    exchange(route, route.received, route.sent, in, out, width);
}

namespace {

// Calls move(block offset, packed offset, elements) for the rows in use of each block of a
// [blocks, capacity, width] buffer, packed block after block; returns the packed elements per
// peer. Blocks are grouped by peer in order (the sending side's experts by owner, the owner
// side's blocks by source).
template <typename Move>
std::vector<std::size_t> walkBlocks(const ExpertRoute& route, const std::vector<int>& rows, int width, int peers,
                                    Move move)
{
    const std::size_t blockElements = std::size_t(route.capacity) * std::size_t(width);
    const std::size_t perPeer = rows.size() / std::size_t(peers);
    std::vector<std::size_t> perPeerElements(std::size_t(peers), 0);
    std::size_t packed = 0;
    for (std::size_t b = 0; b < rows.size(); ++b) {
        const std::size_t n = std::size_t(rows[b]) * std::size_t(width);
        move(b * blockElements, packed, n);
        perPeerElements[b / perPeer] += n;
        packed += n;
    }
    return perPeerElements;
}

}  // namespace

void ExpertDispatcher::exchange(const ExpertRoute& route, const std::vector<int>& sendRows,
                                const std::vector<int>& recvRows, kernels::ConstDevPtr in, kernels::DevPtr out,
                                int width)
{
    using kernels::offset;
    if (!m_group) {
        // One rank owns every expert: the blocks stay where they are.
        walkBlocks(route, sendRows, width, 1, [&](std::size_t block, std::size_t, std::size_t n) {
            m_backend->copy(offset(out, block), offset(in, block), n);
        });
        return;
    }
    // Only the rows in use travel.
    const std::size_t total = sendRows.size() * std::size_t(route.capacity) * std::size_t(width);
    DeviceBuffer sendPacked(*m_backend, total), recvPacked(*m_backend, total);
    const std::vector<std::size_t> sendCounts =
        walkBlocks(route, sendRows, width, m_size, [&](std::size_t block, std::size_t packed, std::size_t n) {
            m_backend->copy(offset(sendPacked.ptr(), packed), offset(in, block), n);
        });
    const std::vector<std::size_t> recvCounts =
        walkBlocks(route, recvRows, width, m_size, [](std::size_t, std::size_t, std::size_t) {});
    m_group->startAllToAll(sendPacked.ptr(), sendCounts, recvPacked.ptr(), recvCounts).wait();
    walkBlocks(route, recvRows, width, m_size, [&](std::size_t block, std::size_t packed, std::size_t n) {
        m_backend->copy(offset(out, block), offset(recvPacked.ptr(), packed), n);
    });
}

}  // namespace meshbench::agent
