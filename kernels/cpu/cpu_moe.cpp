// MoE routing on the CPU: softmax router, top-k, per-expert capacity with dropping (Lepikhin et al.
// 2020, GShard; Fedus et al. 2021, Switch Transformer), the load-balancing auxiliary loss, and the
// permute / combine pair that moves token rows into expert blocks and back (Megatron-LM's
// moe_utils permute / unpermute). Routing metadata is host memory; the row buffers are fp32.
//
// Determinism: top-k ties go to the lower expert index; an over-full expert drops its lowest-probability
// assignments first, ties dropping the later token first; kept assignments take the rows of the
// expert's block [e·C, e·C + count) in increasing token order.

#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace meshbench::kernels {
namespace {

void checkShape(const RouterShape& s, const char* kernel)
{
    if (s.tokens < 0 || s.experts < 1 || s.topK < 1 || s.topK > s.experts || s.capacity < 1)
        throw KernelError(std::string(kernel) + ": need tokens >= 0, experts >= 1, 1 <= topK <= experts and " +
                          "capacity >= 1 (got tokens " + std::to_string(s.tokens) + ", experts " +
                          std::to_string(s.experts) + ", topK " + std::to_string(s.topK) + ", capacity " +
                          std::to_string(s.capacity) + ")");
}

void require(const void* p, const char* kernel, const char* what)
{
    if (p == nullptr)
        throw KernelError(std::string(kernel) + ": " + what + " is null");
}

void checkWidth(int h, const char* kernel)
{
    if (h < 1)
        throw KernelError(std::string(kernel) + ": row width h must be positive");
}

// dLogits[e] += p_e (g_e - sum_i p_i g_i): the softmax Jacobian (symmetric) applied to g.
void softmaxBackwardRow(const float* p, const double* g, int E, float* dLogits)
{
    double dot = 0.0;
    for (int e = 0; e < E; ++e)
        dot += static_cast<double>(p[e]) * g[e];
    for (int e = 0; e < E; ++e)
        dLogits[e] += static_cast<float>(static_cast<double>(p[e]) * (g[e] - dot));
}

}  // namespace

