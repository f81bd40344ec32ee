// The CUDA backend's host class: device memory through a caching allocator, time marks as CUDA
// events on the one compute stream, and each operation through the launcher of its layer's file
// beside this one, a file per layer as llm.c: elementwise, embedding, norms, rope, attention (with
// flash_attention), cross_entropy, moe, optimizer, and GEMMs in cublaslt. The router itself works on
// the interface's host arrays, with the CPU backend's code.

#include "kernels/caching_allocator.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/norms.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/rope.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace meshbench::kernels::cuda {
namespace {

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int device)
        : m_allocator(
              [](std::size_t bytes) -> void* {
                  void* p = nullptr;
                  if (cudaMalloc(&p, bytes) == cudaSuccess)
                      return p;
                  cudaGetLastError();  // out of memory is answered by the allocator, not left pending
                  return nullptr;
              },
              [](void* p) { cudaFree(p); })
    {
        if (!cublasLtLoaded())
            throw KernelError("cuda backend: " + cublasLtProblem());
        check(cudaSetDevice(device), "cudaSetDevice");
        check(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
        m_gemm.emplace();
        check(cudaMalloc(&m_scalar, sizeof(double)), "cudaMalloc");
    }
    ~CudaBackend() override
    {
        cudaStreamSynchronize(m_stream);
        for (cudaEvent_t event : m_marks)
            cudaEventDestroy(event);
        m_allocator.emptyCache();
        cudaFree(m_scalar);
        m_gemm.reset();
        cudaStreamDestroy(m_stream);
    }

    cudaStream_t stream() const { return m_stream; }

    std::string_view name() const override { return "cuda"; }

    DevPtr allocate(std::size_t elements, DType dtype) override
    {
        return {allocateZeroed(m_allocator, m_stream, elements * dtypeSize(dtype)), dtype};
    }
    // The block goes back to the cache at once: the work queued on it runs first, in stream order,
    // before any later user of the block.
    void release(DevPtr p) override { m_allocator.release(p.data); }
    // Nothing to move for n == 0: a launch of zero blocks fails, and its error, left pending, would
    // be reported by the next unrelated check under that operation's name.
    void upload(DevPtr dst, const float* src, std::size_t n) override
    {
        if (n == 0)
            return;
        if (dst.dtype == DType::F32) {
            check(cudaMemcpyAsync(dst.data, src, n * sizeof(float), cudaMemcpyHostToDevice, m_stream), "upload");
            check(cudaStreamSynchronize(m_stream), "upload");
            return;
        }
        // Written over at once: no zero-fill.
        const DevPtr staging{m_allocator.allocate(n * sizeof(float)), DType::F32};
        check(cudaMemcpyAsync(staging.data, src, n * sizeof(float), cudaMemcpyHostToDevice, m_stream), "upload");
        launchConvert(m_stream, staging, dst, n);
        launched("upload");
        check(cudaStreamSynchronize(m_stream), "upload");
        release(staging);
    }
    void download(float* dst, ConstDevPtr src, std::size_t n) override
    {
        if (n == 0)
            return;
        if (src.dtype == DType::F32) {
            check(cudaMemcpyAsync(dst, src.data, n * sizeof(float), cudaMemcpyDeviceToHost, m_stream), "download");
            check(cudaStreamSynchronize(m_stream), "download");
            return;
        }
        const DevPtr staging{m_allocator.allocate(n * sizeof(float)), DType::F32};
        launchConvert(m_stream, src, staging, n);
        launched("download");
        check(cudaMemcpyAsync(dst, staging.data, n * sizeof(float), cudaMemcpyDeviceToHost, m_stream), "download");
        check(cudaStreamSynchronize(m_stream), "download");
        release(staging);
    }
    bool hostAddressable() const override { return false; }
    void copyToHost(void* dst, ConstDevPtr src, std::size_t n) override
    {
        if (n == 0)
            return;
        check(cudaMemcpyAsync(dst, src.data, n * dtypeSize(src.dtype), cudaMemcpyDeviceToHost, m_stream), "copyToHost");
        check(cudaStreamSynchronize(m_stream), "copyToHost");
    }
    void copyFromHost(DevPtr dst, const void* src, std::size_t n) override
    {
        if (n == 0)
            return;
        check(cudaMemcpyAsync(dst.data, src, n * dtypeSize(dst.dtype), cudaMemcpyHostToDevice, m_stream),
              "copyFromHost");
        check(cudaStreamSynchronize(m_stream), "copyFromHost");
    }
    void synchronize() override { check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize"); }
    TimeMark markTime() override
    {
        if (m_markCount == m_marks.size()) {
            cudaEvent_t event = nullptr;
            check(cudaEventCreate(&event), "cudaEventCreate");
            m_marks.push_back(event);
        }
        check(cudaEventRecord(m_marks[m_markCount], m_stream), "cudaEventRecord");
        return TimeMark(m_markCount++);
    }
    double secondsBetween(TimeMark from, TimeMark to) override
    {
        if (from >= m_markCount || to >= m_markCount)
            throw KernelError("cuda backend: a time mark that was forgotten");
        check(cudaEventSynchronize(m_marks[to]), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, m_marks[from], m_marks[to]), "cudaEventElapsedTime");
        return double(ms) * 1e-3;
    }
    void forgetTimeMarks() override { m_markCount = 0; }
    DeviceMemory deviceMemory() override
    {
        const CachingAllocator::Stats stats = m_allocator.stats();
        std::size_t free = 0, total = 0;
        check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        return {stats.inUseBytes, stats.reservedBytes, stats.peakReservedBytes, std::int64_t(total - free),
                std::int64_t(total)};
    }
    void fill(DevPtr dst, float value, std::size_t n) override { launchFill(m_stream, dst, value, n); }
    void copy(DevPtr dst, ConstDevPtr src, std::size_t n) override
    {
        if (n == 0)
            return;
        if (dst.dtype == src.dtype)
            check(cudaMemcpyAsync(dst.data, src.data, n * dtypeSize(dst.dtype), cudaMemcpyDeviceToDevice, m_stream),
                  "copy");
        else
            launchConvert(m_stream, src, dst, n);
        launched("copy");
    }

    void gemm(bool transA, bool transB, int M, int N, int K, float alpha, ConstDevPtr A, int lda, ConstDevPtr B,
              int ldb, float beta, DevPtr C, int ldc) override
    {
        m_gemm->gemm(m_stream, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }

    void add(ConstDevPtr x, DevPtr y, std::size_t n) override { launchAdd(m_stream, x, y, n); }
    void scale(DevPtr x, float alpha, std::size_t n) override { launchScale(m_stream, x, alpha, n); }

    void embeddingForward(const int* ids, int T, ConstDevPtr table, int h, DevPtr out) override
    {
        launchEmbeddingForward(m_stream, m_allocator, ids, T, table, h, out);
    }
    void embeddingBackward(const int* ids, int T, ConstDevPtr dOut, int h, DevPtr dTable) override
    {
        launchEmbeddingBackward(m_stream, m_allocator, ids, T, dOut, h, dTable);
    }
    void layerNormForward(ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr beta, int T, int h, float eps, DevPtr out,
                          DevPtr mean, DevPtr rstd) override
    {
        launchLayerNormForward(m_stream, x, gamma, beta, T, h, eps, out, mean, rstd);
    }
    void layerNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr mean, ConstDevPtr rstd,
                           int T, int h, DevPtr dx, DevPtr dGamma, DevPtr dBeta) override
    {
        launchLayerNormBackward(m_stream, dOut, x, gamma, mean, rstd, T, h, dx, dGamma, dBeta);
    }
    void rmsNormForward(ConstDevPtr x, ConstDevPtr gamma, int T, int h, float eps, DevPtr out, DevPtr rstd) override
    {
        launchRmsNormForward(m_stream, x, gamma, T, h, eps, out, rstd);
    }
    void rmsNormBackward(ConstDevPtr dOut, ConstDevPtr x, ConstDevPtr gamma, ConstDevPtr rstd, int T, int h, DevPtr dx,
                         DevPtr dGamma) override
    {
        launchRmsNormBackward(m_stream, dOut, x, gamma, rstd, T, h, dx, dGamma);
    }

    void geluForward(ConstDevPtr x, DevPtr out, std::size_t n) override { launchGeluForward(m_stream, x, out, n); }
    void geluBackward(ConstDevPtr dOut, ConstDevPtr x, DevPtr dx, std::size_t n) override
    {
        launchGeluBackward(m_stream, dOut, x, dx, n);
    }
    void swigluForward(ConstDevPtr x, int T, int f, DevPtr out) override
    {
        launchSwigluForward(m_stream, x, T, f, out);
    }
    void swigluBackward(ConstDevPtr dOut, ConstDevPtr x, int T, int f, DevPtr dx) override
    {
        launchSwigluBackward(m_stream, dOut, x, T, f, dx);
    }

    void rope(DevPtr x, int tokens, int seq, int heads, int headDim, float base, bool inverse) override
    {
        launchRope(m_stream, m_allocator, x, tokens, seq, heads, headDim, base, inverse);
    }
    void attentionForward(const AttentionShape& shape, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v, DevPtr out,
                          DevPtr lse) override
    {
        launchAttentionForward(m_stream, shape, q, k, v, out, lse);
    }
    void attentionBackward(const AttentionShape& shape, ConstDevPtr dOut, ConstDevPtr q, ConstDevPtr k, ConstDevPtr v,
                           ConstDevPtr out, ConstDevPtr lse, DevPtr dq, DevPtr dk, DevPtr dv) override
    {
        launchAttentionBackward(m_stream, m_allocator, shape, dOut, q, k, v, out, lse, dq, dk, dv);
    }
    double crossEntropy(ConstDevPtr logits, const int* targets, int T, int V, float gradScale, DevPtr dLogits) override
    {
        return launchCrossEntropy(m_stream, m_allocator, m_scalar, logits, targets, T, V, gradScale, dLogits);
    }
    // The router's softmax, top-k, capacity and load-balancing loss work on host arrays (the
    // interface's routing metadata): the CPU backend's code, shared.
    void route(const RouterShape& shape, const float* logits, const Routing& routing) override
    {
        m_host.route(shape, logits, routing);
    }
    double auxLoss(const RouterShape& shape, const Routing& routing, float coef, float* dLogits) override
    {
        return m_host.auxLoss(shape, routing, coef, dLogits);
    }
    void routerBackward(const RouterShape& shape, const Routing& routing, const float* dWeight, float* dLogits) override
    {
        m_host.routerBackward(shape, routing, dWeight, dLogits);
    }
    void permute(const RouterShape& shape, const Routing& routing, ConstDevPtr x, int h, DevPtr permuted) override
    {
        launchPermute(m_stream, m_allocator, shape, routing, x, h, permuted);
    }
    void combine(const RouterShape& shape, const Routing& routing, ConstDevPtr expertOut, int h, DevPtr out) override
    {
        launchCombine(m_stream, m_allocator, shape, routing, expertOut, h, out);
    }
    void combineBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dOut, ConstDevPtr expertOut,
                         int h, DevPtr dExpertOut, float* dWeight) override
    {
        launchCombineBackward(m_stream, m_allocator, shape, routing, dOut, expertOut, h, dExpertOut, dWeight);
    }
    void permuteBackward(const RouterShape& shape, const Routing& routing, ConstDevPtr dPermuted, int h,
                         DevPtr dx) override
    {
        launchPermuteBackward(m_stream, m_allocator, shape, routing, dPermuted, h, dx);
    }

    double sumSquares(ConstDevPtr x, std::size_t n) override { return launchSumSquares(m_stream, m_scalar, x, n); }

    void adamw(DevPtr param, ConstDevPtr grad, DevPtr m, DevPtr v, std::size_t n, float lr, float beta1, float beta2,
               float eps, float weightDecay, int step, float gradScale) override
    {
        launchAdamW(m_stream, param, grad, m, v, n, lr, beta1, beta2, eps, weightDecay, step, gradScale);
    }

