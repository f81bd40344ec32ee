#pragma once
// Expert parallelism's token dispatcher (GShard, Lepikhin et al. 2020; Megatron-core's
// MoEAlltoAllTokenDispatcher): the experts of a MoE layer are split into ep contiguous blocks, one
// per rank of the EP group. Each rank permutes its tokens into per-expert blocks of `capacity`
// rows, the ranks exchange how many rows each expert block holds, and one all-to-all moves just
// those rows to the experts' owners; after the experts, the reverse all-to-all brings the outputs
// back, and the combine weights them into the tokens' order. The backward runs the same path
// in reverse.
//
// Buffers are [E x capacity, width]. On the sending side, block e holds the rows routed to expert
// e; on the owner's side, block (source x E/ep + local expert) holds the rows source sent to it.
// Rows past a block's count are never read.

#include "agent/runtime/communicator.h"
#include "agent/runtime/device_buffer.h"

#include "kernels/backend.h"

#include <vector>

namespace meshbench::agent {

// The rows of one layer's dispatch for one micro-batch.
struct ExpertRoute {
    int capacity = 0;
    std::vector<int> sent;      // [E]: rows this rank routed to each expert (kept after capacity)
    std::vector<int> received;  // [E]: rows in each of the owner-side blocks of this rank
};

class ExpertDispatcher {
public:
    // group: the EP group, or null without expert parallelism.
    ExpertDispatcher(kernels::Backend& backend, Communicator* group);

    int size() const { return m_size; }
    int localExperts(int experts) const { return experts / m_size; }

    // Permutes the tokens x [T, width] by the routing, exchanges the split sizes and sends each
    // expert's rows to its owner: expertIn receives the owner-side blocks.
    ExpertRoute dispatch(const kernels::RouterShape& shape, const kernels::Routing& routing, kernels::ConstDevPtr x,
                         int width, kernels::DevPtr expertIn);
    // The experts' outputs (owner side) back to their tokens' ranks, into `rows` (sending side,
    // kept for the backward), then weighted into y [T, width].
    void combine(const kernels::RouterShape& shape, const kernels::Routing& routing, const ExpertRoute& route,
                 kernels::ConstDevPtr expertOut, int width, kernels::DevPtr rows, kernels::DevPtr y);

    // The gradient of y to the experts' owners (owner side: dExpertOut), with the combine
    // weights' gradient [T, k] into dWeight.
    void combineBackward(const kernels::RouterShape& shape, const kernels::Routing& routing, const ExpertRoute& route,
                         kernels::ConstDevPtr dy, kernels::ConstDevPtr rows, int width, kernels::DevPtr dExpertOut,
                         float* dWeight);
    // The experts' input gradients back to their tokens' ranks, un-permuted into dx [T, width].
    void dispatchBackward(const kernels::RouterShape& shape, const kernels::Routing& routing, const ExpertRoute& route,
                          kernels::ConstDevPtr dExpertIn, int width, kernels::DevPtr dx);

    // The two moves on their own: sending-side blocks to the owners, and back.
    void toOwners(const ExpertRoute& route, kernels::ConstDevPtr in, kernels::DevPtr out, int width);
    void fromOwners(const ExpertRoute& route, kernels::ConstDevPtr in, kernels::DevPtr out, int width);

private:
    void exchange(const ExpertRoute& route, const std::vector<int>& sendRows, const std::vector<int>& recvRows,
                  kernels::ConstDevPtr in, kernels::DevPtr out, int width);

    kernels::Backend* m_backend;
    Communicator* m_group;
    int m_size;
};

}  // namespace meshbench::agent