void CpuBackend::route(const RouterShape& shape, const float* logits, const Routing& routing)
{
    const char* kernel = "route";
    checkShape(shape, kernel);
    require(logits, kernel, "logits");
    require(routing.probs, kernel, "routing.probs");
    require(routing.expertOf, kernel, "routing.expertOf");
    require(routing.weightOf, kernel, "routing.weightOf");
    require(routing.rowOf, kernel, "routing.rowOf");
    require(routing.tokenOfRow, kernel, "routing.tokenOfRow");
    require(routing.countOf, kernel, "routing.countOf");
    require(routing.routedOf, kernel, "routing.routedOf");

    const int T = shape.tokens;
    const int E = shape.experts;
    const int K = shape.topK;
    const int C = shape.capacity;
    const std::size_t slots = static_cast<std::size_t>(T) * K;

    // Softmax per token, shifted by the row maximum (stable), normaliser in double.
    for (int t = 0; t < T; ++t) {
        const float* x = logits + static_cast<std::size_t>(t) * E;
        float* p = routing.probs + static_cast<std::size_t>(t) * E;
        const float m = *std::max_element(x, x + E);
        double sum = 0.0;
        for (int e = 0; e < E; ++e)
            sum += std::exp(static_cast<double>(x[e]) - m);
        for (int e = 0; e < E; ++e)
            p[e] = static_cast<float>(std::exp(static_cast<double>(x[e]) - m) / sum);
    }

    // Top-k by probability, highest first; ties go to the lower expert index.
    std::vector<int> order(E);
    for (int t = 0; t < T; ++t) {
        const float* p = routing.probs + static_cast<std::size_t>(t) * E;
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + K, order.end(),
                          [p](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
        for (int j = 0; j < K; ++j) {
            routing.expertOf[static_cast<std::size_t>(t) * K + j] = order[j];
            routing.weightOf[static_cast<std::size_t>(t) * K + j] = p[order[j]];
        }
    }

    // Assignments grouped by expert, each group in token order (a counting sort over slots t·K + j).
    std::fill(routing.routedOf, routing.routedOf + E, 0);
    for (std::size_t s = 0; s < slots; ++s)
        ++routing.routedOf[routing.expertOf[s]];
    std::vector<int> begin(static_cast<std::size_t>(E) + 1, 0);
    for (int e = 0; e < E; ++e)
        begin[e + 1] = begin[e] + routing.routedOf[e];
    std::vector<int> bySlot(slots);
    {
        std::vector<int> next(begin.begin(), begin.end() - 1);
        for (std::size_t s = 0; s < slots; ++s)
            bySlot[next[routing.expertOf[s]]++] = static_cast<int>(s);
    }

    // Capacity: an over-full expert keeps its C most probable assignments. The stable sort keeps token
    // order among equal probabilities, so the later token of a tie lands past the cut and is dropped.
    std::vector<char> kept(slots, 1);
    std::vector<int> ranked;
    for (int e = 0; e < E; ++e) {
        if (routing.routedOf[e] <= C)
            continue;
        ranked.assign(bySlot.begin() + begin[e], bySlot.begin() + begin[e + 1]);
        std::stable_sort(ranked.begin(), ranked.end(),
                         [&routing](int a, int b) { return routing.weightOf[a] > routing.weightOf[b]; });
        for (std::size_t i = static_cast<std::size_t>(C); i < ranked.size(); ++i)
            kept[ranked[i]] = 0;
    }

    // Rows: kept assignments fill [e·C, e·C + count) in token order; the rest of the block is unused.
    std::fill(routing.rowOf, routing.rowOf + slots, -1);
    std::fill(routing.tokenOfRow, routing.tokenOfRow + static_cast<std::size_t>(E) * C, -1);
    for (int e = 0; e < E; ++e) {
        int row = e * C;
        for (int i = begin[e]; i < begin[e + 1]; ++i) {
            const int s = bySlot[i];
            if (!kept[s])
                continue;
            routing.rowOf[s] = row;
            routing.tokenOfRow[row] = s / K;
            ++row;
        }
        routing.countOf[e] = row - e * C;
    }
}

double CpuBackend::auxLoss(const RouterShape& shape, const Routing& routing, float coef, float* dLogits)
{
    const char* kernel = "auxLoss";
    checkShape(shape, kernel);
    require(routing.probs, kernel, "routing.probs");
    require(routing.routedOf, kernel, "routing.routedOf");
    const int T = shape.tokens;
    const int E = shape.experts;
    if (T == 0)
        return 0.0;

    // Fedus et al. 2021, eq. 4: loss = coef · E · sum_i f_i P_i. f_i (a count) carries no gradient;
    // P_i = mean_t p_ti does, so dLoss/dp_ti = coef · E · f_i / T.
    std::vector<double> f(E);
    std::vector<double> meanProb(E, 0.0);
    for (int e = 0; e < E; ++e)
        f[e] = static_cast<double>(routing.routedOf[e]) / (static_cast<double>(T) * shape.topK);
    for (int t = 0; t < T; ++t)
        for (int e = 0; e < E; ++e)
            meanProb[e] += routing.probs[static_cast<std::size_t>(t) * E + e];
    double loss = 0.0;
    for (int e = 0; e < E; ++e) {
        meanProb[e] /= T;
        loss += f[e] * meanProb[e];
    }
    loss *= static_cast<double>(coef) * E;

    if (dLogits != nullptr) {
        std::vector<double> dProbs(E);
        for (int e = 0; e < E; ++e)
            dProbs[e] = static_cast<double>(coef) * E * f[e] / T;
        for (int t = 0; t < T; ++t)
            softmaxBackwardRow(routing.probs + static_cast<std::size_t>(t) * E, dProbs.data(), E,
                               dLogits + static_cast<std::size_t>(t) * E);
    }
    return loss;
}

void CpuBackend::permute(const RouterShape& shape, const Routing& routing, ConstDevPtr x, int h, DevPtr permuted)
{
    const char* kernel = "permute";
    checkShape(shape, kernel);
    checkWidth(h, kernel);
    require(routing.tokenOfRow, kernel, "routing.tokenOfRow");
    const float* xp = asF32(x);
    float* pp = asF32(permuted);
    const int rows = shape.experts * shape.capacity;
    for (int row = 0; row < rows; ++row) {
        float* dst = pp + static_cast<std::size_t>(row) * h;
        const int t = routing.tokenOfRow[row];
        if (t < 0) {
            std::fill(dst, dst + h, 0.0f);
            continue;
        }
        const float* src = xp + static_cast<std::size_t>(t) * h;
        std::copy(src, src + h, dst);
    }
}

void CpuBackend::combine(const RouterShape& shape, const Routing& routing, ConstDevPtr expertOut, int h, DevPtr out)
{
    const char* kernel = "combine";
    checkShape(shape, kernel);
    checkWidth(h, kernel);
    require(routing.rowOf, kernel, "routing.rowOf");
    require(routing.weightOf, kernel, "routing.weightOf");
    const float* ep = asF32(expertOut);
    float* op = asF32(out);
    const int K = shape.topK;
    for (int t = 0; t < shape.tokens; ++t) {
        float* o = op + static_cast<std::size_t>(t) * h;
        std::fill(o, o + h, 0.0f);
        for (int j = 0; j < K; ++j) {
            const std::size_t s = static_cast<std::size_t>(t) * K + j;
            const int row = routing.rowOf[s];
            if (row < 0)
                continue;  // dropped: the token passes this slot by (the residual carries it)
            const float w = routing.weightOf[s];
            const float* src = ep + static_cast<std::size_t>(row) * h;
            for (int c = 0; c < h; ++c)
                o[c] += w * src[c];
        }
    }
}

void CpuBackend::combineBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dOut,
                                 ConstDevPtr expertOut, int h, DevPtr dExpertOut, float* dWeight)
{
    const char* kernel = "combineBackward";
    checkShape(shape, kernel);
    checkWidth(h, kernel);
    require(routing.rowOf, kernel, "routing.rowOf");
    require(routing.weightOf, kernel, "routing.weightOf");
    require(routing.tokenOfRow, kernel, "routing.tokenOfRow");
    require(dWeight, kernel, "dWeight");
    const float* dop = asF32(dOut);
    const float* ep = asF32(expertOut);
    float* dep = asF32(dExpertOut);
    const int K = shape.topK;

    // Unused rows get a zero gradient; every kept row is written below.
    const int rows = shape.experts * shape.capacity;
    for (int row = 0; row < rows; ++row)
        if (routing.tokenOfRow[row] < 0)
            std::fill(dep + static_cast<std::size_t>(row) * h, dep + static_cast<std::size_t>(row + 1) * h, 0.0f);

    for (int t = 0; t < shape.tokens; ++t) {
        const float* g = dop + static_cast<std::size_t>(t) * h;
        for (int j = 0; j < K; ++j) {
            const std::size_t s = static_cast<std::size_t>(t) * K + j;
            const int row = routing.rowOf[s];
            if (row < 0) {
                dWeight[s] = 0.0f;
                continue;
            }
            const float w = routing.weightOf[s];
            const float* y = ep + static_cast<std::size_t>(row) * h;
            float* dy = dep + static_cast<std::size_t>(row) * h;
            double dot = 0.0;
            for (int c = 0; c < h; ++c) {
                dy[c] = w * g[c];
                dot += static_cast<double>(g[c]) * y[c];
            }
            dWeight[s] = static_cast<float>(dot);
        }
    }
}

