// The CUDA backend on a GPU, each figure beside its reference in the same run:
//  1. every GEMM shape of a GPT layer (forward and backward) through the backend's gemm, beside one
//     plain cuBLASLt bf16 matmul of the same shape (descriptors and algorithm chosen once);
//  2. the attention kernel's TFLOP/s forward and backward, causal, bf16;
//  3. a stack of GPT layers (pre-norm, multi-head attention with RoPE, GELU MLP of 4h) forward and
//     backward in bf16 through the backend, as achieved TFLOP/s and MFU against the dense bf16 peak,
//     and where its time goes (GEMMs, attention forward and backward, the rest).
// With --megatron-shapes it times instead every per-GPU GEMM of Megatron-LM's weak-scaling runs
// (megatron_weak_scaling.h: QKV, projection, fc1, fc2 and the output layer, forward, input and
// weight gradient) through plain cuBLASLt, beside the TFLOP/s the planner prices the same shape at
// on this device (plan/device_model.h): the device data the planner's GEMM model answers to.
// Times are CUDA events around the work (the backend's time marks), medians of the repetitions
// after a warm-up.
//
// FLOP counts (model FLOPs, no recompute): a [M, K] x [K, N] GEMM is 2MNK; causal attention
// forward 2 x 2 B H S^2 D / 2 (QK^T and PV, half the scores), backward 2.5 times that
// (FlashAttention-2's convention, which counts the recomputed QK^T) for the kernel's own figure and
// 2 times for the MFU (Megatron's count of a layer, Narayanan et al. 2021, eq. 3, without the
// vocabulary term).
//
// usage: bench_gpu [--hidden 4096] [--heads 32] [--seq 4096] [--batch 1] [--layers 4] [--reps 10]
//                  [--peak-tflops 989]
//        bench_gpu --megatron-shapes [--reps 5]
// Exits 2 without a usable CUDA device, naming why.

#include "megatron_weak_scaling.h"

#include "kernels/backend_choice.h"
#include "kernels/cuda/cuda_device.h"
#include "plan/device_model.h"
#include "plan/presets.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

using namespace meshbench::kernels;

namespace {

struct Options {
    int hidden = 4096, heads = 32, seq = 4096, batch = 1, layers = 4, reps = 10;
    double peakTflops = 989;  // H100/H200 SXM dense bf16, the vendor's datasheet
    bool megatronShapes = false;
};

bool parse(int argc, char** argv, Options& o)
{
    int i = 1;
    if (argc > 1 && std::string(argv[1]) == "--megatron-shapes") {
        o.megatronShapes = true;
        i = 2;
    }
    for (; i + 1 < argc; i += 2) {
        const std::string key = argv[i];
        const double value = std::atof(argv[i + 1]);
        if (key == "--hidden")
            o.hidden = int(value);
        else if (key == "--heads")
            o.heads = int(value);
        else if (key == "--seq")
            o.seq = int(value);
        else if (key == "--batch")
            o.batch = int(value);
        else if (key == "--layers")
            o.layers = int(value);
        else if (key == "--reps")
            o.reps = int(value);
        else if (key == "--peak-tflops")
            o.peakTflops = value;
        else
            return false;
    }
    return i == argc && o.hidden % o.heads == 0 && o.reps > 0;
}

void check(cudaError_t status, const char* what)
{
    if (status != cudaSuccess) {
        std::fprintf(stderr, "bench_gpu: %s: %s\n", what, cudaGetErrorString(status));
        std::exit(1);  // NOLINT(concurrency-mt-unsafe): bench_gpu starts no thread that could race it
    }
}

void check(cublasStatus_t status, const char* what)
{
    if (status != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "bench_gpu: %s: cuBLASLt status %d\n", what, int(status));
        std::exit(1);  // NOLINT(concurrency-mt-unsafe): bench_gpu starts no thread that could race it
    }
}

