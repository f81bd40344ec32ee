#pragma once
// The collective-communication interface the parallel training stack is written against, and
// the process groups of a rank. Implemented over MPI here (the CPU collective layer); the CUDA
// issue adds NCCL behind the same interface.

#include "plan/mesh.h"

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

namespace meshbench::agent {

// A peer died or a collective failed; names the group and the operation.
class CommError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// One process group. Buffers are host fp32 (or double for scalars); every member calls every
// collective in the same order.
class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;

    virtual void allReduceSum(float* data, std::size_t n) = 0;
    virtual void allReduceSum(double* data, std::size_t n) = 0;
    virtual void allReduceMax(double* data, std::size_t n) = 0;
    // in holds size() x perRank elements; member r receives the sum of block r.
    virtual void reduceScatterSum(const float* in, float* out, std::size_t perRank) = 0;
    // in holds perRank elements; out receives every member's block in member order. in may be
    // this member's own block inside out.
    virtual void allGather(const float* in, float* out, std::size_t perRank) = 0;
    virtual void broadcast(float* data, std::size_t n, int root) = 0;
    // Block r of in (perRank elements) goes to member r; out receives member r's block for us at r.
    virtual void allToAll(const float* in, float* out, std::size_t perRank) = 0;

    // Point to point. send returns at once; the data must stay untouched until waitSends().
    // Messages between two members with the same tag arrive in the order they were sent.
    virtual void send(const float* data, std::size_t n, int peer, int tag) = 0;
    virtual void recv(float* data, std::size_t n, int peer, int tag) = 0;
    virtual void waitSends() = 0;
};

// The world communicator and the groups of one rank, built from engine/plan's mesh (the same
// mapping the planner and the GUI use).
struct ProcessGroups {
    plan::Mesh mesh;
    int worldRank = 0;
    plan::MeshCoord coord;
    std::unique_ptr<Communicator> world;
    std::unique_ptr<Communicator> tensor;
    std::unique_ptr<Communicator> pipeline;
    std::unique_ptr<Communicator> data;
    std::unique_ptr<Communicator> expert;
    std::unique_ptr<Communicator> expertData;
};

}  // namespace meshbench::agent