void CpuBackend::permuteBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dPermuted, int h,
                                 DevPtr dx)
{
    const char* kernel = "permuteBackward";
    checkShape(shape, kernel);
    checkWidth(h, kernel);
    require(routing.rowOf, kernel, "routing.rowOf");
    const float* dpp = asF32(dPermuted);
    float* dxp = asF32(dx);
    const int K = shape.topK;
    for (int t = 0; t < shape.tokens; ++t) {
        float* d = dxp + static_cast<std::size_t>(t) * h;
        for (int j = 0; j < K; ++j) {
            const int row = routing.rowOf[static_cast<std::size_t>(t) * K + j];
            if (row < 0)
                continue;
            const float* src = dpp + static_cast<std::size_t>(row) * h;
            for (int c = 0; c < h; ++c)
                d[c] += src[c];
        }
    }
}

void CpuBackend::routerBackward(const RouterShape& shape, const Routing& routing, const float* dWeight, float* dLogits)
{
    const char* kernel = "routerBackward";
    checkShape(shape, kernel);
    require(routing.probs, kernel, "routing.probs");
    require(routing.expertOf, kernel, "routing.expertOf");
    require(dWeight, kernel, "dWeight");
    require(dLogits, kernel, "dLogits");
    const int E = shape.experts;
    const int K = shape.topK;
    // weightOf[t, j] = probs[t, expertOf[t, j]], so dProbs is dWeight scattered (summed on repeats).
    std::vector<double> dProbs(E, 0.0);
    for (int t = 0; t < shape.tokens; ++t) {
        const std::size_t base = static_cast<std::size_t>(t) * K;
        for (int j = 0; j < K; ++j)
            dProbs[routing.expertOf[base + j]] += dWeight[base + j];
        softmaxBackwardRow(routing.probs + static_cast<std::size_t>(t) * E, dProbs.data(), E,
                           dLogits + static_cast<std::size_t>(t) * E);
        for (int j = 0; j < K; ++j)
            dProbs[routing.expertOf[base + j]] = 0.0;
    }
}

}  // namespace meshbench::kernels