// Median seconds of `run` over the repetitions, after one warm-up, timed by the backend's marks.
double medianSeconds(Backend& backend, int reps, const std::function<void()>& run)
{
    run();
    std::vector<double> seconds;
    for (int r = 0; r < reps; ++r) {
        backend.synchronize();
        backend.forgetTimeMarks();
        const TimeMark begin = backend.markTime();
        run();
        seconds.push_back(backend.secondsBetween(begin, backend.markTime()));
    }
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
}

DevPtr randomBuffer(Backend& backend, std::size_t n, DType dtype, float scale, unsigned seed)
{
    std::mt19937 engine(seed);
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> host(n);
    for (float& v : host)
        v = normal(engine);
    const DevPtr p = backend.allocate(n, dtype);
    backend.upload(p, host.data(), n);
    return p;
}

// One row-major GEMM shape of the layer: C [M, N] = op(A) op(B), K deep.
struct GemmShape {
    const char* name;
    bool transA, transB;
    int M, N, K;
    DType out;
};

// Plain cuBLASLt: the same row-major-as-column-major mapping, descriptors and the heuristic's first
// algorithm made once, then only cublasLtMatmul in the timed loop.
class PlainMatmul {
public:
    PlainMatmul(cublasLtHandle_t lt, const GemmShape& s, void* workspace, std::size_t workspaceBytes)
        : m_lt(lt), m_workspace(workspace), m_workspaceBytes(workspaceBytes)
    {
        check(cublasLtMatmulDescCreate(&m_op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
        const cublasOperation_t opB = s.transB ? CUBLAS_OP_T : CUBLAS_OP_N, opA = s.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
        check(cublasLtMatmulDescSetAttribute(m_op, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)), "TRANSA");
        check(cublasLtMatmulDescSetAttribute(m_op, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)), "TRANSB");
        const auto u = [](int v) { return std::uint64_t(v); };
        check(cublasLtMatrixLayoutCreate(&m_b, CUDA_R_16BF, s.transB ? u(s.K) : u(s.N), s.transB ? u(s.N) : u(s.K),
                                         s.transB ? s.K : s.N),
              "layout B");
        check(cublasLtMatrixLayoutCreate(&m_a, CUDA_R_16BF, s.transA ? u(s.M) : u(s.K), s.transA ? u(s.K) : u(s.M),
                                         s.transA ? s.M : s.K),
              "layout A");
        check(cublasLtMatrixLayoutCreate(&m_c, s.out == DType::F32 ? CUDA_R_32F : CUDA_R_16BF, u(s.N), u(s.M), s.N),
              "layout C");
        cublasLtMatmulPreference_t preference = nullptr;
        check(cublasLtMatmulPreferenceCreate(&preference), "preference");
        check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &m_workspaceBytes, sizeof(m_workspaceBytes)),
              "workspace");
        int found = 0;
        check(cublasLtMatmulAlgoGetHeuristic(m_lt, m_op, m_b, m_a, m_c, m_c, preference, 1, &m_heuristic, &found),
              "heuristic");
        cublasLtMatmulPreferenceDestroy(preference);
        if (found == 0)
            check(CUBLAS_STATUS_NOT_SUPPORTED, "no algorithm");
    }
    ~PlainMatmul()
    {
        cublasLtMatrixLayoutDestroy(m_c);
        cublasLtMatrixLayoutDestroy(m_a);
        cublasLtMatrixLayoutDestroy(m_b);
        cublasLtMatmulDescDestroy(m_op);
    }
    void run(const void* A, const void* B, void* C, cudaStream_t stream)
    {
        const float alpha = 1, beta = 0;
        check(cublasLtMatmul(m_lt, m_op, &alpha, B, m_b, A, m_a, &beta, C, m_c, C, m_c, &m_heuristic.algo, m_workspace,
                             m_workspaceBytes, stream),
              "cublasLtMatmul");
    }

private:
    cublasLtHandle_t m_lt;
    void* m_workspace;
    std::size_t m_workspaceBytes;
    cublasLtMatmulDesc_t m_op = nullptr;
    cublasLtMatrixLayout_t m_a = nullptr, m_b = nullptr, m_c = nullptr;
    cublasLtMatmulHeuristicResult_t m_heuristic{};
};

