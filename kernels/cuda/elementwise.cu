// Elementwise kernels of the CUDA backend: dtype conversion, fill, add, scale, and GELU and SwiGLU
// forward and backward, over kernels/elementwise_math.h (the same functions the CPU backend runs).

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/elementwise_math.h"

namespace meshbench::kernels::cuda {
namespace {

__global__ void convertKernel(const void* src, DType from, void* dst, DType to, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(dst, to, i, load(src, from, i));
}

__global__ void fillKernel(void* dst, DType dtype, float value, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(dst, dtype, i, value);
}

__global__ void addKernel(const void* x, DType xType, void* y, DType yType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(y, yType, i, load(y, yType, i) + load(x, xType, i));
}

__global__ void scaleKernel(void* x, DType dtype, float alpha, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(x, dtype, i, alpha * load(x, dtype, i));
}

__global__ void geluKernel(const void* x, DType xType, void* out, DType outType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(out, outType, i, math::gelu(load(x, xType, i)));
}

__global__ void geluBackwardKernel(const void* dOut, DType dType, const void* x, DType xType, void* dx, DType dxType,
                                   std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n) store(dx, dxType, i, math::geluBackward(load(dOut, dType, i), load(x, xType, i)));
}

// x [T, 2f]: gate columns [0, f), up columns [f, 2f); out [T, f].
__global__ void swigluKernel(const void* x, DType xType, std::size_t f, void* out, DType outType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t t = i / f, j = i % f;
        store(out, outType, i, math::swiglu(load(x, xType, t * 2 * f + j), load(x, xType, t * 2 * f + f + j)));
    }
}

__global__ void swigluBackwardKernel(const void* dOut, DType dType, const void* x, DType xType, std::size_t f, void* dx,
                                     DType dxType, std::size_t n)
{
    MESHBENCH_FOR_EACH(i, n)
    {
        const std::size_t t = i / f, j = i % f;
        const math::SwigluGradient g = math::swigluBackward(load(dOut, dType, i), load(x, xType, t * 2 * f + j),
                                                            load(x, xType, t * 2 * f + f + j));
        store(dx, dxType, t * 2 * f + j, g.gate);
        store(dx, dxType, t * 2 * f + f + j, g.up);
    }
}

}  // namespace

void launchConvert(cudaStream_t stream, ConstDevPtr src, DevPtr dst, std::size_t n)
{
    convertKernel<<<blocksFor(n), kThreads, 0, stream>>>(src.data, src.dtype, dst.data, dst.dtype, n);
}

void launchFill(cudaStream_t stream, DevPtr dst, float value, std::size_t n)
{
    if (n > 0)
        fillKernel<<<blocksFor(n), kThreads, 0, stream>>>(dst.data, dst.dtype, value, n);
    launched("fill");
}

void launchAdd(cudaStream_t stream, ConstDevPtr x, DevPtr y, std::size_t n)
{
    if (n > 0)
        addKernel<<<blocksFor(n), kThreads, 0, stream>>>(x.data, x.dtype, y.data, y.dtype, n);
    launched("add");
}

void launchScale(cudaStream_t stream, DevPtr x, float alpha, std::size_t n)
{
    if (n > 0)
        scaleKernel<<<blocksFor(n), kThreads, 0, stream>>>(x.data, x.dtype, alpha, n);
    launched("scale");
}

void launchGeluForward(cudaStream_t stream, ConstDevPtr x, DevPtr out, std::size_t n)
{
    if (n > 0)
        geluKernel<<<blocksFor(n), kThreads, 0, stream>>>(x.data, x.dtype, out.data, out.dtype, n);
    launched("geluForward");
}

void launchGeluBackward(cudaStream_t stream, ConstDevPtr dOut, ConstDevPtr x, DevPtr dx, std::size_t n)
{
    if (n > 0)
        geluBackwardKernel<<<blocksFor(n), kThreads, 0, stream>>>(dOut.data, dOut.dtype, x.data, x.dtype, dx.data,
                                                                  dx.dtype, n);
    launched("geluBackward");
}

void launchSwigluForward(cudaStream_t stream, ConstDevPtr x, int T, int f, DevPtr out)
{
    const std::size_t n = std::size_t(T) * std::size_t(f);
    if (n > 0)
        swigluKernel<<<blocksFor(n), kThreads, 0, stream>>>(x.data, x.dtype, std::size_t(f), out.data, out.dtype, n);
    launched("swigluForward");
}

void launchSwigluBackward(cudaStream_t stream, ConstDevPtr dOut, ConstDevPtr x, int T, int f, DevPtr dx)
{
    const std::size_t n = std::size_t(T) * std::size_t(f);
    if (n > 0)
        swigluBackwardKernel<<<blocksFor(n), kThreads, 0, stream>>>(dOut.data, dOut.dtype, x.data, x.dtype,
                                                                    std::size_t(f), dx.data, dx.dtype, n);
    launched("swigluBackward");
}

}  // namespace meshbench::kernels::cuda