private:
    CpuBackend m_host;  // the host-side routing
    CachingAllocator m_allocator;
    std::optional<CublasLtGemm> m_gemm;  // made on the device, once the constructor has set it
    std::vector<cudaEvent_t> m_marks;    // time marks, reused after forgetTimeMarks
    std::size_t m_markCount = 0;
    cudaStream_t m_stream = nullptr;
    double* m_scalar = nullptr;  // one device double for the reductions read back to the host
};

}  // namespace

DeviceStatus probeDevice()
{
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0)
        return {false, "no CUDA device: no NVIDIA driver is installed"};
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess)
        return {false, std::string("no CUDA device: ") + cudaGetErrorString(status)};
    if (count == 0)
        return {false, "no CUDA device: the driver sees none"};
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, 0) != cudaSuccess)
        return {false, "no CUDA device: cannot read device 0's properties"};
    const std::string description = std::string(properties.name) + ", sm_" + std::to_string(properties.major) +
                                    std::to_string(properties.minor) + ", " +
                                    std::to_string(properties.totalGlobalMem >> 30) + " GiB";
    // The kernels are built for sm_90 (with compute_90 PTX for newer chips).
    if (properties.major < 9)
        return {false, description + ": this build's kernels need compute capability 9.0 (Hopper) or newer", count};
    if (!cublasLtLoaded())
        return {false, description + ": " + cublasLtProblem(), count};
    return {true, description, count};
}

std::unique_ptr<Backend> makeBackend(int device) { return std::make_unique<CudaBackend>(device); }

std::string deviceIdentity(int device)
{
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device) != cudaSuccess)
        return "device " + std::to_string(device);
    std::string hex;
    for (char byte : properties.uuid.bytes) {
        const char digits[] = "0123456789abcdef";
        hex += digits[(static_cast<unsigned char>(byte) >> 4) & 15];
        hex += digits[static_cast<unsigned char>(byte) & 15];
    }
    return hex;
}

void* computeStream(Backend& backend) { return static_cast<CudaBackend&>(backend).stream(); }

}  // namespace meshbench::kernels::cuda