double tflops(double flop, double seconds) { return flop / seconds * 1e-12; }

// Seconds of one GEMM through plain cuBLASLt; A and B are random buffers at least as large as the
// shape's operands (what they hold matters to the power draw, not which values).
double plainSeconds(Backend& gpu, cublasLtHandle_t lt, void* workspace, std::size_t workspaceBytes, const GemmShape& s,
                    DevPtr A, DevPtr B, int reps)
{
    const DevPtr C = gpu.allocate(std::size_t(s.M) * s.N, s.out);
    PlainMatmul plain(lt, s, workspace, workspaceBytes);
    const auto stream = static_cast<cudaStream_t>(cuda::computeStream(gpu));
    const double seconds = medianSeconds(gpu, reps, [&] { plain.run(A.data, B.data, C.data, stream); });
    gpu.release(C);
    return seconds;
}

// One per-GPU GEMM of a Megatron run: which weight, and the pass's shape.
struct MegatronGemm {
    const char* weight;
    GemmShape shape;
};

// A layer's QKV, projection, fc1 and fc2 and the output layer, each forward (x W^T), input gradient
// (dy W) and weight gradient (dy^T x, fp32 out). The input is the whole sequence, gathered when
// sequence-parallel; weights are split over tp as Megatron splits them.
std::vector<MegatronGemm> megatronGemms(const meshbench::bench::MegatronRun& run)
{
    const int T = meshbench::bench::kMegatronSeq, h = run.hidden, t = run.tp;
    struct Weight {
        const char* name;
        int n, k;  // the weight is [n, k]
    };
    const Weight weights[] = {{"qkv", 3 * h / t, h},
                              {"proj", h, h / t},
                              {"fc1", 4 * h / t, h},
                              {"fc2", h, 4 * h / t},
                              {"logits", meshbench::bench::kMegatronVocab / t, h}};
    std::vector<MegatronGemm> gemms;
    for (const Weight& w : weights) {
        gemms.push_back({w.name, {"fwd", false, true, T, w.n, w.k, DType::BF16}});
        gemms.push_back({w.name, {"dgrad", false, false, T, w.k, w.n, DType::BF16}});
        gemms.push_back({w.name, {"wgrad", true, false, w.n, w.k, T, DType::F32}});
    }
    return gemms;
}

// Each Megatron run's GEMMs through plain cuBLASLt beside the planner's price for the same shape on
// a DGX H200's device table, and the run's sum over one layer and the output layer.
void megatronShapes(Backend& gpu, cublasLtHandle_t lt, void* workspace, std::size_t workspaceBytes, int reps)
{
    using meshbench::bench::kMegatronRuns;
    const meshbench::plan::DevicePerformance planned =
        meshbench::plan::devicePerformance(*meshbench::plan::clusterPreset("dgx-h200"), 8).device;
    std::size_t largest = 0;
    for (const auto& run : kMegatronRuns)
        for (const MegatronGemm& g : megatronGemms(run))
            largest = std::max({largest, std::size_t(g.shape.M) * g.shape.K, std::size_t(g.shape.K) * g.shape.N});
    const DevPtr A = randomBuffer(gpu, largest, DType::BF16, 1, 1), B = randomBuffer(gpu, largest, DType::BF16, 1, 2);
    std::printf("\nTFLOP/s of plain cuBLASLt (measured) and of the planner's price for the shape (planned); ratio is "
                "planned time over measured\n%-6s %-7s %-6s %7s %7s %7s %10s %10s %7s\n",
                "run", "GEMM", "pass", "M", "N", "K", "measured", "planned", "ratio");
    for (const auto& run : kMegatronRuns) {
        double measuredSum = 0, plannedSum = 0;
        for (const MegatronGemm& g : megatronGemms(run)) {
            const GemmShape& s = g.shape;
            const double measured = plainSeconds(gpu, lt, workspace, workspaceBytes, s, A, B, reps);
            const double price = meshbench::plan::gemmTime(planned, s.M, s.N, s.K);
            const double flop = 2.0 * s.M * s.N * double(s.K);
            measuredSum += measured;
            plannedSum += price;
            std::printf("%-6s %-7s %-6s %7d %7d %7d %10.1f %10.1f %6.0f%%\n", run.size, g.weight, s.name, s.M, s.N, s.K,
                        tflops(flop, measured), tflops(flop, price), 100 * price / measured);
        }
        std::printf("%-6s one layer and the output layer: measured %.3f ms, planned %.3f ms (%.0f%%)\n", run.size,
                    measuredSum * 1e3, plannedSum * 1e3, 100 * plannedSum / measuredSum);
    }
    gpu.release(A);
    gpu.release(B);
}

}  // namespace

int main(int argc, char** argv)
{
    Options o;
    if (!parse(argc, argv, o)) {
        std::fprintf(stderr, "usage: bench_gpu [--hidden H] [--heads N] [--seq S] [--batch B] [--layers L] [--reps R] "
                             "[--peak-tflops P]   (hidden divisible by heads)\n"
                             "       bench_gpu --megatron-shapes [--reps R]\n");
        return 2;
    }
    const DeviceStatus device = cudaDeviceStatus();
    if (!device.usable) {
        std::printf("bench_gpu: nothing measured: %s\n", device.description.c_str());
        return 2;
    }
    const std::unique_ptr<Backend> owned = cuda::makeBackend(0);
    Backend& gpu = *owned;
    const auto stream = static_cast<cudaStream_t>(cuda::computeStream(gpu));
    const int h = o.hidden, f = 4 * o.hidden, T = o.batch * o.seq, D = o.hidden / o.heads;
    std::printf("bench_gpu: %s; hidden %d, heads %d (head dim %d), seq %d, batch %d, %d layers, bf16, peak %.0f "
                "TFLOP/s\n",
                device.description.c_str(), h, o.heads, D, o.seq, o.batch, o.layers, o.peakTflops);

    // 1. GEMMs: forward (x W^T), input gradient (dy W), weight gradient (dy^T x, fp32 out).
    cublasLtHandle_t lt = nullptr;
    check(cublasLtCreate(&lt), "cublasLtCreate");
    const std::size_t workspaceBytes = std::size_t(32) << 20;
    void* workspace = nullptr;
    check(cudaMalloc(&workspace, workspaceBytes), "cudaMalloc");
    if (o.megatronShapes) {
        megatronShapes(gpu, lt, workspace, workspaceBytes, o.reps);
        cudaFree(workspace);
        cublasLtDestroy(lt);
        return 0;
    }
    const GemmShape shapes[] = {
        {"attn proj fwd  [T,h]x[h,h]^T", false, true, T, h, h, DType::BF16},
        {"mlp up fwd     [T,h]x[4h,h]^T", false, true, T, f, h, DType::BF16},
        {"mlp down fwd   [T,4h]x[h,4h]^T", false, true, T, h, f, DType::BF16},
        {"mlp down dX    [T,h]x[h,4h]", false, false, T, f, h, DType::BF16},
        {"mlp up dW      [T,4h]^Tx[T,h]", true, false, f, h, T, DType::F32},
    };
    std::printf("\n%-34s %12s %12s %8s\n", "GEMM", "ours TFLOP/s", "cuBLASLt", "ratio");
    double worstRatio = 1e9;
    for (const GemmShape& s : shapes) {
        const std::size_t aSize = std::size_t(s.M) * s.K, bSize = std::size_t(s.K) * s.N,
                          cSize = std::size_t(s.M) * s.N;
        const DevPtr A = randomBuffer(gpu, aSize, DType::BF16, 1, 1), B = randomBuffer(gpu, bSize, DType::BF16, 1, 2);
        const DevPtr C = gpu.allocate(cSize, s.out);
        const int lda = s.transA ? s.M : s.K, ldb = s.transB ? s.K : s.N;
        const double ours = medianSeconds(
            gpu, o.reps, [&] { gpu.gemm(s.transA, s.transB, s.M, s.N, s.K, 1.0f, A, lda, B, ldb, 0.0f, C, s.N); });
        PlainMatmul plain(lt, s, workspace, workspaceBytes);
        const double reference = medianSeconds(gpu, o.reps, [&] { plain.run(A.data, B.data, C.data, stream); });
        const double flop = 2.0 * s.M * s.N * double(s.K);
        worstRatio = std::min(worstRatio, reference / ours);
        std::printf("%-34s %12.1f %12.1f %7.0f%%\n", s.name, tflops(flop, ours), tflops(flop, reference),
                    100 * reference / ours);
        for (DevPtr p : {A, B, C})
            gpu.release(p);
    }

    // 2. Attention, causal, bf16.
    const AttentionShape attention{o.batch, o.seq, o.heads, o.heads, D};
    const std::size_t qkv = std::size_t(T) * h;
    const DevPtr q = randomBuffer(gpu, qkv, DType::BF16, 1, 3), k = randomBuffer(gpu, qkv, DType::BF16, 1, 4),
                 v = randomBuffer(gpu, qkv, DType::BF16, 1, 5), dOut = randomBuffer(gpu, qkv, DType::BF16, 1, 6);
    const DevPtr out = gpu.allocate(qkv, DType::BF16), dq = gpu.allocate(qkv, DType::BF16),
                 dk = gpu.allocate(qkv, DType::BF16), dv = gpu.allocate(qkv, DType::BF16);
    const DevPtr lse = gpu.allocate(std::size_t(o.batch) * o.heads * o.seq, DType::F32);
    const double attentionFlop = 2.0 * 2.0 * o.batch * o.heads * double(o.seq) * o.seq * D / 2;
    const double forward = medianSeconds(gpu, o.reps, [&] { gpu.attentionForward(attention, q, k, v, out, lse); });
    const double backward =
        medianSeconds(gpu, o.reps, [&] { gpu.attentionBackward(attention, dOut, q, k, v, out, lse, dq, dk, dv); });
    std::printf("\nattention (causal, seq %d, head dim %d): forward %.1f TFLOP/s (%.0f%% of peak), backward %.1f "
                "TFLOP/s (%.0f%%)\n",
                o.seq, D, tflops(attentionFlop, forward), 100 * tflops(attentionFlop, forward) / o.peakTflops,
                tflops(2.5 * attentionFlop, backward), 100 * tflops(2.5 * attentionFlop, backward) / o.peakTflops);

    // 3. The layer stack: per layer x -> rmsnorm -> q, k, v (RoPE on q, k) -> attention -> proj -> +x
    //    -> rmsnorm -> up -> GELU -> down -> +, then the backward of all of it (weight gradients in
    //    fp32, as they accumulate). Activations of every layer are kept for the backward.
    struct Layer {
        DevPtr wq, wk, wv, wo, wUp, wDown, gamma1, gamma2;
        DevPtr gq, gk, gv, go, gUp, gDown, gGamma1, gGamma2;
        DevPtr x, n1, rstd1, lq, lk, lv, att, lse, mid, n2, rstd2, up, act, y;
    };
    const auto bf = [&](std::size_t n, unsigned seed, float scale) {
        return randomBuffer(gpu, n, DType::BF16, scale, seed);
    };
    const auto zeros = [&](std::size_t n, DType t) { return gpu.allocate(n, t); };
    const std::size_t hh = std::size_t(h) * h, hf = std::size_t(h) * f, th = std::size_t(T) * h,
                      tf = std::size_t(T) * f;
    std::vector<Layer> layers(std::size_t(o.layers));
    unsigned seed = 10;
    const float weightScale = 0.02f;
    for (Layer& l : layers) {
        l = {bf(hh, seed++, weightScale),
             bf(hh, seed++, weightScale),
             bf(hh, seed++, weightScale),
             bf(hh, seed++, weightScale),
             bf(hf, seed++, weightScale),
             bf(hf, seed++, weightScale),
             bf(std::size_t(h), seed++, 1),
             bf(std::size_t(h), seed++, 1),
             zeros(hh, DType::F32),
             zeros(hh, DType::F32),
             zeros(hh, DType::F32),
             zeros(hh, DType::F32),
             zeros(hf, DType::F32),
             zeros(hf, DType::F32),
             zeros(std::size_t(h), DType::F32),
             zeros(std::size_t(h), DType::F32),
             zeros(th, DType::BF16),
             zeros(th, DType::BF16),
             zeros(std::size_t(T), DType::F32),
             zeros(th, DType::BF16),
             zeros(th, DType::BF16),
             zeros(th, DType::BF16),
             zeros(th, DType::BF16),
             zeros(std::size_t(o.batch) * o.heads * o.seq, DType::F32),
             zeros(th, DType::BF16),
             zeros(th, DType::BF16),
             zeros(std::size_t(T), DType::F32),
             zeros(tf, DType::BF16),
             zeros(tf, DType::BF16),
             zeros(th, DType::BF16)};
    }
    const DevPtr input = bf(th, seed++, 1), dTop = bf(th, seed++, 1);
    const DevPtr dx = zeros(th, DType::BF16), dy = zeros(th, DType::BF16), dn = zeros(th, DType::BF16),
                 dq2 = zeros(th, DType::BF16), dk2 = zeros(th, DType::BF16), dv2 = zeros(th, DType::BF16),
                 dAtt = zeros(th, DType::BF16), dUp = zeros(tf, DType::BF16), dAct = zeros(tf, DType::BF16);
    const float base = 10000;
    // Where the stack's time goes, from one extra run with a mark after each group of operations
    // (each group's time is the interval since the previous mark).
    enum Part { kGemm, kAttentionForward, kAttentionBackward, kOther, kParts };
    const char* const partNames[kParts] = {"GEMMs", "attention forward", "attention backward",
                                           "norms, RoPE, GELU, adds"};
    bool profiling = false;
    std::vector<std::pair<Part, TimeMark>> cuts;
    const auto cut = [&](Part part) {
        if (profiling)
            cuts.emplace_back(part, gpu.markTime());
    };
    const auto stack = [&] {
        cut(kOther);
        gpu.copy(layers[0].x, input, th);
        for (std::size_t i = 0; i < layers.size(); ++i) {
            Layer& l = layers[i];
            gpu.rmsNormForward(l.x, l.gamma1, T, h, 1e-5f, l.n1, l.rstd1);
            cut(kOther);
            for (const auto& [w, projected] : {std::pair{l.wq, l.lq}, std::pair{l.wk, l.lk}, std::pair{l.wv, l.lv}})
                gpu.gemm(false, true, T, h, h, 1, l.n1, h, w, h, 0, projected, h);
            cut(kGemm);
            gpu.rope(l.lq, T, o.seq, o.heads, D, base, false);
            gpu.rope(l.lk, T, o.seq, o.heads, D, base, false);
            cut(kOther);
            gpu.attentionForward(attention, l.lq, l.lk, l.lv, l.att, l.lse);
            cut(kAttentionForward);
            gpu.gemm(false, true, T, h, h, 1, l.att, h, l.wo, h, 0, l.mid, h);
            cut(kGemm);
            gpu.add(l.x, l.mid, th);
            gpu.rmsNormForward(l.mid, l.gamma2, T, h, 1e-5f, l.n2, l.rstd2);
            cut(kOther);
            gpu.gemm(false, true, T, f, h, 1, l.n2, h, l.wUp, h, 0, l.up, f);
            cut(kGemm);
            gpu.geluForward(l.up, l.act, tf);
            cut(kOther);
            gpu.gemm(false, true, T, h, f, 1, l.act, f, l.wDown, f, 0, l.y, h);
            cut(kGemm);
            gpu.add(l.mid, l.y, th);
            if (i + 1 < layers.size())
                gpu.copy(layers[i + 1].x, l.y, th);
            cut(kOther);
        }
        gpu.copy(dy, dTop, th);
        cut(kOther);
        for (std::size_t i = layers.size(); i-- > 0;) {
            Layer& l = layers[i];
            // MLP: y = mid + down(gelu(up(norm2(mid)))).
            gpu.gemm(true, false, h, f, T, 1, dy, h, l.act, f, 1, l.gDown, f);
            gpu.gemm(false, false, T, f, h, 1, dy, h, l.wDown, f, 0, dAct, f);
            cut(kGemm);
            gpu.geluBackward(dAct, l.up, dUp, tf);
            cut(kOther);
            gpu.gemm(true, false, f, h, T, 1, dUp, f, l.n2, h, 1, l.gUp, h);
            gpu.gemm(false, false, T, h, f, 1, dUp, f, l.wUp, h, 0, dn, h);
            cut(kGemm);
            gpu.rmsNormBackward(dn, l.mid, l.gamma2, l.rstd2, T, h, dx, l.gGamma2);
            gpu.add(dy, dx, th);  // dMid
            cut(kOther);
            // Attention: mid = x + proj(attention(rope(q), rope(k), v)).
            gpu.gemm(true, false, h, h, T, 1, dx, h, l.att, h, 1, l.go, h);
            gpu.gemm(false, false, T, h, h, 1, dx, h, l.wo, h, 0, dAtt, h);
            cut(kGemm);
            gpu.attentionBackward(attention, dAtt, l.lq, l.lk, l.lv, l.att, l.lse, dq2, dk2, dv2);
            cut(kAttentionBackward);
            gpu.rope(dq2, T, o.seq, o.heads, D, base, true);
            gpu.rope(dk2, T, o.seq, o.heads, D, base, true);
            gpu.fill(dn, 0, th);
            cut(kOther);
            for (const auto& [d, w, g] :
                 {std::tuple{dq2, l.wq, l.gq}, std::tuple{dk2, l.wk, l.gk}, std::tuple{dv2, l.wv, l.gv}}) {
                gpu.gemm(true, false, h, h, T, 1, d, h, l.n1, h, 1, g, h);
                gpu.gemm(false, false, T, h, h, 1, d, h, w, h, 1, dn, h);
            }
            cut(kGemm);
            gpu.rmsNormBackward(dn, l.x, l.gamma1, l.rstd1, T, h, dy, l.gGamma1);
            gpu.add(dx, dy, th);  // dx of the layer = dMid + norm1's backward
            cut(kOther);
        }
    };
    const double stackSeconds = medianSeconds(gpu, o.reps, stack);
    const double layerFlop =
        3.0 * (12.0 * T * double(h) * h * 2) + 3.0 * (2.0 * 2.0 * o.batch * double(o.seq) * o.seq * h / 2);
    const double achieved = tflops(layerFlop * o.layers, stackSeconds);
    const DeviceMemory memory = gpu.deviceMemory();
    std::printf("\nlayer stack (%d layers, forward + backward): %.2f ms, %.1f TFLOP/s, MFU %.1f%% of %.0f; worst GEMM "
                "at %.0f%% of plain cuBLASLt\n",
                o.layers, stackSeconds * 1e3, achieved, 100 * achieved / o.peakTflops, o.peakTflops, 100 * worstRatio);
    // The breakdown run (after the timed ones, so that they are not perturbed by the marks).
    gpu.synchronize();
    gpu.forgetTimeMarks();
    profiling = true;
    stack();
    double partSeconds[kParts] = {};
    for (std::size_t i = 1; i < cuts.size(); ++i)
        partSeconds[cuts[i].first] += gpu.secondsBetween(cuts[i - 1].second, cuts[i].second);
    double profiled = 0;
    for (double seconds : partSeconds)
        profiled += seconds;
    for (int part = 0; part < kParts; ++part)
        std::printf("  %-26s %8.2f ms  %5.1f%%\n", partNames[part], partSeconds[part] * 1e3,
                    100 * partSeconds[part] / profiled);
    std::printf("device memory: %.2f GiB in use, %.2f GiB reserved by the caching allocator, %.1f of %.1f GiB used on "
                "the device\n",
                double(memory.inUseBytes) / double(1 << 30), double(memory.reservedBytes) / double(1 << 30),
                double(memory.deviceUsedBytes) / double(1 << 30), double(memory.deviceTotalBytes) / double(1 << 30));
    cudaFree(workspace);
    cublasLtDestroy(lt);
    return 0;
}
